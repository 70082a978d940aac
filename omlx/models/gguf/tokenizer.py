"""Build tokenizer.json and tokenizer_config.json from a GGUF's tokenizer metadata."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers import processors as post
from tokenizers.models import BPE

from omlx.errors import ImportFailed

from .reader import GGUFModel

# llama.cpp token types (tokenizer.ggml.token_type).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

# GPT-2's split pattern; llama.cpp names pre-tokenizer variants in tokenizer.ggml.pre.
_GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


@dataclass(slots=True)
class SpecialTokens:
    bos: str | None
    eos: str | None
    unk: str | None
    pad: str | None
    bos_id: int | None
    eos_ids: list[int]
    pad_id: int | None


def _byte_level_pre_tokenizer(pre: str) -> pre_tokenizers.PreTokenizer:
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    if pre in ("smollm", "starcoder", "refact", "codeshell"):
        # One digit per token, then GPT-2 splitting.
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            ]
        )
    if pre in ("llama-bpe", "llama3", "smaug-bpe"):
        pattern = _LLAMA3_PATTERN
    elif pre in ("qwen2", "deepseek-r1-qwen"):
        pattern = _QWEN2_PATTERN
    elif pre in ("gpt2", "default", "gpt-2"):
        pattern = _GPT2_PATTERN
    else:
        raise ImportFailed(f"unsupported GGUF pre-tokenizer {pre!r} (tokenizer.ggml.pre)")
    split = pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False)
    return pre_tokenizers.Sequence([split, byte_level])


def _gpt2_tokenizer(meta: dict[str, Any], tokens: list[str]) -> Tokenizer:
    merges_raw = meta.get("tokenizer.ggml.merges")
    if not merges_raw:
        raise ImportFailed("GGUF gpt2 tokenizer has no tokenizer.ggml.merges")
    merges = [tuple(m.split(" ", 1)) for m in merges_raw]
    vocab = {tok: i for i, tok in enumerate(tokens)}
    tokenizer = Tokenizer(BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tokenizer.pre_tokenizer = _byte_level_pre_tokenizer(meta.get("tokenizer.ggml.pre", "default"))
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def _spm_merges(tokens: list[str], types: list[int], scores: list[float]) -> list[tuple[str, str]]:
    """Derive BPE merges from a SentencePiece vocabulary: a pair merges when the joined piece
    exists, ranked by that piece's score (SentencePiece BPE applies the best-scoring first)."""
    vocab = {tok: i for i, tok in enumerate(tokens) if types[i] == NORMAL}
    ranked: list[tuple[float, int, int, str, str]] = []
    for piece, piece_id in vocab.items():
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            left_id, right_id = vocab.get(left), vocab.get(right)
            if left_id is not None and right_id is not None:
                ranked.append((-scores[piece_id], piece_id, left_id, left, right))
    ranked.sort()
    return [(left, right) for _, _, _, left, right in ranked]


def _spm_tokenizer(meta: dict[str, Any], tokens: list[str], types: list[int]) -> Tokenizer:
    scores = meta.get("tokenizer.ggml.scores")
    if scores is None or len(scores) != len(tokens):
        raise ImportFailed("GGUF llama (SentencePiece) tokenizer has no tokenizer.ggml.scores")
    unk_id = meta.get("tokenizer.ggml.unknown_token_id")
    vocab = {tok: i for i, tok in enumerate(tokens)}
    model = BPE(
        vocab=vocab,
        merges=_spm_merges(tokens, types, list(scores)),
        unk_token=tokens[unk_id] if unk_id is not None else None,
        fuse_unk=True,
        byte_fallback=BYTE in types,
    )
    tokenizer = Tokenizer(model)
    norm: list[normalizers.Normalizer] = []
    if meta.get("tokenizer.ggml.add_space_prefix", True):
        norm.append(normalizers.Prepend("▁"))
    norm.append(normalizers.Replace(" ", "▁"))
    tokenizer.normalizer = normalizers.Sequence(norm)
    dec: list[decoders.Decoder] = [
        decoders.Replace("▁", " "),
        decoders.ByteFallback(),
        decoders.Fuse(),
    ]
    if meta.get("tokenizer.ggml.add_space_prefix", True):
        dec.append(decoders.Strip(" ", 1, 0))
    tokenizer.decoder = decoders.Sequence(dec)
    return tokenizer


def _token(tokens: list[str], meta: dict[str, Any], key: str) -> tuple[str | None, int | None]:
    idx = meta.get(f"tokenizer.ggml.{key}_token_id")
    if idx is None or not 0 <= int(idx) < len(tokens):
        return None, None
    return tokens[int(idx)], int(idx)


def special_tokens(model: GGUFModel) -> SpecialTokens:
    meta = model.metadata
    tokens = list(meta["tokenizer.ggml.tokens"])
    bos, bos_id = _token(tokens, meta, "bos")
    eos, eos_id = _token(tokens, meta, "eos")
    unk, _ = _token(tokens, meta, "unknown")
    pad, pad_id = _token(tokens, meta, "padding")
    _, eot_id = _token(tokens, meta, "eot")
    eos_ids = [i for i in (eos_id, eot_id) if i is not None]
    return SpecialTokens(bos, eos, unk, pad, bos_id, list(dict.fromkeys(eos_ids)), pad_id)


def _post_processor(
    special: SpecialTokens, add_bos: bool, add_eos: bool
) -> post.PostProcessor | None:
    if not (add_bos and special.bos) and not (add_eos and special.eos):
        return None
    pre = [special.bos] if add_bos and special.bos else []
    suf = [special.eos] if add_eos and special.eos else []
    single = " ".join([*pre, "$A", *suf])
    pair = " ".join([*pre, "$A", *suf, "$B:1", *suf])
    ids = {
        special.bos: special.bos_id,
        special.eos: special.eos_ids[0] if special.eos_ids else None,
    }
    return post.TemplateProcessing(
        single=single, pair=pair, special_tokens=[(t, i) for t, i in ids.items() if t in pre + suf]
    )


def write_tokenizer(model: GGUFModel, dest: Path) -> SpecialTokens:
    """Write tokenizer.json and tokenizer_config.json into dest; return the special tokens."""
    meta = model.metadata
    kind = meta.get("tokenizer.ggml.model")
    tokens = meta.get("tokenizer.ggml.tokens")
    if not tokens:
        raise ImportFailed("GGUF has no tokenizer (tokenizer.ggml.tokens)")
    tokens = list(tokens)
    types = [int(t) for t in meta.get("tokenizer.ggml.token_type", [NORMAL] * len(tokens))]
    if kind == "gpt2":
        tokenizer = _gpt2_tokenizer(meta, tokens)
    elif kind == "llama":
        tokenizer = _spm_tokenizer(meta, tokens, types)
    else:
        raise ImportFailed(f"unsupported GGUF tokenizer model {kind!r} (tokenizer.ggml.model)")
    special = special_tokens(model)
    # Control tokens are special; user-defined ones (e.g. Gemma's whitespace runs) match
    # the raw text before normalisation, as llama.cpp does.
    tokenizer.add_special_tokens(
        [
            AddedToken(t, special=True, normalized=False)
            for t, ty in zip(tokens, types, strict=True)
            if ty == CONTROL
        ]
    )
    tokenizer.add_tokens(
        [
            AddedToken(t, special=False, normalized=False)
            for t, ty in zip(tokens, types, strict=True)
            if ty == USER_DEFINED
        ]
    )
    add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", False))
    add_eos = bool(meta.get("tokenizer.ggml.add_eos_token", False))
    if (processor := _post_processor(special, add_bos, add_eos)) is not None:
        tokenizer.post_processor = processor
    tokenizer.save(str(dest / "tokenizer.json"))
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": add_bos,
        "add_eos_token": add_eos,
        "bos_token": special.bos,
        "eos_token": special.eos,
        "unk_token": special.unk,
        "pad_token": special.pad,
        "clean_up_tokenization_spaces": False,
        "model_max_length": int(model.arch_field("context_length", 2048)),
    }
    if template := meta.get("tokenizer.chat_template"):
        config["chat_template"] = template
    (dest / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False))
    return special
