"""Pure: an earlier run folder's receipt (with its settings, manifest and samples) -> the basis a calibration
measures from (`--calibrate-from RUN_FOLDER`, onegpu.plan.calibrate): its identity and its measurements.

The receipt is read as the typed record (onegpu.record.receipt); the manifest and samples.jsonl are not receipt
data and are read as the JSON they are. Every rule a run breaks is a CalibrationError naming it.
"""
from __future__ import annotations

import datetime as _dt
from typing import TYPE_CHECKING

from onegpu.core.units import GIB
from onegpu.plan.calibrate import MULTI_GPU_REFUSAL, CalibrationError, RunBasis
from onegpu.record.sections_load import BootFacts

if TYPE_CHECKING:  # types only: the record's reader does I/O, and this module reads what it was given
    from onegpu.record.receipt import ReceiptRecord

RECEIPT_SCHEMA = "onegpu/receipt@1"
DEFAULT_UTILIZATION = 0.85  # the kit's fixed --gpu-memory-utilization, used when the run's argv does not say


def _flag(argv: list[str], name: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return str(argv[i + 1])
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def _ready_gpu_used(receipt: ReceiptRecord, samples: list[dict]) -> tuple[int | None, str]:
    """GPU used at READY: the landing record's reading, else the last sample taken before ready_at."""
    at_ready = receipt.landing.at_ready if receipt.landing is not None else None
    if at_ready is not None:
        used = at_ready.gpu_used_bytes
        if used is not None:
            return used, "NVML reading taken at READY (landing record)"
        why = "; ".join(at_ready.errors or []) or "the sample at READY holds no GPU reading"
        return None, f"no NVML reading at READY ({why})"
    ready_at = receipt.engine.ready_at if receipt.engine is not None else None
    if ready_at is None or not samples:
        return None, "no sample at READY was recorded"
    try:
        ready_t = _dt.datetime.fromisoformat(ready_at).timestamp()
    except ValueError:
        return None, f"engine.ready_at {ready_at!r} is not a time"
    before = [s for s in samples if isinstance(s.get("t"), (int, float)) and s["t"] <= ready_t + 1]
    with_gpu = [s for s in before if isinstance(s.get("gpu_used_bytes"), int)]
    if not with_gpu:
        return None, "no sample up to READY holds an NVML reading"
    return with_gpu[-1]["gpu_used_bytes"], "the last NVML sample up to READY (samples.jsonl)"


def run_basis(run_id: str, folder: str, receipt: ReceiptRecord, settings, manifest,
              samples: list[dict]) -> RunBasis:
    """The basis of an earlier run from its receipt, settings (a Settings), manifest and samples.

    Raises CalibrationError naming what is missing or why the run measured nothing.
    """
    where = f"run {run_id}"
    if settings.multi_gpu is not None:
        raise CalibrationError(MULTI_GPU_REFUSAL.format(what=f"{where} ran the {settings.protocol}"))
    if receipt.schema != RECEIPT_SCHEMA:
        raise CalibrationError(f"{where}: receipt.json is not a kit receipt (schema {RECEIPT_SCHEMA!r})")
    boot = receipt.boot
    if boot is None or boot.ready is not True:
        what = "never reached READY" if boot is not None else "never started an engine"
        raise CalibrationError(f"{where}: the engine {what}: nothing was measured to calibrate from")
    facts = boot.facts or BootFacts()
    load_gib, kv_cache_gib = facts.load_gib, facts.kv_cache_gib
    if load_gib is None or kv_cache_gib is None:
        missing = [line for value, line in ((load_gib, "Model loading took X GiB"),
                                            (kv_cache_gib, "Available KV cache memory: X GiB")) if value is None]
        raise CalibrationError(f"{where}: its boot log states no {' and no '.join(repr(m) for m in missing)} line: "
                               "the engine's own accounting is not known")
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), list):
        raise CalibrationError(f"{where}: no manifest.json: nothing ties the run to a checkpoint")
    files = {r["path"]: r["size"] for r in manifest["files"]
             if isinstance(r, dict) and isinstance(r.get("path"), str) and isinstance(r.get("size"), int)}
    config_sha = next((r.get("sha256") for r in manifest["files"]
                       if isinstance(r, dict) and r.get("path") == "config.json"), None)
    launch = receipt.launch
    image_id = ((launch.image_id if launch is not None else None)
                or (receipt.image.id if receipt.image is not None else None))
    if image_id is None or not image_id.startswith("sha256:"):
        raise CalibrationError(f"{where}: the receipt names no image ID the engine ran from")
    uuid = receipt.selection.gpu_uuid if receipt.selection is not None else None
    gpu = receipt.hardware.gpu if receipt.hardware is not None else None
    devices = (gpu.devices if gpu is not None else None) or []
    device = next((d for d in devices if d.uuid == uuid), None)
    if device is None or device.total_bytes is None:
        raise CalibrationError(f"{where}: the receipt records no selected GPU with its total memory")
    argv = [*((launch.entrypoint if launch is not None else None) or []),
            *((launch.command if launch is not None else None) or [])]
    util = _flag(argv, "--gpu-memory-utilization")
    used, note = _ready_gpu_used(receipt, samples)
    probed = receipt.probe.vllm_version if receipt.probe is not None else None
    return RunBasis(
        run_id=run_id, folder=folder, checkpoint_files=files, config_sha256=config_sha, image_id=image_id,
        context_tokens=settings.context_tokens, prefill_chunk_tokens=settings.prefill_chunk_tokens,
        kv_cache_dtype=settings.kv_cache_dtype, cpu_offload_gib=settings.cpu_offload_gib,
        gpu_name=device.name, gpu_total_bytes=device.total_bytes, gpu_used_before_bytes=device.used_bytes,
        gpu_utilization=float(util) if util else DEFAULT_UTILIZATION,
        load_bytes=round(load_gib * GIB), kv_pool_bytes=round(kv_cache_gib * GIB),
        kv_pool_tokens=facts.kv_cache_tokens, ready_gpu_used_bytes=used, ready_note=note,
        vllm_version=probed or facts.vllm_version,
        banners=list(receipt.banners),
        model_id=settings.model_id, model_revision=settings.model_revision)
