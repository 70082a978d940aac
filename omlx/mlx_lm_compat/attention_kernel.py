"""Attention of a few queries as one custom CUDA kernel a layer.

MLX 0.32's CUDA backend has a fused attention kernel only for up to 3 queries and no
array mask (its sdpa_vector rule). A batched decode step always brings one (BatchKVCache
masks every row's left padding), so on CUDA each layer takes the composed fallback:
`q @ k^T` as a batched GEMV that reads every key once per query head of the GQA group,
a select, a softmax and `probs @ v`, five graph nodes or more a layer. On an H200 with the
Qwen3-8B shape at 64 rows that attention took ~5 ms of a ~14 ms step's GPU time
(benchmarks/results/decode_step_anatomy_folded_h200.jsonl), and each node costs the
host tens of microseconds to record on a host-bound step.

Here one kernel does a layer's attention: a thread block per (row, KV head, chunk of
query vectors), so each key and value is read once for the whole GQA group; each warp
walks every WARPS-th tile of 32 keys, a key a lane (LANE_KEYS, the default; off, every
WARPS-th key a warp), with an online (flash) softmax, and the warps' partial results
are merged through shared memory. The mask is read as it is (boolean, any broadcast
shape over [B, H, L, S]); "causal" (L queries at the end of S keys) and None need no
array. Queries, keys and values are read through their strides, so the cache's slice
views and the transposed queries cost no copy, and the output is written in the
[B, L, H, D] layout the model reshapes next, returned as a [B, H, L, D] view.

Same math as MLX's fallback (scale, mask, float32 softmax), not the same rounding order.
On CUDA `engine.decode_attention = "auto"` (the default) installs it for batched
one-query steps and for the DFlash passes made inside `verifying()` (a served draft's
verifies: not the batch generator's short prefill chunks of the same architecture), and
"kernel" for every call `takes_kernel` accepts; `benchmarks/attention_kernel_check.py`
checks it against MLX's attention on the GPU and times both, and a test runs its source
on host threads.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import mlx.core as mx

from omlx.mlx_lm_compat.attention_patch import patch_attention, restore_attention
from omlx.mlx_lm_compat.cuda_header import CONVERSIONS

_PATCHED = "_omlx_kernel_attention"
_EVERY_CALL = "_omlx_kernel_every_call"  # set on a model whose 1-16-query calls it takes
_IN_SCOPE = "_omlx_kernel_in_scope"  # set on a model whose verifies (verifying()) it takes
# A module with attention of its own (the DFlash draft's) declares this attribute, False;
# use_kernel_attention sets it True and the module then calls kernel_attention itself.
KERNEL_ATTENTION_FLAG = "attends_by_kernel"
MAX_QUERIES = 16  # a DFlash block; a longer pass is a prefill, where MLX's own is fused
HEAD_DIMS = (64, 96, 128, 256)  # whole warps of elements
_DTYPES = (mx.bfloat16, mx.float16, mx.float32)
WARPS = 8
# Candidates measured against the first kernel by benchmarks/attention_kernel_check.py
# (--variants): two elements a load (bfloat16 pairs), the next key's loads issued before
# this key's arithmetic, and several keys' loads issued together (KEY_BATCH > 1;
# PREFETCH_NEXT_KEY takes precedence over it). On an H100 (attention_kernel_keys_h100.jsonl)
# four keys together took the 8B shape's decode 8-12% faster (64-256 rows, head 128),
# and SmolLM2's (head 64) 20% slower: heads under KEY_BATCH_MIN_HEAD_DIM load one key.
PAIRED_LOADS = False
PREFETCH_NEXT_KEY = False
KEY_BATCH = 4
KEY_BATCH_MIN_HEAD_DIM = 128
# A key a lane instead of a key a warp (_KEYS_A_WARP below; KEY_BATCH then plays no
# part). On an H100 (attention_check_h100_s18.jsonl, attention_kernel_lanes_h100.jsonl)
# it beat the loop above in every case timed: the 8B shape's decode at 64 / 128 / 256
# rows 2.78-2.85 / 5.21-5.36 / 9.80-9.90 ms against 3.50-3.56 / 6.44-6.78 / 12.49-12.75
# (36 layers), 64 rows over 2,100 keys 11.2-11.5 against 19.1-19.2, SmolLM2's 16-query
# DFlash verify 0.60-0.61 against 0.84-0.95, its 64-row decode 0.87 against 0.93.
LANE_KEYS = True
# Query vectors a block holds when a call has several queries (a DFlash verify or draft
# block); None: the register budget (16 for heads of 64). Fewer spread a lone verify's
# few blocks over more of the card, each reading the keys again from L2. On an H100
# (dflash_verify_h100_s19/call2, 30 layers chained) 4 took SmolLM2's 16-query verify
# 1.29 ms against 1.79 (causal) and 1.16 against 1.40 (array mask), its draft block
# 0.21 against 0.24; 2 and 8 were slower than 4.
MULTI_QUERY_BLOCK: int | None = 4

_MASK_LOOKUP = """
      if (allowed) {
        const int64_t mi = (mask_shape[0] == 1 ? 0 : b) * mask_strides[0]
            + (mask_shape[1] == 1 ? 0 : head[i]) * mask_strides[1]
            + (mask_shape[2] == 1 ? 0 : ql[i]) * mask_strides[2]
            + s * mask_strides[3];
        allowed = mask[mi];
      }
"""

_HEADER = CONVERSIONS

_PROLOGUE = """
  constexpr int E = HEAD_DIM / 32;  // elements a lane holds: DIM(e), e < E
  // Element e of a lane: lane + 32 e, or with PAIRS (HEAD_DIM a multiple of 64) the
  // neighbours 2 lane + 64 (e / 2) + {0, 1}, so a load can fetch two at once.
#define DIM(e) (PAIRS ? 2 * lane + 64 * ((e) >> 1) + ((e) & 1) : lane + 32 * (e))
  struct alignas(2 * sizeof(T)) Pair {
    T x[2];
  };
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int b = blockIdx.y / KV_HEADS;
  const int kvh = blockIdx.y - b * KV_HEADS;
  const int q0 = blockIdx.z * QPB;
  const int S = keys_shape[2];
  // QLEN 0: the number of queries is read at run time, so a verify's 2-16 queries share
  // one compiled kernel (MLX compiles each template once per process, ~1.4 s).
  const int qlen = QLEN > 0 ? QLEN : int(queries_shape[2]);
  const int qoff = S - qlen;  // query l sits at key position qoff + l
  const float scale_log2 = __int_as_float(SCALE_BITS) * 1.4426950408889634f;

  float q[QPB][E];
  float o[QPB][E];
  float m[QPB];
  float lsum[QPB];
  int head[QPB];
  int ql[QPB];
  bool live[QPB];
#pragma unroll
  for (int i = 0; i < QPB; ++i) {
    const int v = q0 + i;  // query vector over (group member g, query l): v = g * qlen + l
    live[i] = v < GQA * qlen;
    const int g = live[i] ? v / qlen : 0;
    ql[i] = live[i] ? v - g * qlen : 0;
    head[i] = kvh * GQA + g;
    const T* qp = queries + b * queries_strides[0] + head[i] * queries_strides[1]
        + ql[i] * queries_strides[2];
#pragma unroll
    for (int e = 0; e < E; ++e) {
      q[i][e] = live[i]
          ? omlx_cuda::to_float(qp[DIM(e) * queries_strides[3]]) * scale_log2
          : 0.f;
      o[i][e] = 0.f;
    }
    m[i] = omlx_cuda::neg_inf();
    lsum[i] = 0.f;
  }

  const T* kp = keys + b * keys_strides[0] + kvh * keys_strides[1];
  const T* vp = values + b * values_strides[0] + kvh * values_strides[1];
"""

_KEY_A_WARP = """
  // PAIRS: two neighbouring elements a load where the layout allows it (a cache's
  // slices of contiguous buffers do); element by element otherwise. The same for every
  // thread of the block, so no divergence.
  const bool paired = PAIRS && keys_strides[3] == 1 && values_strides[3] == 1
      && ((keys_strides[0] | keys_strides[1] | keys_strides[2]) & 1) == 0
      && ((values_strides[0] | values_strides[1] | values_strides[2]) & 1) == 0
      && reinterpret_cast<unsigned long long>(keys) % (2 * sizeof(T)) == 0
      && reinterpret_cast<unsigned long long>(values) % (2 * sizeof(T)) == 0;
  auto fetch = [&](int s, T* kdst, T* vdst) {
    const T* ks = kp + s * keys_strides[2];
    const T* vs = vp + s * values_strides[2];
    if (paired) {
#pragma unroll
      for (int j = 0; j < E / 2; ++j) {
        const Pair kpair = *reinterpret_cast<const Pair*>(ks + 2 * lane + 64 * j);
        const Pair vpair = *reinterpret_cast<const Pair*>(vs + 2 * lane + 64 * j);
        kdst[2 * j] = kpair.x[0];
        kdst[2 * j + 1] = kpair.x[1];
        vdst[2 * j] = vpair.x[0];
        vdst[2 * j + 1] = vpair.x[1];
      }
    } else {
#pragma unroll
      for (int e = 0; e < E; ++e) {
        kdst[e] = ks[DIM(e) * keys_strides[3]];
        vdst[e] = vs[DIM(e) * values_strides[3]];
      }
    }
  };
  // PREFETCH: the next key's loads are issued before this key's arithmetic, into the
  // raw registers this key was just read from (E more values a lane for keys and values).
  // KEY_BATCH (without PREFETCH): the loads of a warp's next KEY_BATCH keys issued
  // together, then their arithmetic one by one, so their memory latencies overlap.
  T kraw[KEY_BATCH][E];
  T vraw[KEY_BATCH][E];
  if (PREFETCH && warp < S) {
    fetch(warp, kraw[0], vraw[0]);
  }
  for (int s0 = warp; s0 < S; s0 += WARPS * KEY_BATCH) {
    if (!PREFETCH) {
#pragma unroll
      for (int j = 0; j < KEY_BATCH; ++j) {
        if (s0 + j * WARPS < S) {
          fetch(s0 + j * WARPS, kraw[j], vraw[j]);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < KEY_BATCH; ++j) {
      const int s = s0 + j * WARPS;
      if (s >= S) {
        break;  // the same for every lane of the warp
      }
      float k[E];
      float val[E];
#pragma unroll
      for (int e = 0; e < E; ++e) {
        k[e] = omlx_cuda::to_float(kraw[j][e]);
        val[e] = omlx_cuda::to_float(vraw[j][e]);
      }
      if (PREFETCH && s + WARPS < S) {
        fetch(s + WARPS, kraw[0], vraw[0]);
      }
#pragma unroll
      for (int i = 0; i < QPB; ++i) {
        bool allowed = live[i] && (!CAUSAL || s <= qoff + ql[i]);
        MASK_LOOKUP
        if (!allowed) {
          continue;  // the same for every lane of the warp: no shuffle is left waiting
        }
        float dot = 0.f;
#pragma unroll
        for (int e = 0; e < E; ++e) {
          dot += q[i][e] * k[e];
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
          dot += __shfl_xor_sync(0xffffffff, dot, off);
        }
        const float mn = fmaxf(m[i], dot);
        const float f = exp2f(m[i] - mn);
        const float p = exp2f(dot - mn);
        lsum[i] = lsum[i] * f + p;
#pragma unroll
        for (int e = 0; e < E; ++e) {
          o[i][e] = o[i][e] * f + p * val[e];
        }
        m[i] = mn;
      }
    }
  }

"""

_KEYS_A_WARP = """
  // LANES: a warp takes 32 keys at a time, one a lane. Each lane scores its key against
  // every query of the block (the queries in shared memory; the key row read in 16-byte
  // pieces where its layout allows), the tile's softmax costs two warp reductions a
  // query, and then the tile's values are read key by key, every lane accumulating its
  // elements of the output with that key's weight from the key's lane. Against the loop
  // above (a key a warp: five dependent shuffles a query and key), far fewer shuffles
  // and many more loads in flight.
  __shared__ __align__(16) float sq[QPB][HEAD_DIM];  // aligned: four elements a read
  for (int idx = threadIdx.x; idx < QPB * HEAD_DIM; idx += WARPS * 32) {
    const int i = idx / HEAD_DIM;
    const int d = idx - i * HEAD_DIM;
    const int v = q0 + i;
    const bool ok = v < GQA * qlen;
    const int g = ok ? v / qlen : 0;
    const T* qp = queries + b * queries_strides[0] + (kvh * GQA + g) * queries_strides[1]
        + (ok ? v - g * qlen : 0) * queries_strides[2];
    sq[i][d] = ok ? omlx_cuda::to_float(qp[d * queries_strides[3]]) * scale_log2 : 0.f;
  }
  __syncthreads();
  constexpr int VEC = 16 / sizeof(T);
  struct alignas(16) Chunk {
    T x[VEC];
  };
  const bool whole_rows = keys_strides[3] == 1 && (keys_strides[2] * sizeof(T)) % 16 == 0
      && reinterpret_cast<unsigned long long>(kp) % 16 == 0;
  for (int t0 = warp * 32; t0 < S; t0 += WARPS * 32) {
    const int s = t0 + lane;
    float sc[QPB];
#pragma unroll
    for (int i = 0; i < QPB; ++i) {
      sc[i] = 0.f;
    }
    if (s < S) {
      const T* ks = kp + int64_t(s) * keys_strides[2];
      if (whole_rows) {
#pragma unroll 4
        for (int c = 0; c < HEAD_DIM / VEC; ++c) {
          const Chunk piece = reinterpret_cast<const Chunk*>(ks)[c];
#pragma unroll
          for (int j = 0; j < VEC; ++j) {
            const float kf = omlx_cuda::to_float(piece.x[j]);
#pragma unroll
            for (int i = 0; i < QPB; ++i) {
              sc[i] += sq[i][c * VEC + j] * kf;
            }
          }
        }
      } else {
        for (int d = 0; d < HEAD_DIM; ++d) {
          const float kf = omlx_cuda::to_float(ks[d * keys_strides[3]]);
#pragma unroll
          for (int i = 0; i < QPB; ++i) {
            sc[i] += sq[i][d] * kf;
          }
        }
      }
    }
    float p[QPB];
#pragma unroll
    for (int i = 0; i < QPB; ++i) {
      bool allowed = s < S && live[i] && (!CAUSAL || s <= qoff + ql[i]);
      MASK_LOOKUP
      float score = allowed ? sc[i] : omlx_cuda::neg_inf();
      float top = score;
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) {
        top = fmaxf(top, __shfl_xor_sync(0xffffffff, top, off));
      }
      const float mn = fmaxf(m[i], top);
      if (mn == omlx_cuda::neg_inf()) {
        p[i] = 0.f;  // nothing of this query in the tile or before: the same in every lane
        continue;
      }
      p[i] = exp2f(score - mn);
      float total = p[i];
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) {
        total += __shfl_xor_sync(0xffffffff, total, off);
      }
      const float f = exp2f(m[i] - mn);
      lsum[i] = lsum[i] * f + total;
#pragma unroll
      for (int e = 0; e < E; ++e) {
        o[i][e] *= f;
      }
      m[i] = mn;
    }
    const int count = min(32, S - t0);
#pragma unroll 4
    for (int t = 0; t < count; ++t) {
      const T* vs = vp + int64_t(t0 + t) * values_strides[2];
      float val[E];
#pragma unroll
      for (int e = 0; e < E; ++e) {
        val[e] = omlx_cuda::to_float(vs[DIM(e) * values_strides[3]]);
      }
#pragma unroll
      for (int i = 0; i < QPB; ++i) {
        const float weight = __shfl_sync(0xffffffff, p[i], t);
#pragma unroll
        for (int e = 0; e < E; ++e) {
          o[i][e] += weight * val[e];
        }
      }
    }
  }

"""

_MERGE = """
  __shared__ float sm_m[QPB][WARPS];
  __shared__ float sm_l[QPB][WARPS];
  __shared__ float sm_o[WARPS][HEAD_DIM];
  if (lane == 0) {
#pragma unroll
    for (int i = 0; i < QPB; ++i) {
      sm_m[i][warp] = m[i];
      sm_l[i][warp] = lsum[i];
    }
  }
  const int H = KV_HEADS * GQA;
#pragma unroll
  for (int i = 0; i < QPB; ++i) {
#pragma unroll
    for (int e = 0; e < E; ++e) {
      sm_o[warp][DIM(e)] = o[i][e];
    }
    __syncthreads();
    if (live[i]) {
      float M = omlx_cuda::neg_inf();
      for (int w = 0; w < WARPS; ++w) {
        M = fmaxf(M, sm_m[i][w]);
      }
      float total = 0.f;
      for (int w = 0; w < WARPS; ++w) {
        total += sm_m[i][w] == omlx_cuda::neg_inf() ? 0.f : sm_l[i][w] * exp2f(sm_m[i][w] - M);
      }
      T* op = out + ((int64_t(b) * qlen + ql[i]) * H + head[i]) * HEAD_DIM;
      for (int d = threadIdx.x; d < HEAD_DIM; d += WARPS * 32) {
        float acc = 0.f;
        for (int w = 0; w < WARPS; ++w) {
          acc += sm_m[i][w] == omlx_cuda::neg_inf() ? 0.f : sm_o[w][d] * exp2f(sm_m[i][w] - M);
        }
        op[d] = omlx_cuda::from_float<T>(total > 0.f ? acc / total : 0.f);
      }
    }
    __syncthreads();
  }
#undef DIM
"""

_SOURCE = _PROLOGUE + _KEY_A_WARP + _MERGE
_SOURCE_LANES = _PROLOGUE + _KEYS_A_WARP + _MERGE


_kernels: dict[tuple[bool, bool], Any] = {}


def _kernel(masked: bool, lanes: bool) -> Any:
    """The compiled-on-first-use kernel object, with or without a mask input, with a key
    a warp (the first loop) or a key a lane (LANE_KEYS)."""
    kernel = _kernels.get((masked, lanes))
    if kernel is None:
        source = (_SOURCE_LANES if lanes else _SOURCE).replace(
            "MASK_LOOKUP", _MASK_LOOKUP if masked else ""
        )
        names = ["queries", "keys", "values"] + (["mask"] if masked else [])
        kernel = mx.fast.cuda_kernel(
            name="omlx_attention" + ("_lanes" if lanes else "") + ("_masked" if masked else ""),
            input_names=names,
            output_names=["out"],
            source=source,
            header=_HEADER,
            ensure_row_contiguous=False,  # strides are read; no copy of the cache views
        )
        _kernels[masked, lanes] = kernel
    return kernel


def queries_per_block(group: int, queries: int, head_dim: int) -> int:
    """Query vectors one block holds in registers: about 32 floats a lane for each of
    the queries and the output accumulators. One query (a decode step) takes its whole
    GQA group when it fits; several take MULTI_QUERY_BLOCK (at most the register
    budget) whatever their number, so that every count of 2-16 queries runs the same
    compiled kernel."""
    budget = 32 // (head_dim // 32)
    if queries == 1:
        return max(1, min(group, budget))
    return max(1, min(budget, MULTI_QUERY_BLOCK or budget))


def template_queries(queries: int) -> int:
    """The kernel's QLEN: 1 compiled in for a decode step, 0 (read at run time) else."""
    return 1 if queries == 1 else 0


def _mask_4d(mask: mx.array) -> mx.array:
    if mask.ndim == 4:
        return mask  # a reshape to the same shape would still be a graph node
    return mask.reshape((1,) * (4 - mask.ndim) + tuple(mask.shape))


def takes_kernel(queries: Any, keys: Any, values: Any, mask: Any) -> bool:
    """Whether `kernel_attention` computes this call: 1-16 queries of a supported head
    size and dtype, and a mask it can read (None, "causal" or boolean over the keys).
    Left to MLX: a lone unmasked query (its own fused kernel) and half-precision queries
    under "causal" (cuDNN's fused attention: 0.44 ms against the kernel's 0.82 for 30
    layers of a 16-query verify on an H100, attention_kernel_check_h100.jsonl)."""
    if not (isinstance(queries, mx.array) and queries.ndim == 4 and keys.ndim == 4):
        return False
    b, heads, n, d = queries.shape
    if not 1 <= n <= MAX_QUERIES or d not in HEAD_DIMS:
        return False
    if queries.dtype not in _DTYPES or keys.dtype != queries.dtype:
        return False
    if values.dtype != queries.dtype or values.shape[-1] != d or keys.shape[-1] != d:
        return False
    kv = keys.shape[1]
    if heads % kv or keys.shape[2] < n or keys.shape[0] != b:
        return False
    if mask is None:
        return n > 1
    if isinstance(mask, str):
        return mask == "causal" and takes_causal(queries.dtype)
    if not isinstance(mask, mx.array) or mask.dtype != mx.bool_ or not 1 <= mask.ndim <= 4:
        return False
    m = (1,) * (4 - mask.ndim) + tuple(mask.shape)
    return m[0] in (1, b) and m[1] in (1, heads) and m[2] in (1, n) and m[3] == keys.shape[2]


def takes_causal(dtype: Any) -> bool:
    """Whether the kernel takes this dtype's "causal" calls (see takes_kernel)."""
    return dtype == mx.float32


def takes_batched_decode(queries: Any, keys: Any, values: Any, mask: Any) -> bool:
    """`takes_kernel` for one query a row under an array mask: the batched decode step.
    A DFlash verify (several queries) keeps its own path, whose numbers match plain
    decoding's exactly (row_attention.py)."""
    return (
        isinstance(mask, mx.array)
        and isinstance(queries, mx.array)
        and queries.ndim == 4
        and queries.shape[2] == 1
        and takes_kernel(queries, keys, values, mask)
    )


_scope = threading.local()  # per engine thread: another model's steps stay outside


@contextmanager
def verifying() -> Iterator[None]:
    """Graph building inside this block (a DFlash target pass) hands every call of 1-16
    queries to the kernel, where `use_kernel_attention(batched_decode_only=True)` took
    only batched decode steps. Attention runs when the model is called, not when MLX
    evaluates, so the block goes around the call."""
    _scope.depth = getattr(_scope, "depth", 0) + 1
    try:
        yield
    finally:
        _scope.depth -= 1


def inside_verifying() -> bool:
    """Whether this thread is building a graph inside `verifying()`."""
    return getattr(_scope, "depth", 0) > 0


def takes_decode_or_verify(queries: Any, keys: Any, values: Any, mask: Any) -> bool:
    """`takes_batched_decode`, and inside `verifying()` every call `takes_kernel` takes."""
    if inside_verifying():
        return takes_kernel(queries, keys, values, mask)
    return takes_batched_decode(queries, keys, values, mask)


# (dtype, heads, kv heads, QLEN, head dim, masked, causal, scale) -> the call's template
# and queries per block; the rows and the number of queries only change the grid.
_variants: dict[tuple, tuple[list, int]] = {}


def _variant(dtype: Any, heads: int, kv: int, n: int, d: int, mask: Any, scale: float):
    qlen = template_queries(n)
    pairs, prefetch = PAIRED_LOADS and d % 64 == 0, PREFETCH_NEXT_KEY
    key_batch = 1 if prefetch or d < KEY_BATCH_MIN_HEAD_DIM else max(1, int(KEY_BATCH))
    key = (dtype, heads, kv, qlen, d, isinstance(mask, mx.array), isinstance(mask, str), scale)
    key += (pairs, prefetch, key_batch, LANE_KEYS, MULTI_QUERY_BLOCK)
    found = _variants.get(key)
    if found is None:
        group = heads // kv
        qpb = queries_per_block(group, n, d)
        (scale_bits,) = struct.unpack("<i", struct.pack("<f", float(scale)))
        template = [
            ("T", dtype),
            ("HEAD_DIM", d),
            ("GQA", group),
            ("KV_HEADS", kv),
            ("QLEN", qlen),
            ("QPB", qpb),
            ("WARPS", WARPS),
            ("PAIRS", pairs),
            ("PREFETCH", prefetch),
            ("KEY_BATCH", key_batch),
            ("CAUSAL", isinstance(mask, str)),
            ("SCALE_BITS", scale_bits),
        ]
        found = _variants[key] = (template, qpb, LANE_KEYS)
    return found


def kernel_attention(
    queries: mx.array, keys: mx.array, values: mx.array, scale: float, mask: Any
) -> mx.array:
    """queries [B, H, L, D]; keys, values [B, KV, S, D]; mask None, "causal" or boolean
    (True = attend) broadcastable to [B, H, L, S]. Returns [B, H, L, D]."""
    b, heads, n, d = queries.shape
    kv = keys.shape[1]
    template, qpb, lanes = _variant(queries.dtype, heads, kv, n, d, mask, scale)
    chunks = -(-(heads // kv) * n // qpb)
    masked = isinstance(mask, mx.array)
    inputs = [queries, keys, values, _mask_4d(mask)] if masked else [queries, keys, values]
    (out,) = _kernel(masked, lanes)(
        inputs=inputs,
        template=template,
        grid=(WARPS * 32, b * kv, chunks),
        threadgroup=(WARPS * 32, 1, 1),
        output_shapes=[(b, n, heads, d)],
        output_dtypes=[queries.dtype],
    )
    return out.transpose(0, 2, 1, 3)


def use_kernel_attention(model: Any, batched_decode_only: bool = False) -> int:
    """Route `model`'s attention of 1-16 queries (or, `batched_decode_only`, of one
    query a row under a padding mask, and of 1-16 inside `verifying()`) through
    `kernel_attention` (CUDA only: the caller checks). Patches the modules its layers
    come from; idempotent. Returns how many modules were patched now. Modules with
    attention of their own (a DFlash draft's block attention) take the kernel too,
    unless `batched_decode_only`."""
    takes = takes_decode_or_verify if batched_decode_only else takes_kernel
    if not batched_decode_only:
        _set_own_flag(model, True)
    object.__setattr__(model, _IN_SCOPE if batched_decode_only else _EVERY_CALL, True)
    return patch_attention(model, takes, kernel_attention, _PATCHED)


def kernel_takes_verifies(model: Any) -> bool:
    """Whether `use_kernel_attention` routed `model`'s DFlash verifies (calls of 1-16
    queries, inside `verifying()` where only batched decode is patched) through the
    kernel."""
    return getattr(model, _EVERY_CALL, False) or getattr(model, _IN_SCOPE, False)


def _set_own_flag(model: Any, value: bool) -> None:
    for _, module in model.named_modules():
        if hasattr(module, KERNEL_ATTENTION_FLAG):
            setattr(module, KERNEL_ATTENTION_FLAG, value)


def warm_kernel_attention(model: Any) -> bool:
    """Compile the batched decode step's kernel now, at load, not in the first step of
    two rows: MLX 0.32 keeps no disk copy of a custom kernel (its own it does), so each
    process compiles it once, ~1.4 s on an H100 (the first two-row step of every HTTP
    run, serving_scale_h100/http-trace-kernel-*.jsonl.gz). Two rows of one token each,
    one of them left-padded, through the model itself. False where the model's caches
    are not all plain KV caches (then the first step compiles it)."""
    from mlx_lm.models.cache import BatchKVCache, KVCache, make_prompt_cache

    if not all(type(c) is KVCache for c in make_prompt_cache(model)):
        return False
    cache = [BatchKVCache(left_padding=[1, 0]) for _ in range(len(model.layers))]
    mx.eval(model(mx.array([[0, 1], [1, 1]]), cache=cache))
    mx.eval(model(mx.array([[1], [1]]), cache=cache))
    return True


def restore_kernel_attention(model: Any) -> None:
    _set_own_flag(model, False)
    for mark in (_EVERY_CALL, _IN_SCOPE):
        if mark in model.__dict__:
            object.__delattr__(model, mark)
    restore_attention(model, _PATCHED)


__all__ = [
    "KERNEL_ATTENTION_FLAG",
    "inside_verifying",
    "kernel_attention",
    "kernel_takes_verifies",
    "queries_per_block",
    "restore_kernel_attention",
    "takes_batched_decode",
    "takes_causal",
    "takes_decode_or_verify",
    "takes_kernel",
    "use_kernel_attention",
    "verifying",
    "warm_kernel_attention",
]
