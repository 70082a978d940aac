"""Row-gemv linears (engine.row_gemv): a few rows as one batched matrix-vector product.

On a CPU (these tests) the arithmetic is MLX's reference matmul either way, so the
results must agree with nn.Linear's; which kernel CUDA picks is measured on the GPU
(benchmarks/row_gemv_probe.py).
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx.utils import tree_flatten

from omlx.draft.baseline import plain_generate
from omlx.draft.loop import DFlashGenerator, DFlashParams
from omlx.draft.random_init import draft_config_for, random_draft
from omlx.draft.serving import DFlashPath
from omlx.engine.loading import load_text_model
from omlx.engine.mlx_backend import MLXBackend
from omlx.mlx_lm_compat import row_gemv
from omlx.mlx_lm_compat.fused_projections import FusedProjections
from omlx.mlx_lm_compat.row_gemv import RowGemvLinear, use_row_gemv, uses_row_gemv
from omlx.platform.weight_layout import InputMajorLinear
from omlx.settings import EngineSettings
from tests.fixtures.tiny_models import ARCHS, build_tiny_in_memory
from tests.mlx.draft.conftest import build_target
from tests.mlx.engine.engine_helpers import collect, request, run_with_pool

PROMPT = [3, 17, 42, 99, 5, 128, 7, 64]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize(
    "shape", [(1, 48), (2, 48), (1, 5, 48), (3, 4, 48), (1, 16, 48), (1, 0, 48)]
)
def test_a_row_gemv_linear_computes_what_nn_linear_does(shape, bias) -> None:
    linear = nn.Linear(48, 40, bias=bias)
    swapped = RowGemvLinear(linear)
    x = mx.random.normal(shape, key=mx.random.key(len(shape) * 7 + shape[-2]))
    got, want = swapped(x), linear(x)
    assert got.shape == want.shape == (*shape[:-1], 40)
    assert mx.allclose(got, want, rtol=1e-5, atol=1e-5).item()


def test_rows_past_the_limit_take_nn_linear_unchanged() -> None:
    linear = nn.Linear(32, 24)
    swapped = RowGemvLinear(linear, max_rows=4)
    x = mx.random.normal((1, 9, 32), key=mx.random.key(3))
    assert mx.array_equal(swapped(x), linear(x)).item()  # the same ops: bit for bit


@pytest.mark.parametrize("rows", [1, 6])
def test_the_kept_weight_views_follow_a_new_weight_and_are_no_parameters(rows) -> None:
    linear = nn.Linear(32, 24)
    swapped = RowGemvLinear(linear)
    x = mx.random.normal((1, rows, 32), key=mx.random.key(rows))
    mx.eval(swapped(x))  # the views are made and evaluated with the first pass
    assert sorted(k for k, _ in tree_flatten(swapped.parameters())) == ["bias", "weight"]
    fresh = nn.Linear(32, 24)
    swapped.update({"weight": fresh.weight, "bias": fresh.bias})
    assert mx.allclose(swapped(x), fresh(x), rtol=1e-5, atol=1e-5).item()
    assert not mx.allclose(swapped(x), linear(x), rtol=1e-3, atol=1e-3).item()


def _graph_ops(tmp_path: Path, out: mx.array) -> list[str]:
    dot = tmp_path / "graph.dot"
    mx.export_to_dot(str(dot), out)
    return re.findall(r'label ="([A-Za-z_]+)"', dot.read_text())


def test_after_the_first_pass_a_call_builds_no_weight_view_nodes(tmp_path) -> None:
    """On a host-bound GPU every graph node costs host time: once evaluated, the
    weight's transposed and broadcast views are leaves, and projections of one input
    share its vectors view."""
    q = RowGemvLinear(nn.Linear(32, 24, bias=False))
    k = RowGemvLinear(nn.Linear(32, 8, bias=False))
    first = mx.random.normal((1, 6, 32), key=mx.random.key(1))
    mx.eval(q(first), k(first), q(first[:, :1]))  # the first passes make the views
    x = mx.random.normal((1, 6, 32), key=mx.random.key(2))
    one = mx.random.normal((1, 1, 32), key=mx.random.key(3))
    mx.eval(x, one)  # leaves: the graphs below are the calls' own nodes only
    ops = _graph_ops(tmp_path, mx.concatenate([q(x), k(x)], axis=-1))
    assert ops.count("Matmul") == 2
    assert "Broadcast" not in ops
    assert ops.count("Transpose") == 1  # the input's vectors view (a swap), shared
    assert ops.count("Reshape") == 3  # that view's reshape, and each output's
    ops = _graph_ops(tmp_path, q(one))  # MLX's own flatten around a batched matmul
    assert ops.count("Matmul") == 1 and "Transpose" not in ops


def test_fresh_views_build_them_in_every_call_with_the_same_result(tmp_path, monkeypatch):
    """The benchmarks' comparison arm (--fresh-views): the views of before, per call."""
    q = RowGemvLinear(nn.Linear(32, 24, bias=False))
    x = mx.random.normal((1, 6, 32), key=mx.random.key(4))
    mx.eval(x)
    kept = q(x)
    monkeypatch.setattr(row_gemv, "KEEP_VIEWS", False)
    mx.eval(q(x))
    ops = _graph_ops(tmp_path, q(x))
    assert ops.count("Transpose") == 2  # the input's swap and the weight's transpose
    assert mx.array_equal(q(x), kept).item()


@pytest.mark.parametrize("arch", ARCHS)
def test_a_swapped_model_computes_what_the_stock_one_does(arch: str) -> None:
    stock = build_tiny_in_memory(arch, seed=5)
    swapped = build_tiny_in_memory(arch, seed=5)
    count = use_row_gemv(swapped)
    plain_linears = [m for _, m in stock.named_modules() if type(m) is nn.Linear]
    assert count == len(plain_linears) > 0
    assert uses_row_gemv(swapped) and not uses_row_gemv(stock)
    # The parameters are shared, not copied, under the same names (checkpoints load).
    assert [k for k, _ in tree_flatten(swapped.parameters())] == [
        k for k, _ in tree_flatten(stock.parameters())
    ]
    for rows in (1, 4, 16):
        x = mx.array([PROMPT * 2])[:, :rows]
        assert mx.allclose(stock(x), swapped(x), rtol=1e-4, atol=1e-4).item()


def test_only_plain_linears_that_fit_are_swapped() -> None:
    model = build_tiny_in_memory("llama", seed=2)
    nn.quantize(model, group_size=32, bits=4, class_predicate=lambda p, m: p.endswith("q_proj"))
    sizes = sorted({m.weight.nbytes for _, m in model.named_modules() if type(m) is nn.Linear})
    limit = sizes[0]  # only the smallest linears fit
    swapped = use_row_gemv(model, max_weight_bytes=limit)
    kinds = {type(m) for _, m in model.named_modules()}
    assert swapped > 0 and nn.QuantizedLinear in kinds and nn.Linear in kinds
    rows = [m for _, m in model.named_modules() if type(m) is RowGemvLinear]
    assert all(m.weight.nbytes <= limit for m in rows)
    # all_or_none (engine.row_gemv auto): one linear too large and nothing is swapped.
    other = build_tiny_in_memory("llama", seed=2)
    assert use_row_gemv(other, max_weight_bytes=limit, all_or_none=True) == 0
    assert not uses_row_gemv(other)
    assert use_row_gemv(other, max_weight_bytes=sizes[-1], all_or_none=True) > 0


def test_an_untied_head_too_large_does_not_keep_the_layers_from_swapping() -> None:
    model = build_tiny_in_memory("gemma3", seed=2)  # untied lm_head, a 262k vocabulary
    layer_bytes = max(
        m.weight.nbytes for n, m in model.named_modules() if type(m) is nn.Linear and n != "lm_head"
    )
    assert model.lm_head.weight.nbytes > layer_bytes
    swapped = use_row_gemv(model, max_weight_bytes=layer_bytes, all_or_none=True)
    assert swapped > 0 and type(model.lm_head) is nn.Linear  # the head as it was
    assert all(
        type(m) is RowGemvLinear
        for n, m in model.named_modules()
        if n != "lm_head" and isinstance(m, nn.Linear)
    )


@pytest.mark.parametrize("pipelined", [False, True], ids=["sequential", "pipelined"])
def test_dflash_over_row_gemv_target_and_draft_emits_plain_greedy(pipelined: bool) -> None:
    plain = plain_generate(build_target("qwen3"), PROMPT, DFlashParams(max_tokens=48)).tokens
    target = build_target("qwen3")
    draft = random_draft(draft_config_for(target), seed=1)
    assert use_row_gemv(target) > 0 and use_row_gemv(draft) > 0
    run = DFlashGenerator.from_models(target, draft, pipelined=pipelined).generate(
        PROMPT, DFlashParams(max_tokens=48)
    )
    assert run.run() == plain


def test_the_engine_setting_reaches_the_load(tiny_llama_dir: Path) -> None:
    # auto: on CUDA only, for models whose linears all fit; these tests run on a CPU.
    for value, expect in (("off", False), ("on", True), ("auto", False)):
        loaded = MLXBackend(EngineSettings(row_gemv=value)).load("tiny", tiny_llama_dir)
        assert uses_row_gemv(loaded.model) is expect
    fused = load_text_model("tiny", tiny_llama_dir, fuse_projections=True, row_gemv="on")
    linears = [m.linear for _, m in fused.model.named_modules() if isinstance(m, FusedProjections)]
    assert linears and all(type(lin) is RowGemvLinear for lin in linears)
    # Not stored input-major on top: the CPU layout swap takes plain nn.Linear only.
    assert not any(isinstance(m, InputMajorLinear) for _, m in fused.model.named_modules())


def test_auto_resolves_per_device() -> None:
    assert EngineSettings().row_gemv_mode(cuda=True) == "small_models"
    assert EngineSettings().row_gemv_mode(cuda=False) == "off"
    assert EngineSettings(row_gemv="on").row_gemv_mode(cuda=False) == "on"
    assert EngineSettings(row_gemv="off").row_gemv_mode(cuda=True) == "off"


def test_a_served_dflash_draft_follows_its_target() -> None:
    for swap in (False, True):
        target = build_target("qwen3")
        if swap:
            use_row_gemv(target)
        path = DFlashPath("random")
        generator = path._generator_for(target)
        assert generator is not None and path._draft is not None
        assert uses_row_gemv(path._draft) is swap


def test_engine_serves_the_same_greedy_tokens_with_the_setting_on(tiny_llama_dir: Path) -> None:
    async def body(pool):  # three concurrent requests: batched decode steps of 2-3 rows
        reqs = [
            request("row gemv or not", max_tokens=12),
            request("another prompt", max_tokens=9),
            request("a third one here", max_tokens=7),
        ]
        return [r.token_ids for r in await asyncio.gather(*(collect(pool, q) for q in reqs))]

    off = run_with_pool(tiny_llama_dir, body)
    on = run_with_pool(tiny_llama_dir, body, row_gemv="on")
    assert on == off and all(off)
