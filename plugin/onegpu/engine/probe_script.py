"""Runs INSIDE the engine image, with the image's own python3 (`python3 -c <this file> <launch argv as JSON>`).

It only reads, and prints one JSON line after the marker; the host judges it (onegpu.engine.probe_parse):
* vLLM's and torch's versions, vLLM's own platform detection, torch's CUDA device count and, when that is 0, what
  torch says when asked to initialise CUDA (its reason, in its words);
* with a CUDA device, the pinned host-to-device bandwidth the engine's own torch reaches (the link ceiling's input);
* the help texts of `vllm serve` (`--help=all` on releases that page their help, plain `--help` on older ones);
* the launch argv judged by the release's own `vllm serve` parser, built as its `vllm` command builds it
  (vllm/entrypoints/cli/main.py, serve.py: ServeSubcommand.subparser_init). Without a GPU the CUDA build cannot
  infer its device and refuses to build the parser ("Failed to infer device type", vllm/config/device.py); the
  parser is then built again with VLLM_TARGET_DEVICE=cpu, vLLM's own setting that names the platform (vllm/envs.py,
  vllm/platforms/__init__.py), and the probe says so.
Standard library only at the top: vllm and torch are imported inside guards, so a broken image still answers.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

MARKER = "ONEGPU-PROBE-RESULT "
HELP_TIMEOUT_S = 120
PARSE_TIMEOUT_S = 180
# Pinned host-to-device copies on the first CUDA device (rank 0's GPU), timed by CUDA events: a few seconds, a few
# hundred MiB of pinned memory, inside the container's RAM cap. The link ceiling uses the best of them.
H2D_BYTES = 256 << 20
H2D_REPEATS = 5
# Builds `vllm serve`'s parser as `vllm` does and parses argv: exit 0 accepted, 2 with argparse's own error.
PARSE = """
import json, sys
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser(prog="vllm", description="vLLM CLI")
sub = parser.add_subparsers(required=False, dest="subparser")
command = ServeSubcommand()
command.subparser_init(sub).set_defaults(dispatch_function=command.cmd)
args = parser.parse_args(json.loads(sys.argv[1]))
command.validate(args)
"""
NO_DEVICE = "Failed to infer device type"


def versions(out: dict) -> None:
    try:
        import vllm  # type: ignore[import-not-found]
        out["vllm_version"] = str(getattr(vllm, "__version__", "unknown"))
    except Exception as exc:  # noqa: BLE001  (whatever the image raises is the answer)
        out["errors"].append("import vllm: %s: %s" % (type(exc).__name__, exc))
    try:
        from vllm.platforms import current_platform  # type: ignore[import-not-found]
        out["platform"] = str(current_platform.device_type)
    except Exception as exc:  # noqa: BLE001
        out["platform_error"] = "%s: %s" % (type(exc).__name__, exc)
    try:
        import torch  # type: ignore[import-not-found]
        out["torch_version"] = str(torch.__version__)
        out["cuda_device_count"] = int(torch.cuda.device_count())
        if out["cuda_device_count"] == 0 and hasattr(torch.cuda, "init"):
            try:
                torch.cuda.init()
            except Exception as exc:  # noqa: BLE001  (torch's reason, in its words)
                out["cuda_init_error"] = "%s: %s" % (type(exc).__name__, exc)
    except Exception as exc:  # noqa: BLE001
        out["errors"].append("torch: %s: %s" % (type(exc).__name__, exc))


def link_bandwidth(out: dict) -> None:
    """The host-to-device bandwidth the engine's own torch reaches from pinned memory (only with a CUDA device)."""
    try:
        import torch

        src = torch.empty(H2D_BYTES, dtype=torch.uint8, pin_memory=True)
        dst = torch.empty(H2D_BYTES, dtype=torch.uint8, device="cuda:0")
        dst.copy_(src, non_blocking=True)  # the first copy warms the path up; it is not timed
        torch.cuda.synchronize()
        seconds = []
        for _ in range(H2D_REPEATS):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dst.copy_(src, non_blocking=True)
            end.record()
            end.synchronize()
            seconds.append(start.elapsed_time(end) / 1000.0)
        out["h2d"] = {"bytes": H2D_BYTES, "repeats": H2D_REPEATS, "seconds": [round(s, 6) for s in seconds],
                      "gbps": round(H2D_BYTES / min(seconds) / 1e9, 3), "device": str(torch.cuda.get_device_name(0))}
    except Exception as exc:  # noqa: BLE001  (no measurement is a fact too; the ceiling then says NOT MEASURED)
        out["h2d_error"] = "%s: %s" % (type(exc).__name__, exc)


def helps(out: dict, exe: str) -> None:
    for mode in ("--help=all", "--help"):
        try:
            done = subprocess.run([exe, "serve", mode], capture_output=True, text=True, timeout=HELP_TIMEOUT_S)
            out["help"][mode] = {"exit_code": done.returncode, "text": done.stdout,
                                 "stderr_tail": done.stderr[-2000:]}
        except subprocess.TimeoutExpired:
            out["help"][mode] = {"exit_code": None, "text": "", "stderr_tail": ""}
            out["errors"].append("vllm serve %s did not answer within %d s" % (mode, HELP_TIMEOUT_S))


def parse(argv: list, target_device: str | None) -> dict:
    env = dict(os.environ)
    if target_device:
        env["VLLM_TARGET_DEVICE"] = target_device
    try:
        done = subprocess.run([sys.executable, "-c", PARSE, json.dumps(argv)], capture_output=True, text=True,
                              timeout=PARSE_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        return {"exit_code": None, "stderr_tail": "", "target_device": target_device}
    return {"exit_code": done.returncode, "stderr_tail": done.stderr[-3000:], "target_device": target_device}


def main() -> None:
    out: dict = {"errors": [], "vllm_version": None, "torch_version": None, "cuda_device_count": None,
                 "platform": None, "help": {}, "parser": None}
    versions(out)
    if out.get("cuda_device_count"):
        link_bandwidth(out)
    else:
        out["h2d_error"] = "torch in the engine image sees no CUDA device"
    exe = shutil.which("vllm")
    if exe is None:
        out["errors"].append("no vllm command on PATH")
    else:
        helps(out, exe)
    if len(sys.argv) > 1 and out["vllm_version"] is not None:
        argv = json.loads(sys.argv[1])
        result = parse(argv, None)
        if result["exit_code"] != 0 and NO_DEVICE in result["stderr_tail"]:
            result = {**parse(argv, "cpu"), "without_device": result["stderr_tail"][-600:]}
        out["parser"] = result
    sys.stdout.write("\n" + MARKER + json.dumps(out) + "\n")


if __name__ == "__main__":  # `python3 -c <this file>` runs as __main__
    main()
