"""How fast the prefix cache finds the longest cached prefix of a 100k-token prompt.

Times chain hashing plus index lookups through PrefixCache.lookup (its lock included)
for a full hit (every block cached: the worst case, every key hashed) and a miss at the
first block, at block sizes 16 and 256. Pure Python: no model, no MLX.

    python benchmarks/cache_index_bench.py [--smoke]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import subprocess
import tempfile
import time
from pathlib import Path

from omlx.cache.chain_hash import iter_chain_keys
from omlx.cache.hot_tier import HotBlock
from omlx.cache.index import BlockInfo, match_chain
from omlx.cache.prefix_cache import PrefixCache
from omlx.settings import CacheSettings

RESULTS = Path(__file__).parent / "results"


def bench(num_tokens: int, block_size: int, repeats: int) -> dict:
    rng = random.Random(0)
    tokens = [rng.randrange(150_000) for _ in range(num_tokens)]
    with tempfile.TemporaryDirectory() as tmp:
        cache = PrefixCache(CacheSettings(block_size=block_size, hot_budget_bytes=1 << 40),
                            Path(tmp), cold_cap_bytes=1 << 30)  # fmt: skip
        keys = list(iter_chain_keys("fp", tokens, block_size))
        cache.insert(HotBlock(BlockInfo(k, "fp", i, block_size, 1)) for i, k in enumerate(keys))
        times = {"hit": [], "miss": []}
        for _ in range(repeats):
            for case, toks in (("hit", tokens), ("miss", [-1, *tokens[1:]])):
                t0 = time.perf_counter()
                found = match_chain(iter_chain_keys("fp", toks, block_size), cache.lookup)
                times[case].append(time.perf_counter() - t0)
                assert len(found) == (len(keys) if case == "hit" else 0)
        cache.close(spill=False)
    return {
        "block_size": block_size,
        "num_blocks": len(keys),
        "hit_ms": round(min(times["hit"]) * 1000, 3),
        "miss_ms": round(min(times["miss"]) * 1000, 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--smoke", action="store_true", help="one repeat, 10k tokens (CI)")
    args = ap.parse_args()
    num_tokens, repeats = (10_000, 1) if args.smoke else (100_000, 5)
    sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()  # fmt: skip
    result = {
        "bench": "cache_index",
        "git_sha": sha,
        "device": platform.machine() + " " + platform.processor(),
        "num_tokens": num_tokens,
        "runs": [bench(num_tokens, b, repeats) for b in (16, 256)],
    }
    line = json.dumps(result)
    print(line)
    if not args.smoke:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "cache_index.json").write_text(line + "\n")


if __name__ == "__main__":
    main()
