"""Pure: an earlier run of the same checkpoint, image, context and prefill chunk -> the measured non-weight GPU
cost (bytes) that replaces the assumed reserve in a new plan (`--calibrate-from RUN_FOLDER`).

Two measurements, the larger used (a reserve set too low lets a plan pass that the card cannot hold):
* vLLM's own accounting, from the boot log: the engine sizes its KV pool as utilization x total minus
  everything else it holds, so target - "Model loading took X GiB" - "Available KV cache memory" is what it
  held besides weights and KV (activations of one prefill chunk, CUDA context, sampler buffers).
* NVML at READY, from the samples: GPU used at READY minus what was used before the engine started is the
  engine's whole cost; minus the KV pool it is the non-KV cost; minus the loaded weights, the non-weight cost.
Every rule a run breaks is a CalibrationError naming it; the caller turns it into a usage error. The earlier run's
basis (RunBasis) is read from its receipt by onegpu.record.run_basis.
"""
from __future__ import annotations

import math

from msgspec import Struct, field

from onegpu.core.jsonable import to_json
from onegpu.core.units import GIB, MIB, gib

SHOWN = 5


class CalibrationError(ValueError):
    """A run folder that cannot calibrate this plan; the message names the rule it breaks."""


class RunBasis(Struct, frozen=True):
    """What an earlier run folder establishes: its identity and its measurements (bytes, tokens)."""

    run_id: str
    folder: str
    checkpoint_files: dict[str, int]  # path -> size, from its manifest.json
    config_sha256: str | None
    image_id: str
    context_tokens: int
    prefill_chunk_tokens: int
    kv_cache_dtype: str | None
    cpu_offload_gib: float
    gpu_name: str | None
    gpu_total_bytes: int
    gpu_used_before_bytes: int | None  # the selected card's used memory when the session read the machine
    gpu_utilization: float
    load_bytes: int  # "Model loading took X GiB": the weights the engine holds on the GPU
    kv_pool_bytes: int  # "Available KV cache memory: X GiB"
    kv_pool_tokens: int | None
    ready_gpu_used_bytes: int | None  # NVML at READY
    ready_note: str  # where the READY reading came from, or why there is none
    vllm_version: str | None
    banners: list[str] = field(default_factory=list)
    model_id: str | None = None
    model_revision: str | None = None


class CurrentBasis(Struct, frozen=True):
    """The same identity, read now from the settings (or proposal request), the checkpoint and the image."""

    checkpoint_root: str
    checkpoint_files: dict[str, int]
    config_sha256: str
    image_reference: str
    image_id: str
    context_tokens: int
    prefill_chunk_tokens: int
    kv_cache_dtype: str | None = None
    cpu_offload_gib: float | None = None
    source: str = "settings"  # "settings" or "proposal request"
    model_id: str | None = None
    model_revision: str | None = None


class Calibration(Struct, frozen=True):
    """The measured non-weight reserve and how it was derived; `reserve_bytes` replaces the assumed reserve."""

    run_id: str
    folder: str
    reserve_bytes: int
    how: str
    estimates: dict  # {"boot_log_bytes": int, "nvml_bytes": int | None}
    rows: list[str]
    warnings: list[str]
    image_id: str
    vllm_version: str | None
    gpu_name: str | None

    def as_json(self) -> dict:
        return to_json(self)


# The measured reserve is one GPU's: a multi-GPU run's boot log has one line per worker, and the two protocols'
# results are never pooled.
MULTI_GPU_REFUSAL = ("{what}: a calibration measures the one-GPU protocol's non-weight reserve, and a multi-GPU "
                     "protocol's results are never pooled with it")


def _names(items: list[str]) -> str:
    return ", ".join(items[:SHOWN]) + (f" and {len(items) - SHOWN} more" if len(items) > SHOWN else "")


def identity_problems(run: RunBasis, now: CurrentBasis) -> list[str]:
    """Every way the earlier run is not of this checkpoint, image, context and prefill chunk (empty: same)."""
    problems = []
    only_then = sorted(set(run.checkpoint_files) - set(now.checkpoint_files))
    only_now = sorted(set(now.checkpoint_files) - set(run.checkpoint_files))
    if only_then or only_now:
        parts = ([f"{len(only_then)} only in the run ({_names(only_then)})"] if only_then else []) + \
                ([f"{len(only_now)} only now ({_names(only_now)})"] if only_now else [])
        problems.append(f"the checkpoint file list differs: {'; '.join(parts)}")
    resized = [f"{p} (run {run.checkpoint_files[p]:,} B, now {now.checkpoint_files[p]:,} B)"
               for p in sorted(set(run.checkpoint_files) & set(now.checkpoint_files))
               if run.checkpoint_files[p] != now.checkpoint_files[p]]
    if resized:
        problems.append(f"{len(resized)} checkpoint file(s) differ in size: {_names(resized)}")
    for what, then, current in (("model ID", run.model_id, now.model_id),
                                ("model revision", run.model_revision, now.model_revision)):
        if then and current and then != current:
            problems.append(f"the {what} differs: {then} in the run, {current} now")
    if run.config_sha256 != now.config_sha256:
        problems.append(f"config.json differs: SHA-256 {run.config_sha256 or 'not recorded'} in the run, "
                        f"{now.config_sha256} now")
    if run.image_id != now.image_id:
        problems.append(f"the image differs: the run ran {run.image_id}, {now.image_reference!r} is {now.image_id} "
                        "now")
    if run.context_tokens != now.context_tokens:
        problems.append(f"the context differs: {run.context_tokens:,} tokens in the run, {now.context_tokens:,} now")
    if run.prefill_chunk_tokens != now.prefill_chunk_tokens:
        problems.append(f"the prefill chunk differs: {run.prefill_chunk_tokens:,} tokens in the run, "
                        f"{now.prefill_chunk_tokens:,} now (activations scale with it)")
    return problems


def require_same_basis(run: RunBasis, now: CurrentBasis) -> None:
    """Raises CalibrationError listing every difference; a run of another checkpoint or image never calibrates."""
    problems = identity_problems(run, now)
    if problems:
        raise CalibrationError(f"run {run.run_id} is not a run of the checkpoint, image, context and prefill chunk "
                               f"the {now.source} name: " + "; ".join(problems) + ". Calibrate only from a run of the "
                               "same checkpoint, image, context and prefill chunk")


def _ceil_mib(n: int) -> int:
    return math.ceil(n / MIB) * MIB


def measure(run: RunBasis, now: CurrentBasis | None = None) -> Calibration:
    """The non-weight GPU reserve the run measured (the larger of its two measurements, rounded up to MiB).

    Raises CalibrationError when the measurements are negative (numbers that contradict each other).
    """
    target = math.ceil(run.gpu_total_bytes * run.gpu_utilization)  # as vLLM's request_memory rounds
    from_log = target - run.load_bytes - run.kv_pool_bytes
    rows = [f"vLLM's accounting (boot log): {run.gpu_utilization:g} x {gib(run.gpu_total_bytes)} = {gib(target)} "
            f"minus weights loaded {gib(run.load_bytes)} minus KV pool {gib(run.kv_pool_bytes)} = {gib(from_log)}"]
    from_nvml = None
    if run.ready_gpu_used_bytes is not None:
        before = run.gpu_used_before_bytes or 0
        non_kv = run.ready_gpu_used_bytes - before - run.kv_pool_bytes
        from_nvml = non_kv - run.load_bytes
        rows.append(f"NVML at READY ({run.ready_note}): used {gib(run.ready_gpu_used_bytes)} minus {gib(before)} used "
                    f"before the engine minus KV pool {gib(run.kv_pool_bytes)} = non-KV cost {gib(non_kv)}; minus "
                    f"weights loaded {gib(run.load_bytes)} = {gib(from_nvml)}")
    else:
        rows.append(f"NVML at READY: not measured ({run.ready_note}); the boot log's accounting stands alone")
    raw = max(v for v in (from_log, from_nvml) if v is not None)
    if raw < 0:
        raise CalibrationError(f"run {run.run_id}: its measurements give a negative non-weight cost ({gib(raw)}): "
                               "the boot log and the samples contradict each other; nothing to calibrate from")
    reserve = _ceil_mib(raw)
    how = "the larger of the boot log's accounting and NVML at READY" if from_nvml is not None else \
        "vLLM's accounting in the boot log; no NVML reading at READY"
    rows.append(f"non-weight reserve = {gib(reserve)} ({how}, rounded up to whole MiB)")
    warnings = [f"calibrated from run {run.run_id}, whose receipt says: {b}" for b in run.banners]
    if now is not None:
        if now.kv_cache_dtype != run.kv_cache_dtype:
            warnings.append(f"the KV dtype differs from run {run.run_id} ({run.kv_cache_dtype or 'model dtype'} then, "
                            f"{now.kv_cache_dtype or 'model dtype'} now): the reserve excludes the KV pool, so it "
                            "still applies")
        if now.cpu_offload_gib is not None and now.cpu_offload_gib != run.cpu_offload_gib:
            warnings.append(f"the CPU offload differs from run {run.run_id} ({run.cpu_offload_gib:g} GiB then, "
                            f"{now.cpu_offload_gib:g} GiB now): the reserve excludes the weights, so it still applies")
    return Calibration(run_id=run.run_id, folder=run.folder, reserve_bytes=reserve, how=how,
                       estimates={"boot_log_bytes": from_log, "nvml_bytes": from_nvml}, rows=rows,
                       warnings=warnings, image_id=run.image_id, vllm_version=run.vllm_version,
                       gpu_name=run.gpu_name)


def gpu_warning(calibration: Calibration, gpu_name: str | None) -> str | None:
    """A warning when the run measured another GPU model than the one selected now (None when the same)."""
    if gpu_name is None or calibration.gpu_name is None or gpu_name == calibration.gpu_name:
        return None
    return (f"run {calibration.run_id} measured a {calibration.gpu_name}; the selected GPU now is a {gpu_name}: the "
            "CUDA context and kernels' workspace can differ between models")


def settings_reserve_text(settings) -> str:
    """How the settings' own reserve is shown: ASSUMED (the kit's named default) or from the settings."""
    shown = gib(round(settings.gpu_reserve_gib * GIB))
    return f"{shown} ASSUMED" if "gpu_reserve_gib" in settings.assumed else f"{shown} from the settings"


def describe(calibration: Calibration | None, assumed_text: str) -> list[str]:
    """Fact lines: the reserve the plan uses, and how it was derived."""
    if calibration is None:
        return [f"non-weight GPU reserve {assumed_text}: not calibrated (give --calibrate-from RUN_FOLDER, a run of "
                "the same checkpoint, image, context and prefill chunk, to replace it by a measurement)"]
    return [f"non-weight GPU reserve {gib(calibration.reserve_bytes)} CALIBRATED FROM {calibration.run_id} "
            f"(replaces {assumed_text})", *[f"  {row}" for row in calibration.rows]]
