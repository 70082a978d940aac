"""The distilled replies the repository carries (benchmarks/results/data), as samples."""

from __future__ import annotations

import gzip
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# The shipped prompts answered seven times (one greedy reply, six sampled: 16,800
# replies, 2.95M reply tokens; the fifth sampled pass written on an H200, the others on
# the 2-core CPU). Its first 14,400 lines are the file of five sampled passes runs 6-7
# trained on (distill-9988e413d566036e.jsonl), its first 12,000 the file of four
# (distill-7ea91c095c2b30ca.jsonl) and its first 9,600 the file of three that runs 3-5
# trained on (distill-4930c67b8bddc3cf.jsonl): `head -n 14400` / `12000` / `9600`.
DATA = ROOT / "benchmarks/results/data/distill-91a1dd4f6277e425.jsonl.gz"
# Greedy replies to all 7,200 prompts of the more-prompts set (`--prompts more`; 1.29M
# reply tokens), written on the 2-core CPU in two runs, the second going on with the
# first's partial file (its first 5,120 lines), with its record.
MORE_DATA = ROOT / "benchmarks/results/data/distill-26562c5b25f76fe5.jsonl.gz"


def read_carried(path: Path = DATA) -> list[Any]:
    """The samples of a distilled data file, gzipped (unpacked to a temporary file) or not."""
    from omlx.draft.train.data import read_samples

    if path.suffix != ".gz":
        return read_samples(path)
    with tempfile.TemporaryDirectory(prefix="omlx-data-") as tmp:
        plain = Path(tmp) / path.stem
        plain.write_bytes(gzip.decompress(path.read_bytes()))
        return read_samples(plain)
