"""benchmarks/gpu_carry.py: pieces join back byte for byte, and no call carries too much."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[3]


def _load():
    # benchmarks/ is no package: load the module from its file, as the scripts find it.
    spec = importlib.util.spec_from_file_location("gpu_carry", ROOT / "benchmarks/gpu_carry.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_carry"] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def test_packing_keeps_every_call_under_its_room(tmp_path):
    carry = _load()
    sizes = [70, 50, 40, 30, 30, 20, 10, 5]
    files = []
    for i, size in enumerate(sizes):
        f = tmp_path / f"f{i}"
        f.write_bytes(b"x" * size)
        files.append(f)
    bins = carry.pack(files, room=100)
    assert sorted(p for b in bins for p in b.items) == sorted(files)
    assert all(b.used <= 100 for b in bins)
    assert len(bins) == 3  # 255 bytes: first fit, largest first, needs no more than three
    with pytest.raises(ValueError, match="larger than a call's room"):
        carry.pack(files, room=60)


def test_split_pieces_and_extras_come_back_on_the_machine(tmp_path):
    carry = _load()
    big = tmp_path / "model.gguf"
    big.write_bytes(bytes(range(256)) * 41)
    machine = tmp_path / "gpu"
    machine.mkdir()
    parts = carry.split_file(big, 1000, machine)
    assert [p.name for p in parts] == [f"model.gguf.part{i:02d}" for i in range(11)]
    (machine / "extra-0000").write_text("{}")
    (machine / "extra-0001").write_text("init")
    (machine / "extra-manifest.tsv").write_text(
        "extra-0000\tdraft/config.json\nextra-0001\tsrc/pkg/__init__.py\n"
    )
    subprocess.run(  # only the joining and the extras: no wheels here, no GPU
        ["bash", "-c", (ROOT / "benchmarks/gpu_install.sh").read_text().split('\n"$python"')[0]],
        env={"GPU_DIR": str(machine), "PATH": "/usr/bin:/bin"},
        check=True,
    )
    assert (machine / "model.gguf").read_bytes() == big.read_bytes()
    assert not list(machine.glob("*.part*"))
    assert (machine / "extra" / "draft" / "config.json").read_text() == "{}"
    # A name with the old separator in it lands where it belongs.
    assert (machine / "extra" / "src" / "pkg" / "__init__.py").read_text() == "init"
    assert not (machine / "extra-manifest.tsv").exists()
