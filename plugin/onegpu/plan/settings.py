"""Settings: the kit's own schema (onegpu/settings@1) and the earlier kit's axm/one-gpu-settings@1.

Budgets are always explicit. Knobs the earlier schema lacks take named defaults that the plan shows as
ASSUMED. Every rule broken is reported at once, each naming the field, the value and the rule.
"""
from __future__ import annotations

import hashlib
import math
import re
from pathlib import Path

from msgspec import Struct, field

from onegpu.core import strict_json
from onegpu.core.jsonable import to_json
from onegpu.core.kv_dtypes import KV_DTYPES
from onegpu.core.shown import as_json

OWN_SCHEMA = "onegpu/settings@1"
LEGACY_SCHEMA = "axm/one-gpu-settings@1"
MAX_SETTINGS_BYTES = 1_000_000

KV_CACHE_DTYPES = tuple(KV_DTYPES)  # kv_dtypes.py: one row per value
# How vLLM's UVA offloader holds the offloaded weights in host RAM (onegpu.engine.launch sets the engine's env from it):
# "rounded" is vLLM's default, each parameter pinned through torch's pinned allocator, which rounds every buffer
# up to a power of two; "exact" sets VLLM_WEIGHT_OFFLOADING_DISABLE_PIN_MEMORY=1, so no parameter goes through
# that allocator: on CUDA, vLLM's op that maps a parameter for the GPU then pins a copy of exactly its bytes.
OFFLOAD_PINNINGS = ("rounded", "exact")
MAX_CONTEXT = 16 * 2**20
MAX_DEADLINE_S = 7 * 24 * 3600

# Named defaults for knobs a settings file may leave out; each is shown as ASSUMED, never applied silently.
ASSUMED_DEFAULTS: dict[str, tuple[object, str]] = {
    "gpu_reserve_gib": (8.0, "non-weight GPU reserve: CUDA context, activations of one prefill chunk, "
                             "sampler buffers; calibrate it from a measured run"),
    "kv_cache_dtype": (None, "the model's own dtype (vLLM 'auto')"),
    "trust_remote_code": (False, "the model's code from the checkpoint is not executed"),
    "request_timeout_s": (600, "per request"),
    "serve_window_s": (3600, "serve window length, counted from READY"),
    "shm_gib": (16.0, "container /dev/shm size"),
    "pids_limit": (4096, "container process limit"),
    "free_floor_gib": (2.0, "GPU memory that should stay free after boot"),
    "max_requests": (1000, "cap on request lines"),
    "container_cpus": (None, "no CPU quota on the container"),
    "offload_pinning": ("rounded", "vLLM's default: each offloaded parameter pinned by torch's allocator, "
                                   "which rounds it up to a power of two"),
}

_REVISION = re.compile(r"^[0-9a-f]{40}$")
_MODEL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9_.-]+)?$")
_IMAGE = re.compile(r"^(sha256:[0-9a-f]{64}|[a-z0-9][a-z0-9._/:-]*(@sha256:[0-9a-f]{64})?)$")
_GPU_UUID = re.compile(r"^(GPU|MIG)-[0-9a-fA-F-]{8,}$")
_NCCL_KEY = re.compile(r"^NCCL_[A-Z0-9_]{1,64}$")
_VLLM_VERSION = re.compile(r"^\d{1,4}\.\d{1,4}(\.\d{1,4})?([.+-]?[0-9A-Za-z][0-9A-Za-z.+_-]{0,30})?$")

# The multi-GPU protocol (settings field multi_gpu): vLLM's own tensor and pipeline parallelism over the GPUs
# listed, one GPU per rank. It is a separate protocol: its plan, receipt and report say "N-GPU protocol (TP x PP)".
MAX_PARALLEL = 16
MULTI_GPU_FIELDS = ("gpus", "tensor_parallel_size", "pipeline_parallel_size", "nccl_env")
# The NCCL environment of the public TP3 field report (three 96 GB cards, peer access forced on in the driver):
# peer-to-peer and shared-memory transports allowed, P2P across PCIe root complexes (NCCL_P2P_LEVEL=SYS), at
# least 8 channels, and the legacy cudaIpc transport instead of cuMem (NCCL_CUMEM_ENABLE=0). Assumed, and shown
# as ASSUMED, when multi_gpu leaves nccl_env out; `"nccl_env": {}` passes none.
FIELD_NCCL_ENV = {
    "NCCL_P2P_DISABLE": "0", "NCCL_SHM_DISABLE": "0", "NCCL_P2P_LEVEL": "SYS", "NCCL_MIN_NCHANNELS": "8",
    "NCCL_CUMEM_ENABLE": "0", "NCCL_CUMEM_HOST_ENABLE": "0",
}


class MultiGpu(Struct, frozen=True):
    """The declared multi-GPU protocol: rank r runs on gpus[r] (rank = PP stage x TP + TP rank, as vLLM
    assigns devices)."""

    gpus: tuple[int | str, ...]
    tensor_parallel_size: int
    pipeline_parallel_size: int
    nccl_env: dict[str, str]

    @property
    def label(self) -> str:
        return protocol_label(self.tensor_parallel_size, self.pipeline_parallel_size)


def protocol_label(tp: int, pp: int) -> str:
    """'N-GPU protocol (TP t x PP p)': how every artefact names a multi-GPU run (N = TP x PP, one GPU per rank)."""
    return f"{tp * pp}-GPU protocol (TP {tp} x PP {pp})"


class SettingsError(ValueError):
    """All rules a settings file breaks, one line each."""

    def __init__(self, path: str, errors: list[str]):
        self.path, self.errors = path, errors
        super().__init__(f"{path}: " + "; ".join(errors))


class Settings(Struct, frozen=True):
    source_schema: str
    path: str
    sha256: str
    model_id: str
    model_revision: str
    model_path: str
    image: str
    gpu: int | str  # index, or a GPU UUID
    context_tokens: int
    prefill_chunk_tokens: int
    cpu_offload_gib: float
    container_ram_gib: float
    host_headroom_gib: float
    deadline_s: int
    boot_deadline_s: int
    container_cpus: float | None
    gpu_reserve_gib: float
    kv_cache_dtype: str | None  # None: assumed the model's dtype; the launch passes no flag then
    trust_remote_code: bool
    request_timeout_s: int
    serve_window_s: int
    shm_gib: float
    pids_limit: int
    free_floor_gib: float
    max_requests: int
    offload_pinning: str  # one of OFFLOAD_PINNINGS
    assumed: dict[str, str] = field(default_factory=dict)  # field -> "value (why)"
    multi_gpu: MultiGpu | None = None  # None: the one-GPU protocol, the kit's main question
    # The image's vLLM version as the operator declares it: the plan applies that release's rules
    # (onegpu.plan.vllm_versions); None: an earlier probe's record of the image, else the newest rules, ASSUMED.
    vllm_version: str | None = None

    @property
    def protocol(self) -> str:
        """What a result of these settings is: the one-GPU protocol, or "N-GPU protocol (TP x PP)"."""
        return "one-GPU protocol" if self.multi_gpu is None else self.multi_gpu.label

    @property
    def gpu_selectors(self) -> tuple[int | str, ...]:
        """Every GPU the session uses, in rank order (the one GPU of the one-GPU protocol)."""
        return (self.gpu,) if self.multi_gpu is None else self.multi_gpu.gpus


def settings_values(settings: Settings) -> dict:
    """The settings as JSON for the receipt and plan.json. A one-GPU session's carry no multi_gpu key, as before
    the protocol existed, so its plan.json and receipt read as they did."""
    values = to_json(settings)
    for optional in ("multi_gpu", "vllm_version"):  # absent, as before these fields existed
        if values.get(optional) is None:
            values.pop(optional, None)
    return values


# field -> (kind, low, high); kinds: int, number, str, bool, gpu, revision, model_id, path, image, kv, pinning
OWN_FIELDS: dict[str, tuple] = {
    "model_id": ("model_id",), "model_revision": ("revision",), "model_path": ("path",), "image": ("image",),
    "gpu": ("gpu",), "context_tokens": ("int", 1, MAX_CONTEXT), "prefill_chunk_tokens": ("int", 1, MAX_CONTEXT),
    "cpu_offload_gib": ("number", 0, 65536), "container_ram_gib": ("number", 1, 65536),
    "host_headroom_gib": ("number", 0, 65536), "deadline_s": ("int", 1, MAX_DEADLINE_S),
    "boot_deadline_s": ("int", 1, MAX_DEADLINE_S), "container_cpus": ("number", 0.01, 4096),
    "gpu_reserve_gib": ("number", 0, 4096), "kv_cache_dtype": ("kv",), "trust_remote_code": ("bool",),
    "request_timeout_s": ("int", 1, MAX_DEADLINE_S), "serve_window_s": ("int", 1, MAX_DEADLINE_S),
    "shm_gib": ("number", 0.0625, 4096), "pids_limit": ("int", 64, 4194304),
    "free_floor_gib": ("number", 0, 4096), "max_requests": ("int", 1, 10_000_000),
    "offload_pinning": ("pinning",), "multi_gpu": ("multi_gpu",), "vllm_version": ("version",),
}
_OWN_REQUIRED: tuple[str, ...] = ("model_id", "model_revision", "model_path", "image", "gpu", "context_tokens",
                 "prefill_chunk_tokens", "cpu_offload_gib", "container_ram_gib", "host_headroom_gib", "deadline_s")

# The earlier kit's names -> ours (KIT.md section 10); all of its fields are required.
_LEGACY_MAP = {
    "model_id": "model_id", "model_revision": "model_revision", "model_path": "model_path", "image": "image",
    "gpu_index": "gpu", "context": "context_tokens", "prefill_chunk": "prefill_chunk_tokens",
    "offload_gib": "cpu_offload_gib", "ram_limit_gib": "container_ram_gib", "reserve_gib": "host_headroom_gib",
    "cpus": "container_cpus", "timeout_s": "deadline_s", "max_requests": "max_requests",
}


def _is_placeholder(value) -> bool:
    return isinstance(value, str) and (value.startswith("REPLACE_WITH") or value.startswith("/choose/"))


def check_field(name: str, value, spec: tuple) -> str | None:
    """The rule `value` breaks, or None."""
    kind = spec[0]
    if _is_placeholder(value):
        return f"field {name!r}: value {as_json(value)} is a placeholder: replace it with the real value"
    shown = f"field {name!r}: value {as_json(value)}"
    if kind in ("int", "number"):
        lo, hi = spec[1], spec[2]
        is_num = isinstance(value, (int, float)) and not isinstance(value, bool)
        if kind == "int" and not (isinstance(value, int) and not isinstance(value, bool)):
            return f"{shown}: must be an integer (a boolean is not) from {lo} to {hi}"
        if kind == "number" and (not is_num or not math.isfinite(value)):
            return f"{shown}: must be a finite number (a boolean is not) from {lo} to {hi}"
        if not lo <= value <= hi:
            return f"{shown}: must be from {lo} to {hi}"
        return None
    if kind == "bool":
        return None if isinstance(value, bool) else f"{shown}: must be true or false"
    if kind == "multi_gpu":
        return None  # a block of its own: multi_gpu_errors
    if kind == "pinning" and value not in OFFLOAD_PINNINGS:
        return (f"{shown}: must be \"rounded\" (vLLM's default: each offloaded parameter pinned by torch's "
                "allocator, rounded up to a power of two) or \"exact\" (the engine gets "
                "VLLM_WEIGHT_OFFLOADING_DISABLE_PIN_MEMORY=1)")
    if not isinstance(value, str) and kind != "gpu" and not (kind == "kv" and value is None):
        return f"{shown}: must be a string"
    if kind == "revision" and not _REVISION.match(value):
        return f"{shown}: must be the 40-character lowercase hex commit of the model repository"
    if kind == "model_id" and not _MODEL_ID.match(value):
        return f"{shown}: must be a model ID such as ORG/NAME"
    if kind == "path":
        if "\x00" in value or not value:
            return f"{shown}: must be a non-empty path"
        if value.startswith("~"):
            return f"{shown}: must be absolute ('~' is not expanded)"
        if not Path(value).is_absolute():
            return f"{shown}: must be an absolute path (a relative path would depend on where pytest runs)"
    if kind == "image" and not _IMAGE.match(value):
        return f"{shown}: must be a local image reference (name:tag, name@sha256:..., or sha256:<64 hex>)"
    if kind == "gpu":
        if isinstance(value, bool) or not (isinstance(value, int) and 0 <= value < 64 or
                                           isinstance(value, str) and _GPU_UUID.match(value)):
            return f"{shown}: must be a GPU index from 0 to 63 or a GPU UUID (GPU-...)"
    if kind == "version" and not _VLLM_VERSION.match(value):
        return f"{shown}: must be a vLLM version number such as \"0.34.0\" (what `vllm --version` prints)"
    if kind == "kv" and value is not None and value not in KV_CACHE_DTYPES:
        return f"{shown}: must be one of {', '.join(KV_CACHE_DTYPES)} or null"
    return None


def parse_settings(data: dict, path: str, sha256: str) -> Settings:
    """Validate a parsed settings document; raises SettingsError listing every broken rule."""
    if not isinstance(data, dict):
        raise SettingsError(path, [f"the document must be a JSON object, found {type(data).__name__}"])
    schema = data.get("schema")
    if schema == OWN_SCHEMA:
        body = {k: v for k, v in data.items() if k != "schema"}
        allowed, required = set(OWN_FIELDS), _OWN_REQUIRED
    elif schema == LEGACY_SCHEMA:
        body = {_LEGACY_MAP.get(k, f"?{k}"): v for k, v in data.items() if k != "schema"}
        allowed, required = set(_LEGACY_MAP.values()), tuple(_LEGACY_MAP.values())
    else:
        raise SettingsError(path, [f"field 'schema': value {as_json(schema)}: must be {OWN_SCHEMA!r} or {LEGACY_SCHEMA!r}"])
    reverse = {v: k for k, v in _LEGACY_MAP.items()} if schema == LEGACY_SCHEMA else {}
    errors = [f"field {k[1:]!r}: value {as_json(v)}: unknown field (not in {schema})" for k, v in body.items()
              if k.startswith("?")]
    errors += [f"field {k!r}: value {as_json(v)}: unknown field (not in {schema})" for k, v in body.items()
               if not k.startswith("?") and k not in allowed]
    errors += [f"field {reverse.get(k, k)!r}: required" for k in required if k not in body]
    for key, value in body.items():
        if key in OWN_FIELDS and key in allowed:
            problem = check_field(reverse.get(key, key), value, OWN_FIELDS[key])
            if problem:
                errors.append(problem)
    if "multi_gpu" in body and "multi_gpu" in allowed:
        errors += multi_gpu_errors(body["multi_gpu"], body.get("gpu"))
    if errors:
        raise SettingsError(path, errors)
    values = dict(body)
    assumed: dict[str, str] = {}
    for key, (default, why) in ASSUMED_DEFAULTS.items():
        if key not in values:
            values[key] = default
            assumed[key] = f"{default if default is not None else 'none'} ({why})"
    if "boot_deadline_s" not in values:
        values["boot_deadline_s"] = values["deadline_s"]
        assumed["boot_deadline_s"] = f"{values['deadline_s']} (the overall deadline)"
    for key in ("cpu_offload_gib", "container_ram_gib", "host_headroom_gib", "gpu_reserve_gib", "shm_gib",
                "free_floor_gib"):
        values[key] = float(values[key])
    if values["container_cpus"] is not None:
        values["container_cpus"] = float(values["container_cpus"])
    if "multi_gpu" in values:
        values["multi_gpu"], nccl_assumed = multi_gpu_of(values["multi_gpu"])
        if nccl_assumed:
            assumed["multi_gpu.nccl_env"] = (f"{' '.join(f'{k}={v}' for k, v in FIELD_NCCL_ENV.items())} (the "
                                             "NCCL environment of the public TP3 field report; {} passes none)")
    return Settings(source_schema=schema, path=path, sha256=sha256, assumed=assumed, **values)


def multi_gpu_errors(block, gpu) -> list[str]:
    """Every rule the multi_gpu block breaks, each naming the field, the value and the rule."""
    if not isinstance(block, dict):
        return [f"field 'multi_gpu': value {as_json(block)}: must be an object with gpus, tensor_parallel_size, "
                "pipeline_parallel_size and optionally nccl_env"]
    errors = [f"field 'multi_gpu.{k}': value {as_json(v)}: unknown field (allowed: {', '.join(MULTI_GPU_FIELDS)})"
              for k, v in block.items() if k not in MULTI_GPU_FIELDS]
    errors += [f"field 'multi_gpu.{k}': required" for k in MULTI_GPU_FIELDS[:3] if k not in block]
    for key in ("tensor_parallel_size", "pipeline_parallel_size"):
        if key in block:
            problem = check_field(f"multi_gpu.{key}", block[key], ("int", 1, MAX_PARALLEL))
            errors += [problem] if problem else []
    gpus = block.get("gpus")
    if "gpus" in block:
        if not isinstance(gpus, list) or not 2 <= len(gpus) <= MAX_PARALLEL:
            errors.append(f"field 'multi_gpu.gpus': value {as_json(gpus)}: must be a list of 2 to {MAX_PARALLEL} "
                          "GPU indexes or UUIDs, one per rank (one GPU is the one-GPU protocol: leave multi_gpu out)")
            gpus = None
        else:
            for i, selector in enumerate(gpus):
                problem = check_field(f"multi_gpu.gpus[{i}]", selector, ("gpu",))
                errors += [problem] if problem else []
            if len({json_key(s) for s in gpus}) != len(gpus):
                errors.append(f"field 'multi_gpu.gpus': value {as_json(gpus)}: must name each GPU once")
            if gpu is not None and gpus and json_key(gpus[0]) != json_key(gpu):
                errors.append(f"field 'gpu': value {as_json(gpu)}: must be the first GPU of multi_gpu.gpus "
                              f"({as_json(gpus[0])}), rank 0's GPU")
    tp, pp = block.get("tensor_parallel_size"), block.get("pipeline_parallel_size")
    if (isinstance(gpus, list) and isinstance(tp, int) and isinstance(pp, int) and not isinstance(tp, bool)
            and not isinstance(pp, bool)):
        if tp * pp != len(gpus):
            errors.append(f"field 'multi_gpu': tensor_parallel_size {tp} x pipeline_parallel_size {pp} = {tp * pp} "
                          f"ranks: must equal the {len(gpus)} GPUs listed (vLLM runs one rank per GPU)")
    errors += _nccl_errors(block.get("nccl_env", {}))
    return errors


def json_key(selector) -> str:
    """A GPU selector as a comparable key (an index and a UUID never collide)."""
    return as_json(selector)


def _nccl_errors(env) -> list[str]:
    if not isinstance(env, dict):
        return [f"field 'multi_gpu.nccl_env': value {as_json(env)}: must be an object of NCCL_* names to strings"]
    errors = []
    for key, value in env.items():
        if not _NCCL_KEY.match(key):
            errors.append(f"field 'multi_gpu.nccl_env.{key}': must be an NCCL_* variable name (upper case)")
        elif not isinstance(value, str) or len(value) > 256 or not value.isprintable():
            errors.append(f"field 'multi_gpu.nccl_env.{key}': value {as_json(value)}: must be a string of at most "
                          "256 printable characters (no newline or control character: the value is shown on one "
                          "line of the launch plan)")
    return errors


def multi_gpu_of(block: dict) -> tuple[MultiGpu, bool]:
    """A validated multi_gpu block as MultiGpu, and whether its NCCL environment was assumed."""
    assumed = "nccl_env" not in block
    return MultiGpu(gpus=tuple(block["gpus"]), tensor_parallel_size=block["tensor_parallel_size"],
                    pipeline_parallel_size=block["pipeline_parallel_size"],
                    nccl_env=dict(FIELD_NCCL_ENV if assumed else block["nccl_env"])), assumed


def load_settings(path: Path) -> Settings:
    """Read and validate a settings file; raises SettingsError (never a traceback for bad input)."""
    return settings_of_bytes(read_settings_bytes(path), str(path))


def read_settings_bytes(path: Path) -> bytes:
    """A settings file's bytes; raises SettingsError when it cannot be read or is too large to be one."""
    try:
        return strict_json.read_bounded(Path(path), MAX_SETTINGS_BYTES)
    except strict_json.JSONFileError as exc:
        problem = (f"{exc.size} bytes: a settings file must be under {MAX_SETTINGS_BYTES:,} bytes"
                   if exc.kind == "too_large" else str(exc))
        raise SettingsError(str(path), [problem]) from None


def settings_of_bytes(raw: bytes, shown: str) -> Settings:
    """Validate a settings file's bytes (`shown` names it in errors); raises SettingsError."""
    try:
        data = strict_json.loads(raw)
    except (strict_json.StrictJSONError, UnicodeDecodeError) as exc:
        raise SettingsError(shown, [str(exc)]) from None
    return parse_settings(data, shown, hashlib.sha256(raw).hexdigest())
