"""The CUDA source of omlx's attention kernel (attention_kernel.py compiles and launches it).

Two loops share a prologue (a block's queries, its keys' and values' rows) and the merge
of the warps' partial softmaxes: a key a warp (SOURCE_KEY_A_WARP, the first kernel) and
a key a lane (SOURCE_KEY_A_LANE, the default). MASK_LOOKUP replaces the word MASK_LOOKUP
in either when the call has a mask array. The compile-time switches (PAIRS, PREFETCH,
KEY_BATCH, QPB, ...) are template arguments set by attention_kernel._variant. A test
compiles the same strings with g++ and runs them on the host
(tests/mlx/engine/test_attention_kernel.py).
"""

from __future__ import annotations

MASK_LOOKUP = """
      if (allowed) {
        const int64_t mi = (mask_shape[0] == 1 ? 0 : b) * mask_strides[0]
            + (mask_shape[1] == 1 ? 0 : head[i]) * mask_strides[1]
            + (mask_shape[2] == 1 ? 0 : ql[i]) * mask_strides[2]
            + s * mask_strides[3];
        allowed = mask[mi];
      }
"""

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

SOURCE_KEY_A_WARP = _PROLOGUE + _KEY_A_WARP + _MERGE
SOURCE_KEY_A_LANE = _PROLOGUE + _KEYS_A_WARP + _MERGE

__all__ = ["MASK_LOOKUP", "SOURCE_KEY_A_LANE", "SOURCE_KEY_A_WARP"]
