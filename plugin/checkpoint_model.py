"""The checkpoint facts as data: what the header scan establishes without reading a single weight."""
from __future__ import annotations

from dataclasses import dataclass, field

# Tensor roles the capacity table keeps apart.
ROLES = ("routed_experts", "shared_dense", "embeddings_head")

# A shard whose __metadata__ carries this key holds headers only (the demo checkpoint): no weights.
SYNTHETIC_METADATA_KEY = "onegpu.synthetic"


@dataclass(slots=True)  # not frozen: a 1 T checkpoint has ~140k of these, and slots build them 4x faster
class TensorInfo:
    name: str
    dtype: str
    shape: list[int]
    nbytes: int
    shard: str  # shard file name relative to the checkpoint root
    role: str  # one of ROLES
    layer: int | None  # decoder layer index when the name carries one


@dataclass(frozen=True)
class ShardFacts:
    name: str  # relative to the checkpoint root
    size_bytes: int
    header_bytes: int
    tensors: int


@dataclass(frozen=True)
class QuantFacts:
    method: str | None  # "fp8", "mxfp4", "modelopt" (nvfp4), "compressed-tensors"; None = unquantized
    store_dtype: str | None  # e.g. "mxfp4" for MiMo's fp8 config with mxfp4-stored experts
    recognised: bool
    description: str
    ignored_layers: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class CheckpointFacts:
    root: str
    hf_cache_repo: str | None  # the models--ORG--NAME folder when the checkpoint is a cache snapshot
    hf_revision: str | None  # the snapshot's 40-hex folder name
    config: dict
    architectures: list[str]
    model_type: str | None
    quant: QuantFacts
    index_file: str | None  # model.safetensors.index.json, or None for a single model.safetensors
    shards: list[ShardFacts]
    tensors: list[TensorInfo]  # every tensor, shard by shard in header order (kept out of the receipt: too many)
    bytes_by_dtype: dict[str, int]
    params_by_dtype: dict[str, int]  # element counts for dtypes that are not packed
    packed_bytes_by_dtype: dict[str, int]  # packed blocks (U8 holding F4 pairs, ...) counted by bytes only
    bytes_by_role: dict[str, int]
    weight_bytes: int  # all tensor data bytes from the headers
    index_total_size: int | None  # metadata.total_size as the index states it
    tokenizer_files: list[str]
    files: list[str]  # every regular file under the root, relative, sorted (what custody hashes)
    synthetic: bool  # header-only checkpoint: no weights at all
    disk_free_bytes: int | None = None

    def summary(self) -> dict:
        """Everything but the per-tensor list and the config, for the receipt."""
        from dataclasses import fields

        from .jsonable import to_json

        # Field by field: converting the ~10^5 tensor rows only to drop them would dominate a scan.
        data = {f.name: to_json(getattr(self, f.name)) for f in fields(self) if f.name not in ("tensors", "config")}
        data["tensor_count"] = len(self.tensors)
        return data
