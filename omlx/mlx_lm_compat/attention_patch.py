"""Rerouting mlx-lm's attention: the module-level patch decode_attention.py and
row_attention.py install.

mlx-lm's model modules call `scaled_dot_product_attention`, imported from `base` into
each module, so replacing that name in a module reroutes every model of that
architecture in the process. A wrapper keeps the function it replaced, so a patch is
idempotent (a marker found anywhere down the chain of wrappers) and undone by its
marker (when its wrapper is the outermost one; a wrapper below another stays).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

NAME = "scaled_dot_product_attention"
_WRAPPED = "_omlx_wrapped"  # the function a wrapper replaced
_MARKER = "_omlx_marker"  # which patch made the wrapper


def _sources(model: Any) -> Iterator[Any]:
    """The modules `model`'s layers come from that define the attention function."""
    seen: set[str] = set()
    for _, module in model.named_modules():
        name = type(module).__module__
        source = sys.modules.get(name)
        if name not in seen and source is not None and callable(getattr(source, NAME, None)):
            seen.add(name)
            yield source


def _patched_by(fn: Any, marker: str) -> bool:
    while fn is not None:
        if getattr(fn, _MARKER, None) == marker:
            return True
        fn = getattr(fn, _WRAPPED, None)
    return False


Takes = Callable[[Any, Any, Any, Any], bool]  # (queries, keys, values, mask)
Computes = Callable[[Any, Any, Any, float, Any], Any]  # (queries, keys, values, scale, mask)


def _routing(original: Any, takes: Takes, computes: Computes) -> Any:
    def attention(
        queries: Any,
        keys: Any,
        values: Any,
        cache: Any,
        scale: float,
        mask: Any,
        sinks: Any = None,
    ) -> Any:
        if (
            sinks is None
            and not hasattr(cache, "bits")  # quantized caches have their own kernel
            and takes(queries, keys, values, mask)
        ):
            return computes(queries, keys, values, scale, mask)
        return original(queries, keys, values, cache, scale=scale, mask=mask, sinks=sinks)

    return attention


def patch_attention(model: Any, takes: Takes, computes: Computes, marker: str) -> int:
    """Route the attention of `model`'s modules through `computes` for the calls `takes`
    accepts (never attention sinks or a quantized cache; the rest stays mlx-lm's), once
    per module and marker; how many modules were patched now."""
    patched = 0
    for source in _sources(model):
        original = getattr(source, NAME)
        if _patched_by(original, marker):
            continue
        wrapper = _routing(original, takes, computes)
        setattr(wrapper, _WRAPPED, original)
        setattr(wrapper, _MARKER, marker)
        setattr(source, NAME, wrapper)
        patched += 1
    return patched


def _unwrap(source: Any, marker: str) -> None:
    fn = getattr(source, NAME, None)
    if getattr(fn, _MARKER, None) == marker:
        setattr(source, NAME, getattr(fn, _WRAPPED))


def restore_attention(model: Any, marker: str) -> None:
    """Undo `patch_attention(..., marker)` for the modules of `model`'s layers."""
    for source in _sources(model):
        _unwrap(source, marker)


def restore_attention_everywhere(marker: str) -> None:
    """Undo `patch_attention(..., marker)` in every loaded mlx-lm module (tests)."""
    for name, source in list(sys.modules.items()):
        if name.startswith("mlx_lm.") and source is not None:
            _unwrap(source, marker)


__all__ = ["patch_attention", "restore_attention", "restore_attention_everywhere"]
