"""plugin/onegpu/core/uds_http.py against a real HTTP server on a real Unix socket (a small threaded server in this file)."""
from __future__ import annotations

import hashlib
import http.client
import os
import socket
import socketserver
import threading
import time
from http.server import BaseHTTPRequestHandler

import pytest

from onegpu.core.uds_http import SUN_PATH_MAX, UnixHTTPConnection, uds_request, uds_stream


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def reply(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802
        if self.path == "/slow":  # status line after 0.3 s, body 0.6 s later
            time.sleep(0.3)
            self.send_response(200)
            self.send_header("Content-Length", "4")
            self.end_headers()
            self.wfile.flush()
            time.sleep(0.6)
            self.wfile.write(b"done")
        elif self.path in ("/stream", "/cut"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(3):
                data = f"data: {i}\n\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
                time.sleep(0.15)
                if self.path == "/cut" and i == 1:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
            self.wfile.write(b"0\r\n\r\n")
        elif self.path == "/trickle":  # 5 chunks of a 5-byte body, 0.2 s apart
            self.send_response(200)
            self.send_header("Content-Length", "5")
            self.end_headers()
            for _ in range(5):
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(0.2)
        elif self.path == "/silent":
            time.sleep(2)
        else:
            self.reply(200, b'{"ok": true}')

    def do_POST(self):  # noqa: N802
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.bodies.append(body)
        self.reply(201, hashlib.sha256(body).hexdigest().encode(), "text/plain")


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    bodies: list[bytes]  # every POST body received, in order


def serve_at(path: str) -> Server:
    server = Server(path, Handler)
    server.bodies = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def server(tmp_path):
    srv = serve_at(str(tmp_path / "e.sock"))
    yield srv
    srv.shutdown()
    srv.server_close()


def test_get_returns_status_headers_and_body(server):
    resp = uds_request(server.server_address, "GET", "/health", timeout=5)
    assert (resp.status, resp.body) == (200, b'{"ok": true}')
    assert resp.header("content-type") == "application/json"
    assert 0 < resp.ttfb_s <= resp.elapsed_s


def test_post_body_arrives_byte_for_byte(server):
    body = b'{"model": "m", "prompt": "caf\xc3\xa9 \\u00e9"}'
    resp = uds_request(server.server_address, "POST", "/v1/completions", body=body, timeout=5)
    assert resp.status == 201
    assert server.bodies == [body]
    assert resp.body.decode() == hashlib.sha256(body).hexdigest()


def test_ttfb_is_the_status_line_and_elapsed_the_end_of_the_body(server):
    resp = uds_request(server.server_address, "GET", "/slow", timeout=5)
    assert resp.body == b"done"
    assert resp.ttfb_s >= 0.25, resp
    assert resp.elapsed_s - resp.ttfb_s >= 0.3, resp  # the body's wait is not in the first-byte time


def test_socket_path_longer_than_the_kernel_limit(tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    path = str(deep / "engine.sock")
    assert len(os.fsencode(path)) > SUN_PATH_MAX
    # binding needs the same detour: bind through the folder's descriptor
    dirfd = os.open(deep, os.O_PATH | os.O_DIRECTORY)
    try:
        cwd = os.getcwd()
        os.chdir(f"/proc/self/fd/{dirfd}")
        try:
            srv = serve_at("engine.sock")
        finally:
            os.chdir(cwd)
    finally:
        os.close(dirfd)
    try:
        with pytest.raises(OSError):  # the plain connect(2) refuses the long path
            socket.socket(socket.AF_UNIX).connect(path)
        assert uds_request(path, "GET", "/health", timeout=5).status == 200
    finally:
        srv.shutdown()
        srv.server_close()


def test_socket_name_too_long_even_through_proc_is_a_clear_error(tmp_path):
    path = tmp_path / ("n" * 120)
    with pytest.raises(ValueError, match="too long"):
        uds_request(path, "GET", "/health", timeout=1)


def test_stream_yields_chunks_as_they_arrive(server):
    with uds_stream(server.server_address, "GET", "/stream", timeout=5) as stream:
        assert stream.status == 200 and stream.header("content-type") == "text/event-stream"
        chunks = list(stream.chunks())
    assert b"".join(chunks) == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"
    assert len(chunks) == 3
    assert stream.chunk_times_s[-1] - stream.chunk_times_s[0] >= 0.2, stream.chunk_times_s
    assert stream.elapsed_s >= stream.chunk_times_s[-1]


def test_stream_cut_by_the_server_raises(server):
    with uds_stream(server.server_address, "GET", "/cut", timeout=5) as stream:
        with pytest.raises(http.client.IncompleteRead):
            list(stream.chunks())


def test_timeout_bounds_the_whole_request(server):
    # every byte comes within 0.2 s, the whole body in 1 s: only a whole-request bound can fire at 0.5 s
    with pytest.raises(TimeoutError):
        uds_request(server.server_address, "GET", "/trickle", timeout=0.5)


def test_silent_engine_times_out(server):
    with pytest.raises(TimeoutError):
        uds_request(server.server_address, "GET", "/silent", timeout=0.3)


def test_missing_socket_is_an_os_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        uds_request(tmp_path / "nothing.sock", "GET", "/health", timeout=1)


def test_connection_class_is_an_http_client_connection(server):
    conn = UnixHTTPConnection(server.server_address, timeout=5)
    try:
        conn.request("GET", "/health")
        resp = conn.getresponse()
        assert resp.status == 200 and resp.read() == b'{"ok": true}'
        conn.request("GET", "/health")  # keep-alive: the same connection answers again
        assert conn.getresponse().read() == b'{"ok": true}'
    finally:
        conn.close()
