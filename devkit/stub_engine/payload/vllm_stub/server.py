"""The stub's HTTP server: OpenAI endpoints on a Unix socket (or TCP without --uds), standard library only.

HTTP/1.1 keep-alive; normal responses carry Content-Length; streamed ones (SSE, text/event-stream) use
chunked transfer encoding, one `data: {...}\\n\\n` chunk per token, then `data: [DONE]\\n\\n`.
GET /stub/stats reports what the engine saw (requests, concurrency, body hashes) for tests.
"""
from __future__ import annotations

import hashlib
import json
import os
import socketserver
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from . import answers, failures

COMPLETION_PATHS = {"/v1/chat/completions": "chat", "/v1/completions": "completion"}


class Engine:
    """Shared state of one serving stub: settings, counters, and the failure to play while serving."""

    def __init__(self, args, knobs, log, numbers):
        self.args, self.knobs, self.log, self.numbers = args, knobs, log, numbers
        self.lock = threading.Lock()
        self.requests = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.completed = 0
        self.bodies_sha256: list[str] = []

    def enter(self, body: bytes) -> None:
        with self.lock:
            self.requests += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self.bodies_sha256.append(hashlib.sha256(body).hexdigest())

    def leave(self) -> int:
        with self.lock:
            self.in_flight -= 1
            self.completed += 1
            return self.completed

    def stats(self) -> dict:
        with self.lock:
            return {"requests": self.requests, "max_in_flight": self.max_in_flight,
                    "in_flight": self.in_flight, "bodies_sha256": list(self.bodies_sha256)}

    def die(self, why: str) -> None:
        """End the whole process now, as vLLM does when a worker dies while serving: the engine core and the
        API server say so, uvicorn shuts down, and the process exits 0 as vLLM's API server does
        (died-after-start.log): an exit status 0 is no clean stop here. Open connections are cut.
        """
        self.log.error("EngineCore", "multiproc_executor.py:315", failures.WORKER_DIED)
        for line in failures.CORE_DEAD:
            self.log.error("EngineCore", "core.py:1512", line)
        for line in failures.API_DEAD:
            self.log.error("APIServer", "async_llm.py:906", line)
        self.log.warning("APIServer", "stub.py:3", f"stub: {why}")
        for line in failures.SHUTDOWN + [f"INFO:     Finished server process [{os.getpid()}]"]:
            self.log.write(line)
        os._exit(0)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    # For the type checker only (bare annotations make no attribute): make_server serves with one of these,
    # and do_POST resets _done, the count leave_once returns, to None for each request.
    server: UnixServer | TcpServer
    _done: int | None

    @property
    def engine(self) -> Engine:
        return self.server.engine

    # uvicorn-style access log; for a Unix socket there is no client address to show
    def log_request(self, code="-", size="-") -> None:
        if not self.engine.args.disable_uvicorn_access_log:
            status = f"{int(code)} {HTTPStatus(int(code)).phrase}" if str(code).isdigit() else code
            self.engine.log.raw("APIServer", f'INFO:     - "{self.requestline}" {status}')

    def log_message(self, format, *args) -> None:  # noqa: A002 (BaseHTTPRequestHandler's signature)
        pass

    def read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def leave_once(self) -> int | None:
        """The request in progress stops counting as in flight; called before its answer's last bytes go out,
        so a client that sends its next request once it has read this answer can never be counted twice."""
        if getattr(self, "_done", False) is None:
            self._done = self.engine.leave()
        return getattr(self, "_done", None)

    def send_json(self, status: int, obj, extra_headers: dict | None = None) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for key, value in (extra_headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.leave_once()
        self.wfile.write(data)
        self.wfile.flush()

    def send_empty(self, status: int) -> None:
        self.send_response(status)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        e = self.engine
        if self.path == "/health":
            self.send_empty(200)
        elif self.path == "/v1/models":
            self.send_json(200, answers.models_list(e.args.served_model_name, e.args.model, e.numbers.max_model_len))
        elif self.path == "/version":
            self.send_json(200, {"version": e.knobs.version})
        elif self.path == "/stub/stats":
            self.send_json(200, e.stats())
        elif self.path in COMPLETION_PATHS:
            self.send_json(405, {"detail": "Method Not Allowed"}, {"allow": "POST"})
        else:
            self.send_json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:  # noqa: N802
        kind = COMPLETION_PATHS.get(self.path)
        if kind is None:
            self.read_body()
            status, detail = (405, "Method Not Allowed") if self.path in ("/health", "/v1/models") else (404, "Not Found")
            self.send_json(status, {"detail": detail})
            return
        body = self.read_body()
        e = self.engine
        if e.knobs.fail == "die_after_requests" and e.completed >= e.knobs.fail_after_requests:
            # N answered: this one is in flight when the engine dies, and vLLM's API server answers it HTTP 500
            # (recorded on the real engine: a worker SIGKILLed mid-request), then goes down.
            self.send_json(500, failures.ENGINE_DEAD_ANSWER)
            e.die(f"STUB_FAIL=die_after_requests:{e.knobs.fail_after_requests}")
        e.enter(body)
        self._done = None
        try:
            self.answer(kind, body)
        finally:
            done = self.leave_once()
        if e.knobs.fail == "die_after_requests" and done >= e.knobs.fail_after_requests:
            e.die(f"STUB_FAIL=die_after_requests:{e.knobs.fail_after_requests}")

    def answer(self, kind: str, body: bytes) -> None:
        e = self.engine
        try:
            plan = answers.plan_answer(kind, body, e.args.served_model_name, e.numbers.max_model_len,
                                       e.knobs.answer_tokens)
        except answers.RequestError as err:
            self.send_json(err.status, err.body())
            return
        if e.knobs.fail == "crash_mid_stream" and not plan.stream:
            e.die("STUB_FAIL=crash_mid_stream, non-streamed request")
        if not plan.stream:
            time.sleep(e.knobs.response_delay_s)
            self.send_json(200, answers.full_response(plan))
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        events = answers.stream_events(plan)
        for i, event in enumerate(events):
            if e.knobs.fail == "crash_mid_stream" and i == 2:
                e.die("STUB_FAIL=crash_mid_stream")
            if i:
                time.sleep(e.knobs.token_delay_s)
            self.write_chunk(f"data: {json.dumps(event)}\n\n".encode())
        self.write_chunk(b"data: [DONE]\n\n")
        self.leave_once()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


class UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    engine: Engine  # set by make_server


class TcpServer(ThreadingHTTPServer):
    daemon_threads = True
    engine: Engine  # set by make_server


def make_server(engine: Engine) -> UnixServer | TcpServer:
    """Bind the listening socket (a stale socket file is replaced, as vLLM does); returns the server."""
    server: UnixServer | TcpServer
    if getattr(engine.args, "uds", None):
        path = engine.args.uds
        if os.path.exists(path):
            os.unlink(path)
        server = UnixServer(path, Handler)
    else:
        server = TcpServer((engine.args.host or "0.0.0.0", engine.args.port), Handler)
    server.engine = engine
    return server
