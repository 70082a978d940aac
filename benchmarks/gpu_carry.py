"""Pack what a GPU session needs into folders one device call can carry each.

    python benchmarks/gpu_carry.py [--out .gpu] [--extra PATH ...] [--no-download]
        [--carry-mib 64]

A call carries the working tree plus the folders it names, 64 MiB in all, and the machine
(Python 3.12, no package registry, numpy, PyTorch and CUDA 13 libraries already there)
stays warm only ~30 s between calls. This downloads MLX's CUDA build, mlx-lm and the
server's dependencies for that machine (leaving out what it has), adds the default
model's GGUF and any --extra files or folders (carried replies, a draft), splits what is
too big into `.partNN` pieces, and packs it all into OUT/1, OUT/2, ... each under the
room a call leaves beside the tree. It prints one line per call: the folder to carry and
the command; the last call's command ends with `benchmarks/gpu_install.sh`, which joins
the pieces, installs the wheels into /root/site and checks that MLX sees the GPU. Issue
the calls back to back, the measurement in the last one.

On the machine, /root/gpu then holds the default model's GGUF whole (`omlx pull
/root/gpu/SmolLM2-135M-Instruct.Q4_1.gguf`) and each --extra path under /root/gpu/extra/
(a folder keeps its name and layout).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIB = 1 << 20
EXTRA_MANIFEST = "extra-manifest.tsv"  # NAME<TAB>PATH under extra/, one line a file
MLX = "0.32.4"
# mlx-lm's own dependencies (transformers and the rest) are on the machine.
NO_DEPS = [f"mlx=={MLX}", f"mlx-cuda-13=={MLX}", "mlx-lm==0.32.2"]
# The server and the draft tools; their dependencies come along.
PACKAGES = [
    "litestar",
    "uvicorn",
    "httptools",
    "uvloop",
    "msgspec",
    "tomli-w",
    "gguf",
    "httpx",
    "tomlkit",
    "ruamel.yaml",
    "llguidance>=1.9",
    "py-spy",
]
# What the GPU machine's Python already holds (the GPU notes), or must not be replaced.
ON_MACHINE = (
    "numpy",
    "torch",
    "triton",
    "transformers",
    "tokenizers",
    "safetensors",
    "huggingface_hub",
    "hf_xet",
    "jinja2",
    "markupsafe",
    "pyyaml",
    "sentencepiece",
    "protobuf",
    "rich",
    "typer",
)
# pip matches exactly the tags given: every manylinux level up to the machine's glibc
# (2.35 at least: MLX's CUDA wheel needs it) that wheels are published for.
PLATFORM = [
    "--only-binary=:all:",
    "--python-version",
    "3.12",
    "--implementation",
    "cp",
    "--platform",
    "manylinux_2_35_x86_64",
    "--platform",
    "manylinux_2_34_x86_64",
    "--platform",
    "manylinux_2_31_x86_64",
    "--platform",
    "manylinux_2_28_x86_64",
    "--platform",
    "manylinux_2_17_x86_64",
    "--platform",
    "manylinux2014_x86_64",
    "--platform",
    "any",
]


@dataclass
class Bin:
    room: int
    items: list[Path] = field(default_factory=list)

    @property
    def used(self) -> int:
        return sum(p.stat().st_size for p in self.items)


def tree_bytes() -> int:
    """What every call carries anyway: the tracked and untracked, not ignored, files."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout
    return sum(
        (ROOT / n).stat().st_size for n in out.decode().split("\0") if n and (ROOT / n).is_file()
    )


def split_file(path: Path, piece: int, into: Path) -> list[Path]:
    """`path` cut into NAME.part00, part01, ... of at most `piece` bytes, in `into`."""
    parts = []
    with path.open("rb") as f:
        while chunk := f.read(piece):
            part = into / f"{path.name}.part{len(parts):02d}"
            part.write_bytes(chunk)
            parts.append(part)
    return parts


def pack(files: list[Path], room: int) -> list[Bin]:
    """First fit, largest first: few calls, none over `room` bytes."""
    bins: list[Bin] = []
    for f in sorted(files, key=lambda p: p.stat().st_size, reverse=True):
        size = f.stat().st_size
        if size > room:
            raise ValueError(f"{f} ({size} bytes) is larger than a call's room ({room})")
        for b in bins:
            if b.used + size <= b.room:
                b.items.append(f)
                break
        else:
            bins.append(Bin(room, [f]))
    return bins


def on_machine(wheel: Path) -> bool:
    name = wheel.name.split("-")[0].lower()
    return name in ON_MACHINE or name.startswith("nvidia_")


def download(into: Path) -> None:
    pip = [sys.executable, "-m", "pip", "download", "-q", *PLATFORM, "-d", str(into)]
    subprocess.run([*pip, "--no-deps", *NO_DEPS], check=True)
    subprocess.run([*pip, *PACKAGES], check=True)
    for wheel in into.glob("*.whl"):
        if on_machine(wheel):
            wheel.unlink()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / ".gpu")
    ap.add_argument("--extra", type=Path, action="append", default=[])
    ap.add_argument("--no-download", action="store_true", help="pack OUT/dl as it is")
    ap.add_argument("--carry-mib", type=float, default=64.0)
    args = ap.parse_args()

    from omlx.models.default_model import find_default_gguf

    out = args.out
    dl = out / "dl"
    if not args.no_download:
        shutil.rmtree(out, ignore_errors=True)
        dl.mkdir(parents=True)
        download(dl)
    for old in out.glob("[0-9]*"):
        shutil.rmtree(old)
    room = int(args.carry_mib * MIB) - tree_bytes() - 2 * MIB  # a margin for files added
    pieces = out / "pieces"
    shutil.rmtree(pieces, ignore_errors=True)
    pieces.mkdir(parents=True)
    files: list[Path] = []
    gguf = find_default_gguf()
    sources = [*dl.glob("*.whl"), *([gguf] if gguf else [])]
    manifest = []
    for extra in args.extra:
        found = [extra] if extra.is_file() else sorted(p for p in extra.rglob("*") if p.is_file())
        for f in found:
            # Numbered names and a manifest of where each goes: a path flattened into the
            # name could not tell its own separators from the path's.
            dest = pieces / f"extra-{len(manifest):04d}"
            shutil.copyfile(f, dest)
            sources.append(dest)
            manifest.append(f"{dest.name}\t{f.relative_to(extra.parent)}\n")
    for src in sources:
        if src.stat().st_size > room:
            files += split_file(src, room // 2, pieces)
        else:
            files.append(src)
    bins = pack(files, room)
    if manifest:  # with the last call's files, which gpu_install.sh restores from
        listing = pieces / EXTRA_MANIFEST
        listing.write_text("".join(manifest))
        if bins[-1].used + listing.stat().st_size > room:
            bins.append(Bin(room))
        bins[-1].items.append(listing)
    for i, b in enumerate(bins, start=1):
        folder = out / str(i)
        folder.mkdir()
        for f in b.items:
            shutil.copyfile(f, folder / f.name)
    shown = out.resolve().relative_to(ROOT) if out.resolve().is_relative_to(ROOT) else out
    for i, b in enumerate(bins, start=1):
        cmd = f"mkdir -p /root/gpu && cp {shown}/{i}/* /root/gpu/"
        if i == len(bins):
            cmd += " && bash benchmarks/gpu_install.sh && <measurement>"
        print(f"call {i}: carry [{shown}/{i}] ({b.used / MIB:.1f} MiB): {cmd}")


if __name__ == "__main__":
    main()
