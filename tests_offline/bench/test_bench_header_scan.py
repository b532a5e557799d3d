"""The header scan benchmark's cold figures are cold, its paired figures alternate, and its floor reads what
the scan reads. A drop that left pages behind would make "cold" a warm figure without failing the benchmark.
"""
from __future__ import annotations

import os

from benchmarks.bench_header_scan import drop_from_page_cache, read_headers, resident_bytes_of, timed_pair
from devkit.synth import moe_tensors, write_checkpoint
from onegpu.checkpoint.scan import read_checkpoint

MIB = 1 << 20


def _written(path, size: int):
    with open(path, "wb") as fh:
        fh.write(os.urandom(size))
        fh.flush()
        os.fsync(fh.fileno())  # dirty pages cannot be dropped
    path.read_bytes()
    return path


def test_the_drop_empties_the_page_cache_of_the_listed_files_only(disk_folder):
    listed = [_written(disk_folder / f"shard-{i}", 2 * MIB) for i in range(2)]
    other = _written(disk_folder / "other", 2 * MIB)
    assert resident_bytes_of(listed) >= 0.95 * 4 * MIB
    drop_from_page_cache(listed)
    assert resident_bytes_of(listed) == 0
    assert resident_bytes_of([other]) >= 0.95 * 2 * MIB


def test_paired_figures_alternate_their_order_and_each_call_follows_the_setup():
    calls = []
    first, second = timed_pair(lambda: calls.append("a"), lambda: calls.append("b"), 4,
                               before=lambda: calls.append("-"))
    assert "".join(calls) == "-a-b-b-a-a-b-b-a"
    assert len(first[0]) == len(second[0]) == 4 and len(first[1]) == len(second[1]) == 4


def test_the_floor_reads_the_index_and_every_header_the_scan_reads(tmp_path):
    root = write_checkpoint(tmp_path / "ckpt", {"num_hidden_layers": 2},
                            moe_tensors(layers=2, experts=4, hidden=64, moe_intermediate=32), shards=3)
    facts = read_checkpoint(root)
    shards = [root / s.name for s in facts.shards]
    index = root / facts.index_file
    for read_ahead in (True, False):
        headers = read_headers(index, shards, read_ahead=read_ahead)
        assert headers[0] == index.read_bytes()
        assert [len(h) for h in headers[1:]] == [s.header_bytes for s in facts.shards]
        assert all(h.startswith(b"{") and h.rstrip().endswith(b"}") for h in headers[1:])
