"""A small BERT encoder in MLX: sentence embeddings and cross-encoder scoring.

Module names mirror Hugging Face's `BertModel` / `BertForSequenceClassification` (and
the RoBERTa/XLM-R variants) so safetensors load without renaming beyond the `bert.` /
`roberta.` prefix. Checked against a float64 numpy forward of the same weights and
against sentence-transformers' published all-MiniLM-L6-v2 similarities.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import mlx.nn as nn

ROBERTA_TYPES = frozenset({"roberta", "xlm-roberta", "camembert"})


@dataclass(frozen=True, slots=True)
class BertConfig:
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    hidden_act: str = "gelu"
    pad_token_id: int = 0
    num_labels: int = 0  # > 0: a sequence-classification head
    is_roberta: bool = False

    @classmethod
    def from_dict(cls, config: dict[str, Any], *, with_head: bool) -> BertConfig:
        num_labels = 0
        if with_head:
            labels = config.get("id2label") or {}
            num_labels = int(config.get("num_labels") or len(labels) or 1)
        return cls(
            vocab_size=config["vocab_size"],
            hidden_size=config["hidden_size"],
            num_hidden_layers=config["num_hidden_layers"],
            num_attention_heads=config["num_attention_heads"],
            intermediate_size=config["intermediate_size"],
            max_position_embeddings=config.get("max_position_embeddings", 512),
            type_vocab_size=config.get("type_vocab_size", 2),
            layer_norm_eps=config.get("layer_norm_eps", 1e-12),
            hidden_act=config.get("hidden_act", "gelu"),
            pad_token_id=config.get("pad_token_id", 0) or 0,
            num_labels=num_labels,
            is_roberta=str(config.get("model_type", "")) in ROBERTA_TYPES,
        )

    @property
    def max_tokens(self) -> int:
        # RoBERTa positions start after the padding index.
        offset = self.pad_token_id + 1 if self.is_roberta else 0
        return self.max_position_embeddings - offset


def _activation(name: str) -> Any:
    if name in ("gelu_new", "gelu_pytorch_tanh", "gelu_fast"):
        return nn.gelu_approx
    return {"relu": nn.relu, "silu": nn.silu, "swish": nn.silu}.get(name, nn.gelu)


class Embeddings(nn.Module):
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(c.vocab_size, c.hidden_size)
        self.position_embeddings = nn.Embedding(c.max_position_embeddings, c.hidden_size)
        self.token_type_embeddings = nn.Embedding(max(c.type_vocab_size, 1), c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self._offset = c.pad_token_id + 1 if c.is_roberta else 0

    def __call__(self, ids: mx.array, type_ids: mx.array, mask: mx.array) -> mx.array:
        if self._offset:  # RoBERTa numbers real tokens from pad+1; padding keeps pad_id
            positions = mx.cumsum(mask, axis=1) * mask + (self._offset - 1)
        else:
            positions = mx.broadcast_to(mx.arange(ids.shape[1]), ids.shape)
        x = (
            self.word_embeddings(ids)
            + self.position_embeddings(positions.astype(mx.int32))
            + self.token_type_embeddings(type_ids)
        )
        return self.LayerNorm(x)


class SelfAttention(nn.Module):
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.num_heads = c.num_attention_heads
        self.query = nn.Linear(c.hidden_size, c.hidden_size)
        self.key = nn.Linear(c.hidden_size, c.hidden_size)
        self.value = nn.Linear(c.hidden_size, c.hidden_size)
        self._attend = mx.fast.scaled_dot_product_attention  # bert_cpu.py swaps it on a CPU

    def __call__(self, x: mx.array, bias: mx.array) -> mx.array:
        b, n, d = x.shape
        h = self.num_heads

        def heads(t: mx.array) -> mx.array:
            return t.reshape(b, n, h, d // h).transpose(0, 2, 1, 3)

        q, k, v = heads(self.query(x)), heads(self.key(x)), heads(self.value(x))
        out = self._attend(q, k, v, scale=1 / math.sqrt(d // h), mask=bias)
        return out.transpose(0, 2, 1, 3).reshape(b, n, d)


class DenseNorm(nn.Module):
    """`dense` then residual LayerNorm: BERT's attention-output and output blocks."""

    def __init__(self, d_in: int, d_out: int, eps: float) -> None:
        super().__init__()
        self.dense = nn.Linear(d_in, d_out)
        self.LayerNorm = nn.LayerNorm(d_out, eps=eps)

    def __call__(self, x: mx.array, residual: mx.array) -> mx.array:
        return self.LayerNorm(self.dense(x) + residual)


class Attention(nn.Module):
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.self = SelfAttention(c)
        self.output = DenseNorm(c.hidden_size, c.hidden_size, c.layer_norm_eps)

    def __call__(self, x: mx.array, bias: mx.array) -> mx.array:
        return self.output(self.self(x, bias), x)


class Intermediate(nn.Module):
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.intermediate_size)
        self._act = _activation(c.hidden_act)

    def __call__(self, x: mx.array) -> mx.array:
        return self._act(self.dense(x))


class Layer(nn.Module):
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.attention = Attention(c)
        self.intermediate = Intermediate(c)
        self.output = DenseNorm(c.intermediate_size, c.hidden_size, c.layer_norm_eps)

    def __call__(self, x: mx.array, bias: mx.array) -> mx.array:
        x = self.attention(x, bias)
        return self.output(self.intermediate(x), x)


class Encoder(nn.Module):
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.layer = [Layer(c) for _ in range(c.num_hidden_layers)]

    def __call__(self, x: mx.array, bias: mx.array) -> mx.array:
        for layer in self.layer:
            x = layer(x, bias)
        return x


class Pooler(nn.Module):
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.hidden_size)

    def __call__(self, hidden: mx.array) -> mx.array:
        return mx.tanh(self.dense(hidden[:, 0]))


class RobertaHead(nn.Module):
    """RoBERTa's classification head: dense + tanh + out_proj on the first token."""

    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.hidden_size)
        self.out_proj = nn.Linear(c.hidden_size, c.num_labels)

    def __call__(self, hidden: mx.array) -> mx.array:
        return self.out_proj(mx.tanh(self.dense(hidden[:, 0])))


class BertModel(nn.Module):
    """Encoder (+ optional classification head); `__call__` returns hidden states."""

    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.config = c
        self.embeddings = Embeddings(c)
        self.encoder = Encoder(c)
        if c.num_labels and c.is_roberta:
            self.classifier = RobertaHead(c)
        elif c.num_labels:
            self.pooler = Pooler(c)
            self.classifier = nn.Linear(c.hidden_size, c.num_labels)

    def __call__(self, ids: mx.array, mask: mx.array, type_ids: mx.array | None = None) -> mx.array:
        if type_ids is None:
            type_ids = mx.zeros_like(ids)
        # Padding keys get -inf-like bias so real tokens never attend to them.
        bias = ((1 - mask[:, None, None, :].astype(mx.float32)) * -1e9).astype(
            self.embeddings.word_embeddings.weight.dtype
        )
        return self.encoder(self.embeddings(ids, type_ids, mask), bias)

    def classify(self, ids: mx.array, mask: mx.array, type_ids: mx.array | None = None) -> mx.array:
        """Sequence-classification logits, shape (batch, num_labels)."""
        hidden = self(ids, mask, type_ids)
        if self.config.is_roberta:
            return self.classifier(hidden)
        return self.classifier(self.pooler(hidden))

    def sanitize(self, weights: dict[str, mx.array]) -> dict[str, mx.array]:
        """Drop the HF prefix, buffers, and the pooler unless the BERT head uses it."""
        with_head = bool(self.config.num_labels)
        keep_pooler = with_head and not self.config.is_roberta
        out: dict[str, mx.array] = {}
        for key, value in weights.items():
            for prefix in ("bert.", "roberta.", "model."):
                if key.startswith(prefix):
                    key = key[len(prefix) :]
            if key.endswith("position_ids") or (not keep_pooler and key.startswith("pooler.")):
                continue
            if key.startswith(("lm_head.", "cls.")) or (
                not with_head and key.startswith("classifier.")
            ):
                continue
            out[key] = value
        return out
