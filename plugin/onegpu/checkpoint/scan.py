"""A checkpoint folder -> CheckpointFacts, from config.json, the index and the shard headers (no weights read).

Every rule a checkpoint breaks ends as Blocked: CHECKPOINT_MISSING (no folder, no config.json, no index or
single shard), CHECKPOINT_INCOMPLETE (shards, tensors or tokenizer files missing or unreadable) or
CHECKPOINT_CORRUPT (a header, the index or a link breaks a rule), each message naming the file and the rule.
"""
from __future__ import annotations

import gc
import os
import shutil
from array import array
from contextlib import contextmanager
from itertools import accumulate, chain, compress, repeat
from math import prod
from operator import not_, sub
from pathlib import Path

from msgspec.structs import replace

from onegpu.checkpoint.files import cache_layout, list_files, normal_name, shard_name_problem
from onegpu.checkpoint.index_bulk import decode_index
from onegpu.checkpoint.model import ROLES, SYNTHETIC_METADATA_KEY, CheckpointFacts, ShardFacts, TensorTable
from onegpu.checkpoint.quant_config import quant_facts
from onegpu.checkpoint.safetensors_header import HeaderError, ShardHeader, brief, decode_json, read_header
from onegpu.checkpoint.tensor_roles import collapse_experts, layer_index, packed_rows, tensor_role
from onegpu.core.outcomes import Blocked
from onegpu.core.shown import cut
from onegpu.core.units import gib

CONFIG_NAME = "config.json"
INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
MODELOPT_NAME = "hf_quant_config.json"
TOKENIZER_NAMES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")
# config.json, the index and hf_quant_config.json are small; a larger one is refused before it is read.
MAX_JSON_BYTES = 100_000_000
SHOWN = 5  # names listed in a message before "and N more"


def read_checkpoint(root) -> CheckpointFacts:
    """Read everything the headers say about the checkpoint at `root`.

    Raises Blocked CHECKPOINT_MISSING, CHECKPOINT_INCOMPLETE or CHECKPOINT_CORRUPT; never another exception
    for bad input.
    """
    # The index and the headers of a large MoE checkpoint are ~10^5 small acyclic objects each: collector
    # passes over them while they are built would double the scan and free nothing.
    with _gc_paused():
        return _read(Path(os.path.abspath(root)))


def _read(root: Path) -> CheckpointFacts:
    if not root.is_dir():
        what = "does not exist" if not os.path.lexists(root) else "is not a folder"
        raise Blocked("CHECKPOINT_MISSING", f"the checkpoint folder {root} {what}")
    if not (root / CONFIG_NAME).is_file():
        raise Blocked("CHECKPOINT_MISSING", f"{CONFIG_NAME} is missing from the checkpoint folder {root}")
    layout = cache_layout(root)
    listing = list_files(root, layout)
    present = set(listing.files)
    config = _json_object(root, CONFIG_NAME)
    side = _json_object(root, MODELOPT_NAME) if MODELOPT_NAME in present else None
    index_file, weight_map, total_size = _index(root, present, listing.files)
    shards = list(dict.fromkeys(weight_map.values())) if weight_map is not None else [SINGLE_NAME]
    _check_shards_present(shards, present, listing.dangling)
    # Shard by shard: each header's columns are folded into the table and dropped before the next is read.
    table, shard_facts, synthetic = _TableBuilder(), [], False
    for name in shards:
        header = _header(root, name)
        if weight_map is None:
            weight_map = dict.fromkeys(header.names, SINGLE_NAME)
            if not weight_map:
                raise Blocked("CHECKPOINT_CORRUPT", f"{SINGLE_NAME}: the shard holds no tensors")
        table.add(name, header, weight_map)
        shard_facts.append(ShardFacts(name, header.file_bytes, header.header_bytes, len(header.names)))
        synthetic = synthetic or SYNTHETIC_METADATA_KEY in header.metadata
        del header
    tensors, totals = table.finish(weight_map or {})
    del weight_map
    _check_unlisted(root, listing.files, shards, index_file)
    facts = _facts(root, layout, config, side, index_file, total_size, shard_facts, synthetic, tensors, totals,
                   listing)
    _check_total_size(facts)
    _check_rest(facts, listing)
    return facts


def read_config(root) -> dict:
    """config.json alone, read as read_checkpoint reads it (for the launch plan, which needs only its towers).

    Raises Blocked CHECKPOINT_MISSING, CHECKPOINT_INCOMPLETE or CHECKPOINT_CORRUPT as read_checkpoint does."""
    return _json_object(Path(os.path.abspath(root)), CONFIG_NAME)


@contextmanager
def _gc_paused():
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _json_object(root: Path, name: str, bulk=None) -> dict:
    """A small JSON file of the checkpoint, strictly parsed, that must hold an object. `bulk(raw)` may answer the
    value first (index_bulk), or None to have it read the plain way."""
    path = root / name
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > MAX_JSON_BYTES:
                raise Blocked("CHECKPOINT_CORRUPT", f"{name}: {size:,} bytes is beyond the {MAX_JSON_BYTES:,}-byte "
                              "limit for a JSON file of the checkpoint")
            raw = fh.read()
    except FileNotFoundError:
        raise Blocked("CHECKPOINT_MISSING", f"{name} is missing from the checkpoint folder {root}") from None
    except OSError as exc:
        raise Blocked("CHECKPOINT_INCOMPLETE", f"{name}: cannot be read ({exc.strerror})") from None
    value = bulk(raw) if bulk is not None else None
    if value is not None:
        return value
    try:
        value = decode_json(raw)
    except ValueError as exc:
        raise Blocked("CHECKPOINT_CORRUPT", f"{name}: {exc}") from None
    if not isinstance(value, dict):
        raise Blocked("CHECKPOINT_CORRUPT", f"{name}: must hold a JSON object, not {type(value).__name__}")
    return value


def _index(root: Path, present: set, files: list[str]) -> tuple[str | None, dict | None, int | None]:
    """(index file name, weight_map, metadata.total_size), or (None, None, None) for a single shard."""
    if INDEX_NAME not in present:
        if SINGLE_NAME in present:
            return None, None, None
        raise Blocked("CHECKPOINT_MISSING", f"neither {INDEX_NAME} nor {SINGLE_NAME} is in the checkpoint "
                      f"folder {root}")
    shard_files = [f for f in files if f.endswith(".safetensors")]
    shared = []  # [True] when the bulk decoder read the index: its entries share one string per shard already

    def bulk(raw: bytes) -> dict | None:
        value = decode_index(raw, shard_files)
        shared.append(value is not None)
        return value

    index = _json_object(root, INDEX_NAME, bulk)
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict):
        raise Blocked("CHECKPOINT_CORRUPT", f"{INDEX_NAME}: weight_map must be an object of tensor name to shard file")
    if not weight_map:
        raise Blocked("CHECKPOINT_CORRUPT", f"{INDEX_NAME}: weight_map names no tensors")
    try:
        "".join(weight_map.values())  # every shard name a string, in one C-level pass
        not_text = None
    except TypeError:
        not_text = next((t, s) for t, s in weight_map.items() if type(s) is not str)
    if not_text:
        raise Blocked("CHECKPOINT_CORRUPT", f"{INDEX_NAME}: weight_map[{brief(not_text[0])}] must be a shard "
                      f"file name, not {brief(not_text[1])}")
    shards = {shard: shard for shard in weight_map.values()}  # each distinct shard name once
    for shard in shards:
        problem = shard_name_problem(shard)
        if problem:
            tensor = next(t for t, s in weight_map.items() if s == shard)
            raise Blocked("CHECKPOINT_CORRUPT", f"{INDEX_NAME}: tensor {brief(tensor)} -> {brief(shard)}: {problem}")
    # The plain parser makes one string per entry: ~10^5 copies of ~10^3 shard names. One object per shard
    # instead, as the bulk decoder gives (assigning existing keys leaves the dict's size and order as they are).
    if shared != [True]:
        for tensor, shard in weight_map.items():
            weight_map[tensor] = shards[shard]
    metadata = index.get("metadata", {})
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise Blocked("CHECKPOINT_CORRUPT", f"{INDEX_NAME}: metadata must be an object")
    total = metadata.get("total_size")
    if total is not None and (type(total) is not int or total < 0):
        raise Blocked("CHECKPOINT_CORRUPT", f"{INDEX_NAME}: metadata.total_size must be a non-negative integer "
                      f"byte count, not {brief(total)}")
    return INDEX_NAME, weight_map, total


def _listed(names: list[str]) -> str:
    shown = ", ".join(cut(n, 200) for n in names[:SHOWN])
    return shown + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")


def _check_shards_present(shards: list[str], present: set, dangling: list[str]) -> None:
    missing = [s for s in shards if normal_name(s) not in present]
    if missing:
        broken = set(dangling)
        notes = [f"{s} (a link to a missing file)" if normal_name(s) in broken else s for s in missing]
        raise Blocked("CHECKPOINT_INCOMPLETE", f"{len(missing)} of {len(shards)} shard(s) named by the index are "
                      f"missing: {_listed(notes)}", {"missing_shards": len(missing), "shards": len(shards)})


def _header(root: Path, name: str) -> ShardHeader:
    try:
        return read_header(root / name, name)
    except HeaderError as exc:
        raise Blocked("CHECKPOINT_CORRUPT", f"shard {exc.shard}: {exc.rule}") from None
    except OSError as exc:
        raise Blocked("CHECKPOINT_INCOMPLETE", f"shard {name}: cannot be read ({exc.strerror})") from None


def _check_unlisted(root: Path, files: list[str], shards: list[str], index_file: str | None) -> None:
    """A top-level .safetensors file the index does not list must hold no tensors.

    Such a file is a leftover of another download or revision: an engine without an index loads every
    .safetensors file of the folder, and custody would vouch for bytes the facts never counted.
    `consolidated*.safetensors` is left alone: Mistral ships it beside the indexed shards for its own loader.
    """
    listed = {normal_name(s) for s in shards}
    for name in files:
        if "/" in name or not name.endswith(".safetensors") or name in listed or name.startswith("consolidated"):
            continue
        count = len(_header(root, name).names)
        if count:
            by = f"{index_file} does not list it" if index_file else f"there is no index and it is not {SINGLE_NAME}"
            raise Blocked("CHECKPOINT_CORRUPT", f"shard {name}: holds {count} tensor(s) but {by} (a leftover of "
                          "another download? the engine could load it)")


class _TableBuilder:
    """The TensorTable, a shard at a time, checked against the index, with the byte and parameter totals.

    Works on each shard's columns (C-level map/zip/compress), as a 1 T checkpoint has ~10^5 tensors. Role and
    layer are read once per expert group (TensorTable): the names of a group differ only in the expert number,
    which neither reads.
    """

    def __init__(self) -> None:
        self.names: list[str] = []
        self.dtype_codes: dict[str, int] = {}
        self.dtype_of = bytearray()
        self.nbytes, self.shape_dims, self.shape_ends = array("q"), array("q"), array("q")
        self.shards: list[str] = []
        self.shard_of, self.layers, self.group_of, self.group_first = array("q"), array("q"), array("q"), array("q")
        self.role_of = bytearray()
        self.groups: dict[str, int] = {}  # collapsed name -> group number
        self.group_role: list[int] = []
        self.group_layer: list[int] = []
        self.stray: list[str] = []
        self.by_dtype: dict[str, int] = {}
        self.params: dict[str, int] = {}
        self.packed: dict[str, int] = {}
        self.by_role = dict.fromkeys(ROLES, 0)

    def add(self, shard: str, header: ShardHeader, weight_map: dict) -> None:
        names, dtypes, shapes = header.names, header.dtypes, header.shapes
        if not names:
            return
        if list(map(weight_map.get, names)) != [shard] * len(names):
            self.stray += [f"{n} (in {shard}; the index says {weight_map.get(n) or 'nothing'})"
                           for n in names if weight_map.get(n) != shard]
            return
        start = len(self.names)
        sizes = list(map(sub, header.ends, header.starts))
        ids = self._group_ids(names, start)
        self.names += names
        self.nbytes.extend(sizes)
        codes = self.dtype_codes
        for dtype in set(dtypes).difference(codes):
            codes[dtype] = len(codes)
        self.dtype_of += bytes(map(codes.__getitem__, dtypes))
        self.shape_dims.extend(chain.from_iterable(shapes))
        self.shape_ends.extend(accumulate(map(len, shapes), initial=self.shape_ends[-1] if start else 0))
        del self.shape_ends[start]  # the initial value accumulate repeats
        self.shards.append(shard)
        self.shard_of.extend(repeat(len(self.shards) - 1, len(names)))
        self.group_of.extend(ids)
        role_codes = bytes(map(self.group_role.__getitem__, ids))
        self.role_of += role_codes
        self.layers.extend(map(self.group_layer.__getitem__, ids))
        for code in set(role_codes):
            self.by_role[ROLES[code]] += sum(compress(sizes, map(code.__eq__, role_codes)))
        self._dtype_totals(names, dtypes, shapes, sizes)

    def _group_ids(self, names: list[str], start: int) -> list[int]:
        collapsed = collapse_experts(names) or names
        groups = self.groups
        new = dict.fromkeys(collapsed).keys() - groups.keys()
        if new:
            # each new group's first tensor: reversed, the smallest index of a key is written last
            first = dict(zip(reversed(collapsed), range(len(collapsed) - 1, -1, -1)))
            for key in sorted(new, key=first.__getitem__):
                i = first[key]
                groups[key] = len(groups)
                self.group_first.append(start + i)
                self.group_role.append(ROLES.index(tensor_role(names[i])))
                layer = layer_index(names[i])
                self.group_layer.append(-1 if layer is None else layer)
        return list(map(groups.__getitem__, collapsed))

    def _dtype_totals(self, names, dtypes, shapes, sizes) -> None:
        for dtype in set(dtypes):
            mask = list(map(dtype.__eq__, dtypes))
            self.by_dtype[dtype] = self.by_dtype.get(dtype, 0) + sum(compress(sizes, mask))
            is_packed_row = packed_rows(list(compress(names, mask)), dtype)
            if any(is_packed_row):
                self.packed[dtype] = self.packed.get(dtype, 0) + sum(compress(compress(sizes, mask), is_packed_row))
            if not all(is_packed_row):
                unpacked = compress(compress(shapes, mask), map(not_, is_packed_row))
                self.params[dtype] = self.params.get(dtype, 0) + sum(map(prod, unpacked))

    def finish(self, weight_map: dict) -> tuple[TensorTable, dict]:
        """The table and the totals; raises Blocked CHECKPOINT_CORRUPT for a tensor the index places elsewhere (or
        nowhere), CHECKPOINT_INCOMPLETE for one no header holds."""
        if self.stray:
            raise Blocked("CHECKPOINT_CORRUPT", f"{len(self.stray)} tensor(s) in shard headers are not where "
                          f"{INDEX_NAME} puts them: {_listed(self.stray)}", {"stray_tensors": len(self.stray)})
        # Every header tensor sits where the index puts it, and a name is unique within a header, so no name is
        # in two headers: equal counts mean the index and the headers name exactly the same tensors.
        if len(self.names) != len(weight_map):
            held = set(self.names)
            missing = [f"{t} (index: {s})" for t, s in weight_map.items() if t not in held]
            raise Blocked("CHECKPOINT_INCOMPLETE", f"{len(missing)} tensor(s) named by {INDEX_NAME} are in no shard "
                          f"header: {_listed(missing)}", {"missing_tensors": len(missing)})
        table = TensorTable(tuple(self.names), tuple(self.dtype_codes), bytes(self.dtype_of), self.nbytes,
                            self.shape_dims, self.shape_ends, tuple(self.shards), self.shard_of, bytes(self.role_of),
                            self.layers, self.group_of, tuple(self.groups), self.group_first)
        totals = {"by_dtype": self.by_dtype, "params": self.params, "packed": self.packed, "by_role": self.by_role}
        return table, totals


def _facts(root, layout, config, side, index_file, total_size, shards, synthetic, tensors, totals, listing):
    by_dtype, params, packed = totals["by_dtype"], totals["params"], totals["packed"]
    quant = quant_facts(config, side)
    if packed:
        note = ", ".join(f"{d} {gib(b)}" for d, b in sorted(packed.items()))
        quant = replace(quant, description=f"{quant.description}; packed blocks ({note}) are counted by bytes, "
                        "not parameters")
    architectures = config.get("architectures")
    return CheckpointFacts(
        root=str(root),
        hf_cache_repo=layout.hf_cache_repo,
        hf_revision=layout.hf_revision,
        config=config,
        architectures=[a for a in architectures if isinstance(a, str)] if isinstance(architectures, list) else [],
        model_type=config.get("model_type") if isinstance(config.get("model_type"), str) else None,
        quant=quant,
        index_file=index_file,
        shards=shards,
        tensors=tensors,
        bytes_by_dtype=dict(sorted(by_dtype.items())),
        params_by_dtype=dict(sorted(params.items())),
        packed_bytes_by_dtype=dict(sorted(packed.items())),
        bytes_by_role=totals["by_role"],
        weight_bytes=sum(by_dtype.values()),
        index_total_size=total_size,
        tokenizer_files=[n for n in TOKENIZER_NAMES if n in set(listing.files)],
        files=listing.files,
        synthetic=synthetic,
        disk_free_bytes=_disk_free(root),
    )


def _disk_free(root: Path) -> int | None:
    try:
        return shutil.disk_usage(root).free
    except OSError:
        return None


def _check_total_size(facts: CheckpointFacts) -> None:
    stated = facts.index_total_size
    if stated is None or stated == facts.weight_bytes:
        return
    file_total = sum(s.size_bytes for s in facts.shards)
    hint = " (it equals the shard file sizes, headers included)" if stated == file_total else ""
    raise Blocked("CHECKPOINT_CORRUPT", f"{INDEX_NAME}: metadata.total_size is {stated:,} bytes{hint} but the shard "
                  f"headers declare {facts.weight_bytes:,} bytes of tensor data (difference "
                  f"{stated - facts.weight_bytes:+,} bytes)",
                  {"index_total_size": stated, "header_weight_bytes": facts.weight_bytes})


def _check_rest(facts: CheckpointFacts, listing) -> None:
    if listing.dangling:
        raise Blocked("CHECKPOINT_INCOMPLETE", f"{len(listing.dangling)} link(s) in the checkpoint lead to missing "
                      f"files: {_listed(listing.dangling)}")
    if not facts.tokenizer_files:
        raise Blocked("CHECKPOINT_INCOMPLETE", f"no tokenizer file in the checkpoint folder (looked for "
                      f"{', '.join(TOKENIZER_NAMES)})")
