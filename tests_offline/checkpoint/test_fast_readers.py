"""The fast readers of a checkpoint's JSON against the reference readers they stand in for.

`safetensors_bulk.check_bulk`, `strict_json.loads_proven` and `index_bulk.decode_index` may only ever answer what the entry-by-entry
header reader and the strict standard-library parser answer, or decline. Each test feeds both the same
text: valid files, files the safetensors package writes, and thousands of seeded mutations aimed at the
places a fast reader can go wrong (duplicate keys, where the metadata sits, escapes, big numbers).
"""
from __future__ import annotations

import json
import random
import struct

import numpy as np
import pytest
import safetensors.numpy

from devkit.synth import header_prefix
from onegpu.checkpoint.index_bulk import decode_index
from onegpu.checkpoint.safetensors_bulk import check_bulk
from onegpu.checkpoint.safetensors_header import HeaderError, parse_header, parse_header_by_entry
from onegpu.core import strict_json

TENSORS = {"model.layers.0.mlp.experts.0.w1.weight": ("F8_E4M3", [4, 8]),
           "model.layers.0.mlp.experts.0.w1.weight_scale_inv": ("F32", [1, 1]),
           "a:b": ("F4", [6]), "c": ("BF16", [3, 0]), "d": ("F6_E2M3", [4]), "e": ("U8", [5])}


def _header(tensors=TENSORS, metadata=None) -> tuple[bytes, int]:
    """(the JSON header, the file size) of a valid shard."""
    prefix, data = header_prefix(tensors, metadata)
    return prefix[8:], len(prefix) + data


def _agree(raw: bytes, file_bytes: int) -> str:
    """Asserts the fast reader answers as the reference or declines; says which it did."""
    fast = check_bulk(raw, file_bytes)
    try:
        reference = parse_header_by_entry(raw, file_bytes, "s")
    except HeaderError:
        assert fast is None, raw
        return "refused"
    if fast is None:
        return "declined"
    columns, metadata = fast
    assert list(zip(*columns)) == reference.tensors and metadata == reference.metadata, raw
    return "agreed"


@pytest.mark.parametrize("metadata", [None, {}, {"format": "pt"}, {"k:1": "v:2", "x": "{,}:\""[:-1]}])
def test_valid_headers_take_the_fast_path_and_agree(metadata):
    raw, size = _header(metadata=metadata)
    assert _agree(raw, size) == "agreed"
    assert parse_header(raw, size, "s") == parse_header_by_entry(raw, size, "s")


def test_files_the_package_writes_take_the_fast_path(tmp_path):
    arrays = {f"model.layers.{i}.w": np.zeros((i + 1, 2), dtype=np.float16) for i in range(3)}
    path = tmp_path / "m.safetensors"
    safetensors.numpy.save_file(arrays, path, metadata={"format": "pt"})
    blob = path.read_bytes()
    (n,) = struct.unpack("<Q", blob[:8])
    assert blob[8:8 + n].startswith(b'{"__metadata__":')  # where the package puts it, and where it is taken out
    assert _agree(blob[8:8 + n], len(blob)) == "agreed"


@pytest.mark.parametrize("raw, why", [
    (b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}',
     "duplicate tensor"),
    (b'{"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}}', "duplicate key in an entry"),
    (b'{"__metadata__":{"k":"v","k":"w"},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
     "duplicate metadata key"),
    (b'{"__metadata__":{},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
     b'"__metadata__":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}}', "second metadata shaped as a tensor"),
    (b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"__metadata__":{"k":["v"]}}', "metadata not strings"),
    (b' {"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', "leading space"),
    (b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":null}}', "unknown key"),
    (b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}junk', "trailing text"),
    (b'{"a":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}}', "float dimension"),
])
def test_what_breaks_a_rule_is_never_taken_fast(raw, why):
    with pytest.raises(HeaderError):
        parse_header_by_entry(raw, 8 + len(raw) + 4, "s")
    assert check_bulk(raw, 8 + len(raw) + 4) is None, why


@pytest.mark.parametrize("raw", [
    b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"__metadata__":{"k":"v"}}',  # metadata last
    b'{ "__metadata__" : {"k":"v"}, "a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',  # spaced
    b'{"a\\u003ab":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',  # an escape
])
def test_unusual_but_valid_headers_are_read_by_the_reference(raw):
    assert check_bulk(raw, 8 + len(raw) + 4) is None
    assert parse_header(raw, 8 + len(raw) + 4, "s") == parse_header_by_entry(raw, 8 + len(raw) + 4, "s")


# Fragments a mutation splices in: the tokens that make duplicate keys, metadata, escapes and big numbers.
_FRAGMENTS = [b'"a:b":', b'"dtype":"F32",', b'"__metadata__":', b'{"k":"v"},', b'null,', b'\\u003a', b'\\"',
              b'18446744073709551616', b'1e400', b'-0', b'0.5', b',', b':', b'"', b'{', b'}', b'[', b']', b' ',
              b'"shape":[4],', b'"data_offsets":[0,4]', b'"c":{"dtype":"F4","shape":[2],"data_offsets":[0,1]},']


def _mutants(rng: random.Random, raw: bytes, count: int):
    for _ in range(count):
        out = bytearray(raw)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(out) + 1)
            how = rng.randrange(4)
            if how == 0:
                out[at:at] = rng.choice(_FRAGMENTS)
            elif how == 1:
                del out[at:at + rng.randint(1, 12)]
            elif how == 2 and at < len(out):
                out[at] = rng.randrange(32, 127)
            else:  # repeat a stretch of the text (duplicates a key, an entry or a member)
                end = min(len(out), at + rng.randint(4, 80))
                out[end:end] = out[at:end]
        yield bytes(out)


def test_seeded_mutations_never_make_the_fast_reader_disagree():
    rng = random.Random(20261202)
    seen = {"refused": 0, "declined": 0, "agreed": 0}
    for metadata in (None, {"format": "pt", "a:b": "c:d"}):
        raw, size = _header(metadata=metadata)
        for mutant in _mutants(rng, raw, 3000):
            # The file size follows a mutant's own length, so size rules alone do not refuse it.
            seen[_agree(mutant, size - len(raw) + len(mutant))] += 1
    assert seen["refused"] > 1000 and seen["agreed"] > 20, seen  # the mutations both break and keep files


def _json_mutants(rng: random.Random, count: int):
    base = json.dumps({"weight_map": {"a": "s1", "b:c": "s2"}, "metadata": {"total_size": 10, "x": [1, {"y": None}]},
                       "f": True}, separators=(",", ":")).encode()
    yield from _mutants(rng, base, count)


def test_proven_json_is_what_the_strict_parser_returns():
    rng = random.Random(7)
    proven = 0
    for text in _json_mutants(rng, 6000):
        value = strict_json.loads_proven(text)
        try:
            expected = strict_json.loads(text.decode("utf-8"))
        except (strict_json.StrictJSONError, ValueError):
            assert value is strict_json.NOT_PROVEN, text
            continue
        if value is not strict_json.NOT_PROVEN:
            proven += 1
            assert value == expected and json.dumps(value) == json.dumps(expected), text
    assert proven > 100


@pytest.mark.parametrize("text", [b'{"a":1,"a":2}', b'{"a":{"b":1,"b":1}}', b'[1.5]', b'[18446744073709551616]',
                                  b'{"a\\u003a":1}', b'NaN', b'[1e400]'])
def test_what_cannot_be_proven_is_left_to_the_strict_parser(text):
    assert strict_json.loads_proven(text) is strict_json.NOT_PROVEN


SHARD_FILES = ["s1.safetensors", "s2.safetensors", "sub/s3.safetensors"]


def _index_mutants(rng: random.Random, count: int):
    base = json.dumps({"weight_map": {"a": "s1.safetensors", "b:c": "s2.safetensors", "d": "s1.safetensors",
                                      "e": "sub/s3.safetensors"},
                       "metadata": {"total_size": 10, "x": [1, {"y": None}]}}, separators=(",", ":")).encode()
    yield base
    yield from _mutants(rng, base, count)


def test_bulk_index_is_what_the_strict_parser_returns_with_one_string_per_shard():
    rng = random.Random(11)
    proven = 0
    for text in _index_mutants(rng, 6000):
        value = decode_index(text, SHARD_FILES)
        try:
            expected = strict_json.loads(text.decode("utf-8"))
        except (strict_json.StrictJSONError, ValueError):
            assert value is None, text
            continue
        if value is not None:
            proven += 1
            assert value == expected and json.dumps(value) == json.dumps(expected), text
            shards = {id(s) for s in value["weight_map"].values()}
            assert len(shards) == len(set(value["weight_map"].values())), text  # one object per shard name
    assert proven > 100


@pytest.mark.parametrize("text", [
    b'{"weight_map":{"a":"s1.safetensors","a":"s2.safetensors"}}',  # duplicate tensor name
    b'{"weight_map":{},"weight_map":{"a":"s1.safetensors"}}',  # duplicate top-level key
    b'{"weight_map":{"a":"s1.safetensors"},"other":1}',  # a key the bulk shape does not have
    b'{"weight_map":{"a":"elsewhere.safetensors"}}',  # not a file of the folder
    b'{"weight_map":{"a\\u003a":"s1.safetensors"}}',  # an escape
    b'{"weight_map":{"a":"s1.safetensors"},"metadata":{"total_size":1.5}}',  # a float
    b'{"weight_map":{"a":"s1.safetensors"},"metadata":{"m":{"k":1,"k":2}}}',  # duplicate inside the metadata
    b'["s1.safetensors"]', b'{"weight_map":[]}'])
def test_what_the_bulk_index_cannot_prove_is_left_to_the_plain_reader(text):
    assert decode_index(text, SHARD_FILES) is None
