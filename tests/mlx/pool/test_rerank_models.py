"""Rerankers: a tiny cross-encoder vs a numpy forward, a tiny Qwen3-style yes/no, SmolLM2."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from omlx.models.types import ModelType, inspect_model
from omlx.workers.rerank import CausalReranker, CrossEncoder, load_reranker, rerank

pytestmark = pytest.mark.timeout(180)


def numpy_cross_encoder(path: Path, ids: list[int], type_ids: list[int]) -> float:
    """BERT-for-sequence-classification forward in float64: the reference."""
    w = {
        k.removeprefix("bert."): v.astype(np.float64)
        for k, v in load_file(str(path / "model.safetensors")).items()
    }
    cfg = json.loads((path / "config.json").read_text())
    n, heads = len(ids), cfg["num_attention_heads"]

    def ln(x: np.ndarray, name: str) -> np.ndarray:
        m, v = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - m) / np.sqrt(v + cfg["layer_norm_eps"]) * w[f"{name}.weight"] + w[
            f"{name}.bias"
        ]

    def lin(x: np.ndarray, name: str) -> np.ndarray:
        return x @ w[f"{name}.weight"].T + w[f"{name}.bias"]

    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n]
    x = ln(x + w["embeddings.token_type_embeddings.weight"][type_ids], "embeddings.LayerNorm")
    d = x.shape[1] // heads
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        q, k, v = (
            lin(x, p + f"attention.self.{t}").reshape(n, heads, d).transpose(1, 0, 2)
            for t in ("query", "key", "value")
        )
        s = q @ k.transpose(0, 2, 1) / math.sqrt(d)
        s = np.exp(s - s.max(-1, keepdims=True))
        a = ((s / s.sum(-1, keepdims=True)) @ v).transpose(1, 0, 2).reshape(n, -1)
        x = ln(x + lin(a, p + "attention.output.dense"), p + "attention.output.LayerNorm")
        h = lin(x, p + "intermediate.dense")
        h = 0.5 * h * (1 + np.vectorize(math.erf)(h / math.sqrt(2)))
        x = ln(x + lin(h, p + "output.dense"), p + "output.LayerNorm")
    pooled = np.tanh(lin(x[0], "pooler.dense"))
    return float(1 / (1 + np.exp(-lin(pooled, "classifier")[0])))


def test_cross_encoder_matches_numpy_reference(tiny_cross_encoder_dir: Path) -> None:
    assert inspect_model(tiny_cross_encoder_dir).type == ModelType.RERANKER
    m = load_reranker("ce", tiny_cross_encoder_dir)
    assert isinstance(m, CrossEncoder)
    docs = ["a short one", "a much longer document about cats and dogs and the weather", "x"]
    scores, num_tokens = rerank(m, "pets at home", docs, None)
    for doc, score in zip(docs, scores, strict=True):
        ids, types = m.tokenizer.encode_pair("pets at home", doc)
        assert 1 in types  # the document is segment B
        assert score == pytest.approx(
            numpy_cross_encoder(tiny_cross_encoder_dir, ids, types), abs=1e-4
        )
    assert num_tokens > 20
    # batched with padding == one at a time
    singles = [rerank(m, "pets at home", [d], None)[0][0] for d in docs]
    assert scores == pytest.approx(singles, abs=1e-5)


@pytest.fixture(scope="module")
def tiny_qwen3_reranker(tmp_path_factory: pytest.TempPathFactory, tiny_qwen3_dir: Path) -> Path:
    dest = tmp_path_factory.mktemp("qr") / "tiny-Qwen3-Reranker"
    shutil.copytree(tiny_qwen3_dir, dest)
    return dest


def test_qwen3_style_yes_no_reranker(tiny_qwen3_reranker: Path) -> None:
    assert inspect_model(tiny_qwen3_reranker).type == ModelType.RERANKER  # by its name
    m = load_reranker("qr", tiny_qwen3_reranker)
    assert isinstance(m, CausalReranker)
    docs = ["Paris is the capital of France.", "Bananas are yellow.", "?"]
    scores, _ = rerank(m, "capital of France", docs, None)
    assert len(scores) == 3 and all(0 < s < 1 for s in scores)
    singles = [rerank(m, "capital of France", [d], None)[0][0] for d in docs]
    assert scores == pytest.approx(singles, abs=1e-4)  # right padding changes nothing
    # the score is softmax over the yes/no logits at the end of the judge prompt
    import mlx.core as mx

    from omlx.workers.rerank import NO_WORDS, YES_WORDS, answer_ids, judge_prompt

    ids = judge_prompt(m.tokenizer, "capital of France", docs[0], None)
    # Qwen3-Reranker's prompt: the answer follows an empty thinking block
    assert m.tokenizer.decode(ids).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    logits = m.model(mx.array([ids]))[0, -1].astype(mx.float32)
    yes = [float(logits[i].item()) for i in answer_ids(m.tokenizer, YES_WORDS)]
    no = [float(logits[i].item()) for i in answer_ids(m.tokenizer, NO_WORDS)]
    lse = lambda xs: math.log(sum(math.exp(x) for x in xs))  # noqa: E731
    assert scores[0] == pytest.approx(1 / (1 + math.exp(lse(no) - lse(yes))), abs=1e-4)


def test_smollm2_yes_no_reranker_prefers_the_relevant_document(smollm2_dir: Path) -> None:
    from mlx_lm import load

    from omlx.workers.rerank import rerank_with_causal_lm

    model, tokenizer = load(str(smollm2_dir))
    docs = [
        "The Eiffel Tower is in Paris, the capital city of France.",
        "Bananas are rich in potassium and grow in tropical climates.",
    ]
    scores, _ = rerank_with_causal_lm((model, tokenizer), "What is the capital of France?", docs)
    assert scores[0] > scores[1], scores
