"""Capacity verdicts over plain facts (KIT.md 5), each number worked out in the test."""
from plugin.capacity import (CHECKS, GPU_CHECKS, TABLE_TITLE, capacity_table, capacity_verdicts, engine_parameters,
                             pinned_pow2_bytes)
from plugin.checkpoint_model import CheckpointFacts, QuantFacts, TensorInfo
from plugin.hardware_model import CgroupFacts, GpuDevice, HostFacts
from plugin.kvcache import kv_cache_estimate
from plugin.settings import parse_settings
from plugin.tensor_roles import layer_index, tensor_role
from tests_offline.synth import nbytes

GIB, MIB, KIB = 2**30, 2**20, 2**10

LLAMA_CONFIG = {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
                "hidden_size": 1024, "torch_dtype": "bfloat16"}


def checkpoint_facts(table: dict, config: dict | None = None, quant: QuantFacts | None = None,
                     synthetic: bool = False, root: str = "/models/demo") -> CheckpointFacts:
    """CheckpointFacts for a tensor table {name: (dtype, shape)}, summed the way the header reader sums."""
    tensors = [TensorInfo(name, dtype, list(shape), nbytes(dtype, shape), "model-00001-of-00001.safetensors",
                          tensor_role(name), layer_index(name)) for name, (dtype, shape) in table.items()]
    by_dtype: dict[str, int] = {}
    by_role = {"routed_experts": 0, "shared_dense": 0, "embeddings_head": 0}
    for t in tensors:
        by_dtype[t.dtype] = by_dtype.get(t.dtype, 0) + t.nbytes
        by_role[t.role] += t.nbytes
    total = sum(t.nbytes for t in tensors)
    return CheckpointFacts(
        root=root, hf_cache_repo=None, hf_revision=None, config=config or LLAMA_CONFIG,
        architectures=["LlamaForCausalLM"], model_type="llama",
        quant=quant or QuantFacts(None, None, True, "unquantized (weights as stored, bfloat16)"),
        index_file="model.safetensors.index.json", shards=[], tensors=tensors, bytes_by_dtype=by_dtype,
        params_by_dtype={}, packed_bytes_by_dtype={}, bytes_by_role=by_role, weight_bytes=total,
        index_total_size=total, tokenizer_files=["tokenizer.json"],
        files=["config.json", "model-00001-of-00001.safetensors", "model.safetensors.index.json", "tokenizer.json"],
        synthetic=synthetic)


def settings_with(**overrides):
    data = {"schema": "onegpu/settings@1", "model_id": "org/demo", "model_revision": "a" * 40,
            "model_path": "/models/demo", "image": "vllm/vllm-openai:v0.11.0", "gpu": 0, "context_tokens": 8192,
            "prefill_chunk_tokens": 2048, "cpu_offload_gib": 0, "container_ram_gib": 64, "host_headroom_gib": 16,
            "deadline_s": 3600, **overrides}
    return parse_settings(data, "/tmp/s.json", "0" * 64)


def gpu_device(total_gib: float = 96, free_gib: float | None = None) -> GpuDevice:
    total = int(total_gib * GIB)
    return GpuDevice(index=0, name="NVIDIA RTX PRO 6000 Blackwell", uuid="GPU-0000", total_bytes=total,
                     free_bytes=int((free_gib if free_gib is not None else total_gib - 0.5) * GIB),
                     used_bytes=GIB // 2, reserved_bytes=None, mig_enabled=False, compute_processes=[],
                     pci_bus_id="00000000:01:00.0")


def host(available_gib: float | None = 256, cgroup_limit_gib: float | None = None, stated: bool = False) -> HostFacts:
    avail = None if available_gib is None else int(available_gib * GIB)
    limit = None if cgroup_limit_gib is None else int(cgroup_limit_gib * GIB)
    return HostFacts(hostname="h", kernel="6.1", ram_total_bytes=avail, ram_available_bytes=avail,
                     ram_stated_by_operator=stated, swap_total_bytes=0, swap_free_bytes=0,
                     cgroup=CgroupFacts(2, "/user.slice", limit, None, None, None), memlock_limit_bytes=None,
                     transparent_hugepages="madvise", cpus_online=16, cpus_usable=16.0, numa_nodes=1, wsl2=False)


def layers_table(layers: int, layer_gib: float) -> dict:
    """Decoder layers of `layer_gib` each (one BF16 tensor per layer) plus a 1 GiB embedding."""
    rows = int(layer_gib * GIB) // (2 * 1024)
    table = {"model.embed_tokens.weight": ("BF16", [GIB // 2048, 1024])}
    table.update({f"model.layers.{i}.mlp.down_proj.weight": ("BF16", [rows, 1024]) for i in range(layers)})
    return table


def by_check(verdicts):
    return {v.check: v for v in verdicts}


def judge(settings, table=None, gpu=None, host_facts=None, disk=50 * GIB, kv=None, **kw):
    ckpt = checkpoint_facts(table if table is not None else layers_table(10, 4))
    kv = kv or kv_cache_estimate(ckpt.config, settings.context_tokens, settings.kv_cache_dtype,
                                 settings.prefill_chunk_tokens)
    return by_check(capacity_verdicts(settings, gpu or gpu_device(), host_facts or host(), ckpt, kv, disk, **kw))


def test_every_check_is_judged_in_order_and_a_pass_never_says_fits():
    verdicts = capacity_verdicts(settings_with(), gpu_device(), host(), checkpoint_facts(layers_table(10, 4)),
                                 kv_cache_estimate(LLAMA_CONFIG, 8192, None, 2048), 50 * GIB)
    assert [v.check for v in verdicts] == list(CHECKS)
    assert all(v.status == "OK" for v in verdicts), [v for v in verdicts if v.status != "OK"]
    assert not any("fits" in v.message or "fit " in v.message for v in verdicts)
    assert all(v.message.startswith("no definite failure") for v in verdicts
               if v.check in ("gpu_weights", "kv_cache", "host_offload", "host_ram", "disk"))
    table = capacity_table(verdicts)
    assert table[0].split() == ["check", "status", "numbers"] and len(table) == len(CHECKS) + 1
    assert "never 'fits'" in TABLE_TITLE


def test_gpu_budget_is_085_of_the_card_minus_the_assumed_reserve():
    v = judge(settings_with())["gpu_budget"]
    # 96 GiB x 0.85 = 81.6 GiB; minus the ASSUMED 8 GiB reserve = 73.6 GiB
    assert v.numbers["target_bytes"] == int(96 * GIB * 0.85)
    assert v.numbers["budget_bytes"] == int(96 * GIB * 0.85) - 8 * GIB
    assert v.numbers["reserve_assumed"] is True and "ASSUMED" in v.message
    stated = judge(settings_with(gpu_reserve_gib=4))["gpu_budget"]
    assert stated.numbers["budget_bytes"] == int(96 * GIB * 0.85) - 4 * GIB and "ASSUMED" not in stated.message


def test_weights_left_on_the_gpu_above_the_budget_are_insufficient_vram():
    # 30 layers x 4 GiB + 1 GiB embedding = 121 GiB; offload 40 GiB -> 81 GiB on the GPU > 73.6 GiB budget
    v = judge(settings_with(cpu_offload_gib=40, container_ram_gib=64), layers_table(30, 4))["gpu_weights"]
    assert (v.status, v.code) == ("BLOCKED", "INSUFFICIENT_VRAM")
    assert v.numbers["weight_bytes"] == 121 * GIB
    assert v.numbers["gpu_resident_bytes"] == 81 * GIB
    budget = int(96 * GIB * 0.85) - 8 * GIB
    assert v.numbers["over_bytes"] == 81 * GIB - budget
    assert "exceeds the GPU budget" in v.message and "by 7.40 GiB" in v.message


def test_offload_moves_decoder_layers_only_never_the_embedding():
    # 2 layers x 4 GiB + 1 GiB embedding; an offload budget of 20 GiB can move only the 8 GiB of layers
    v = judge(settings_with(cpu_offload_gib=20, container_ram_gib=64), layers_table(2, 4))["gpu_weights"]
    assert v.numbers["offloaded_bytes"] == 8 * GIB and v.numbers["gpu_resident_bytes"] == 1 * GIB
    assert "the only ones vLLM's offloader moves" in v.message


def test_kv_that_does_not_fit_beside_the_weights_is_blocked():
    # 17 x 4 + 1 = 69 GiB on the GPU; KV for 1,048,576 tokens of the 2-layer Llama shape:
    # 2 layers x 2 KV heads x (128 + 128) x 2 B = 2,048 B per token -> 2 GiB; 69 + 2 = 71 <= 73.6: passes
    ok = judge(settings_with(context_tokens=1048576), layers_table(17, 4))["kv_cache"]
    assert ok.status == "OK" and ok.numbers["kv_bytes"] == 2 * GIB and ok.numbers["need_bytes"] == 71 * GIB
    # 18 x 4 + 1 = 73 GiB + 2 GiB = 75 GiB > 73.6 GiB
    v = judge(settings_with(context_tokens=1048576), layers_table(18, 4))["kv_cache"]
    assert (v.status, v.code) == ("BLOCKED", "KV_DOES_NOT_FIT")
    assert v.numbers["need_bytes"] == 75 * GIB
    assert v.numbers["over_bytes"] == 75 * GIB - (int(96 * GIB * 0.85) - 8 * GIB)


def test_unknown_kv_is_an_unknown_row_not_a_pass():
    settings = settings_with()
    ckpt = checkpoint_facts(layers_table(2, 1), config={"num_attention_heads": 8, "torch_dtype": "bfloat16"})
    kv = kv_cache_estimate(ckpt.config, 8192, None, 2048)
    v = by_check(capacity_verdicts(settings, gpu_device(), host(), ckpt, kv, 50 * GIB))["kv_cache"]
    assert v.status == "UNKNOWN" and "num_hidden_layers" in v.message


def test_offload_must_fit_inside_the_ram_cap_minus_the_containers_own_needs():
    # cap 64 GiB - 8 GiB ASSUMED own needs = 56 GiB of room; offloading 60 GiB of layers does not go in
    v = judge(settings_with(cpu_offload_gib=60, container_ram_gib=64), layers_table(30, 4))["host_offload"]
    assert (v.status, v.code) == ("BLOCKED", "INSUFFICIENT_HOST_RAM")
    assert v.numbers["room_bytes"] == 56 * GIB and v.numbers["offloaded_bytes"] == 60 * GIB
    assert "ASSUMED" in v.message and "CUDA host context" in v.message


def test_cap_plus_headroom_must_fit_in_the_hosts_available_ram():
    # cap 200 + headroom 16 = 216 GiB > 200 GiB available
    v = judge(settings_with(container_ram_gib=200), host_facts=host(available_gib=200))["host_ram"]
    assert (v.status, v.code) == ("BLOCKED", "INSUFFICIENT_HOST_RAM")
    assert v.numbers["need_bytes"] == 216 * GIB and "short by 16.00 GiB" in v.message
    stated = judge(settings_with(container_ram_gib=64), host_facts=host(available_gib=512, stated=True))["host_ram"]
    assert stated.status == "OK" and "stated by the operator" in stated.message


def test_unknown_host_ram_of_a_replayed_profile_is_unknown_with_the_way_out():
    v = judge(settings_with(), host_facts=host(available_gib=None))["host_ram"]
    assert v.status == "UNKNOWN" and "--host-ram-gib" in v.message


def test_cgroup_limit_below_cap_plus_headroom_is_blocked():
    v = judge(settings_with(container_ram_gib=64), host_facts=host(cgroup_limit_gib=48))["cgroup"]
    assert (v.status, v.code) == ("BLOCKED", "CGROUP_LIMIT")
    assert v.numbers["need_bytes"] == 80 * GIB and v.numbers["cgroup_limit_bytes"] == 48 * GIB
    assert judge(settings_with(), host_facts=host(cgroup_limit_gib=None))["cgroup"].status == "OK"


def test_run_folder_disk_under_the_stated_need_is_disk_full():
    v = judge(settings_with(), disk=512 * MIB)["disk"]
    assert (v.status, v.code) == ("BLOCKED", "DISK_FULL") and "at least 1.00 GiB" in v.message
    assert judge(settings_with(), disk=None)["disk"].status == "UNKNOWN"


def test_unrecognised_quantization_is_an_unknown_row():
    settings = settings_with()
    unknown = QuantFacts("awq-ish", None, False, "quantization method 'awq-ish' is not one the kit reads")
    ckpt = checkpoint_facts(layers_table(2, 1), quant=unknown)
    v = by_check(capacity_verdicts(settings, gpu_device(), host(), ckpt,
                                   kv_cache_estimate(LLAMA_CONFIG, 8192, None, 2048), GIB))["quantization"]
    assert v.status == "UNKNOWN" and "awq-ish" in v.message


def test_driver_free_memory_below_the_utilization_target_is_blocked():
    # vLLM refuses to start when free < 0.85 x total: 96 x 0.85 = 81.6 GiB > 80 GiB free
    v = judge(settings_with(), gpu=gpu_device(96, free_gib=80))["gpu_free"]
    assert (v.status, v.code) == ("BLOCKED", "INSUFFICIENT_VRAM") and v.numbers["need_bytes"] == int(96 * GIB * 0.85)


def test_no_selected_gpu_makes_gpu_rows_unknown_and_still_judges_the_host():
    settings = settings_with(container_ram_gib=200)
    ckpt = checkpoint_facts(layers_table(2, 1))
    verdicts = by_check(capacity_verdicts(settings, None, host(available_gib=100), ckpt,
                                          kv_cache_estimate(LLAMA_CONFIG, 8192, None, 2048), GIB,
                                          gpu_missing_reason="BLOCKED NO_NVIDIA_DRIVER: NVML could not be loaded"))
    for check in GPU_CHECKS:
        assert verdicts[check].status == "UNKNOWN" and "NO_NVIDIA_DRIVER" in verdicts[check].message
        assert verdicts[check].numbers == {}  # no number is invented
    assert verdicts["host_ram"].code == "INSUFFICIENT_HOST_RAM"


def expert_table(layers: int = 2, experts: int = 8) -> dict:
    """Per layer: a 2 KiB norm, then 8 experts x (gate, up, down) of 768 x 1024 BF16 = 1.5 MiB each."""
    table = {}
    for i in range(layers):
        table[f"model.layers.{i}.input_layernorm.weight"] = ("BF16", [1024])
        for e in range(experts):
            for proj, shape in (("gate_proj", [768, 1024]), ("up_proj", [768, 1024]), ("down_proj", [1024, 768])):
                table[f"model.layers.{i}.mlp.experts.{e}.{proj}.weight"] = ("BF16", shape)
    table["lm_head.weight"] = ("BF16", [4096, 1024])
    table["model.mtp.layers.0.eh_proj.weight"] = ("BF16", [1024, 2048])
    return table


def test_engine_parameters_stack_the_experts_of_a_layer_as_the_engine_does():
    params = engine_parameters(checkpoint_facts(expert_table()).tensors)
    # per layer: the norm (2 KiB), w13 = 8 experts x (gate + up) x 1.5 MiB = 24 MiB, w2 = 8 x 1.5 MiB = 12 MiB;
    # lm_head (no layer) and the MTP layer are not offloadable
    assert params == [("model.layers.0.input_layernorm.weight", 2 * KIB),
                      ("model.layers.0.mlp.experts.w13.weight", 24 * MIB),
                      ("model.layers.0.mlp.experts.w2.weight", 12 * MIB),
                      ("model.layers.1.input_layernorm.weight", 2 * KIB),
                      ("model.layers.1.mlp.experts.w13.weight", 24 * MIB),
                      ("model.layers.1.mlp.experts.w2.weight", 12 * MIB)]


def test_pinned_power_of_two_figure_in_layer_order_until_the_budget_is_used():
    params = [b for _, b in engine_parameters(checkpoint_facts(expert_table()).tensors)]
    # budget 50 MiB: norm0 2 KiB + w13 24 MiB + w2 12 MiB = 36 MiB + 2 KiB < 50 -> norm1 -> w13_1: 60 MiB + 4 KiB
    # >= 50 stop. Pinned: 2 KiB + 32 MiB (24 -> 32) + 16 MiB (12 -> 16) + 2 KiB + 32 MiB = 80 MiB + 4 KiB
    assert pinned_pow2_bytes(params, 50 * MIB) == (60 * MIB + 4 * KIB, 80 * MIB + 4 * KIB, 5)


def test_pinned_risk_is_a_warning_row_never_blocked():
    table = expert_table()
    # RAM cap 8 GiB + 70 MiB leaves 70 MiB after the 8 GiB own needs; the pinned 80 MiB + 4 KiB exceeds it
    risky = judge(settings_with(cpu_offload_gib=50 / 1024, container_ram_gib=8 + 70 / 1024), table)["pinned_pow2"]
    assert risky.status == "UNKNOWN" and risky.code is None and risky.message.startswith("RISK:")
    assert risky.numbers["pinned_bytes"] == 80 * MIB + 4 * KIB
    # per checkpoint tensor (1.5 MiB -> 2 MiB each): norm0 + 24 tensors + norm1 + 10 tensors reach 50 MiB;
    # pinned = 2 x 2 KiB + 34 x 2 MiB = 68 MiB + 4 KiB
    assert risky.numbers["pinned_per_checkpoint_tensor_bytes"] == 68 * MIB + 4 * KIB
    assert "vLLM's offloader with MXFP4 experts" in risky.message
    calm = judge(settings_with(cpu_offload_gib=50 / 1024, container_ram_gib=9), table)["pinned_pow2"]
    assert calm.status == "OK" and calm.numbers["pinned_bytes"] == 80 * MIB + 4 * KIB
    assert judge(settings_with(cpu_offload_gib=0), table)["pinned_pow2"].numbers["pinned_bytes"] == 0
