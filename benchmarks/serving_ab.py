"""A/B of two omlx source trees: the serving_bench concurrency levels against `omlx serve`
run from the tree given (put first on PYTHONPATH), on the optimized BLAS.

    git worktree add /tmp/old REV && python benchmarks/serving_ab.py /tmp/old
    python benchmarks/serving_ab.py .
"""

import asyncio
import json
import sys
import tempfile

sys.path.insert(0, sys.argv[1])
from pathlib import Path

from omlx.engine import blas
from omlx.loadgen.scenarios import run_level
from omlx.loadgen.server_process import free_port, omlx_command, server_process

model = Path.home() / ".omlx/models/SmolLM2-135M-Instruct"
port = free_port()
env = {
    **blas.optimized_env(),
    "OMLX_CACHE__COLD_DIR": tempfile.mkdtemp(),
    "PYTHONPATH": sys.argv[1],
}


async def main(base):
    out = []
    for salt, c in enumerate([4, 8, 16]):
        r = await run_level(
            base,
            model.name,
            concurrency=c,
            num_requests=2 * c,
            prompt_words=128,
            max_tokens=64,
            salt=salt + 1,
        )
        out.append((c, round(r.aggregate_tps, 2), r.ttft_p50_s, r.itl_p50_ms))
        print(out[-1], flush=True)
    return out


with server_process(omlx_command(model, port), port, env=env) as base:
    res = asyncio.run(main(base))
print(json.dumps({"tree": sys.argv[1], "levels": res}))
