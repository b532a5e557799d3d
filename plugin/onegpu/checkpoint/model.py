"""The checkpoint facts as data: what the header scan establishes without reading a single weight."""
from __future__ import annotations

from array import array
from typing import Iterator

from msgspec import Struct, field

# Tensor roles the capacity table keeps apart.
ROLES = ("routed_experts", "shared_dense", "embeddings_head")

# A shard whose __metadata__ carries this key holds headers only (the demo checkpoint): no weights.
SYNTHETIC_METADATA_KEY = "onegpu.synthetic"


class TensorInfo(Struct, frozen=True):
    """One tensor, as a row of TensorTable."""

    name: str
    dtype: str
    shape: list[int]
    nbytes: int
    shard: str  # shard file name relative to the checkpoint root
    role: str  # one of ROLES
    layer: int | None  # decoder layer index when the name carries one


class TensorTable(Struct, frozen=True, eq=False):
    """Every tensor of the checkpoint, shard by shard in header order, as columns.

    A 1 T MoE checkpoint has ~1.4 x 10^5 tensors: as one object per tensor they were ~10^6 small objects (the rows,
    their shapes, their numbers) that each full collection walks; as columns they are the names and a few flat
    arrays. Rows (TensorInfo) are made on demand: `table[i]`, or iterating the table.

    Names group by expert: group_of[i] numbers the distinct names with every routed expert's number made 0
    (tensor_roles.collapse_experts), in order of first appearance; group_names holds those names and group_first
    the first tensor of each. A pass that never reads an expert number classifies one tensor per group: ~10^3
    groups for ~10^5 tensors.
    """

    names: tuple[str, ...]
    dtypes: tuple[str, ...]  # the distinct dtypes: dtype_of[i] indexes them
    dtype_of: bytes
    nbytes: array  # "q"
    shape_dims: array  # "q": every tensor's dimensions, one tensor after the other
    shape_ends: array  # "q": where tensor i's dimensions end in shape_dims
    shards: tuple[str, ...]  # shard_of[i] indexes them
    shard_of: array  # "q"
    role_of: bytes  # indexes ROLES
    layers: array  # "q": the decoder layer the name carries, -1 when none
    group_of: array  # "q"
    group_names: tuple[str, ...]
    group_first: array  # "q"

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, i: int) -> TensorInfo:
        layer = self.layers[i]
        return TensorInfo(self.names[i], self.dtypes[self.dtype_of[i]],
                          self.shape_dims[self.shape_ends[i - 1] if i else 0:self.shape_ends[i]].tolist(),
                          self.nbytes[i], self.shards[self.shard_of[i]], ROLES[self.role_of[i]],
                          None if layer < 0 else layer)

    def __iter__(self) -> Iterator[TensorInfo]:
        return map(self.__getitem__, range(len(self.names)))

    @classmethod
    def of_rows(cls, rows) -> "TensorTable":
        """The table of TensorInfo rows (tests, small tables); the header scan builds its own column by column."""
        from onegpu.checkpoint.tensor_roles import collapse_experts

        rows = list(rows)
        names = [t.name for t in rows]
        collapsed = collapse_experts(names) or names
        groups: dict[str, int] = {}
        first = array("q")
        for i, key in enumerate(collapsed):
            if key not in groups:
                groups[key] = len(groups)
                first.append(i)
        dtypes = tuple(dict.fromkeys(t.dtype for t in rows))
        shards = tuple(dict.fromkeys(t.shard for t in rows))
        ends, total = array("q"), 0
        for t in rows:
            total += len(t.shape)
            ends.append(total)
        return cls(tuple(names), dtypes, bytes(dtypes.index(t.dtype) for t in rows),
                   array("q", (t.nbytes for t in rows)), array("q", (d for t in rows for d in t.shape)), ends, shards,
                   array("q", (shards.index(t.shard) for t in rows)), bytes(ROLES.index(t.role) for t in rows),
                   array("q", (-1 if t.layer is None else t.layer for t in rows)),
                   array("q", map(groups.__getitem__, collapsed)), tuple(groups), first)


class ShardFacts(Struct, frozen=True):
    name: str  # relative to the checkpoint root
    size_bytes: int
    header_bytes: int
    tensors: int


class QuantFacts(Struct, frozen=True):
    method: str | None  # "fp8", "mxfp4", "modelopt" (nvfp4), "compressed-tensors"; None = unquantized
    store_dtype: str | None  # e.g. "mxfp4" for MiMo's fp8 config with mxfp4-stored experts
    recognised: bool
    description: str
    ignored_layers: list[str] = field(default_factory=list)


class CheckpointFacts(Struct, frozen=True):
    root: str
    hf_cache_repo: str | None  # the models--ORG--NAME folder when the checkpoint is a cache snapshot
    hf_revision: str | None  # the snapshot's 40-hex folder name
    config: dict
    architectures: list[str]
    model_type: str | None
    quant: QuantFacts
    index_file: str | None  # model.safetensors.index.json, or None for a single model.safetensors
    shards: list[ShardFacts]
    tensors: TensorTable  # every tensor, shard by shard in header order (kept out of the receipt: too many)
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
        from onegpu.core.jsonable import to_json

        # Field by field: converting the ~10^5 tensor rows only to drop them would dominate a scan.
        data = {name: to_json(getattr(self, name)) for name in self.__struct_fields__
                if name not in ("tensors", "config")}
        data["tensor_count"] = len(self.tensors)
        return data
