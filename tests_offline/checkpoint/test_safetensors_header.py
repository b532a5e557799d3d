"""The strict header reader against files the safetensors package writes, and against what it refuses."""
from __future__ import annotations

import ctypes
import json
import math
import random
import struct

import numpy as np
import pytest
import safetensors.numpy
from safetensors import TensorSpec, safe_open, serialize

from devkit.synth import header_prefix, write_raw_shard, write_shard
from onegpu.checkpoint.safetensors_header import DTYPE_BITS, MAX_HEADER_BYTES, HeaderError, parse_header, read_header

# The safetensors package's names for each header dtype, with the bits it stores per element.
PACKAGE_DTYPES = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "F8_E5M2": "float8_e5m2", "F8_E4M3": "float8_e4m3fn",
    "F8_E8M0": "float8_e8m0fnu", "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2FNUZ": "float8_e5m2fnuz",
    "I16": "int16", "U16": "uint16", "F16": "float16", "BF16": "bfloat16", "I32": "int32", "U32": "uint32",
    "F32": "float32", "I64": "int64", "U64": "uint64", "F64": "float64", "C64": "complex64",
}


def test_the_dtype_table_is_the_formats():
    assert DTYPE_BITS == {
        "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8,
        "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
        "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64, "F64": 64, "C64": 64}


def _package_file(path, tensors: dict, metadata=None):
    """Write {name: (header dtype, shape)} with the safetensors package's own serializer."""
    buffers, specs = [], {}
    for name, (dtype, shape) in tensors.items():
        if dtype == "F4":  # the package takes F4 as float4_e2m1fn_x2: two values per stored element
            size = math.prod(shape) // 2
            spec_dtype, spec_shape = "float4_e2m1fn_x2", [*shape[:-1], shape[-1] // 2]
        else:
            size = math.prod(shape) * DTYPE_BITS[dtype] // 8
            spec_dtype, spec_shape = PACKAGE_DTYPES[dtype], list(shape)
        buf = ctypes.create_string_buffer(max(size, 1))
        buffers.append(buf)
        specs[name] = TensorSpec(dtype=spec_dtype, shape=spec_shape, data_ptr=ctypes.addressof(buf), data_len=size)
    path.write_bytes(serialize(specs, metadata))
    return path


def _raw_header(path) -> dict:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n])


def _assert_same_as_package(path):
    ours = read_header(path)
    theirs = _raw_header(path)
    declared = {k: v for k, v in theirs.items() if k != "__metadata__"}
    assert {t[0]: (t[1], t[2], [t[3], t[4]]) for t in ours.tensors} == {
        k: (v["dtype"], v["shape"], v["data_offsets"]) for k, v in declared.items()}
    with safe_open(path, framework="numpy") as f:
        assert sorted(t[0] for t in ours.tensors) == sorted(f.keys())
        assert ours.metadata == (f.metadata() or {})
        for name, dtype, shape, _start, _end in ours.tensors:
            assert f.get_slice(name).get_dtype() == dtype
            assert f.get_slice(name).get_shape() == shape
    assert ours.file_bytes == path.stat().st_size
    return ours


@pytest.mark.parametrize("dtype", sorted(set(DTYPE_BITS) - {"F6_E2M3", "F6_E3M2"}))
def test_every_dtype_the_package_writes_is_read_alike(tmp_path, dtype):
    tensors = {"w": (dtype, [4, 6]), "scalar": (dtype, []), "empty": (dtype, [0, 3]), "v": (dtype, [2])}
    if dtype == "F4":  # two values per byte: no scalar, even last dimensions
        tensors = {"w": (dtype, [4, 6]), "empty": (dtype, [0, 4]), "v": (dtype, [2])}
    _assert_same_as_package(_package_file(tmp_path / "x.safetensors", tensors, {"format": "pt"}))


def test_random_files_of_the_package_are_read_alike(tmp_path):
    rng = random.Random(20251202)
    dtypes = sorted(set(DTYPE_BITS) - {"F6_E2M3", "F6_E3M2"})
    for i in range(60):
        tensors = {}
        for j in range(rng.randint(0, 12)):
            dtype = rng.choice(dtypes)
            shape = [rng.randint(0, 5) for _ in range(rng.randint(0, 4))]
            if dtype == "F4":
                shape = [*shape, 2 * rng.randint(0, 3)]
            tensors[f"model.layers.{j}.t{rng.randint(0, 99)}"] = (dtype, shape)
        metadata = {f"k{k}": "v" * k for k in range(rng.randint(0, 3))} or None
        _assert_same_as_package(_package_file(tmp_path / f"r{i}.safetensors", tensors, metadata))


def test_numpy_save_file_output_is_read_alike(tmp_path):
    arrays = {"a": np.zeros((3, 5), np.float32), "b": np.ones(7, np.int64), "c": np.zeros((2, 2), np.float16),
              "d": np.zeros(3, np.bool_), "e": np.zeros((1, 1, 1), np.uint8)}
    path = tmp_path / "np.safetensors"
    safetensors.numpy.save_file(arrays, str(path), metadata={"source": "numpy"})
    header = _assert_same_as_package(path)
    assert header.metadata == {"source": "numpy"}


def test_six_bit_dtypes_follow_the_package_reading(tmp_path):
    """The package cannot write F6 but reads it: whole bytes are accepted, a partial byte refused by both."""
    good = write_raw_shard(tmp_path / "f6.safetensors", header_prefix({"a": ("F6_E2M3", [4])})[0], 3)
    assert read_header(good).tensors == [("a", "F6_E2M3", [4], 0, 3)]
    with safe_open(good, framework="numpy") as f:
        assert f.get_slice("a").get_dtype() == "F6_E2M3"
    body = b'{"a":{"dtype":"F6_E3M2","shape":[3],"data_offsets":[0,3]}}'
    bad = write_raw_shard(tmp_path / "f6bad.safetensors", struct.pack("<Q", len(body)) + body, 3)
    with pytest.raises(HeaderError, match="whole number of bytes"):
        read_header(bad)
    with pytest.raises(Exception):
        safe_open(bad, framework="numpy")


def test_only_the_length_and_the_header_are_read(tmp_path):
    """A shard with a 1 TiB (sparse) data region costs two reads: /proc/self/io counts the bytes read."""
    path = tmp_path / "big.safetensors"
    write_shard(path, {"w": ("BF16", [2**19, 2**20])})
    read_header(path)  # warm: imports, caches

    def bytes_read() -> int:
        with open("/proc/self/io") as fh:
            return int(next(line for line in fh if line.startswith("rchar:")).split()[1])
    before = bytes_read()
    header = read_header(path)
    after = bytes_read()
    assert header.data_bytes == 2**40
    assert after - before < 8 + header.header_bytes + 2048  # the /proc read itself is counted too


def _mutants(seed: int, count: int):
    """Valid files with bytes flipped, inserted, cut or the length field changed."""
    rng = random.Random(seed)
    prefix, data = header_prefix({"a": ("F32", [2, 3]), "b": ("F4", [4]), "c": ("BF16", [5])}, {"m": "x"})
    base = bytearray(prefix + b"\0" * data)
    for _ in range(count):
        raw = bytearray(base)
        how = rng.randrange(4)
        if how == 0:
            raw[rng.randrange(8, len(prefix))] = rng.randrange(32, 127)
        elif how == 1:
            raw[0:8] = struct.pack("<Q", max(0, len(prefix) - 8 + rng.randint(-9, 9)))
        elif how == 2:
            del raw[rng.randrange(len(raw)):]
        else:
            at = rng.randrange(8, len(raw))
            raw[at:at] = bytes([rng.randrange(32, 127)])
        yield bytes(raw)


def test_what_the_package_refuses_is_refused_here_too(tmp_path):
    path = tmp_path / "m.safetensors"
    refused_by_package = 0
    for raw in _mutants(7, 400):
        path.write_bytes(raw)
        try:
            safe_open(path, framework="numpy").__enter__()
        except Exception:
            refused_by_package += 1
            with pytest.raises(HeaderError):
                read_header(path)
    assert refused_by_package > 100  # the mutations really do break files


@pytest.mark.parametrize("body, data, rule", [
    (b"{}", 0, None),
    (b'{"__metadata__": null}', 0, None),
    (b'{"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"b":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}',
     0, None),
    (b'{"a":{"dtype":"F32","shape":[0,18446744073709551615],"data_offsets":[0,0]}}', 0, "overflows 64 bits"),
    (b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}}', 8, "exactly dtype, shape and data_offsets"),
    (b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8,8]}}', 8, "two non-negative integers"),
    (b'{"a":{"dtype":"F32","shape":[true],"data_offsets":[0,4]}}', 4, "non-negative integers"),
    (b'{"a":{"dtype":["F32"],"shape":[1],"data_offsets":[0,4]}}', 4, "unknown dtype"),
    (b'{"a":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}}', 4, "unknown dtype"),
    (b'{"a":[1]}', 0, "must be an object"),
    (b'{"__metadata__":["x"]}', 0, "__metadata__ must be an object of strings"),
    (b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}\n', 8, None),
    (b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}\x00', 8, "not strict JSON"),
])
def test_edge_rules(body, data, rule):
    if rule is None:
        assert parse_header(body, 8 + len(body) + data, "s.safetensors").data_bytes == data
    else:
        with pytest.raises(HeaderError, match=rule) as err:
            parse_header(body, 8 + len(body) + data, "s.safetensors")
        assert err.value.shard == "s.safetensors" and str(err.value).startswith("s.safetensors: ")


def test_the_header_cap_is_the_formats(tmp_path):
    assert MAX_HEADER_BYTES == 100_000_000
    at_cap = write_raw_shard(tmp_path / "cap.safetensors", struct.pack("<Q", MAX_HEADER_BYTES) + b"{", 0)
    with pytest.raises(HeaderError, match="runs past the end"):  # at the cap it is read, and found short
        read_header(at_cap)
