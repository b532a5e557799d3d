"""Blocked outcomes: the one catalogue of codes, and the exception the core raises for them.

A blocked condition is an explained end of the experiment (missing weights, too little RAM, ...), not a
bug. The pytest layer turns `Blocked` into `pytest.xfail("BLOCKED <CODE>: <message>")`; every other
exception stays a failure with its traceback.
"""
from __future__ import annotations

from dataclasses import dataclass, field

# code -> what it means, one line each (shown in the README and the report's legend).
CODES: dict[str, str] = {
    # machine
    "NO_NVIDIA_DRIVER": "the NVIDIA management library (NVML) cannot be loaded or initialised",
    "NO_GPU": "the driver answers but reports no GPU",
    "GPU_NOT_FOUND": "the GPU named in the settings (index or UUID) does not exist",
    "GPU_BUSY": "other compute processes already hold memory on the selected GPU",
    "GPU_LOCKED": "another kit session holds the lock on the selected GPU",
    "MIG_ENABLED": "the selected GPU is in MIG mode; the kit needs the whole card",
    "P2P_DISABLED": "the driver reports peer access off between GPUs of the multi-GPU set",
    "HOST_RAM_UNSTATED": "a replayed profile leaves host RAM unset and the operator has not stated it",
    "NO_DOCKER": "no Docker daemon answers",
    "NO_GPU_IN_CONTAINERS": "the Docker daemon cannot hand NVIDIA GPUs to containers",
    "SWAP_LIMIT_UNENFORCED": "the Docker daemon does not enforce swap limits, so the RAM cap would leak into swap",
    "REMOTE_DOCKER": "the Docker daemon is remote or rootless: its memory is not this host's memory",
    # plan
    "NO_SETTINGS": "no --settings file was given",
    "SETTINGS_INVALID": "the settings file breaks a rule of its schema",
    "PLAN_CHANGED": "the approved plan no longer matches what the machine, image or checkpoint say now",
    "CHECKPOINT_MISSING": "the checkpoint folder or its index/config does not exist",
    "CHECKPOINT_INCOMPLETE": "shards or tensors named by the index are missing",
    "CHECKPOINT_CORRUPT": "a shard header or the index breaks the safetensors rules",
    "UNSUPPORTED_QUANT": "the quantization is not supported (by the kit's reading or by the engine)",
    "UNSUPPORTED_ARCH": "the architecture is not supported by the engine",
    "IMAGE_MISSING": "the image reference does not exist locally (the kit never pulls)",
    "INSUFFICIENT_VRAM": "the weights that must stay on the GPU exceed the GPU budget",
    "PARALLEL_SPLIT_REFUSED": ("vLLM refuses to split the model over the multi-GPU protocol's tensor or pipeline "
                               "parallel size (a dimension does not divide)"),
    "INSUFFICIENT_HOST_RAM": "the container RAM cap plus headroom exceed the host's available RAM",
    "CGROUP_LIMIT": "the memory limit of the cgroup the kit runs in is below what the plan needs",
    "KV_DOES_NOT_FIT": "the KV cache for the context does not fit in what is left of the GPU budget",
    "DISK_FULL": "too little free disk for the run folder",
    # runtime
    "HARDWARE_REPLAYED": "the hardware facts are replayed from a profile; nothing may start on this machine",
    "RUNTIME_INCOMPATIBLE": "the image's vLLM lacks a flag or capability the plan uses",
    "RUNTIME_NEEDS_NETWORK": "the engine tried to reach the network, which the container does not have",
    "CHECKPOINT_CHANGED": "a checkpoint file changed (size, mtime or inode) after it was hashed",
    "CHECKPOINT_AUTH_FAILED": "a file's SHA-256 differs from its content address or the publisher's hash",
    "REVISION_MISMATCH": "the checkpoint is the cache snapshot of another revision than the settings name",
    "LOAD_OOM": "the GPU ran out of memory while loading the weights",
    "NO_KV_MEMORY": "the weights loaded but no memory was left for the KV cache",
    "CONTEXT_TOO_LONG": "the context length asked for (max_model_len) exceeds what the model's config allows",
    "SHM_TOO_SMALL": "the container's /dev/shm is smaller than the engine's shared-memory queues need",
    "TRUST_REMOTE_CODE_REQUIRED": "the model needs --trust-remote-code and the settings do not allow it",
    "ENGINE_DIED": ("the engine ended (one of its processes died, or it exited) for a reason none of the other "
                    "codes names; its last words, where it left any, are quoted with it"),
    "HOST_OOM_KILLED": "the container was killed for exceeding its RAM cap",
    "LOAD_TIMEOUT": "the engine was not ready within the boot deadline",
    "DEADLINE": "the overall deadline passed",
    "REQUESTS_INVALID": "the request file or its protocol breaks a rule",
}


# Which blocked finding leads a verdict line when several stand: what the hardware cannot hold (with its
# numbers) first; then everything else; "nothing may start here" (a replayed profile, an image not on this
# machine) last, because it says nothing of whether the model fits.
CAPACITY_CODES = ("INSUFFICIENT_VRAM", "KV_DOES_NOT_FIT", "INSUFFICIENT_HOST_RAM", "CGROUP_LIMIT", "DISK_FULL")
CANNOT_START_HERE = ("IMAGE_MISSING", "HARDWARE_REPLAYED")

# Codes that belong to a later phase's input: an earlier phase's test that needs that input (the machine
# phase's GPU selection needs the settings) waits on it, and the finding is the later phase's, not its own.
HOME_PHASE = {"NO_SETTINGS": "plan", "SETTINGS_INVALID": "plan"}

# The phases of KIT.md section 3, in order; every kit test belongs to one.
PHASES = ("machine", "plan", "probe", "custody", "load", "canary", "batch", "serve")


def consequence(code: str | None) -> int:
    """Rank of a blocked code for leading a verdict line: higher leads."""
    if code in CAPACITY_CODES:
        return 2
    return 0 if code in CANNOT_START_HERE else 1


@dataclass
class Blocked(Exception):
    """A fact that ends the experiment here, with the numbers that show why."""

    code: str
    message: str
    numbers: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.code not in CODES:
            raise ValueError(f"unknown outcome code {self.code!r}; add it to plugin/onegpu/core/outcomes.py")
        super().__init__(self.reason)

    @property
    def reason(self) -> str:
        return f"BLOCKED {self.code}: {self.message}"

    def as_json(self) -> dict:
        return {"code": self.code, "message": self.message, "numbers": dict(self.numbers)}


def parse_reason(text: str) -> tuple[str, str] | None:
    """Split "BLOCKED CODE: message" back into (code, message); None for any other xfail reason."""
    text = text.strip()
    if text.startswith("reason: "):
        text = text[len("reason: "):]
    if not text.startswith("BLOCKED "):
        return None
    code, _, message = text[len("BLOCKED "):].partition(": ")
    return (code, message) if code in CODES else None
