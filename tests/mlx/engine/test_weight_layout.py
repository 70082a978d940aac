"""Input-major linears: same outputs, same greedy tokens, the nn.Linear surface kept."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx_lm.generate import generate_step

from omlx.engine.loading import load_text_model
from omlx.platform.weight_layout import InputMajorLinear, use_input_major_linears
from tests.fixtures.tiny_models import ARCHS, build_tiny_in_memory


def _linears(model: nn.Module, kind: type) -> list[str]:
    return [name for name, m in model.named_modules() if type(m) is kind]


def _greedy(model: nn.Module, prompt: list[int], n: int) -> list[int]:
    return [int(t) for t, _ in generate_step(mx.array(prompt), model, max_tokens=n)]


@pytest.mark.parametrize("arch", ARCHS)
def test_swapped_model_computes_what_the_stock_one_does(arch: str) -> None:
    stock = build_tiny_in_memory(arch, seed=3)
    swapped = build_tiny_in_memory(arch, seed=3)
    linears = _linears(stock, nn.Linear)
    assert use_input_major_linears(swapped) == len(linears) > 0
    assert _linears(swapped, InputMajorLinear) == linears
    assert _linears(swapped, nn.Linear) == []
    x = mx.array([[3, 17, 5, 40, 9, 2, 33]])
    # Same function up to float32 summation order: OpenBLAS splits the two layouts'
    # matmuls differently, and by how many threads the governor runs at the moment
    # (logits of ~10 then differ in the 6th digit). A wrong layout differs in the first.
    assert mx.allclose(stock(x), swapped(x), rtol=1e-4, atol=1e-4).item()
    prompt = [3, 17, 5, 40, 9]
    assert _greedy(swapped, prompt, 12) == _greedy(stock, prompt, 12)


def test_the_linear_surface_stays_readable() -> None:
    lin = nn.Linear(6, 4, bias=True)
    mx.eval(lin.parameters())
    swapped = InputMajorLinear(lin)
    assert swapped.weight_t.shape == (6, 4)
    assert swapped.weight.shape == lin.weight.shape  # what draft capture reads
    assert mx.array_equal(swapped.weight, lin.weight).item()
    x = mx.random.normal((3, 6))
    assert mx.allclose(swapped(x), lin(x), atol=1e-6).item()


def test_quantized_layers_are_left_alone() -> None:
    model = build_tiny_in_memory("llama", seed=1)
    nn.quantize(model, group_size=32, bits=4, class_predicate=lambda p, m: "mlp" in p)
    quantized = _linears(model, nn.QuantizedLinear)
    assert quantized
    use_input_major_linears(model)
    assert _linears(model, nn.QuantizedLinear) == quantized
    assert not [n for n in _linears(model, InputMajorLinear) if "mlp" in n]


def test_the_engine_loads_text_models_input_major_on_the_cpu(tiny_llama_dir: Path) -> None:
    assert mx.default_device().type == mx.cpu  # CI and this machine: no GPU
    lm = load_text_model("tiny", tiny_llama_dir)
    assert _linears(lm.model, InputMajorLinear)
    assert _linears(lm.model, nn.Linear) == []
