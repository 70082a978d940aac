"""Rerankers on the model's thread (MLX): cross-encoders and causal-LM yes/no judges.

A cross-encoder (`*ForSequenceClassification`, BERT or RoBERTa family) reads
`[CLS] query [SEP] document [SEP]` and its logit is the relevance. A causal-LM reranker
(Qwen3-Reranker style, or any chat model) is asked whether the document answers the
query; the score is P(yes) from the "yes" and "no" logits at the last position.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
from mlx.utils import tree_flatten

from omlx.errors import ImportFailed, InvalidRequest
from omlx.platform.cpu_precision import compute_in_float32
from omlx.platform.device import on_gpu
from omlx.workers.bert import BertModel
from omlx.workers.embeddings import BERT_TYPES, load_bert, read_json
from omlx.workers.encoder_batches import CPU_BATCH_TOKENS, batches, by_length
from omlx.workers.encoder_tokenizer import EncoderTokenizer

log = logging.getLogger(__name__)

BATCH_SIZE = 16
CAUSAL_BATCH_SIZE = 4
DEFAULT_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
JUDGE_SYSTEM = (
    "Judge whether the Document meets the requirements based on the Query and the Instruct "
    'provided. Note that the answer can only be "yes" or "no".'
)
YES_WORDS = ("yes", "Yes", " yes", " Yes", "YES")
NO_WORDS = ("no", "No", " no", " No", "NO")


@dataclass(slots=True)
class CrossEncoder:
    name: str
    model: BertModel
    tokenizer: EncoderTokenizer
    weight_bytes: int
    batch_tokens: int | None = None  # padded tokens a forward pass (encoder_batches.py)


@dataclass(slots=True)
class CausalReranker:
    name: str
    model: Any  # an mlx-lm model
    tokenizer: Any  # mlx-lm TokenizerWrapper
    weight_bytes: int


def load_reranker(
    name: str, path: Path, *, cpu_float32: str = "off", cpu_attention: str = "auto"
) -> CrossEncoder | CausalReranker:
    config = read_json(path / "config.json")
    archs = config.get("architectures") or [""]
    if str(archs[0]).endswith("ForSequenceClassification"):
        if config.get("model_type") not in BERT_TYPES:
            raise ImportFailed(
                f"reranker {name!r}: {archs[0]} is not supported (BERT/RoBERTa cross-encoders are)"
            )
        model = load_bert(path, config, with_head=True, cpu_attention=cpu_attention)
        compute_in_float32(model, cpu_float32, name)
        tokenizer = EncoderTokenizer.from_folder(path, model.config.max_tokens)
        batch_tokens = None if on_gpu() else CPU_BATCH_TOKENS
        return CrossEncoder(name, model, tokenizer, _param_bytes(model), batch_tokens)
    from omlx.mlx_lm_compat import load

    try:
        model, tokenizer = load(str(path))
    except (FileNotFoundError, ValueError) as e:
        raise ImportFailed(f"cannot load reranker {name!r} from {path}: {e}") from e
    compute_in_float32(model, cpu_float32, name)
    return CausalReranker(name, model, tokenizer, _param_bytes(model))


def _param_bytes(model: Any) -> int:
    return sum(v.nbytes for _, v in tree_flatten(model.parameters()))


def rerank(
    m: CrossEncoder | CausalReranker, query: str, documents: list[str], instruction: str | None
) -> tuple[list[float], int]:
    """Relevance in [0, 1] per document (input order) and the tokens read."""
    if isinstance(m, CrossEncoder):
        return _cross_encode(m, query, documents)
    return rerank_with_causal_lm((m.model, m.tokenizer), query, documents, instruction)


def _cross_encode(m: CrossEncoder, query: str, documents: list[str]) -> tuple[list[float], int]:
    pairs = [m.tokenizer.encode_pair(query, d) for d in documents]
    lengths = [len(p[0]) for p in pairs]
    scores = [0.0] * len(pairs)
    for rows in batches(lengths, by_length(lengths), BATCH_SIZE, m.batch_tokens):
        chunk = [pairs[i] for i in rows]
        ids, mask = m.tokenizer.pad([p[0] for p in chunk])
        types, _ = m.tokenizer.pad([p[1] for p in chunk])
        logits = m.model.classify(mx.array(ids), mx.array(mask), mx.array(types))
        logits = logits.astype(mx.float32)
        # One logit: sigmoid (ms-marco, bge); two classes: P(relevant) = softmax[1].
        probs = mx.sigmoid(logits[:, 0]) if logits.shape[1] == 1 else mx.softmax(logits, -1)[:, 1]
        mx.eval(probs)
        for i, p in zip(rows, probs.tolist(), strict=True):
            scores[i] = p
    return scores, sum(lengths)


def judge_prompt(tokenizer: Any, query: str, document: str, instruction: str | None) -> list[int]:
    """Token ids asking the model whether `document` meets `query`, ending where it answers."""
    user = (
        f"<Instruct>: {instruction or DEFAULT_INSTRUCTION}\n<Query>: {query}\n"
        f"<Document>: {document}"
    )
    messages = [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": user}]
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        if "<think>" in (tokenizer.chat_template or ""):  # Qwen3: answer without thinking
            text += "<think>\n\n</think>\n\n"
    else:
        text = f"{JUDGE_SYSTEM}\n\n{user}\n\nAnswer (yes or no):"
    return list(tokenizer.encode(text, add_special_tokens=False))


def answer_ids(tokenizer: Any, words: tuple[str, ...]) -> list[int]:
    """Ids of the words that are a single token (the model's possible first answer token)."""
    ids: set[int] = set()
    for w in words:
        enc = tokenizer.encode(w, add_special_tokens=False)
        if len(enc) == 1:
            ids.add(int(enc[0]))
    return sorted(ids)


def rerank_with_causal_lm(
    model_and_tokenizer: tuple[Any, Any],
    query: str,
    documents: list[str],
    instruction: str | None = None,
) -> tuple[list[float], int]:
    """P(yes) per document from one forward pass each (right-padded batches)."""
    model, tokenizer = model_and_tokenizer
    yes, no = answer_ids(tokenizer, YES_WORDS), answer_ids(tokenizer, NO_WORDS)
    if not yes or not no:
        raise InvalidRequest("this model's tokenizer has no single-token yes/no", param="model")
    prompts = [judge_prompt(tokenizer, query, d, instruction) for d in documents]
    scores: list[float] = []
    for start in range(0, len(prompts), CAUSAL_BATCH_SIZE):
        chunk = prompts[start : start + CAUSAL_BATCH_SIZE]
        width = max(len(p) for p in chunk)
        # Right padding is harmless under a causal mask: real tokens never see it.
        ids = mx.array([p + [p[-1]] * (width - len(p)) for p in chunk])
        logits = model(ids)
        last = logits[mx.arange(len(chunk)), mx.array([len(p) - 1 for p in chunk])]
        last = last.astype(mx.float32)
        lse_yes = mx.logsumexp(last[:, mx.array(yes)], axis=-1)
        lse_no = mx.logsumexp(last[:, mx.array(no)], axis=-1)
        probs = mx.sigmoid(lse_yes - lse_no)  # = softmax over {yes, no}
        mx.eval(probs)
        scores.extend(probs.tolist())
    return scores, sum(len(p) for p in prompts)
