"""Cold tier: atomic block files, index rebuilt from disk, LRU cap, bad files skipped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from omlx.cache.chain_hash import BlockKey, chain_keys
from omlx.cache.cold_format import BadBlockFile, block_path, read_header
from omlx.cache.cold_index import ColdIndex, default_cap_bytes
from omlx.cache.cold_store import read_block, write_block
from omlx.cache.hot_tier import HotBlock
from omlx.cache.index import BlockInfo

B = 4
KEYS = chain_keys("fp", list(range(40)), B)
LAYOUT = {"num_layers": "1", "dtype": "float32", "cache_types": '["kv"]', "layers": "[{}]",
          "bf16": "[]"}  # fmt: skip


def make_block(i: int, key: str | None = None, fill: float = 1.0, n: int = 8) -> HotBlock:
    arrays = {"l0.k": np.full((1, 2, B, n), fill + i, np.float32),
              "l0.v": np.full((1, 2, B, n), -fill - i, np.float32)}  # fmt: skip
    nbytes = sum(a.nbytes for a in arrays.values())
    info = BlockInfo(BlockKey(key or KEYS[i]), "fp", i, B, nbytes, model_name="tiny")
    return HotBlock(info=info, arrays=arrays, meta=dict(LAYOUT))


def test_write_read_round_trip_and_header(tmp_path: Path) -> None:
    block = make_block(0)
    entry = write_block(tmp_path, block, B)
    assert entry.path == tmp_path / KEYS[0][:2] / f"{KEYS[0]}.safetensors"
    header = read_header(entry.path)
    assert header.info.key == KEYS[0] and header.block_size == B and header.num_layers == 1
    assert (header.dtype, header.cache_types) == ("float32", ("kv",))
    assert header.meta["format_version"] == "1" and header.meta["model_fingerprint"] == "fp"
    _, arrays = read_block(entry.path)
    assert np.array_equal(arrays["l0.k"], block.arrays["l0.k"])
    assert entry.info.nbytes == entry.path.stat().st_size
    assert not list(tmp_path.rglob("*.tmp"))


def test_rebuild_orders_by_access_time_and_enforces_cap(tmp_path: Path) -> None:
    entries = [write_block(tmp_path, make_block(i), B) for i in range(3)]
    for age, e in zip((30, 10, 20), entries, strict=True):  # oldest access: block 0
        t = time.time() - age
        os.utime(e.path, (t, t))
    size = entries[0].info.nbytes
    index = ColdIndex(tmp_path, cap_bytes=10 * size, block_size=B)
    report, evicted = index.rebuild()
    assert (report.num_blocks, report.num_skipped, evicted) == (3, 0, [])
    assert index.keys() == [KEYS[0], KEYS[2], KEYS[1]]
    assert index.num_bytes == 3 * size

    index.touch(KEYS[0], time.time())
    assert index.keys() == [KEYS[2], KEYS[1], KEYS[0]]
    index.cap_bytes = 2 * size
    evicted = index.add(write_block(tmp_path, make_block(3), B))
    assert [e.info.key for e in evicted] == [KEYS[2], KEYS[1]]
    assert index.keys() == [KEYS[0], KEYS[3]] and index.num_bytes == 2 * size

    small = ColdIndex(tmp_path, cap_bytes=size, block_size=B)  # cap enforced at start-up too
    _, evicted = small.rebuild()
    assert len(small) == 1 and len(evicted) == 3


def _bad_files(root: Path) -> dict[str, Path]:
    good = write_block(root, make_block(0), B).path
    data = good.read_bytes()
    bad = {}
    for i, (name, content) in enumerate(
        [
            ("truncated", data[:-5]),
            ("junk", b"\x00\x01not a safetensors file"),
            ("empty", b""),
            ("padded", data + b"\0\0\0"),
            ("header-garbage", data[:8] + b"{" * (len(data) - 8)),
        ],
        start=1,
    ):
        path = block_path(root, BlockKey(KEYS[i]))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        bad[name] = path
    # A valid safetensors file that is not an omlx block.
    import safetensors.numpy

    foreign = block_path(root, BlockKey("f" * 32))
    foreign.parent.mkdir(parents=True, exist_ok=True)
    foreign.write_bytes(safetensors.numpy.save({"w": np.zeros(3, np.float32)}))
    bad["foreign"] = foreign
    # An omlx block whose name does not match its key, and one of another block size.
    renamed = block_path(root, BlockKey("e" * 32))
    renamed.parent.mkdir(parents=True, exist_ok=True)
    renamed.write_bytes(data)
    bad["renamed"] = renamed
    other = write_block(root / "b8", make_block(7), 8).path
    moved = block_path(root, BlockKey(KEYS[7]))
    moved.parent.mkdir(parents=True, exist_ok=True)
    os.replace(other, moved)
    bad["block-size"] = moved
    return bad


def test_bad_files_are_skipped_and_counted(tmp_path: Path) -> None:
    bad = _bad_files(tmp_path)
    for path in bad.values():
        with pytest.raises(BadBlockFile):
            header = read_header(path)
            if header.block_size != B:
                raise BadBlockFile("block size")
    index = ColdIndex(tmp_path, cap_bytes=1 << 30, block_size=B)
    report, _ = index.rebuild()
    assert (report.num_blocks, report.num_skipped) == (1, len(bad))
    assert index.keys() == [KEYS[0]] and index.num_skipped == len(bad)


def test_flipped_data_byte_fails_the_checksum(tmp_path: Path) -> None:
    path = write_block(tmp_path, make_block(0), B).path
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF  # inside the last tensor: the header and size still look fine
    path.write_bytes(bytes(data))
    read_header(path)
    with pytest.raises(BadBlockFile, match="checksum"):
        read_block(path)


_WRITER = """
import sys, time
import numpy as np
from pathlib import Path
from omlx.cache.chain_hash import chain_keys
from omlx.cache.cold_store import write_block
sys.path.insert(0, {tests!r})
from test_cache_cold_tier import make_block
root = Path({root!r})
keys = chain_keys("fp", list(range(4 * 10000)), 4)
print("ready", flush=True)
for i, key in enumerate(keys):
    write_block(root, make_block(i, key, n=32768), 4)  # ~2 MB per file
"""


def test_kill_9_during_writes_leaves_no_readable_partial_file(tmp_path: Path) -> None:
    code = _WRITER.format(tests=str(Path(__file__).parent), root=str(tmp_path))
    for delay in (0.3, 0.7, 1.1):
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    index = ColdIndex(tmp_path, cap_bytes=1 << 40, block_size=B)
    report, _ = index.rebuild()
    assert report.num_blocks > 0
    for entry in index.entries():  # whatever the scan accepts is complete and intact
        read_block(entry.path)
    leftovers = list(tmp_path.rglob("*.tmp"))  # kept: young tmp files may be another writer's
    assert all(not p.name.endswith(".safetensors") for p in leftovers)
    assert report.num_skipped == 0


def test_default_cap_is_a_share_of_free_disk(tmp_path: Path) -> None:
    cap = default_cap_bytes(tmp_path / "not" / "yet")
    free = __import__("shutil").disk_usage(tmp_path).free
    assert 0 < cap <= free * 0.11
