"""Plain facts for the capacity tests: a small Llama config, checkpoint facts from a tensor table, settings, a GPU
and a host, as the capacity, plan, proposal and landing tests build them."""
from types import SimpleNamespace

from msgspec.structs import fields

from devkit.synth import nbytes
from onegpu.checkpoint.model import CheckpointFacts, QuantFacts, TensorInfo, TensorTable
from onegpu.checkpoint.tensor_roles import layer_index, tensor_role
from onegpu.machine.model import CgroupFacts, GpuDevice, HostFacts
from onegpu.plan.settings import parse_settings

GIB = 2**30

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
        index_file="model.safetensors.index.json", shards=[], tensors=TensorTable.of_rows(tensors),
        bytes_by_dtype=by_dtype,
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



def with_pinning(settings, mode: str):
    """The settings with offload_pinning set, whether or not this checkout's Settings has the field yet."""
    return SimpleNamespace(**{**{f.name: getattr(settings, f.name) for f in fields(settings)},
                              "offload_pinning": mode})
