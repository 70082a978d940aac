"""Tokenizing for encoder models (embeddings, cross-encoders): special tokens, pairs, padding.

Built on `tokenizers` directly. The padding and truncation saved in tokenizer.json
(all-MiniLM-L6-v2 pads every text to 128) are switched off: batches are padded here,
with an attention mask, to the longest sequence of the batch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from omlx.errors import ImportFailed, InvalidRequest


class EncoderTokenizer:
    def __init__(self, tokenizer: Tokenizer, max_tokens: int, pad_id: int = 0) -> None:
        tokenizer.no_padding()
        tokenizer.no_truncation()
        self._tok = tokenizer
        self.max_tokens = max_tokens
        self.pad_id = pad_id
        self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)

    @classmethod
    def from_folder(cls, path: Path, max_tokens: int) -> EncoderTokenizer:
        tok = _read_tokenizer(path)
        pad_id = 0
        pad = tok.token_to_id(_special(path, "pad_token") or "[PAD]")
        if pad is None:
            pad = tok.token_to_id("<pad>")
        if pad is not None:
            pad_id = pad
        return cls(tok, max_tokens, pad_id)

    def encode(
        self, text: str, *, truncate: bool = False, index: int = 0
    ) -> tuple[list[int], bool]:
        """Ids of `text` and whether they were cut; too long is a 400 unless `truncate`."""
        ids = self._tok.encode(text).ids
        if len(ids) > self.max_tokens:
            if not truncate:
                raise InvalidRequest(
                    f"input {index} has {len(ids)} tokens; the model reads at most "
                    f'{self.max_tokens} (send "truncate": true to cut it)',
                    param="input",
                )
            return [*ids[: self.max_tokens - 1], ids[-1]], True  # keep the final [SEP]
        return ids, False

    def encode_pair(self, first: str, second: str) -> tuple[list[int], list[int]]:
        """Ids and token-type ids of `[CLS] first [SEP] second [SEP]`; the second is cut."""
        self._tok.enable_truncation(self.max_tokens, strategy="only_second")
        try:
            enc = self._tok.encode(first, second)
        except Exception as e:  # the query alone is longer than the window
            raise InvalidRequest(f"query too long for this reranker: {e}", param="query") from e
        finally:
            self._tok.no_truncation()
        return enc.ids, enc.type_ids

    def check_ids(self, ids: list[int]) -> list[int]:
        """Token-id input, validated: the model reads it as given."""
        if not ids:
            raise InvalidRequest("an input has no tokens", param="input")
        if len(ids) > self.max_tokens:
            raise InvalidRequest(
                f"an input has {len(ids)} tokens; the model reads at most {self.max_tokens}",
                param="input",
            )
        bad = [t for t in ids if not 0 <= t < self.vocab_size]
        if bad:
            raise InvalidRequest(
                f"token id {bad[0]} is outside the vocabulary (size {self.vocab_size})",
                param="input",
            )
        return ids

    def pad(self, seqs: list[list[int]]) -> tuple[list[list[int]], list[list[int]]]:
        """Right-pad to the longest sequence; returns (ids, attention mask)."""
        width = max(len(s) for s in seqs)
        ids = [s + [self.pad_id] * (width - len(s)) for s in seqs]
        mask = [[1] * len(s) + [0] * (width - len(s)) for s in seqs]
        return ids, mask


def _read_tokenizer(path: Path) -> Tokenizer:
    if (path / "tokenizer.json").is_file():
        return Tokenizer.from_file(str(path / "tokenizer.json"))
    if (path / "vocab.txt").is_file():  # a WordPiece vocabulary alone (older BERT folders)
        from tokenizers.implementations import BertWordPieceTokenizer

        lower = bool(_tokenizer_config(path).get("do_lower_case", True))
        return BertWordPieceTokenizer(str(path / "vocab.txt"), lowercase=lower)._tokenizer
    raise ImportFailed(f"{path}: no tokenizer.json or vocab.txt for an encoder model")


def _tokenizer_config(path: Path) -> dict[str, Any]:
    try:
        data = json.loads((path / "tokenizer_config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _special(path: Path, key: str) -> str | None:
    value = _tokenizer_config(path).get(key)
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None
