"""Sentence embeddings on the worker thread: load, tokenize, batch, pool, normalise (MLX).

BERT-family encoders run on omlx's own BERT (omlx/workers/bert.py); other encoder
families go through mlx-embeddings and share the pooling here. Pooling and
normalisation follow the sentence-transformers files beside the weights.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
from mlx.utils import tree_flatten

from omlx.errors import ImportFailed, InvalidRequest
from omlx.platform.cpu_precision import compute_in_float32
from omlx.platform.device import on_gpu
from omlx.workers.bert import BertConfig, BertModel
from omlx.workers.bert_cpu import use_cpu_paths
from omlx.workers.encoder_batches import CPU_BATCH_TOKENS, batches, by_length
from omlx.workers.encoder_tokenizer import EncoderTokenizer
from omlx.workers.extras import EMBEDDINGS, require

log = logging.getLogger(__name__)

BATCH_SIZE = 32
BERT_TYPES = frozenset({"bert", "roberta", "xlm-roberta", "camembert"})


@dataclass(slots=True)
class EmbeddingModel:
    name: str
    model: Any  # BertModel or an mlx-embeddings model
    tokenizer: EncoderTokenizer
    pooling: str  # mean | cls | max | lasttoken
    normalize: bool
    dimensions: int
    is_matryoshka: bool  # trained so that leading dimensions work alone
    weight_bytes: int
    is_own_bert: bool = True
    batch_tokens: int | None = None  # padded tokens a forward pass (encoder_batches.py)

    @property
    def max_tokens(self) -> int:
        return self.tokenizer.max_tokens


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def load_bert(
    path: Path, config: dict[str, Any], *, with_head: bool, cpu_attention: str = "off"
) -> BertModel:
    """Our BERT from config.json + safetensors; every weight must match (strict).
    `cpu_attention` (engine.cpu_prefill_attention): "auto" takes bert_cpu.py's paths on a
    CPU."""
    model = BertModel(BertConfig.from_dict(config, with_head=with_head))
    weights: dict[str, mx.array] = {}
    for f in sorted(path.glob("*.safetensors")):
        weights.update(mx.load(str(f)))
    weights = model.sanitize(weights)
    dtype = next(iter(weights.values())).dtype if weights else mx.float32
    if dtype not in (mx.float32, mx.float16, mx.bfloat16):
        dtype = mx.float32
    model.set_dtype(dtype)
    try:
        model.load_weights(list(weights.items()), strict=True)
    except ValueError as e:
        raise ImportFailed(f"{path}: weights do not match the BERT config: {e}") from e
    mx.eval(model.parameters())
    if cpu_attention == "auto" and not on_gpu():
        use_cpu_paths(model)
    return model


def _pooling(path: Path) -> tuple[str, bool]:
    """(pooling mode, normalise?) from sentence-transformers' modules.json and Pooling config."""
    modules_file = path / "modules.json"
    if not modules_file.is_file():
        return "mean", True
    try:
        modules = json.loads(modules_file.read_text())
    except (OSError, json.JSONDecodeError):
        modules = []
    pooling, normalize = "mean", False
    for module in modules if isinstance(modules, list) else []:
        kind = str(module.get("type", ""))
        if kind.endswith("Pooling"):
            cfg = read_json(path / module.get("path", "") / "config.json")
            for mode in ("cls", "max", "lasttoken", "mean"):
                if cfg.get(f"pooling_mode_{mode}_token") or cfg.get(f"pooling_mode_{mode}_tokens"):
                    pooling = mode
                    break
        elif kind.endswith("Normalize"):
            normalize = True
    return pooling, normalize


def _is_matryoshka(path: Path, config: dict[str, Any]) -> bool:
    """Model cards of Matryoshka-trained models say so; configs rarely do."""
    if config.get("matryoshka_dimensions"):
        return True
    readme = path / "README.md"
    try:
        return readme.is_file() and "matryoshka" in readme.read_text(errors="ignore").lower()
    except OSError:
        return False


def load_embedding_model(
    name: str, path: Path, *, cpu_float32: str = "off", cpu_attention: str = "auto"
) -> EmbeddingModel:
    config = read_json(path / "config.json")
    model_type = str(config.get("model_type", ""))
    max_seq = read_json(path / "sentence_bert_config.json").get("max_seq_length")
    pooling, normalize = _pooling(path)
    if model_type in BERT_TYPES:
        model: Any = load_bert(path, config, with_head=False, cpu_attention=cpu_attention)
        limit = model.config.max_tokens
        own = True
    else:
        model = _load_with_mlx_embeddings(name, path)
        limit = int(config.get("max_position_embeddings") or 512)
        own = False
    compute_in_float32(model, cpu_float32, name)
    tokenizer = EncoderTokenizer.from_folder(path, min(limit, int(max_seq or limit)))
    weight_bytes = sum(v.nbytes for _, v in tree_flatten(model.parameters()))
    dims = int(config.get("hidden_size") or 0)
    log.info("loaded embedding model %s (%s pooling, %d dims)", name, pooling, dims)
    return EmbeddingModel(
        name,
        model,
        tokenizer,
        pooling,
        normalize,
        dims,
        _is_matryoshka(path, config),
        weight_bytes,
        own,
        None if on_gpu() else CPU_BATCH_TOKENS,
    )


def _load_with_mlx_embeddings(name: str, path: Path) -> Any:
    require(EMBEDDINGS, name)
    try:
        from mlx_embeddings.utils import load_model
    except ImportError as e:
        raise ImportFailed(f"model {name!r} needs mlx-embeddings: {e}") from e
    try:
        return load_model(path)
    except Exception as e:
        raise ImportFailed(f"cannot load embedding model {name!r} from {path}: {e}") from e


def embed(
    m: EmbeddingModel,
    inputs: list[str] | list[list[int]],
    dimensions: int | None = None,
    truncate: bool = False,
) -> tuple[list[list[float]], int, int]:
    """Embeddings in input order, the number of tokens read and of inputs cut."""
    if dimensions is not None and dimensions != m.dimensions:
        if not m.is_matryoshka:
            raise InvalidRequest(
                f"model {m.name!r} does not support `dimensions` (its embeddings have "
                f"{m.dimensions}; only Matryoshka-trained models can be shortened)",
                param="dimensions",
            )
        if not 0 < dimensions <= m.dimensions:
            raise InvalidRequest(
                f"dimensions must be between 1 and {m.dimensions}", param="dimensions"
            )
    seqs: list[list[int]] = []
    num_truncated = 0
    for i, x in enumerate(inputs):
        if isinstance(x, str):
            ids, was_cut = m.tokenizer.encode(x, truncate=truncate, index=i)
            num_truncated += was_cut
        else:
            ids = m.tokenizer.check_ids(x)
        seqs.append(ids)
    lengths = [len(s) for s in seqs]
    out: list[list[float]] = [[] for _ in seqs]
    for chunk in batches(lengths, by_length(lengths), BATCH_SIZE, m.batch_tokens):
        vectors = _embed_batch(m, [seqs[i] for i in chunk], dimensions)
        for i, vec in zip(chunk, vectors, strict=True):
            out[i] = vec
    return out, sum(len(s) for s in seqs), num_truncated


def _embed_batch(
    m: EmbeddingModel, seqs: list[list[int]], dimensions: int | None
) -> list[list[float]]:
    ids, mask = m.tokenizer.pad(seqs)
    ids_a, mask_a = mx.array(ids), mx.array(mask)
    if m.is_own_bert:
        hidden = m.model(ids_a, mask_a)
    else:
        hidden = m.model(ids_a, attention_mask=mask_a).last_hidden_state
    vectors = pool(hidden.astype(mx.float32), mask_a, m.pooling)
    if m.normalize or (dimensions and dimensions != m.dimensions):
        vectors = _l2_normalize(vectors)
    if dimensions and dimensions != m.dimensions:
        # Matryoshka: keep the leading dimensions, then renormalise to unit length.
        vectors = _l2_normalize(vectors[:, :dimensions])
    mx.eval(vectors)
    return vectors.tolist()


def pool(hidden: mx.array, mask: mx.array, mode: str) -> mx.array:
    """(batch, tokens, dim) -> (batch, dim), ignoring padding."""
    m = mask.astype(hidden.dtype)[..., None]
    if mode == "cls":
        return hidden[:, 0]
    if mode == "max":
        return mx.max(mx.where(m > 0, hidden, -1e9), axis=1)
    if mode == "lasttoken":  # right padding: the last real token of each row
        last = mask.sum(axis=1).astype(mx.int32) - 1
        return hidden[mx.arange(hidden.shape[0]), last]
    return (hidden * m).sum(axis=1) / mx.maximum(m.sum(axis=1), 1e-9)


def _l2_normalize(x: mx.array) -> mx.array:
    return x / mx.maximum(mx.linalg.norm(x, axis=-1, keepdims=True), 1e-12)
