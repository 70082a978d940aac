"""engine.cpu_float32: on a CPU, half-precision parameters are cast to float32 at load."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx.utils import tree_flatten, tree_unflatten

from omlx.engine.loading import load_text_model
from omlx.engine.mlx_backend import MLXBackend
from omlx.platform.cpu_precision import float32_bytes, float32_plan
from omlx.settings import EngineSettings

PROMPT = mx.array([[5, 9, 14, 3, 27, 8, 11]])


def _half_copy(src: Path, dest: Path, dtype: mx.Dtype) -> Path:
    shutil.copytree(src, dest)
    weights = mx.load(str(dest / "model.safetensors"))
    mx.save_safetensors(
        str(dest / "model.safetensors"),
        {k: v.astype(dtype) for k, v in weights.items()},
        metadata={"format": "mlx"},
    )
    return dest


@pytest.fixture(scope="module")
def bf16_dir(tiny_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _half_copy(tiny_llama_dir, tmp_path_factory.mktemp("bf16") / "m", mx.bfloat16)


@pytest.fixture(scope="module")
def q4_dir(bf16_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bf16 model quantized to 4 bits (groups of 32; bfloat16 scales and biases)."""
    from omlx.mlx_lm_compat import load

    model, _ = load(str(bf16_dir))  # as stored (the engine's load swaps layouts on a CPU)
    nn.quantize(model, group_size=32, bits=4)
    dest = tmp_path_factory.mktemp("q4") / "m"
    shutil.copytree(bf16_dir, dest)
    mx.save_safetensors(
        str(dest / "model.safetensors"),
        dict(tree_flatten(model.parameters())),
        metadata={"format": "mlx"},
    )
    config = json.loads((dest / "config.json").read_text())
    config["quantization"] = {"group_size": 32, "bits": 4}
    (dest / "config.json").write_text(json.dumps(config))
    return dest


def _cast_by_hand(folder: Path) -> nn.Module:
    """The stored model with every half-precision parameter cast to float32 in one go,
    float32 linears then laid out as the engine keeps them on a CPU."""
    from omlx.platform.weight_layout import use_input_major_linears

    model = load_text_model("tiny", folder, cpu_float32="off").model
    half = [(k, v) for k, v in tree_flatten(model.parameters()) if v.dtype == mx.bfloat16]
    model.update(tree_unflatten([(k, v.astype(mx.float32)) for k, v in half]))
    use_input_major_linears(model)
    return model


def _same_picks(logits: mx.array, half: mx.array) -> None:
    """Computing in bfloat16 only rounds more: the same model picks (nearly) the same."""
    agree = (mx.argmax(logits[0], -1) == mx.argmax(half[0], -1)).mean().item()
    assert agree >= 0.8, agree


def _dtypes(model: nn.Module) -> dict[str, mx.Dtype]:
    return {k: v.dtype for k, v in tree_flatten(model.parameters())}


def test_bfloat16_weights_are_computed_in_float32(bf16_dir: Path) -> None:
    kept = load_text_model("tiny", bf16_dir, cpu_float32="off")
    cast = load_text_model("tiny", bf16_dir, cpu_float32="auto")
    assert set(_dtypes(kept.model).values()) == {mx.bfloat16}
    assert set(_dtypes(cast.model).values()) == {mx.float32}
    assert cast.weight_bytes == 2 * kept.weight_bytes  # the pool sees what it holds
    # The same values, now in float32: exactly what casting the bf16 model by hand gives.
    logits = cast.model(PROMPT)
    assert logits.dtype == mx.float32
    assert mx.array_equal(logits, _cast_by_hand(bf16_dir)(PROMPT)).item()
    _same_picks(logits, kept.model(PROMPT))


def _ram(monkeypatch: pytest.MonkeyPatch, ram_bytes: int) -> None:
    import omlx.platform.memory as memory

    monkeypatch.setattr(memory, "system_memory_bytes", lambda: ram_bytes)


def test_a_quantized_model_too_big_to_dequantize_keeps_its_packed_weights(
    q4_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = load_text_model("tiny", q4_dir, cpu_float32="off")
    total = sum(v.nbytes for _, v in tree_flatten(kept.model.parameters()))
    _ram(monkeypatch, 8 * total)  # the cast fits a quarter of it, float32 weights do not
    cast = load_text_model("tiny", q4_dir, cpu_float32="on")
    before, after = _dtypes(kept.model), _dtypes(cast.model)
    packed = [k for k, d in before.items() if d == mx.uint32]
    assert packed and all(after[k] == mx.uint32 for k in packed)
    assert all(d == mx.float32 for k, d in after.items() if k not in packed)
    assert any(k.endswith(".scales") for k in after)
    logits = cast.model(PROMPT)
    assert logits.dtype == mx.float32
    assert mx.array_equal(logits, _cast_by_hand(q4_dir)(PROMPT)).item()
    _same_picks(logits, kept.model(PROMPT))


def _param_bytes(model: nn.Module) -> int:
    return sum(v.nbytes for _, v in tree_flatten(model.parameters()))


def test_auto_casts_only_what_fits_a_quarter_of_the_ram(bf16_dir: Path) -> None:
    model = load_text_model("tiny", bf16_dir, cpu_float32="off").model
    cast = float32_bytes(model, dequantize=False)
    assert cast == 2 * _param_bytes(model)  # every parameter is bfloat16
    assert float32_plan("auto", model, ram_bytes=4 * cast) == (True, False)
    assert float32_plan("auto", model, ram_bytes=4 * cast - 1) == (False, False)
    assert float32_plan("on", model, ram_bytes=1) == (True, False)
    assert float32_plan("off", model, ram_bytes=1 << 40) == (False, False)
    assert float32_plan("on", model, device=mx.Device(mx.gpu)) == (False, False)  # CPU only


def test_a_float32_model_is_left_alone(tiny_llama_dir: Path) -> None:
    model = load_text_model("tiny", tiny_llama_dir, cpu_float32="off").model
    assert float32_bytes(model, dequantize=False) == _param_bytes(model)
    assert float32_plan("on", model) == (False, False)


@pytest.mark.parametrize(("value", "expect"), [("auto", mx.float32), ("off", mx.bfloat16)])
def test_the_engine_setting_reaches_the_load(bf16_dir: Path, value: str, expect) -> None:
    loaded = MLXBackend(EngineSettings(cpu_float32=value)).load("tiny", bf16_dir)
    assert set(_dtypes(loaded.model).values()) == {expect}


def test_half_precision_weights_keep_mlx_layout_when_not_cast(bf16_dir: Path) -> None:
    from omlx.platform.weight_layout import InputMajorLinear

    kept = load_text_model("tiny", bf16_dir, cpu_float32="off").model
    cast = load_text_model("tiny", bf16_dir, cpu_float32="auto").model
    assert not [m for _, m in kept.named_modules() if isinstance(m, InputMajorLinear)]
    assert [m for _, m in cast.named_modules() if isinstance(m, InputMajorLinear)]


def test_arrays_kept_in_a_list_are_cast_too() -> None:
    from omlx.platform.cpu_precision import upcast_half_parameters

    class Mixer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(8, 8)
            self.gains = [mx.ones((8,)), mx.ones((8,))]  # arrays in a list, no module

    model = Mixer()
    model.set_dtype(mx.bfloat16)
    total = sum(v.nbytes for _, v in tree_flatten(model.parameters()))
    assert upcast_half_parameters(model) == total  # each bfloat16 value grows by its size
    assert set(_dtypes(model).values()) == {mx.float32}


def test_a_quantized_model_that_fits_is_dequantized(q4_dir: Path) -> None:
    from omlx.pool.memory_budget import LOAD_OVERHEAD, estimate_model_bytes

    kept = load_text_model("tiny", q4_dir, cpu_float32="off")
    dense = load_text_model("tiny", q4_dir, cpu_float32="auto")
    assert not [m for _, m in dense.model.named_modules() if "Quantized" in type(m).__name__]
    assert set(_dtypes(dense.model).values()) == {mx.float32}
    # The same values: what the quantized layers computed with float32 scales.
    logits = dense.model(PROMPT)
    reference = _cast_by_hand(q4_dir)(PROMPT)
    assert mx.allclose(logits, reference, atol=1e-4, rtol=1e-4).item()
    assert mx.array_equal(mx.argmax(logits, -1), mx.argmax(reference, -1)).item()
    _same_picks(logits, kept.model(PROMPT))
    # The pool's estimate before the load, from the files' headers, is what it holds.
    assert estimate_model_bytes(q4_dir, cpu_float32="auto") == int(
        dense.weight_bytes * LOAD_OVERHEAD
    )
    assert estimate_model_bytes(q4_dir) < estimate_model_bytes(q4_dir, cpu_float32="auto")


@pytest.mark.parametrize("bits", [3, 4, 6, 8])
def test_the_dequantized_size_is_exact_for_any_width(bits: int, tmp_path: Path) -> None:
    """What the loader plans and what the pool reads from the files before the load both
    equal what dequantizing holds (a layer's own bias kept, scales and biases gone)."""
    from omlx.platform.cpu_precision import dequantize_layers, float32_bytes
    from omlx.pool.weight_headers import dequantized_bytes

    model = nn.Sequential(nn.Linear(64, 96, bias=False), nn.Linear(96, 64))
    nn.quantize(model, group_size=32, bits=bits)
    files = [tmp_path / "model.safetensors"]
    mx.save_safetensors(str(files[0]), dict(tree_flatten(model.parameters())))
    (tmp_path / "config.json").write_text(json.dumps({"quantization": {"bits": bits}}))
    expected = float32_bytes(model, dequantize=True)
    assert dequantized_bytes(tmp_path, files) == expected
    assert dequantize_layers(model) == 2
    assert expected == sum(v.nbytes for _, v in tree_flatten(model.parameters()))
