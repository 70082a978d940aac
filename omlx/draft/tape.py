"""Tape replay for hybrid recurrent layers (Qwen3.5's GatedDeltaNet).

A verify pass runs the recurrence over the whole draft block. When only n of its tokens
are committed, the layer's state must be the state after n steps. Instead of keeping a
state per step (MBs each) or recomputing, verify records an innovation tape: per step
the decay g_t, the key k_t and the delta d_t, so that S_t = S_{t-1} * g_t + k_t ⊗ d_t.
Rollback restores the pre-verify state and replays only the n committed steps with the
same elementwise expression, which reproduces the verify trajectory bit for bit. The
conv state is a window over [pre-verify conv state ; block inputs], so it is re-sliced.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.gated_delta import compute_g, normalize_qk
from mlx_lm.models.qwen3_5 import GatedDeltaNet


@dataclass(slots=True)
class GatedDeltaTape:
    """What one GatedDeltaNet layer recorded during one verify pass."""

    cache: Any  # the layer's ArraysCache
    state0: mx.array  # recurrent state before verify, [B, Hv, Dv, Dk]
    conv_input: mx.array  # [B, K - 1 + T, conv_dim]
    gs: mx.array  # [B, T, Hv]
    ks: mx.array  # [B, T, Hv, Dk], keys repeated to the value heads
    deltas: mx.array  # [B, T, Hv, Dv]

    @property
    def num_steps(self) -> int:
        return self.gs.shape[1]

    def replay(self, num_keep: int) -> None:
        """Set the layer's cache to its state after the first `num_keep` block steps."""
        if num_keep >= self.num_steps:
            return  # the cache already holds the state after every step
        state = self.state0
        for t in range(num_keep):
            state = _step_state(state, self.gs[:, t], self.ks[:, t], self.deltas[:, t])
        kernel_keep = self.conv_input.shape[1] - self.num_steps
        self.cache[0] = mx.contiguous(self.conv_input[:, num_keep : num_keep + kernel_keep])
        self.cache[1] = state


def _step_state(state: mx.array, g: mx.array, k: mx.array, delta: mx.array) -> mx.array:
    # The one expression both verify and replay use, so replay is bit-exact.
    return state * g[..., None, None] + k[..., None, :] * delta[..., None]


def _recurrence(
    q: mx.array, k: mx.array, v: mx.array, g: mx.array, beta: mx.array, state: mx.array
) -> tuple[mx.array, mx.array, mx.array]:
    """The gated delta rule over T steps (scalar gating), also returning the deltas."""
    repeat = v.shape[2] // q.shape[2]
    if repeat > 1:
        q = mx.repeat(q, repeat, -2)
        k = mx.repeat(k, repeat, -2)
    ys, deltas = [], []
    for t in range(q.shape[1]):
        k_t = k[:, t]
        decayed = state * g[:, t][..., None, None]
        kv_mem = (decayed * k_t[..., None, :]).sum(axis=-1)
        delta = (v[:, t] - kv_mem) * beta[:, t][..., None]
        state = _step_state(state, g[:, t], k_t, delta)
        ys.append((state * q[:, t][..., None, :]).sum(axis=-1).astype(q.dtype))
        deltas.append(delta)
    return mx.stack(ys, axis=1), state, (k, mx.stack(deltas, axis=1))


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
        out, state, (ks, deltas) = _recurrence(q, k, v, g, beta, state0)
        cache[1] = state
        cache.advance(s)
        self._tapes.append(GatedDeltaTape(cache, state0, conv_input, g, ks, deltas))
        out = net.norm(out, z)
        return net.out_proj(out.reshape(b, s, -1))


def can_tape(module: Any) -> bool:
    """Whether `module` is a mixer this tape knows how to record exactly."""
    return type(module) is GatedDeltaNet
