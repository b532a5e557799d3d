"""Pure: a launch checked against what KIT.md 6 demands of it, one line per missing or wrong element (the plan test
fails on any)."""
from __future__ import annotations

from onegpu.engine.launch import (
    ENGINE_HOME,
    EXACT_PINNING_ENV,
    GENERATION_CONFIG,
    KIT_LABEL,
    LABEL_OWNER_HOST,
    LABEL_OWNER_PID,
    LABEL_OWNER_START,
    LABEL_RUN_ID,
    MODEL_MOUNT,
    MODEL_REPO_MOUNT,
    OFFLINE_ENV,
    PARALLEL_BACKEND,
    SOCKET_MOUNT,
    SOCKET_NAME,
    USER_ENV,
    LaunchSpec,
    flag_number,
    multi_gpu_env,
    parallel_sizes,
)
from onegpu.plan.capacity import GPU_UTILIZATION  # one number: what the verdicts assume is what the engine gets


def missing_elements(spec: LaunchSpec, settings, gpu_uuid: str | None) -> list[str]:
    """Pure: every element of KIT.md 6 the spec lacks, one line each (empty when the plan is complete)."""
    cmd, problems = spec.command, []

    def flag_value(flag: str) -> str | None:
        return cmd[cmd.index(flag) + 1] if flag in cmd and cmd.index(flag) + 1 < len(cmd) else None

    expected_values = {
        "--served-model-name": settings.model_id, "--uds": f"{SOCKET_MOUNT}/{SOCKET_NAME}",
        "--tensor-parallel-size": str(parallel_sizes(settings)[0]),
        "--pipeline-parallel-size": str(parallel_sizes(settings)[1]),
        "--max-num-seqs": "1",
        "--gpu-memory-utilization": flag_number(GPU_UTILIZATION),
        "--max-model-len": str(settings.context_tokens),
        "--max-num-batched-tokens": str(settings.prefill_chunk_tokens),
        "--cpu-offload-gb": flag_number(settings.cpu_offload_gib),
        "--generation-config": GENERATION_CONFIG,
    }
    if spec.entrypoint != ["vllm"] or cmd[:1] != ["serve"]:
        problems.append(f"entrypoint must be `vllm serve`, is {spec.entrypoint + cmd[:1]}")
    for flag, value in expected_values.items():
        if flag_value(flag) != value:
            problems.append(f"{flag} must be {value!r}, is {flag_value(flag)!r}")
    for flag in ("--enable-chunked-prefill", "--enforce-eager"):
        if flag not in cmd:
            problems.append(f"{flag} missing")
    if ("--language-model-only" in cmd) != bool(spec.towers):
        problems.append(f"--language-model-only must appear exactly when config.json declares towers "
                        f"({', '.join(spec.towers) or 'none'})")
    if ("--trust-remote-code" in cmd) != bool(settings.trust_remote_code):
        problems.append(f"--trust-remote-code must appear only when settings allow it ({settings.trust_remote_code})")
    if flag_value("--kv-cache-dtype") != settings.kv_cache_dtype:
        problems.append(f"--kv-cache-dtype must be {settings.kv_cache_dtype!r} (what the KV estimate assumed)")
    if spec.network_mode != "none":
        problems.append(f"network must be none, is {spec.network_mode!r}")
    model_mounts = [m for m in spec.mounts if m.target in (MODEL_MOUNT, MODEL_REPO_MOUNT)]
    if not model_mounts or not all(m.read_only for m in model_mounts):
        problems.append("the checkpoint must be bind-mounted read-only")
    if not any(m.target == SOCKET_MOUNT and not m.read_only for m in spec.mounts):
        problems.append(f"the private socket folder must be bind-mounted read-write at {SOCKET_MOUNT}")
    if spec.mem_limit_bytes <= 0 or spec.memswap_limit_bytes != spec.mem_limit_bytes:
        problems.append("the RAM cap must be set and the memory+swap cap equal to it (no swap)")
    if spec.pids_limit <= 0 or spec.shm_size_bytes <= 0:
        problems.append("pids limit and shm size must be stated")
    if "no-new-privileges" not in spec.security_opt or "ALL" not in spec.cap_drop:
        problems.append("no-new-privileges and cap-drop ALL are required")
    multi = settings.multi_gpu
    for key, value in {**OFFLINE_ENV, **USER_ENV, **multi_gpu_env(multi)}.items():
        if spec.environment.get(key) != value:
            problems.append(f"environment {key} must be {value!r}")
    if multi is not None:
        if flag_value("--distributed-executor-backend") != PARALLEL_BACKEND or "--disable-custom-all-reduce" not in cmd:
            problems.append(f"the {multi.label} needs --distributed-executor-backend {PARALLEL_BACKEND} and "
                            "--disable-custom-all-reduce")
        if gpu_uuid is not None and len(spec.device_uuids) != len(multi.gpus):
            problems.append(f"the {multi.label} hands over {len(multi.gpus)} GPUs by UUID, the spec has "
                            f"{len(spec.device_uuids)}")
    pinning = {key: spec.environment.get(key) for key in EXACT_PINNING_ENV}
    wanted = EXACT_PINNING_ENV if settings.offload_pinning == "exact" else dict.fromkeys(EXACT_PINNING_ENV)
    if pinning != wanted:
        problems.append(f"offload_pinning {settings.offload_pinning}: environment must hold "
                        + (", ".join(f"{k}={v}" for k, v in EXACT_PINNING_ENV.items())
                           if settings.offload_pinning == "exact" else f"no {', '.join(EXACT_PINNING_ENV)}"))
    for label in (KIT_LABEL, LABEL_RUN_ID, LABEL_OWNER_PID, LABEL_OWNER_START, LABEL_OWNER_HOST):
        if label not in spec.labels:
            problems.append(f"label {label} missing")
    if ENGINE_HOME not in spec.tmpfs:
        problems.append(f"a writable tmpfs HOME at {ENGINE_HOME} is required")
    if gpu_uuid is not None and spec.gpu_uuid != gpu_uuid:
        problems.append(f"the GPU must be handed over by UUID {gpu_uuid}, the spec has {spec.gpu_uuid}")
    return problems
