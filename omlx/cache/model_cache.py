"""One model's view of the prefix cache: `fetch` and `store`, called on its engine thread."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omlx.cache import kv_blocks
from omlx.cache.chain_hash import (
    BlockKey,
    block_key,
    chain_keys,
    encode_extra_keys,
    iter_chain_keys,
)
from omlx.cache.child_index import Child, ChildIndex
from omlx.cache.fingerprint import model_fingerprint
from omlx.cache.hot_tier import HotBlock
from omlx.cache.index import (
    BlockInfo,
    ReuseRule,
    longest_usable_prefix,
    match_chain,
    max_reusable_blocks,
)
from omlx.cache.miss_diagnosis import RecentPrompts, describe
from omlx.platform.device import on_cuda

if TYPE_CHECKING:
    from omlx.cache.prefix_cache import PrefixCache

log = logging.getLogger(__name__)


class ModelPrefixCache:
    """Seeds requests of one model from cached blocks and stores finished requests' blocks.

    Every method runs on the model's engine thread (it builds and evaluates MLX arrays).
    A model whose cache layout cannot be sliced runs uncached: fetch misses, store no-ops.
    """

    def __init__(self, parent: PrefixCache, fingerprint: str, model: Any, name: str) -> None:
        self.parent = parent
        self.fingerprint = fingerprint
        self.model = model
        self.name = name
        self.block_size = parent.block_size
        self.layout: kv_blocks.ModelLayout | None = None
        if parent.enabled:
            try:
                self.layout = kv_blocks.model_layout(model)
            except kv_blocks.UnsupportedCache as e:
                log.warning("prefix cache off for %s: %s", name or fingerprint[:12], e)
        window = self.layout.window_tokens if self.layout else 0
        # Token-level reuse below one block, where every layer holds every token's KV.
        granular = self.layout is not None and self.layout.token_granular
        cuda = on_cuda()
        partial = parent.settings.reuse_partial_blocks(cuda=cuda)
        self.children = ChildIndex() if granular and partial else None
        self.defer_stores = not parent.settings.stores_while_busy(cuda=cuda)
        self.recent = RecentPrompts()  # filled only while DEBUG logging is on
        self.rule = ReuseRule(
            self.block_size,
            needs_state=bool(self.layout and self.layout.needs_state),
            window_tokens=window,
        )

    @property
    def enabled(self) -> bool:
        return self.layout is not None

    def fetch(self, tokens: list[int], extra_keys: tuple = ()) -> tuple[list | None, int]:
        """Caches seeded with the longest cached prefix of `tokens`, and its token count.

        Whole blocks first (the chain); then, for token-granular layouts, the leading ids
        the rest shares with a block stored after them (child_index.py). At least one
        token of `tokens` is always left to prefill. Returns (None, 0) on a miss.
        """
        if self.layout is None:
            return None, 0
        max_blocks = max_reusable_blocks(len(tokens), self.block_size)
        keys = iter_chain_keys(
            self.fingerprint, tokens[: max_blocks * self.block_size], self.block_size, extra_keys
        )
        chain = match_chain(keys, self.parent.lookup)
        num_blocks = longest_usable_prefix(chain, max_blocks, self.rule)
        blocks = self._load(chain[:num_blocks])
        if len(blocks) < num_blocks:  # a block vanished or its file was bad
            num_blocks = longest_usable_prefix([b.info for b in blocks], len(blocks), self.rule)
            blocks = blocks[:num_blocks]
        num_tokens = len(blocks) * self.block_size
        cut = self._shared_start(tokens, blocks, extra_keys)
        if cut is not None:
            blocks.append(cut[0])
            num_tokens += cut[1]
        if not blocks:
            self.parent.count(self.fingerprint, 0)
            self._diagnose(tokens, 0)
            return None, 0
        bf16 = {n for b in blocks for n in json.loads(b.meta.get("bf16", "[]"))}
        caches = kv_blocks.rebuild(
            self.model,
            self.layout,
            [b.arrays for b in blocks],
            block_size=self.block_size,
            bf16_names=bf16,
            num_tokens=num_tokens,
        )
        self.parent.count(self.fingerprint, num_tokens)
        self._diagnose(tokens, num_tokens)
        return caches, num_tokens

    def _shared_start(
        self, tokens: list[int], blocks: list[HotBlock], extra_keys: tuple
    ) -> tuple[HotBlock, int] | None:
        """The block after `blocks` sharing the most leading ids with the rest of `tokens`,
        and how many it shares (the rest stops one token short of the prompt's end)."""
        if self.children is None:
            return None
        start = len(blocks) * self.block_size
        rest = tokens[start : min(len(tokens) - 1, start + self.block_size)]
        anchor = blocks[-1].key if blocks else self._root(extra_keys)
        while (found := self.children.best(anchor, rest)) is not None:
            child, num_shared = found
            info = self.parent.lookup(child.key)
            block = self.parent.load(info) if info is not None else None
            if block is not None and kv_blocks.check_meta(self.layout, block.meta):
                self.children.touch(child.key)
                return block, num_shared
            self.children.discard(child.key)  # evicted meanwhile: forget it, try the next
        return None

    def _root(self, extra_keys: tuple) -> str:
        return "root:" + encode_extra_keys(extra_keys).hex() if extra_keys else "root"

    def _diagnose(self, tokens: list[int], num_cached: int) -> None:
        """At DEBUG, say where a prompt diverged from the closest stored one."""
        if not log.isEnabledFor(logging.DEBUG):
            return
        match = self.recent.best_match(tokens)
        if match is not None and match.shared_tokens > 0:
            name = self.name or self.fingerprint[:12]
            text = describe(match, len(tokens), num_cached, self.block_size)
            log.debug("cache %s: %s", name, text)

    def _load(self, chain: list[BlockInfo]) -> list[HotBlock]:
        blocks = []
        for info in chain:
            block = self.parent.load(info)
            if block is None:
                break
            if not kv_blocks.check_meta(self.layout, block.meta):
                self.parent.discard_bad(info.key, f"block {info.key}: layout differs")
                break
            blocks.append(block)
        return blocks

    def store(self, tokens: list[int], prompt_cache: list, extra_keys: tuple = ()) -> None:
        """Keep the full blocks of one finished sequence (prompt + generated tokens).

        `tokens` are the ids whose KV `prompt_cache` holds (as BatchGenerator.extract_cache
        returns them); only their leading full blocks are kept.
        """
        if self.layout is None:
            return
        if log.isEnabledFor(logging.DEBUG):
            self.recent.add(tokens)
        processed = kv_blocks.processed_tokens(prompt_cache)
        num_tokens = len(tokens) if processed is None else min(len(tokens), processed)
        keys = chain_keys(self.fingerprint, tokens[:num_tokens], self.block_size, extra_keys)
        if self.children is not None:
            self._store_children(tokens, keys, prompt_cache, num_tokens, extra_keys)
        if not keys:
            return
        infos = [self.parent.lookup(k) for k in keys]
        first = next((i for i, info in enumerate(infos) if info is None), len(keys))
        state_at_end = self.layout.needs_state and num_tokens == len(keys) * self.block_size
        if first == len(keys) and state_at_end and not infos[-1].has_state:
            first = len(keys) - 1  # re-store the last block to add the state snapshot
        if first < len(keys):
            self._insert_new(keys, first, prompt_cache, num_tokens)
        # Touch the reused head last-to-first so the chain's head is the most recently used:
        # under pressure, tails are evicted before the prefixes other prompts share.
        self.parent.touch(reversed(keys[:first]))

    def _store_children(
        self,
        tokens: list[int],
        keys: list[BlockKey],
        prompt_cache: list,
        num_tokens: int,
        extra_keys: tuple,
    ) -> None:
        """Index the sequence's blocks under their anchors and keep its unfilled last block."""
        assert self.children is not None
        size = self.block_size
        dropped: list[Child] = []
        anchor = self._root(extra_keys)
        for i, key in enumerate(keys):
            dropped += self.children.add(anchor, key, tokens[i * size : (i + 1) * size], False)
            anchor = key
        tail = tokens[len(keys) * size : num_tokens]
        if tail and self.children.covering(anchor, tail) is None:
            block = self._partial_block(keys, tail, prompt_cache, num_tokens, extra_keys)
            self.parent.insert([block])
            dropped += self.children.add(anchor, block.key, tail, True)
        self.parent.drop(c.key for c in dropped)

    def _partial_block(
        self,
        keys: list[BlockKey],
        tail: list[int],
        prompt_cache: list,
        num_tokens: int,
        extra_keys: tuple,
    ) -> HotBlock:
        [sliced], dtype, bf16 = kv_blocks.slice_blocks(
            prompt_cache,
            self.layout,
            num_tokens=num_tokens,
            block_size=self.block_size,
            first_block=len(keys),
            partial=True,
        )
        # Its own key space: a partial block never collides with a whole one.
        extra = b"partial" + (b"" if keys else encode_extra_keys(extra_keys))
        key = block_key(self.fingerprint, keys[-1] if keys else None, tail, extra)
        info = BlockInfo(
            key=key,
            model_fingerprint=self.fingerprint,
            block_index=len(keys),
            num_tokens=sliced.num_tokens,
            nbytes=sliced.nbytes,
            model_name=self.name,
            partial=True,
        )
        return HotBlock(info, sliced.arrays, kv_blocks.layout_meta(self.layout, dtype, bf16))

    def _insert_new(self, keys: list, first: int, prompt_cache: list, num_tokens: int) -> None:
        sliced, dtype, bf16 = kv_blocks.slice_blocks(
            prompt_cache,
            self.layout,
            num_tokens=num_tokens,
            block_size=self.block_size,
            first_block=first,
        )
        meta = kv_blocks.layout_meta(self.layout, dtype, bf16)
        blocks = [
            HotBlock(
                info=BlockInfo(
                    key=keys[s.block_index],
                    model_fingerprint=self.fingerprint,
                    block_index=s.block_index,
                    num_tokens=s.num_tokens,
                    nbytes=s.nbytes,
                    has_window=s.has_window,
                    has_state=s.has_state,
                    model_name=self.name,
                ),
                arrays=s.arrays,
                meta=meta,
            )
            for s in sliced
        ]
        self.parent.insert(reversed(blocks))

    def snapshot_point(self, num_prompt_tokens: int, num_cached_tokens: int = 0) -> int | None:
        """Where the engine should pause prefill to store a recurrent-state snapshot.

        Only for models with recurrent layers: their state exists only at the end of what
        was processed, so a prefix is reusable only where a store() happened exactly on a
        block boundary. Returns the last block boundary that leaves at least one prompt
        token, if it lies past what was cached; the engine may split the prompt there
        (BatchGenerator.insert_segments) and call `store(tokens[:point], extracted_cache)`
        when the first segment ends. None when nothing is to gain.
        """
        if self.layout is None or not self.layout.needs_state:
            return None
        point = max_reusable_blocks(num_prompt_tokens, self.block_size) * self.block_size
        return point if point > num_cached_tokens else None


def prefix_factory(cache: PrefixCache) -> Callable[[Any, Path], ModelPrefixCache]:
    """What LocalModelPool calls on each engine thread once the model is loaded."""

    def make(model: Any, model_dir: Path) -> ModelPrefixCache:
        fp = model_fingerprint(model_dir, dtype=_param_dtype(model))
        return cache.for_model(fp, model, model_name=Path(model_dir).name)

    return make


def _param_dtype(model: Any) -> str:
    from mlx.utils import tree_flatten

    params = tree_flatten(model.parameters())
    return str(params[0][1].dtype).removeprefix("mlx.core.") if params else ""
