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
    "NO_GPU_IN_CONTAINERS": ("the Docker daemon cannot hand NVIDIA GPUs to containers (or the container's torch "
                             "finds no NVIDIA driver)"),
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
    "PROFILE_OOM": ("the GPU ran out of memory after the weights loaded: in the engine's profiling run, its warmup "
                    "or its CUDA graph capture"),
    "NO_KV_MEMORY": "the weights loaded but no memory (or less than none) was left for the KV cache",
    "CONTEXT_EXCEEDS_KV": "the KV cache the engine could allocate is smaller than one request of the context needs",
    "CONTEXT_TOO_LONG": "the context length asked for (max_model_len) exceeds what the model's config allows",
    "WEIGHTS_NOT_FOUND": "the engine found no weight files of a format it reads in the model folder",
    "CONFIG_INVALID": "the engine could not read the model's config (malformed JSON, or a value it refuses)",
    "GPU_UNSUPPORTED": ("the GPU lacks what the engine build or the model needs: kernels for its compute capability, "
                        "or bfloat16"),
    "NO_ATTENTION_BACKEND": ("no attention backend of the engine accepts the model's attention on this card: each "
                             "refused its head size, dtype, KV cache dtype, block size or the compute capability"),
    "DISTRIBUTED_INIT_FAILED": "NCCL or torch.distributed failed while the engine started its parallel workers",
    "HOST_MEMORY_EXHAUSTED": ("the host refused the engine memory it asked for (an mmap or allocation failed, a "
                              "loader's memory limit was reached, or the CPU build found less free RAM than its "
                              "utilization target), short of a kill"),
    "INVALID_ENGINE_ARGUMENT": "the engine's argument parser refused a value of a flag it knows",
    "CUDA_ERROR": "a CUDA error (an illegal memory access, a device-side assert) ended the engine",
    "SHM_TOO_SMALL": "the container's /dev/shm is smaller than the engine's shared-memory queues need",
    "TRUST_REMOTE_CODE_REQUIRED": "the model needs --trust-remote-code and the settings do not allow it",
    "ENGINE_DIED": ("the engine ended (one of its processes died, or it exited) and its log says no reason a code "
                    "names; its last words, where it left any, are quoted with it"),
    "HOST_OOM_KILLED": "the container (or an engine process) was killed for exceeding its RAM cap or the host's RAM",
    "LOAD_TIMEOUT": "the engine was not ready within the boot deadline",
    "DEADLINE": "the overall deadline passed",
    "REQUESTS_INVALID": "the request file or its protocol breaks a rule",
}


# code -> what to do about it: the engine's failures, each in the operator's terms (the report's failure section
# shows it beside the engine's quoted line).
ADVICE: dict[str, str] = {
    "LOAD_OOM": ("more of the weights must leave the GPU: raise cpu_offload_gib (the plan shows what moves), or use "
                 "a card with more memory"),
    "PROFILE_OOM": ("the activations of the largest step do not fit beside the weights: lower prefill_chunk_tokens "
                    "(max-num-batched-tokens), raise gpu_reserve_gib so the plan keeps room for them, or offload more"),
    "NO_KV_MEMORY": ("nothing is left for the KV cache: offload more weights (cpu_offload_gib) or raise the non-weight "
                     "reserve the plan assumes until the plan blocks first"),
    "CONTEXT_EXCEEDS_KV": ("one request of the context does not fit the KV cache that is left: lower context_tokens, "
                           "use a smaller KV dtype (kv_cache_dtype), or offload more weights"),
    "CONTEXT_TOO_LONG": "lower context_tokens to the model's max_position_embeddings (or what its config derives)",
    "GPU_BUSY": "free the card (another process holds its memory) or select an idle GPU",
    "UNSUPPORTED_QUANT": ("this image's vLLM has no kernel for the checkpoint's quantization on this card: another "
                          "image, another card, or another quantization of the model"),
    "UNSUPPORTED_ARCH": "this image's vLLM does not know the architecture: use an image whose vLLM supports it",
    "WEIGHTS_NOT_FOUND": ("the model folder holds no weights the engine reads (safetensors): check model_path and the "
                          "checkpoint's format"),
    "CHECKPOINT_INCOMPLETE": "download the missing shards; custody's manifest names every file",
    "CONFIG_INVALID": "the checkpoint's config.json is damaged or not what this vLLM expects: restore it",
    "TRUST_REMOTE_CODE_REQUIRED": "read the model's code, then set trust_remote_code true in the settings",
    "GPU_UNSUPPORTED": ("the image was not built for this card (or the card lacks bfloat16): an image built for its "
                        "compute capability, or another card"),
    "NO_ATTENTION_BACKEND": ("the quoted line gives each backend's reasons: where they name the KV cache dtype, change "
                             "kv_cache_dtype in the settings; where they name the compute capability or the head size, "
                             "another card or an image whose backends support it"),
    "DISTRIBUTED_INIT_FAILED": ("the parallel workers could not talk: check peer access and the NCCL environment "
                                "(multi_gpu.nccl_env), the GPU topology the scan shows, and /dev/shm"),
    "HOST_MEMORY_EXHAUSTED": "give the engine more host RAM (container_ram_gib, the host's free RAM) or offload less",
    "HOST_OOM_KILLED": ("the engine needed more host RAM than it had: raise container_ram_gib (the plan's pinned "
                        "figure is the floor), use exact pinning, or offload less"),
    "SHM_TOO_SMALL": "raise shm_gib in the settings",
    "INVALID_ENGINE_ARGUMENT": "a launch value is one this vLLM refuses: the quoted line names the flag and its choices",
    "RUNTIME_INCOMPATIBLE": "use an image whose vLLM knows every flag the plan uses (the probe names them)",
    "NO_GPU_IN_CONTAINERS": ("install the NVIDIA Container Toolkit (or CDI) so the daemon hands the GPU to containers; "
                             "on a machine without an NVIDIA GPU the engine cannot serve"),
    "RUNTIME_NEEDS_NETWORK": "the engine wants files from the network: put them in the checkpoint or the image",
    "CUDA_ERROR": ("a kernel failed on the card: report it upstream with the engine log; a smaller context or "
                   "another backend may avoid it"),
    "ENGINE_DIED": "the engine left no reason: read engine.log in the run folder",
    "LOAD_TIMEOUT": "raise boot_deadline_s, or look at engine.log for where the boot stopped",
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
