"""`vllm` command of the stub image: parse, boot with vLLM-shaped log lines (or fail as told), serve."""
from __future__ import annotations

import os
import signal
import sys
import time

from . import failures
from .args import SUBCOMMANDS, non_default_args, parse_serve, top_usage
from .knobs import KnobError, Knobs, read_knobs
from .logfmt import VllmLog, boot_numbers, offload_line
from .voices import VOICE_CPU, banner, load_and_kv, voice_of
from .voices import VOICE_CUDA as VOICE_CUDA_OLD

CONFIG_FAILURES = ("unsupported_quant", "unsupported_arch", "trust_remote_code", "needs_network")
ENGINE_LOAD_FAILURES = ("load_oom", "gpu_memory_taken")
ENGINE_KV_FAILURES = ("no_kv_memory", "die_at_boot")
ROUTES = [("/openapi.json", "GET, HEAD"), ("/health", "GET"), ("/version", "GET"), ("/v1/models", "GET"),
          ("/v1/chat/completions", "POST"), ("/v1/completions", "POST")]


def main(argv: list[str]) -> int:
    """Entry point of /usr/local/bin/vllm; returns the exit status (2 for argument errors)."""
    try:
        knobs = read_knobs()
    except KnobError as exc:
        sys.stderr.write(f"stub engine: {exc}\n")
        return 64
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(f"{top_usage()}\nvLLM CLI\n")
        return 0
    if argv[0] in ("-v", "--version"):
        sys.stdout.write(knobs.version + "\n")
        return 0
    if argv[0] != "serve":
        sys.stderr.write(f"{top_usage()}vllm: error: argument subparser: "
                         f"invalid choice: {argv[0]!r} (choose from {', '.join(repr(s) for s in SUBCOMMANDS)})\n")
        return 2
    args = parse_serve(argv[1:], knobs)
    install_signal_handlers(knobs)
    return serve(args, knobs)


def install_signal_handlers(knobs: Knobs) -> None:
    """SIGTERM/SIGINT end the stub at once (exit 0, as a clean uvicorn shutdown), unless told to ignore them."""
    if knobs.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        return

    def stop(signum, _frame):
        sys.stdout.write("INFO:     Shutting down\nINFO:     Finished server process [%d]\n" % os.getpid())
        sys.stdout.flush()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)


def fail_engine(log: VllmLog, lines: list[str]) -> int:
    """Engine core start failure, as vLLM 0.32.0 prints it: the worker's own error line (load OOM), the core's
    error lines, the core process's traceback again without a prefix ("Process EngineCore:"), then the API
    server's unprefixed traceback. Returns the exit status."""
    for line in lines:
        if line == failures.LOAD_OOM_LOGGED:
            log.error("Worker", "gpu_model_runner.py:5140", line)
        else:
            log.error("EngineCore", failures.CORE_WHERE, line)
    traceback = lines[next((i for i, line in enumerate(lines) if line.startswith("Traceback")), len(lines)):]
    for line in (["Process EngineCore:"] + traceback if traceback else []) + failures.api_server_gave_up():
        log.write(line)
    return 1


def network_present() -> list[str]:
    """Interfaces other than `lo` and routes seen in /proc/net (read only; nothing is ever connected)."""
    found = []
    with open("/proc/net/dev") as fh:
        for line in fh.readlines()[2:]:
            name = line.split(":")[0].strip()
            if name and name != "lo":
                found.append(f"interface {name}")
    with open("/proc/net/route") as fh:
        found += [f"route via {line.split()[0]}" for line in fh.readlines()[1:] if line.strip()]
    return found


def hold_memory(log: VllmLog, knobs: Knobs) -> int:
    """Touch host memory in 64 MiB steps until the RAM cap kills the process; exit 3 past the stub's own limit."""
    step = 64 * 2**20
    held: list[bytearray] = []
    while len(held) * 64 < knobs.alloc_limit_mib:
        held.append(bytearray(b"\x5a") * step)  # repeated bytes are written, so every page is resident
        log.info("Worker", "weight_utils.py:491", f"stub: {len(held) * 64} MiB of host memory held")
    log.error("Worker", "weight_utils.py:491",
              f"stub: STUB_FAIL=alloc_past_cap held {knobs.alloc_limit_mib} MiB and nothing stopped it (no RAM cap?)")
    return 3


def serve(args, knobs: Knobs) -> int:
    """Boot like vLLM (log lines, delays, failures), then serve until signalled."""
    from .server import Engine, make_server  # the server modules are not needed for argument errors

    log = VllmLog(knobs.log_format, os.getpid())
    n = boot_numbers(args.max_model_len, args.cpu_offload_gb, knobs.boot_delay_s)
    voice = voice_of(knobs.version, knobs.version_tuple)
    log.info("", "__init__.py:287", f"Automatically detected platform {'cpu' if voice == VOICE_CPU else 'cuda'}.")
    if voice == VOICE_CUDA_OLD:
        log.info("APIServer", "api_server.py:1839", f"vLLM API server version {knobs.version}")
    else:  # 0.32's and 0.34's logo banner (vllm/entrypoints/common/startup.py)
        for where, message in banner(knobs.version.split("+")[0], args.model):
            log.info("APIServer", where, message)
    log.info("APIServer", "utils.py:233", f"non-default args: {non_default_args(args, knobs)}")
    log.warning("APIServer", "stub.py:1", "onegpu stub engine: a test double of vLLM's control surface; "
                                          "no model is loaded and no GPU is used")
    fail = knobs.fail
    if fail == "trust_remote_code" and args.trust_remote_code:
        fail = None  # the model needs remote code and was allowed it: it loads
    if fail == "needs_network":
        present = network_present()
        if present:
            log.error("APIServer", "stub.py:2", f"stub: STUB_FAIL=needs_network but the container has network "
                                                f"({', '.join(present)}); the stub never connects anywhere")
            return 3
        for line in failures.network_attempt_lines():
            log.raw("APIServer", line)
    if fail in CONFIG_FAILURES:
        for line in failures.config_failure(fail, args.model):
            log.raw("APIServer", line)
        return 1
    engine = Engine(args, knobs, log, n)
    server = make_server(engine)  # bound before the engine starts, as vLLM does; answered once ready
    log.info("APIServer", "model.py:547", "Resolved architecture: LlamaForCausalLM")
    log.info("APIServer", "model.py:1510", f"Using max model len {n.max_model_len}")
    if args.enable_chunked_prefill:
        log.info("APIServer", "scheduler.py:205",
                 f"Chunked prefill is enabled with max_num_batched_tokens={args.max_num_batched_tokens or 2048}.")
    log.info("EngineCore", "core.py:133",
             f"Initializing a V1 LLM engine (v{knobs.version.split('+')[0]}) with config: model='{args.model}', "
             f"tokenizer='{args.tokenizer or args.model}', trust_remote_code={args.trust_remote_code}, "
             f"max_seq_len={n.max_model_len}, tensor_parallel_size={args.tensor_parallel_size}, "
             f"pipeline_parallel_size={args.pipeline_parallel_size}, quantization={args.quantization}, "
             f"enforce_eager={args.enforce_eager}, kv_cache_dtype={args.kv_cache_dtype}, "
             f"served_model_name={args.served_model_name[0]}")
    log.info("Worker", "gpu_model_runner.py:2602", f"Starting to load model {args.model}...")
    if fail == "alloc_past_cap":
        return hold_memory(log, knobs)
    if args.cpu_offload_gb > 0:
        log.info("Worker", *offload_line(n))
    if fail in ENGINE_LOAD_FAILURES and failures.engine_failure(fail, voice)[0] == "load":
        return fail_engine(log, failures.engine_failure(fail, voice)[1])
    time.sleep(knobs.boot_delay_s / 2)
    log.write("Loading safetensors checkpoint shards: 100% Completed | 1/1 [00:00<00:00,  2.10it/s]")  # no prefix
    loaded, kv = load_and_kv(voice, knobs.log_format, n, args.gpu_memory_utilization or 1.0)
    for proc, level, where, message in loaded:
        log.write(log.format(proc, level, where, message))
    if fail == "hang_at_boot":
        while True:
            time.sleep(3600)
    time.sleep(knobs.boot_delay_s / 2)
    if fail in ENGINE_KV_FAILURES or fail in ENGINE_LOAD_FAILURES:  # a load failure of 0.34 comes after warmup
        return fail_engine(log, failures.engine_failure(fail, voice)[1])
    for proc, level, where, message in kv:
        log.write(log.format(proc, level, where, message))
    log.info("EngineCore", "core.py:402", "init engine (profile, create kv cache, warmup model) took 0.05 seconds")
    if voice == VOICE_CUDA_OLD:
        log.info("APIServer", "api_server.py:1634", "Supported_tasks: ['generate']")
    else:  # vllm/entrypoints/launchers/api_server/entry.py (0.32.0 recorded)
        log.info("APIServer", "entry.py:136", "Supported tasks: ['generate']")
    listen = f"unix:{args.uds}" if getattr(args, "uds", None) else f"http://{args.host or '0.0.0.0'}:{args.port}"
    if voice == VOICE_CUDA_OLD:
        index = " 0" if knobs.has_uds else ""
        log.info("APIServer", "api_server.py:1912", f"Starting vLLM API server{index} on {listen}")
    else:  # vllm/entrypoints/launchers/api_server/entry.py
        log.info("APIServer", "entry.py:139", f"Starting vLLM server on {listen}")
    log.info("APIServer", "launcher.py:37", "Available routes are:")
    for route, methods in ROUTES:
        log.info("APIServer", "launcher.py:46", f"Route: {route}, Methods: {methods}")
    for line in (f"Started server process [{os.getpid()}]", "Waiting for application startup.",
                 "Application startup complete."):
        log.raw("APIServer", f"INFO:     {line}")
    server.serve_forever()
    return 0
