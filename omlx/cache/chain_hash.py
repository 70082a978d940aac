"""Block keys: a chain hash over (model fingerprint, parent key, block token ids, extra keys)."""

from __future__ import annotations

import hashlib
import json
from array import array
from collections.abc import Iterator, Sequence
from typing import NewType

BlockKey = NewType("BlockKey", str)

# Bumped whenever the encoding below changes, so old cold-tier files stop matching.
HASH_VERSION = b"omlx-block-v1"
_DIGEST_BYTES = 16  # 128-bit keys: collisions are out of reach for any realistic cache


def encode_extra_keys(extra_keys: Sequence[object]) -> bytes:
    """A stable byte encoding of extra keys (image hashes, adapters): str, int, bytes, tuples."""

    def norm(x: object) -> object:
        if isinstance(x, bytes):
            return {"b": x.hex()}
        if isinstance(x, (list, tuple)):
            return [norm(v) for v in x]
        if isinstance(x, (str, int, float, bool)) or x is None:
            return x
        raise TypeError(f"extra cache key of type {type(x).__name__} has no stable encoding")

    return json.dumps([norm(x) for x in extra_keys], separators=(",", ":")).encode()


def block_key(
    model_fingerprint: str,
    parent: BlockKey | None,
    token_ids: Sequence[int],
    extra: bytes = b"",
) -> BlockKey:
    """Key of one block; `parent` is the previous block's key (None for the first block)."""
    return _key(model_fingerprint, parent, array("q", token_ids).tobytes(), extra)


def _key(
    model_fingerprint: str, parent: BlockKey | None, token_bytes: bytes, extra: bytes
) -> BlockKey:
    h = hashlib.blake2b(digest_size=_DIGEST_BYTES, person=b"omlx-kv-block")
    h.update(HASH_VERSION)
    h.update(model_fingerprint.encode())
    h.update(b"\0")
    h.update(parent.encode() if parent else b"-")
    h.update(b"\0")
    h.update(len(extra).to_bytes(4, "little"))
    h.update(extra)
    h.update(token_bytes)
    return BlockKey(h.hexdigest())


def iter_chain_keys(
    model_fingerprint: str,
    tokens: Sequence[int],
    block_size: int,
    extra_keys: Sequence[object] = (),
) -> Iterator[BlockKey]:
    """Keys of the full blocks of `tokens`, first to last, computed lazily.

    Extra keys enter the first block only: every later key chains through it, so a
    different image changes the whole chain (correct, at the cost of not sharing the
    text before the image).
    """
    if block_size < 1:
        raise ValueError("block_size must be >= 1")
    extra = encode_extra_keys(extra_keys) if extra_keys else b""
    num_full = len(tokens) // block_size * block_size
    # One conversion up front: per-block list slices and arrays cost more than the hashing.
    buf = memoryview(array("q", tokens[:num_full]).tobytes())
    step = block_size * 8
    parent: BlockKey | None = None
    for start in range(0, num_full * 8, step):
        parent = _key(model_fingerprint, parent, buf[start : start + step], extra)
        extra = b""
        yield parent


def chain_keys(
    model_fingerprint: str,
    tokens: Sequence[int],
    block_size: int,
    extra_keys: Sequence[object] = (),
) -> list[BlockKey]:
    """All full-block keys of `tokens` (a trailing partial block gets none)."""
    return list(iter_chain_keys(model_fingerprint, tokens, block_size, extra_keys))
