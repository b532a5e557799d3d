"""A throwaway kit project around an engine double, and approve_load sessions run in it as an operator would.

The project is laid out like the repo root (pytest.ini, conftest.py, the real tests_hw) plus one conftest, the
seam, as tests_hw/conftest.py:
* engine "stub": devkit/e2e/conftest_simulated_gpu.py, the stub engine image, a header-only checkpoint;
* engine "cpu": devkit/e2e/conftest_cpu_engine.py, the real vLLM CPU image, a tiny real model.
Both replace the GPU facts with recorded NVML answers of an H200 (no GPU here); nothing else is simulated.

By hand, to open a serve window or run a batch against a local engine double:

    python -m devkit.e2e.harness make /tmp/kitp --engine cpu --model qwen3-moe --batch 10
    cd /tmp/kitp && <the printed command> [-m "approve_load and serve"]

`make` builds (or finds) the image, writes the project and prints the session's command line with its
environment; `run` also runs it and prints the run folder's verdict.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
NVML_RECORD = REPO / "tests_offline" / "data" / "nvml" / "h200-nvidia-smi-q.json"
SEAMS = {"stub": HERE / "conftest_simulated_gpu.py", "cpu": HERE / "conftest_cpu_engine.py"}
# The plan test that demands the GPU device request rightly fails where none is made (no NVIDIA runtime).
GPU_ELEMENT_TEST = "tests_hw/test_2_plan_launch.py::test_launch_plan_has_every_element_of_the_engine_container"
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2,
         "num_attention_heads": 8, "num_key_value_heads": 2, "hidden_size": 512, "intermediate_size": 1024,
         "vocab_size": 4096, "max_position_embeddings": 32768, "torch_dtype": "bfloat16"}
STUB_SETTINGS = {"context_tokens": 8192, "prefill_chunk_tokens": 2048, "container_ram_gib": 9,
                 "boot_deadline_s": 60}
# The CPU build on a tiny model: torch and vLLM take about 2-3 GiB of RAM; a boot takes about a minute on two
# cores. The context stays inside the tiny models' max_position_embeddings. The image's vLLM is declared, as an
# operator who knows it would: the plan applies 0.32's rules, which the probe confirms.
CPU_SETTINGS = {"context_tokens": 2048, "prefill_chunk_tokens": 2048, "container_ram_gib": 8,
                "boot_deadline_s": 600, "vllm_version": "0.32.0"}


def llama_tensors() -> dict:
    """Header-only tensors of a 2-layer Llama: the stub never reads weights."""
    t = {"model.embed_tokens.weight": ("BF16", [4096, 512]), "model.norm.weight": ("BF16", [512]),
         "lm_head.weight": ("BF16", [4096, 512])}
    for i in range(2):
        p = f"model.layers.{i}."
        for name, shape in (("self_attn.q_proj", [512, 512]), ("self_attn.k_proj", [128, 512]),
                            ("self_attn.v_proj", [128, 512]), ("self_attn.o_proj", [512, 512]),
                            ("mlp.gate_proj", [1024, 512]), ("mlp.up_proj", [1024, 512]),
                            ("mlp.down_proj", [512, 1024])):
            t[p + name + ".weight"] = ("BF16", shape)
        t[p + "input_layernorm.weight"] = ("BF16", [512])
        t[p + "post_attention_layernorm.weight"] = ("BF16", [512])
    return t


def make_project(root: Path, image: str, engine: str = "stub", checkpoint: Path | None = None,
                 model_id: str = "stub-org/e2e-model", gpus: int = 1, **settings_over) -> Path:
    """Write the project at `root`; `checkpoint` (a real model folder) is required for engine "cpu". `gpus` > 1
    declares the multi-GPU protocol at tensor parallel size `gpus` over that many recorded cards."""
    from devkit.synth import SYNTHETIC_METADATA, write_checkpoint

    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "pytest.ini", root / "pytest.ini")
    shutil.copytree(REPO / "tests_hw", root / "tests_hw", ignore=shutil.ignore_patterns("__pycache__"),
                    dirs_exist_ok=True)
    shutil.copy(SEAMS[engine], root / "tests_hw" / "conftest.py")
    if checkpoint is None:
        if engine != "stub":
            raise ValueError("engine 'cpu' needs a real model folder (devkit.real_engine.tiny_models)")
        checkpoint = write_checkpoint(root / "ckpt", LLAMA, llama_tensors(), shards=2, metadata=SYNTHETIC_METADATA)
    settings = {"schema": "onegpu/settings@1", "model_id": model_id, "model_revision": "e" * 40,
                "model_path": str(checkpoint), "image": image, "gpu": 0, "cpu_offload_gib": 0,
                "host_headroom_gib": 1, "deadline_s": 900, "shm_gib": 0.25, "pids_limit": 512,
                **(STUB_SETTINGS if engine == "stub" else CPU_SETTINGS), **settings_over}
    if gpus > 1:
        settings["multi_gpu"] = {"gpus": list(range(gpus)), "tensor_parallel_size": gpus, "pipeline_parallel_size": 1}
        if "container_ram_gib" not in settings_over:  # the plan assumes 8 GiB of own needs per worker process
            settings["container_ram_gib"] += 8 * (gpus - 1)
    (root / "s.json").write_text(json.dumps(settings))
    # The recorded H200 answers under GPU UUIDs of this project's own: concurrent sessions on one machine
    # would otherwise share the per-GPU lock (which then rightly refuses the second one).
    record = json.loads(NVML_RECORD.read_text())
    record["raw"] = recorded_cards(record["raw"], gpus)
    (root / "nvml-record.json").write_text(json.dumps(record))
    return root


def recorded_cards(raw: dict, gpus: int) -> dict:
    """The recorded card `gpus` times under fresh UUIDs and bus ids; between each pair, what NVML answers for
    cards on one PCIe switch with peer access on (topology SINGLE = 10, P2P status OK = 0, no NVLink)."""
    card = raw["devices"][0]
    devices = [{**card, "index": i, "uuid": f"GPU-{uuid.uuid4()}", "pci_bus_id": f"00000000:{0x41 + i:02X}:00.0"}
               for i in range(gpus)]
    links = [{"a": a, "b": b, "topology": 10, "p2p_read": 0, "p2p_write": 0, "nvlinks": 0}
             for a in range(gpus) for b in range(a + 1, gpus)]
    return {**raw, "devices": devices, **({"links": links} if links else {})}


def add_batch(project: Path, n: int, **body_over) -> list[str]:
    """A frozen request file of n chat requests and its protocol in the project; the session's extra options."""
    from devkit.request_corpus import chat_line, jsonl, legacy_protocol

    settings = json.loads((project / "s.json").read_text())
    requests = jsonl(*(chat_line(f"r{i:02d}", model=settings["model_id"], temperature=i / 100,
                                 messages=[{"role": "user", "content": f"Count to {i + 1}."}], **body_over)
                       for i in range(n)))
    (project / "r.jsonl").write_bytes(requests)
    protocol = legacy_protocol(context=settings["context_tokens"], requests_sha256=hashlib.sha256(requests).hexdigest())
    (project / "p.json").write_text(json.dumps(protocol))
    return ["--requests=r.jsonl", "--protocol=p.json"]


def session_env(project: Path, engine_env: dict | None = None) -> dict:
    """The environment of a session in the project: the repo importable, the seam's inputs."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "ONEGPU_E2E_NVML_RECORD": str(project / "nvml-record.json"),
           "ONEGPU_E2E_STUB_ENV": json.dumps(engine_env or {}), "ONEGPU_E2E_ENGINE_ENV": json.dumps(engine_env or {})}
    env.pop("PYTEST_ADDOPTS", None)
    return env


def session_argv(out: str, *extra: str, mark: str = "approve_load") -> list[str]:
    return [sys.executable, "-m", "pytest", "-m", mark, "--settings=s.json", f"--out={out}",
            f"--deselect={GPU_ELEMENT_TEST}", "-p", "no:randomly", "-rA", *extra]


def session(project: Path, out: str, engine_env: dict | None = None, *extra: str,
            mark: str = "approve_load") -> subprocess.Popen:
    """Start an approve_load session in the project (output: stdout, with stderr folded in)."""
    return subprocess.Popen(session_argv(out, *extra, mark=mark), cwd=project, env=session_env(project, engine_env),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(proc: subprocess.Popen, timeout_s: float = 300) -> str:
    out, _ = proc.communicate(timeout=timeout_s)
    return out


def wait_for(predicate, timeout_s: float, what: str, step_s: float = 0.1):
    """predicate()'s first truthy value, polled every step_s; an AssertionError naming `what` after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def receipt_of(project: Path, out: str) -> dict:
    """The run folder's receipt as its session last recorded it: receipt.json with the journal of a session
    still running (or killed) folded in."""
    from onegpu.evidence.journal import read_receipt

    return read_receipt(project / out)


def outcomes(receipt: dict) -> dict:
    return {nodeid.split("::")[-1]: entry["outcome"] for nodeid, entry in receipt["tests"].items()}


def _image(engine: str) -> str:
    import docker

    client = docker.from_env()
    if engine == "stub":
        from devkit.stub_engine.build import ensure_stub_image, stub_tag

        ensure_stub_image(client)
        return stub_tag()
    from devkit.real_engine.build import ensure_real_engine_image

    return ensure_real_engine_image(client)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devkit.e2e.harness", description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=("make", "run"))
    parser.add_argument("project", type=Path, help="folder to create the kit project in")
    parser.add_argument("--engine", choices=sorted(SEAMS), default="stub")
    parser.add_argument("--model", default="qwen3-moe", help="tiny model for --engine cpu (qwen3-moe, mimo-v2-flash)")
    parser.add_argument("--batch", type=int, metavar="N", help="add a frozen batch of N chat requests")
    parser.add_argument("--mark", default="approve_load", help='-m expression (e.g. "approve_load and serve")')
    parser.add_argument("--gpus", type=int, default=1, metavar="N",
                        help="N > 1: the multi-GPU protocol at tensor parallel size N over N recorded cards")
    args = parser.parse_args(argv)
    checkpoint = None
    if args.engine == "cpu":
        from devkit.real_engine.tiny_models import build

        checkpoint = build(args.project / "models", (args.model,))[args.model]
    project = make_project(args.project, _image(args.engine), args.engine, checkpoint,
                           model_id="stub-org/e2e-model" if args.engine == "stub" else f"tiny/{args.model}",
                           gpus=args.gpus)
    extra = add_batch(project, args.batch) if args.batch else []
    env = session_env(project)
    shown = {k: env[k] for k in ("PYTHONPATH", "ONEGPU_E2E_NVML_RECORD")}
    line = " ".join(f"{k}={shlex.quote(v)}" for k, v in shown.items()) + " " + shlex.join(
        session_argv("runs/by-hand", *extra, mark=args.mark))
    print(f"cd {shlex.quote(str(project))} && {line}")
    if args.action == "run":
        done = subprocess.run(session_argv("runs/by-hand", *extra, mark=args.mark), cwd=project, env=env)
        print(receipt_of(project, "runs/by-hand").get("verdict"))
        return done.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
