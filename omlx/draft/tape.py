"""Tape replay for hybrid recurrent layers (Qwen3.5's GatedDeltaNet).

A verify pass runs the recurrence over the whole draft block. When only n of its tokens
are committed, the layer's state must be the state after n steps. Keeping a state per
step costs MBs per layer and recomputing the layer costs its projections, so verify
records a tape of the recurrence's per-step inputs (q, k, v, decay g, beta: the outputs
of the projections and the conv) and the state it started from. Rollback restores that
state and replays only the n committed steps through the same recurrence function mlx-lm
uses (ops, or the Metal kernel), so the replayed state equals the verify trajectory's
state bit for bit. The conv state is a window over [pre-verify conv state ; block
inputs], so it is re-sliced, not recomputed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from omlx.mlx_lm_compat.gated_delta import GatedDeltaNet, compute_g, normalize_qk
from omlx.mlx_lm_compat.gated_delta import recurrence as _recurrence


@dataclass(slots=True)
class GatedDeltaTape:
    """What one GatedDeltaNet layer recorded during one verify pass."""

    cache: Any  # the layer's ArraysCache
    state0: mx.array  # recurrent state before verify, [B, Hv, Dv, Dk]
    conv_input: mx.array  # [B, K - 1 + T, conv_dim]
    steps: tuple[mx.array, ...]  # q, k, v, g, beta over the T block steps

    @property
    def num_steps(self) -> int:
        return self.steps[0].shape[1]

    def replay(self, num_keep: int) -> None:
        """Set the layer's cache to its state after the first `num_keep` block steps."""
        if num_keep >= self.num_steps:
            return  # the cache already holds the state after every step
        kept = [x[:, :num_keep] for x in self.steps]
        _, state = _recurrence(*kept, self.state0) if num_keep else (None, self.state0)
        kernel_keep = self.conv_input.shape[1] - self.num_steps
        self.cache[0] = mx.contiguous(self.conv_input[:, num_keep : num_keep + kernel_keep])
        self.cache[1] = state


class TapeGatedDeltaNet(nn.Module):
    """Stands in for a qwen3_5 GatedDeltaNet during verify and records its tape.

    Mirrors GatedDeltaNet.__call__ for one unpadded sequence; the projections, conv and
    output norm are the wrapped layer's own modules.
    """

    def __init__(self, inner: GatedDeltaNet, tapes: list[GatedDeltaTape]) -> None:
        super().__init__()
        self.inner = inner
        self._tapes = tapes

    def __call__(self, inputs: mx.array, mask: Any = None, cache: Any = None) -> mx.array:
        net = self.inner
        if cache is None or mask is not None or getattr(cache, "lengths", None) is not None:
            return net(inputs, mask, cache)  # padded batches are not DFlash's path
        b, s, _ = inputs.shape
        qkv = net.in_proj_qkv(inputs)
        z = net.in_proj_z(inputs).reshape(b, s, net.num_v_heads, net.head_v_dim)
        beta = mx.sigmoid(net.in_proj_b(inputs))
        g = compute_g(net.A_log, net.in_proj_a(inputs), net.dt_bias)
        conv_state = cache[0]
        if conv_state is None:
            conv_state = mx.zeros((b, net.conv_kernel_size - 1, net.conv_dim), inputs.dtype)
        state0 = cache[1]
        if state0 is None:
            state0 = mx.zeros(
                (b, net.num_v_heads, net.head_v_dim, net.head_k_dim), dtype=mx.float32
            )
        conv_input = mx.concatenate([conv_state, qkv], axis=1)
        cache[0] = mx.contiguous(conv_input[:, -(net.conv_kernel_size - 1) :, :])
        conv_out = nn.silu(net.conv1d(conv_input))
        q, k, v = [
            t.reshape(b, s, h, d)
            for t, h, d in zip(
                mx.split(conv_out, [net.key_dim, 2 * net.key_dim], -1),
                [net.num_k_heads, net.num_k_heads, net.num_v_heads],
                [net.head_k_dim, net.head_k_dim, net.head_v_dim],
                strict=True,
            )
        ]
        q, k = normalize_qk(q, k, inv_scale=net.head_k_dim**-0.5, eps=1e-6)
        out, state = _recurrence(q, k, v, g, beta, state0)
        cache[1] = state
        cache.advance(s)
        self._tapes.append(GatedDeltaTape(cache, state0, conv_input, (q, k, v, g, beta)))
        out = net.norm(out, z)
        return net.out_proj(out.reshape(b, s, -1))


def can_tape(module: Any) -> bool:
    """Whether `module` is a mixer this tape knows how to record exactly."""
    return type(module) is GatedDeltaNet
