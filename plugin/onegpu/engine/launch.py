"""Pure: settings + the selected GPU + the image ID -> the exact engine container launch (KIT.md 6).

The LaunchSpec is the plan a person approves: the same object yields the docker SDK keyword arguments the
engine is created with and an equivalent `docker run` line to read, so the two cannot drift apart.
"""
from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from pathlib import PurePosixPath

from msgspec import Struct, field

from onegpu.checkpoint.files import hf_cache_layout
from onegpu.core.jsonable import to_json
from onegpu.core.units import GIB, gib
from onegpu.plan.capacity import GPU_UTILIZATION  # one number: what the verdicts assume is what the engine gets

MODEL_MOUNT = "/model"  # a plain checkpoint folder, read-only
MODEL_REPO_MOUNT = "/model-repo"  # a Hugging Face cache repo folder (models--ORG--NAME), read-only
SOCKET_MOUNT = "/run/onegpu"  # the private socket folder, read-write
SOCKET_NAME = "engine.sock"
ENGINE_HOME = "/home/engine"
# The engine runs as the invoking user's uid:gid, which the image's /etc/passwd may not list; getpass (torch
# inductor's cache folder, among others) then fails unless USER or LOGNAME names someone. The name matches HOME.
ENGINE_USER = "engine"

# Writable scratch for a non-root engine: caches under HOME and /tmp. tmpfs pages count against the
# container's memory cap, so they are bounded; `mode=1777` lets any uid write there. `exec`: Docker mounts a
# tmpfs noexec unless told otherwise, and the engine loads the kernels it compiles at run time from there
# (Triton's cache under HOME, torch inductor's under /tmp): a noexec mount fails them with "failed to map
# segment from shared object" (seen on vLLM's CPU build at tensor parallel size 2).
TMPFS = {
    ENGINE_HOME: "rw,nosuid,nodev,exec,size=2g,mode=1777",
    "/tmp": "rw,nosuid,nodev,exec,size=2g,mode=1777",
}

# Offline use, no usage reporting (KIT.md 6).
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}
# Who the engine is inside the container: its writable HOME, and a user name for a uid without a passwd entry.
USER_ENV = {"HOME": ENGINE_HOME, "USER": ENGINE_USER, "LOGNAME": ENGINE_USER}
# settings.offload_pinning "exact": vLLM's offloader skips torch's pinned allocator (which rounds every buffer
# up to a power of two). vLLM reads it as bool(int(value)) (vllm/envs.py).
EXACT_PINNING_ENV = {"VLLM_WEIGHT_OFFLOADING_DISABLE_PIN_MEMORY": "1"}
# A multi-GPU launch: CUDA numbers the container's GPUs by PCI bus (its default, FASTEST_FIRST, puts a faster card
# first whatever the order given), and vLLM gives rank r CUDA device r, so the ranks follow the settings' order only
# when that order is the PCI bus order (machine.gpu_set refuses any other).
DEVICE_ORDER_ENV = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def multi_gpu_env(multi) -> dict[str, str]:
    """The environment a multi-GPU launch adds: the CUDA device order, then the NCCL variables; none for one GPU."""
    return {} if multi is None else {**DEVICE_ORDER_ENV, **multi.nccl_env}

# The multi-GPU protocol (settings multi_gpu): vLLM's own parallelism inside one container on one machine. Its
# workers are processes of the container (multiprocessing, not Ray) and share its IPC namespace and /dev/shm.
PARALLEL_BACKEND = "mp"
# The TP3 field report keeps vLLM's custom all-reduce kernels off: on its PCIe platform they crashed or were
# slower than plain NCCL over peer-to-peer.
CUSTOM_ALL_REDUCE_NOTE = ("--disable-custom-all-reduce: the all-reduce between ranks is plain NCCL, as in the public "
                          "TP3 field report, whose PCIe platform crashed or slowed down with vLLM's custom kernels")

# `--generation-config vllm`: without it vLLM applies the checkpoint's generation_config.json sampling values
# (temperature, top_p, top_k, min_p, penalties) and its max_new_tokens to every request that leaves them out.
# The kit forwards operator and benchmark request bodies byte for byte, so it cannot add those values to each
# request; with `vllm` the engine's own defaults apply and every value a request sets is what runs.
GENERATION_CONFIG = "vllm"
GENERATION_NOTE = ("--generation-config vllm: the engine's own sampling defaults apply to what a request leaves "
                   "out, not the checkpoint's generation_config.json values or its max_new_tokens cap (its stop "
                   "tokens still apply); request bodies are forwarded byte for byte, so every value a request "
                   "sets is what runs")

KIT_LABEL = "onegpu.kit"
LABEL_RUN_ID = "onegpu.run_id"
LABEL_OWNER_PID = "onegpu.owner_pid"
LABEL_OWNER_START = "onegpu.owner_start"  # the owner's start time (clock ticks since boot): guards PID reuse
LABEL_OWNER_HOST = "onegpu.owner_host"  # the kernel boot id: a PID means nothing across reboots
LABEL_OWNER_PIDNS = "onegpu.owner_pidns"  # a PID means nothing in another PID namespace
LABEL_ROLE = "onegpu.role"  # engine or probe


class Owner(Struct, frozen=True):
    """The process that owns a container, as precisely as a later session needs to tell if it is alive."""

    pid: int
    start_ticks: int | None  # /proc/<pid>/stat field 22
    boot_id: str | None
    pidns: str | None  # e.g. "pid:[4026531836]"
    uid: int
    gid: int


class BindMount(Struct, frozen=True):
    source: str  # host path
    target: str  # container path
    read_only: bool


class LaunchSpec(Struct, frozen=True):
    """Everything the engine container is created with; `create_kwargs()` feeds the docker SDK."""

    image_id: str
    name: str
    entrypoint: list[str]
    command: list[str]
    environment: dict[str, str]
    labels: dict[str, str]
    mounts: list[BindMount]
    socket_dir: str  # host path of the private folder bind-mounted at SOCKET_MOUNT
    socket_path: str  # host path of the engine's Unix socket
    gpu_uuid: str | None  # None only for tests that run without a GPU; rank 0's GPU in the multi-GPU protocol
    mem_limit_bytes: int
    memswap_limit_bytes: int  # equal to mem_limit_bytes: no swap
    pids_limit: int
    shm_size_bytes: int
    nano_cpus: int | None
    user: str  # "uid:gid" of the invoking user
    tmpfs: dict[str, str]
    security_opt: list[str]
    cap_drop: list[str]
    network_mode: str = "none"
    init: bool = True  # docker-init as PID 1 forwards the stop signal and reaps the engine's workers
    model_arg: str = MODEL_MOUNT
    notes: list[str] = field(default_factory=list)
    # The tower sections of the checkpoint's config.json (onegpu.checkpoint.towers); non-empty -> `--language-model-only`.
    towers: list[str] = field(default_factory=list)
    # What the engine computes on: "cuda", the product path (one NVIDIA GPU). "cpu" is vLLM's CPU build, the
    # real-engine double of the kit's own tests; the probe then demands vLLM's CPU platform and no CUDA device.
    engine_platform: str = "cuda"
    # The multi-GPU protocol: every GPU of the set by UUID, in rank order ((): the one-GPU protocol), and its label.
    gpu_uuids: tuple[str, ...] = ()
    protocol: str = "one-GPU protocol"

    @property
    def device_uuids(self) -> list[str]:
        """The GPUs the container gets: the set of the multi-GPU protocol, else the one GPU (none in tests
        without a GPU)."""
        if self.gpu_uuid is None:
            return []
        return list(self.gpu_uuids) or [self.gpu_uuid]

    def flags_used(self) -> list[str]:
        """The vllm serve flags the command uses, in order (what the runtime probe checks)."""
        return [arg for arg in self.command if arg.startswith("--")]

    def device_requests(self) -> list[dict]:
        """The GPU(s) by UUID, as the docker SDK's DeviceRequest takes them (the SDK makes one of each mapping);
        empty without a GPU."""
        if not self.device_uuids:
            return []
        return [{"driver": "nvidia", "device_ids": self.device_uuids, "capabilities": [["gpu"]]}]

    def create_kwargs(self) -> dict:
        """Keyword arguments for `client.containers.create` (never `containers.run`: it pulls on a miss). Plain
        data: mounts in the Engine API's own form (the SDK passes them on as they are), GPUs as above."""
        kwargs = {
            "image": self.image_id,
            "name": self.name,
            "entrypoint": list(self.entrypoint),
            "command": list(self.command),
            "environment": dict(self.environment),
            "labels": dict(self.labels),
            "mounts": [{"Target": m.target, "Source": m.source, "Type": "bind", "ReadOnly": m.read_only}
                       for m in self.mounts],
            "network_mode": self.network_mode,
            "mem_limit": self.mem_limit_bytes,
            "memswap_limit": self.memswap_limit_bytes,
            "pids_limit": self.pids_limit,
            "shm_size": self.shm_size_bytes,
            "user": self.user,
            "tmpfs": dict(self.tmpfs),
            "security_opt": list(self.security_opt),
            "cap_drop": list(self.cap_drop),
            "init": self.init,
            "device_requests": self.device_requests(),
        }
        if self.nano_cpus is not None:
            kwargs["nano_cpus"] = self.nano_cpus
        return kwargs

    def docker_run_argv(self) -> list[str]:
        """The equivalent `docker run` command as argv (for people; the kit itself uses the SDK)."""
        argv = ["docker", "run", "--pull=never", "--detach", "--name", self.name, "--network", self.network_mode,
                "--user", self.user]
        if self.init:
            argv.append("--init")
        for m in self.mounts:
            argv += ["--mount", f"type=bind,source={m.source},target={m.target}" + (",readonly" if m.read_only
                                                                                   else "")]
        if self.device_uuids:
            # one quoted device list: docker's --gpus reads its value as CSV, so a bare comma would split it
            argv += ["--gpus", f'"device={",".join(self.device_uuids)}"' if len(self.device_uuids) > 1
                     else f"device={self.device_uuids[0]}"]
        argv += ["--memory", f"{self.mem_limit_bytes}b", "--memory-swap", f"{self.memswap_limit_bytes}b",
                 "--pids-limit", str(self.pids_limit), "--shm-size", f"{self.shm_size_bytes}b"]
        if self.nano_cpus is not None:
            argv += ["--cpus", flag_number(self.nano_cpus / 1e9)]
        for opt in self.security_opt:
            argv += ["--security-opt", opt]
        for cap in self.cap_drop:
            argv += ["--cap-drop", cap]
        for path, options in self.tmpfs.items():
            argv += ["--tmpfs", f"{path}:{options}"]
        for key, value in self.environment.items():
            argv += ["--env", f"{key}={value}"]
        for key, value in self.labels.items():
            argv += ["--label", f"{key}={value}"]
        argv += ["--entrypoint", self.entrypoint[0], self.image_id, *self.entrypoint[1:], *self.command]
        return argv

    def docker_run_line(self) -> str:
        """The equivalent `docker run --pull=never ...` line, shell-quoted, one string."""
        return shlex.join(self.docker_run_argv())

    def plan_lines(self) -> list[str]:
        """The launch plan as rows for the terminal and the report."""
        rows = [
            f"image      {self.image_id}" + (" (by ID; never pulled)" if self.image_id.startswith("sha256:")
                                              else " (a reference: resolved to its ID at approval; never pulled)"),
            *([f"protocol   {self.protocol}: not a one-GPU result"] if self.gpu_uuids else []),
            f"gpu        {', '.join(self.device_uuids) or 'none (no GPU device request)'}"
            + (" (rank order)" if len(self.gpu_uuids) > 1 else ""),
            *(["engine     vLLM's CPU build (the kit's real-engine test double, not the product path: one NVIDIA "
               "GPU)"] if self.engine_platform == "cpu" else []),
            f"network    {self.network_mode}",
            f"user       {self.user} (USER and LOGNAME {self.environment.get('USER', 'not set')}: the uid may "
            f"have no passwd entry; tmpfs HOME {ENGINE_HOME})",
            f"env        {' '.join(f'{k}={v}' for k, v in self.environment.items())}",
            f"memory     RAM cap {gib(self.mem_limit_bytes)} ({self.mem_limit_bytes:,} bytes), memory+swap "
            f"{gib(self.memswap_limit_bytes)}" + (" (no swap)" if self.memswap_limit_bytes == self.mem_limit_bytes
                                                  else ""),
            f"pids       {self.pids_limit}; shm {gib(self.shm_size_bytes)}; cpus "
            f"{flag_number(self.nano_cpus / 1e9) if self.nano_cpus else 'no quota'}",
            f"security   {', '.join(self.security_opt)}; cap-drop {', '.join(self.cap_drop)}",
        ]
        rows += [f"mount      {m.source} -> {m.target} ({'read-only' if m.read_only else 'read-write'})"
                 for m in self.mounts]
        rows.append(f"socket     {self.socket_path} (container: {SOCKET_MOUNT}/{SOCKET_NAME})")
        rows.append(f"argv       {shlex.join([*self.entrypoint, *self.command])}")
        rows += [f"note       {n}" for n in self.notes]
        rows.append(f"as CLI     {self.docker_run_line()}")
        return rows

    def summary_line(self) -> str:
        """One line for the facts: what runs where, with the full line left to the plan table."""
        gpus = (f"{self.protocol} on GPUs {', '.join(self.device_uuids)}" if self.gpu_uuids
                else f"GPU {self.gpu_uuid or 'none'}")
        return (f"launch plan: `vllm serve` with {len(self.flags_used())} flags from image {self.image_id[:19]}..., "
                f"{gpus}, network {self.network_mode}, RAM cap {gib(self.mem_limit_bytes)} "
                f"(no swap: {self.memswap_limit_bytes == self.mem_limit_bytes}), user {self.user}; the equivalent "
                "docker run line is in the launch plan table")

    def to_json(self) -> dict:
        """The spec for the receipt and plan.json, with the docker run line beside it."""
        data = to_json(self)
        if not self.gpu_uuids:  # the one-GPU protocol's launch (and its plan digest) as before the set existed
            del data["gpu_uuids"], data["protocol"]
        data["flags_used"] = self.flags_used()
        data["docker_run_line"] = self.docker_run_line()
        return data


def flag_number(value: float) -> str:
    """A number as a flag value: 600.0 -> "600", 12.5 -> "12.5" (never exponent notation)."""
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))


def container_name(run_id: str, owner_pid: int) -> str:
    """A Docker-legal, session-unique container name."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "-", run_id).strip("-.") or "run"
    return f"onegpu-{safe}-{owner_pid}"


def owner_labels(run_id: str, owner: Owner, role: str) -> dict[str, str]:
    """The labels that let a later session find this container and tell whether its owner is alive."""
    return {
        KIT_LABEL: "1",
        LABEL_RUN_ID: run_id,
        LABEL_OWNER_PID: str(owner.pid),
        LABEL_OWNER_START: "" if owner.start_ticks is None else str(owner.start_ticks),
        LABEL_OWNER_HOST: owner.boot_id or "",
        LABEL_OWNER_PIDNS: owner.pidns or "",
        LABEL_ROLE: role,
    }


def build_launch_spec(settings, gpu_uuid: str | None, image_id: str, run_id: str, socket_dir: str,
                      owner: Owner, checkpoint_root: str | None = None, towers: Sequence[str] = (),
                      gpu_uuids: Sequence[str] = ()) -> LaunchSpec:
    """The engine launch for these settings (pure: no file, process or daemon is consulted).

    `checkpoint_root` is the checkpoint folder with links resolved (default: settings.model_path as written):
    a model_path that is a link to a cache snapshot must mount the snapshot's real repo folder, or the
    snapshot's relative links into ../../blobs would dangle in the container. `towers` are the tower sections
    of its config.json (onegpu.checkpoint.towers.has_towers). `gpu_uuids`: the multi-GPU protocol's set in rank
    order (settings.multi_gpu), rank 0's first."""
    root = checkpoint_root or settings.model_path
    layout = hf_cache_layout(root)
    notes = []
    if str(PurePosixPath(root)) != str(PurePosixPath(settings.model_path)):
        notes.append(f"model_path {settings.model_path} is a link (or passes through one): the container mounts "
                     f"what it points to, {root}")
    if layout:
        repo, snapshot = layout
        mounts = [BindMount(repo, MODEL_REPO_MOUNT, True)]
        model_arg = f"{MODEL_REPO_MOUNT}/{snapshot}"
        notes.append(f"Hugging Face cache: the repo folder is mounted so {snapshot}'s links into ../../blobs "
                     "resolve")
    else:
        mounts = [BindMount(str(PurePosixPath(root)), MODEL_MOUNT, True)]
        model_arg = MODEL_MOUNT
    mounts.append(BindMount(socket_dir, SOCKET_MOUNT, False))
    command = [
        "serve", model_arg,
        "--served-model-name", settings.model_id,
        "--uds", f"{SOCKET_MOUNT}/{SOCKET_NAME}",
        "--tensor-parallel-size", str(parallel_sizes(settings)[0]),
        "--pipeline-parallel-size", str(parallel_sizes(settings)[1]),
        "--max-num-seqs", "1",
        "--gpu-memory-utilization", flag_number(GPU_UTILIZATION),
        "--max-model-len", str(settings.context_tokens),
        "--max-num-batched-tokens", str(settings.prefill_chunk_tokens),
        "--enable-chunked-prefill",
        "--enforce-eager",
        "--cpu-offload-gb", flag_number(settings.cpu_offload_gib),
        "--generation-config", GENERATION_CONFIG,
    ]
    notes.append(GENERATION_NOTE)
    multi = settings.multi_gpu
    if multi is not None:
        command += ["--distributed-executor-backend", PARALLEL_BACKEND, "--disable-custom-all-reduce"]
        notes.append(f"{multi.label}: not a one-GPU result. Rank r runs on the r-th GPU listed (listed in PCI bus "
                     f"order, which CUDA_DEVICE_ORDER=PCI_BUS_ID makes CUDA's order, and vLLM gives rank r CUDA device "
                     f"r); workers are processes of this one container (--distributed-executor-backend "
                     f"{PARALLEL_BACKEND}), sharing its /dev/shm; --cpu-offload-gb applies to each worker")
        notes.append(CUSTOM_ALL_REDUCE_NOTE)
        notes.append("NCCL environment " + (" ".join(f"{k}={v}" for k, v in multi.nccl_env.items()) or "none")
                     + " (settings multi_gpu.nccl_env, or the field report's when it is left out)")
    if towers:
        # The kit's runs are text-only: with every modality limit 0 vLLM skips the towers' weights.
        command.append("--language-model-only")
        notes.append(f"--language-model-only: config.json declares {', '.join(towers)}; the kit's runs are "
                     "text-only, so the engine loads no vision or audio tower")
    environment = {**OFFLINE_ENV, **USER_ENV, **multi_gpu_env(multi)}
    if settings.offload_pinning == "exact":
        environment.update(EXACT_PINNING_ENV)
        notes.append("offload_pinning exact: VLLM_WEIGHT_OFFLOADING_DISABLE_PIN_MEMORY=1, so no offloaded "
                     "parameter is pinned by torch's allocator, which rounds each buffer up to a power of two; "
                     "on CUDA vLLM pins a copy of exactly the parameter's bytes when it maps it for the GPU")
    else:
        notes.append("offload_pinning rounded (vLLM's default): each offloaded parameter is pinned by torch's "
                     "allocator, which rounds its buffer up to a power of two")
    if settings.kv_cache_dtype is not None:
        command += ["--kv-cache-dtype", settings.kv_cache_dtype]
    else:
        notes.append("no --kv-cache-dtype: the engine uses the model's own dtype, as the KV estimate assumed")
    if settings.trust_remote_code:
        command.append("--trust-remote-code")
    ram_cap = int(settings.container_ram_gib * GIB)
    return LaunchSpec(
        image_id=image_id,
        name=container_name(run_id, owner.pid),
        entrypoint=["vllm"],
        command=command,
        environment=environment,
        labels=owner_labels(run_id, owner, "engine"),
        mounts=mounts,
        socket_dir=socket_dir,
        socket_path=f"{socket_dir.rstrip('/')}/{SOCKET_NAME}",
        gpu_uuid=gpu_uuid,
        mem_limit_bytes=ram_cap,
        memswap_limit_bytes=ram_cap,
        pids_limit=settings.pids_limit,
        shm_size_bytes=int(settings.shm_gib * GIB),
        nano_cpus=int(round(settings.container_cpus * 1e9)) if settings.container_cpus else None,
        user=f"{owner.uid}:{owner.gid}",
        tmpfs=dict(TMPFS),
        security_opt=["no-new-privileges"],
        cap_drop=["ALL"],
        model_arg=model_arg,
        notes=notes,
        towers=list(towers),
        gpu_uuids=tuple(gpu_uuids) if multi is not None else (),
        protocol=multi.label if multi is not None else "one-GPU protocol",
    )


def parallel_sizes(settings) -> tuple[int, int]:
    """(tensor, pipeline) parallel size: (1, 1) for the one-GPU protocol."""
    multi = settings.multi_gpu
    return (1, 1) if multi is None else (multi.tensor_parallel_size, multi.pipeline_parallel_size)
