"""Record the run folders the calibration and landing tests read: real `pytest -m approve_load` sessions against
the stub engine image (the same throwaway project tests_offline/sessions/test_approve_e2e.py builds), then pruned to
what the tests use and stripped of this machine's paths.

    python -m tests_offline.data.runs.record_runs        # from the repository root; needs the Docker daemon

What the folders are: boot log lines and samples of the STUB engine (a test double of vLLM's control surface;
no model ran, no GPU was used; the GPU facts are recorded NVML answers of an H200). Their numbers exercise the
kit's arithmetic, not a model's footprint; the receipts say so in their banners.
"""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PLACEHOLDER_ROOT = "/srv/onegpu-e2e"
# name -> (stub knobs, what the tests use it for)
RUNS = {
    "stub-ready-8k": ({"STUB_BOOT_DELAY_S": "1"}, "an engine that reached READY: boot facts, samples, landing"),
    "stub-load-oom": ({"STUB_FAIL": "load_oom"}, "an engine that never reached READY: nothing to calibrate from"),
}
RECEIPT_KEEP = ("schema", "kind", "run_folder", "hardware_source", "banners", "limitations", "hardware", "selection",
                "settings", "checkpoint", "kv_cache", "capacity", "image", "launch", "probe", "engine", "boot",
                "landing", "samples", "warnings")
LAUNCH_KEEP = ("image_id", "entrypoint", "command", "gpu_uuid", "mem_limit_bytes")


def _scrub(text: str, project: Path, more: dict[str, str] | None = None) -> str:
    text = text.replace(str(project), PLACEHOLDER_ROOT)
    for old, new in (more or {}).items():
        text = text.replace(old, new)
    return text


def prune(src: Path, dst: Path, project: Path) -> None:
    """Copy the files the tests read, each cut to the sections they use, with the project path replaced."""
    dst.mkdir(parents=True, exist_ok=True)
    receipt = json.loads(src.joinpath("receipt.json").read_text())
    kept = {k: receipt[k] for k in RECEIPT_KEEP if k in receipt}
    kept["launch"] = {k: receipt["launch"][k] for k in LAUNCH_KEEP if k in receipt.get("launch", {})}
    # The GPU part only: the host and daemon facts of the recording machine are of no use to the tests.
    kept["hardware"] = {k: receipt["hardware"][k] for k in ("schema", "source", "gpu", "notes")}
    kept["engine"] = {k: v for k, v in receipt.get("engine", {}).items() if k in ("ready_at", "started_at",
                                                                                   "boot_elapsed_s")}
    cgroup = ((receipt["hardware"].get("host") or {}).get("cgroup") or {}).get("path")
    more = {cgroup: "/recording-host.scope"} if cgroup else {}
    dst.joinpath("receipt.json").write_text(_scrub(json.dumps(kept, indent=2), project, more) + "\n")
    manifest = json.loads(src.joinpath("manifest.json").read_text())
    rows = [{k: r[k] for k in ("path", "size", "sha256")} for r in manifest["files"]]
    dst.joinpath("manifest.json").write_text(_scrub(json.dumps({"schema": manifest["schema"], "root": manifest["root"],
                                                                "files": rows}, indent=2), project) + "\n")
    for name in ("settings.json", "samples.jsonl", "engine.log"):
        if src.joinpath(name).exists():
            dst.joinpath(name).write_text(_scrub(src.joinpath(name).read_text(), project))


def main() -> None:
    import docker

    from devkit.e2e.harness import finish, make_project, session
    from devkit.stub_engine.build import ensure_stub_image, stub_tag

    client = docker.from_env()
    ensure_stub_image(client)
    with tempfile.TemporaryDirectory() as tmp:
        project = make_project(Path(tmp) / "p", stub_tag())
        for name, (knobs, why) in RUNS.items():
            finish(session(project, f"runs/{name}", knobs))
            shutil.rmtree(HERE / name, ignore_errors=True)
            prune(project / "runs" / name, HERE / name, project)
            print(f"recorded {name}: {why}")


if __name__ == "__main__":
    main()
