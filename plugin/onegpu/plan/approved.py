"""The plan a person approves (KIT.md 10): plan.json, its SHA-256 digest, and the check that an approval still
runs exactly the approved plan (PLAN_CHANGED otherwise).

An approval binds five things: the image ID, the GPU UUID, the settings file digest, the checkpoint's file
list and the engine argv. Everything else in the plan (capacity numbers, free memory) is evidence that may
drift between the scan and the approval without changing what would run.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from onegpu.core import strict_json
from onegpu.core.jsonable import to_json
from onegpu.core.outcomes import Blocked
from onegpu.machine.checks import select_gpu
from onegpu.plan.settings import settings_values

PLAN_SCHEMA = "onegpu/plan@1"
IDENTITY_KEYS = ("image_id", "gpu_uuid", "settings_sha256", "checkpoint_files", "launch_argv")
_WHAT = {"image_id": "image ID", "gpu_uuid": "GPU UUID", "gpu_uuids": "GPU set (rank order)",
         "settings_sha256": "settings digest",
         "checkpoint_files": "checkpoint file list", "launch_argv": "launch argv"}
MAX_PLAN_BYTES = 50_000_000
SYNTHETIC_LINE = "CHECKPOINT IS SYNTHETIC: header-only shards that hold no weights (a demo, not a model)"


class PlanFileError(ValueError):
    """An approved plan file that cannot be read as a plan (named with the rule it breaks)."""


def _selected(hardware, settings):
    try:
        return select_gpu(hardware.gpu, settings.gpu)
    except Blocked:
        return None


def _gpu_set_uuids(hardware, settings) -> list[str] | None:
    """The multi-GPU protocol's GPUs by UUID in rank order (None where one of them is not on this machine)."""
    by_selector = {**{d.index: d.uuid for d in hardware.gpu.devices}, **{d.uuid: d.uuid for d in hardware.gpu.devices}}
    uuids = [by_selector.get(s) for s in settings.multi_gpu.gpus]
    return None if None in uuids else [u for u in uuids if u is not None]


def plan_document(settings, hardware, checkpoint_summary: dict, image, verdicts, launch_spec_json: dict | None,
                  kv=None) -> dict:
    """The plan as plain JSON: what would run (identity) and the facts and verdicts it was judged on."""
    gpu = _selected(hardware, settings)
    launch = dict(launch_spec_json) if launch_spec_json else None
    argv = [*launch.get("entrypoint", []), *launch.get("command", [])] if launch else None
    identity = {
        "image_id": image.id if image is not None else None,
        "gpu_uuid": gpu.uuid if gpu is not None else None,
        "settings_sha256": settings.sha256,
        "checkpoint_files": list(checkpoint_summary.get("files", [])),
        "launch_argv": argv,
    }
    if settings.multi_gpu is not None:  # absent from a one-GPU plan: its digest is unchanged
        identity["gpu_uuids"] = _gpu_set_uuids(hardware, settings)
        identity["protocol"] = settings.protocol
    return {
        "schema": PLAN_SCHEMA,
        "identity": identity,
        "settings": {"path": settings.path, "schema": settings.source_schema, "sha256": settings.sha256,
                     "values": {k: v for k, v in settings_values(settings).items()
                                if k not in ("path", "sha256", "assumed", "source_schema")},
                     "assumed": dict(settings.assumed)},
        "hardware": {"source": hardware.source, "profile": hardware.profile,
                     "gpu": to_json(gpu) if gpu is not None else None},
        "checkpoint": {k: checkpoint_summary.get(k) for k in (
            "root", "hf_cache_repo", "hf_revision", "index_file", "architectures", "model_type", "quant",
            "weight_bytes", "bytes_by_dtype", "bytes_by_role", "tensor_count", "synthetic", "files")},
        "image": to_json(image) if image is not None else None,
        "kv_cache": to_json(kv) if kv is not None else None,
        "capacity": [v.as_json() for v in verdicts],
        "launch": launch,
    }


def plan_bytes(document: dict) -> bytes:
    """The exact bytes of plan.json: sorted keys, so the same plan always has the same digest."""
    return (json.dumps(document, indent=2, sort_keys=True) + "\n").encode()


def plan_digest(document: dict) -> str:
    """SHA-256 (hex) of plan.json's bytes: `sha256sum plan.json` prints the same."""
    return hashlib.sha256(plan_bytes(document)).hexdigest()


def load_plan(path: Path) -> tuple[dict, str]:
    """(document, SHA-256 of the file's bytes) of an approved plan; raises PlanFileError naming the rule."""
    try:
        doc, raw = strict_json.load_file(Path(path), MAX_PLAN_BYTES)
    except strict_json.JSONFileError as exc:
        problem = (f"{exc.size:,} bytes, a plan is under {MAX_PLAN_BYTES:,}" if exc.kind == "too_large" else
                   f"not JSON ({exc})" if exc.kind == "not_json" else str(exc))
        raise PlanFileError(f"--plan {path}: {problem}") from None
    if not isinstance(doc, dict) or doc.get("schema") != PLAN_SCHEMA:
        found = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise PlanFileError(f"--plan {path}: field 'schema' must be {PLAN_SCHEMA!r}, found {found!r} (give the "
                            "plan.json a scan wrote)")
    identity = doc.get("identity")
    if not isinstance(identity, dict):
        raise PlanFileError(f"--plan {path}: field 'identity' must be an object")
    for key in IDENTITY_KEYS:
        if key not in identity:
            raise PlanFileError(f"--plan {path}: field 'identity.{key}' is missing")
    if not isinstance(identity["checkpoint_files"], list):
        raise PlanFileError(f"--plan {path}: field 'identity.checkpoint_files' must be a list")
    return doc, hashlib.sha256(raw).hexdigest()


def _short(value) -> str:
    return "none" if value is None else str(value)


def plan_changes(approved: dict, fresh: dict) -> list[str]:
    """One line per bound thing that differs between the approved plan and the fresh one."""
    a, f = approved["identity"], fresh["identity"]
    changes = []
    for key in ("image_id", "gpu_uuid", "gpu_uuids", "settings_sha256"):
        if a.get(key) != f.get(key):
            extra = " (the image reference now points elsewhere)" if key == "image_id" else ""
            changes.append(f"{_WHAT[key]}: approved {_short(a.get(key))}, now {_short(f.get(key))}{extra}")
    before, now = set(a.get("checkpoint_files") or []), set(f.get("checkpoint_files") or [])
    if before != now:
        added, removed = sorted(now - before), sorted(before - now)
        parts = [f"{len(added)} added ({', '.join(added[:5])}{', ...' if len(added) > 5 else ''})"] if added else []
        parts += [f"{len(removed)} removed ({', '.join(removed[:5])}{', ...' if len(removed) > 5 else ''})"] \
            if removed else []
        changes.append(f"checkpoint file list: {'; '.join(parts)}")
    # The argv is compared when both plans carry one: a plan written before the launch was known binds none.
    if a.get("launch_argv") is not None and f.get("launch_argv") is not None and a["launch_argv"] != f["launch_argv"]:
        changes.append(f"launch argv: approved {' '.join(a['launch_argv'])!r}, now {' '.join(f['launch_argv'])!r}")
    return changes


def require_same_plan(approved: dict, approved_sha256: str, approved_path: str, fresh: dict) -> str:
    """A line saying the approved plan still holds; raises Blocked PLAN_CHANGED naming every difference."""
    changes = plan_changes(approved, fresh)
    if changes:
        raise Blocked("PLAN_CHANGED", f"the approved plan {approved_path} (sha256 {approved_sha256[:12]}) no longer "
                                      f"matches: " + "; ".join(changes) + ". Scan again and approve the new plan",
                      {"changes": len(changes)})
    bound = [_WHAT[k] for k in IDENTITY_KEYS if approved["identity"].get(k) is not None]
    return (f"the approved plan {approved_path} (sha256 {approved_sha256[:12]}) still holds: {', '.join(bound)} "
            "unchanged")


def describe_settings(settings) -> list[str]:
    """Fact lines for the settings, each ASSUMED knob on its own line."""
    gpu = f"GPU index {settings.gpu}" if isinstance(settings.gpu, int) else f"GPU {settings.gpu}"
    if settings.multi_gpu is not None:
        gpu = (f"{settings.protocol} on GPUs {', '.join(str(g) for g in settings.multi_gpu.gpus)} (rank order), "
               "never a one-GPU result")
    lines = [f"settings {settings.path} ({settings.source_schema}, sha256 {settings.sha256[:12]}): model "
             f"{settings.model_id} @ {settings.model_revision} at {settings.model_path}; image {settings.image}; {gpu}",
             f"  context {settings.context_tokens:,} tokens, prefill chunk {settings.prefill_chunk_tokens:,}, CPU "
             f"offload {settings.cpu_offload_gib:g} GiB, container RAM cap {settings.container_ram_gib:g} GiB, host headroom "
             f"{settings.host_headroom_gib:g} GiB, deadline {settings.deadline_s:,} s"]
    lines += [f"  ASSUMED {key} = {why}" for key, why in settings.assumed.items()]
    return lines


def describe_checkpoint(ckpt) -> list[str]:
    """Fact lines: where the checkpoint is, that it is complete, and whether it is synthetic."""
    where = f"{ckpt.root}" + (f" (Hugging Face cache {ckpt.hf_cache_repo}, snapshot {ckpt.hf_revision})"
                              if ckpt.hf_cache_repo else "")
    index = ckpt.index_file or "a single model.safetensors"
    lines = [f"checkpoint {where}: {len(ckpt.files)} files, {len(ckpt.shards)} shard(s) via {index}, "
             f"{len(ckpt.tensors):,} tensors, {len(ckpt.tokenizer_files)} tokenizer file(s); architectures "
             f"{', '.join(ckpt.architectures) or 'not stated'}"]
    if ckpt.synthetic:
        lines.append(SYNTHETIC_LINE)
    return lines


def describe_agreement(ckpt) -> str:
    """The index/header agreement the reader established (it raises CHECKPOINT_* otherwise)."""
    if ckpt.index_total_size is None:
        total = "no index total_size stated"
    elif ckpt.index_total_size == ckpt.weight_bytes:
        total = "index total_size equal"
    else:
        total = f"index total_size {ckpt.index_total_size:,}"
    return (f"index and headers agree: {len(ckpt.tensors):,} tensors in {len(ckpt.shards)} shard(s), each in exactly "
            f"one header; header data bytes {ckpt.weight_bytes:,} ({total})")


def require_revision(ckpt, settings) -> str:
    """A cache snapshot's folder names its revision: it must be the one the settings name (REVISION_MISMATCH).

    Free to check in a scan; custody checks it again, with the content addresses, before any byte is hashed.
    """
    if ckpt.hf_revision is None:
        return (f"revision {settings.model_revision} is the operator's assertion: the checkpoint is a plain folder "
                "(custody hashes it; nothing local ties its bytes to a revision)")
    if ckpt.hf_revision != settings.model_revision:
        raise Blocked("REVISION_MISMATCH", f"the checkpoint is the cache snapshot of revision {ckpt.hf_revision}, "
                                           f"the settings name {settings.model_revision}",
                      {"snapshot": ckpt.hf_revision, "settings": settings.model_revision})
    return (f"the cache snapshot is revision {ckpt.hf_revision}, as the settings name (custody checks its files "
            "against the cache's content addresses)")
