"""Fused sibling projections: the same model function with fewer matmuls per layer."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx.utils import tree_flatten
from mlx_lm.generate import generate_step

from omlx.engine.loading import load_text_model
from omlx.engine.mlx_backend import MLXBackend
from omlx.mlx_lm_compat.fused_projections import (
    FusedProjections,
    ProjectionPart,
    fuse_projections,
)
from omlx.platform.weight_layout import InputMajorLinear
from omlx.settings import EngineSettings
from tests.fixtures.tiny_models import ARCHS, build_tiny_in_memory
from tests.mlx.engine.engine_helpers import collect, request, run_with_pool

PROMPT = [3, 17, 5, 40, 9, 2, 33]


def _greedy(model: nn.Module, prompt: list[int], n: int) -> list[int]:
    return [int(t) for t, _ in generate_step(mx.array(prompt), model, max_tokens=n)]


def _modules(model: nn.Module, kind: type) -> list[str]:
    return [name for name, m in model.named_modules() if type(m) is kind]


def _nbytes(model: nn.Module) -> int:
    return sum(v.nbytes for _, v in tree_flatten(model.parameters()))


def _groups(model: nn.Module) -> int:
    """How many modules hold a full q/k/v or gate/up set of plain linears."""
    sets = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))
    return sum(
        all(type(m.get(n)) in (nn.Linear, nn.QuantizedLinear) for n in names)
        for _, m in model.named_modules()
        for names in sets
    )


@pytest.mark.parametrize("arch", ARCHS)
def test_fused_model_computes_what_the_stock_one_does(arch: str) -> None:
    stock = build_tiny_in_memory(arch, seed=5)
    fused = build_tiny_in_memory(arch, seed=5)
    expected = _groups(stock)
    assert fuse_projections(fused) == expected > 0
    assert len(_modules(fused, FusedProjections)) == expected
    assert _groups(fused) == 0  # no sibling set left as separate matmuls
    assert _nbytes(fused) == _nbytes(stock)  # moved, not copied: parameters counted once
    x = mx.array([PROMPT])
    assert mx.allclose(stock(x), fused(x), rtol=1e-5, atol=1e-5).item()
    assert _greedy(fused, PROMPT[:5], 12) == _greedy(stock, PROMPT[:5], 12)


def test_quantized_siblings_fuse_and_mixed_ones_do_not() -> None:
    stock = build_tiny_in_memory("qwen3", seed=2)
    fused = build_tiny_in_memory("qwen3", seed=2)
    for model in (stock, fused):
        nn.quantize(model, group_size=32, bits=4)
    fuse_projections(fused)
    assert {
        type(m.linear) for _, m in fused.named_modules() if isinstance(m, FusedProjections)
    } == {nn.QuantizedLinear}
    x = mx.array([PROMPT])
    assert mx.allclose(stock(x), fused(x), rtol=1e-5, atol=1e-5).item()
    assert _greedy(fused, PROMPT[:5], 10) == _greedy(stock, PROMPT[:5], 10)

    mixed = build_tiny_in_memory("llama", seed=2)
    nn.quantize(mixed, group_size=32, bits=4, class_predicate=lambda p, m: p.endswith("q_proj"))
    layers = len(mixed.model.layers)
    assert fuse_projections(mixed) == layers  # the MLPs only: q is quantized, k and v not
    assert all(type(layer.self_attn.q_proj) is nn.QuantizedLinear for layer in mixed.model.layers)


def test_no_activation_is_held_between_calls_and_parts_read_like_linears() -> None:
    stock = build_tiny_in_memory("llama", seed=4)
    model = build_tiny_in_memory("llama", seed=4)
    fuse_projections(model)
    model(mx.array([PROMPT]))
    fused = [m for _, m in model.named_modules() if isinstance(m, FusedProjections)]
    assert fused and all(f._memo.input is None and not f._memo.outputs for f in fused)
    attn, stock_attn = model.model.layers[0].self_attn, stock.model.layers[0].self_attn
    assert isinstance(attn.k_proj, ProjectionPart)
    assert mx.array_equal(attn.k_proj.weight, stock_attn.k_proj.weight).item()
    # A part called on another input than its siblings still computes its own projection.
    x, y = mx.random.normal((1, 3, 64)), mx.random.normal((1, 3, 64))
    q, v = attn.q_proj(x), attn.v_proj(y)
    assert mx.allclose(q, stock_attn.q_proj(x), atol=1e-5).item()
    assert mx.allclose(v, stock_attn.v_proj(y), atol=1e-5).item()


def test_the_engine_loads_fused_and_input_major_on_request(tiny_llama_dir: Path) -> None:
    plain = load_text_model("tiny", tiny_llama_dir)
    fused = load_text_model("tiny", tiny_llama_dir, fuse_projections=True)
    assert not _modules(plain.model, FusedProjections)
    linears = [m.linear for _, m in fused.model.named_modules() if isinstance(m, FusedProjections)]
    assert linears and all(type(lin) is InputMajorLinear for lin in linears)  # on the CPU
    assert fused.weight_bytes == plain.weight_bytes
    assert _greedy(fused.model, PROMPT, 10) == _greedy(plain.model, PROMPT, 10)


def test_the_engine_setting_reaches_the_load(tiny_llama_dir: Path) -> None:
    # auto: on an NVIDIA GPU only; these tests run on a CPU.
    for value, expect in (("off", False), ("on", True), ("auto", False)):
        backend = MLXBackend(EngineSettings(fused_projections=value))
        loaded = backend.load("tiny", tiny_llama_dir)
        assert bool(_modules(loaded.model, FusedProjections)) is expect


def test_auto_fuses_on_cuda_only() -> None:
    assert EngineSettings().fuses_projections(cuda=True)
    assert not EngineSettings().fuses_projections(cuda=False)
    assert not EngineSettings(fused_projections="off").fuses_projections(cuda=True)
    assert EngineSettings(fused_projections="on").fuses_projections(cuda=False)


def test_engine_setting_serves_the_same_greedy_tokens(tiny_llama_dir: Path) -> None:
    async def body(pool):  # two concurrent requests: batched decode steps
        import asyncio

        reqs = [request("fused or not", max_tokens=12), request("another prompt", max_tokens=9)]
        return [r.token_ids for r in await asyncio.gather(*(collect(pool, q) for q in reqs))]

    off = run_with_pool(tiny_llama_dir, body)
    on = run_with_pool(tiny_llama_dir, body, fused_projections="on")
    assert on == off and all(off)
