"""A draft vocabulary: the draft scores only the tokens its target actually writes.

The draft borrows the target's LM head, and on a CPU that head is most of a draft pass:
SmolLM2's is 49,152 x 576 (113 MB in float32), read in full every cycle, against 62 MB
for the draft's four layers. Yet 7,782 token ids make 99% of what the target wrote in
its distilled replies. `omlx draft train` saves the smallest set covering a share of
those tokens (`draft_vocab.json`); the drafter then scores that subset (rows of the
head gathered once) and puts -inf everywhere else. Decoding stays lossless: a token
outside the set is never drafted, so it is never accepted, and the target's verify
still picks it. The cost is the rare cycle whose next token falls outside the set.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from omlx.errors import InvalidRequest

VOCAB_FILE = "draft_vocab.json"
ROUND_TO = 256  # vocabulary sizes in whole tiles


@dataclass(frozen=True, slots=True)
class DraftVocab:
    """The token ids a draft may propose (a plain object: MLX modules keep it as is)."""

    token_ids: tuple[int, ...]


def choose_vocab(replies: Iterable[Sequence[int]], coverage: float) -> list[int]:
    """The most frequent token ids that together make `coverage` of the replies' tokens,
    rounded up to a multiple of ROUND_TO (fewer when fewer distinct ids exist)."""
    counts = Counter(t for reply in replies for t in reply)
    total = sum(counts.values())
    ranked = [t for t, _ in counts.most_common()]
    kept, seen = 0, 0
    for token in ranked:
        if total and seen / total >= coverage:
            break
        seen += counts[token]
        kept += 1
    kept = min(len(ranked), -(-kept // ROUND_TO) * ROUND_TO)
    return sorted(int(t) for t in ranked[:kept])


def write_vocab(folder: Path, token_ids: Sequence[int], coverage: float) -> Path:
    path = Path(folder) / VOCAB_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"coverage": coverage, "token_ids": list(token_ids)}))
    tmp.replace(path)
    return path


def read_vocab(folder: Path) -> DraftVocab | None:
    path = Path(folder) / VOCAB_FILE
    if not path.is_file():
        return None
    try:
        ids = json.loads(path.read_text())["token_ids"]
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidRequest(f"unreadable draft vocabulary {path}: {exc}") from exc
    if not ids or not all(isinstance(t, int) and t >= 0 for t in ids):
        raise InvalidRequest(f"draft vocabulary {path} needs non-negative token ids")
    return DraftVocab(tuple(ids))


class RestrictedHead:
    """The target's LM head over a subset of rows, scattered back to the full vocabulary."""

    def __init__(self, head: nn.Module, token_ids: Sequence[int], vocab_size: int) -> None:
        if max(token_ids) >= vocab_size:
            raise InvalidRequest(
                f"the draft vocabulary names token {max(token_ids)}, past the target's {vocab_size}"
            )
        self.ids = mx.array(token_ids, dtype=mx.int32)
        self.vocab_size = vocab_size
        self._quant: dict[str, Any] | None = None
        if hasattr(head, "scales"):  # quantized: rows are output features, gather them
            self._quant = {
                "group_size": head.group_size,
                "bits": head.bits,
                "mode": getattr(head, "mode", "affine"),
            }
            biases = head.get("biases")  # modules are dicts of their arrays
            self._rows = (
                head["weight"][self.ids],
                head["scales"][self.ids],
                None if biases is None else biases[self.ids],
            )
        else:
            self._rows = (head.weight[self.ids], None, None)
        self._bias = head["bias"][self.ids] if "bias" in head else None
        mx.eval([a for a in (*self._rows, self._bias) if a is not None])

    def __call__(self, hidden: mx.array) -> mx.array:
        sub = self.compact(hidden)
        full = mx.full((*sub.shape[:-1], self.vocab_size), -mx.inf, dtype=sub.dtype)
        return mx.put_along_axis(full, mx.broadcast_to(self.ids, sub.shape), sub, axis=-1)

    def compact(self, hidden: mx.array) -> mx.array:
        """Logits over the subset only: [..., len(token_ids)], in `token_ids` order."""
        weight, scales, biases = self._rows
        if self._quant is not None:
            sub = mx.quantized_matmul(
                hidden, weight, scales=scales, biases=biases, transpose=True, **self._quant
            )
        else:
            sub = hidden @ weight.T
        if self._bias is not None:
            sub = sub + self._bias
        return sub
