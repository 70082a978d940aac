"""A request that sets no sampling takes the model's generation_config.json; its own wins."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from omlx.engine.api import SamplingParams
from tests.mlx.engine.engine_helpers import collect, request, run_with_pool

pytestmark = pytest.mark.timeout(180)


def _with_generation_config(src: Path, dest: Path, **sampling: float) -> Path:
    shutil.copytree(src, dest)
    f = dest / "generation_config.json"
    f.write_text(json.dumps({**json.loads(f.read_text()), **sampling}))
    return dest


def test_unset_temperature_takes_the_models_and_an_explicit_one_wins(
    tiny_dir: Path, tmp_path: Path
) -> None:
    model = _with_generation_config(tiny_dir, tmp_path / "tiny", temperature=0.0)

    def ask(sampling: SamplingParams):
        return request("roll the dice", max_tokens=20, sampling=sampling)

    async def body(pool):
        greedy = await collect(pool, ask(SamplingParams(temperature=0.0)))
        # Seeds only matter when sampling: with the model's temperature 0 both are greedy.
        unset = [await collect(pool, ask(SamplingParams(seed=s))) for s in (1, 2)]
        hot = [await collect(pool, ask(SamplingParams(temperature=1.0, seed=s))) for s in (1, 2)]
        return greedy, unset, hot

    greedy, unset, hot = run_with_pool(model, body)
    assert len(greedy.token_ids) == 20
    assert [r.token_ids for r in unset] == [greedy.token_ids] * 2
    # A random tiny model's next-token distribution is flat: at temperature 1.0 two seeds
    # (fixed, so this is deterministic) part ways within 20 tokens.
    assert hot[0].token_ids != hot[1].token_ids
