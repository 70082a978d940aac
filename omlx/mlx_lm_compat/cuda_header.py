"""The device helpers omlx's custom CUDA kernels share (`mx.fast.cuda_kernel` header).

Conversions by name: a bare cast to __nv_bfloat16 needs CUDA's implicit conversions on,
which MLX's NVRTC options leave off. Each kernel gets its own copy (MLX compiles every
kernel with its header), so one namespace serves them all.
"""

from __future__ import annotations

CONVERSIONS = """
namespace omlx_cuda {
__device__ inline float neg_inf() { return __int_as_float(int(0xff800000u)); }
__device__ inline float to_float(float x) { return x; }
__device__ inline float to_float(__half x) { return __half2float(x); }
__device__ inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ inline T from_float(float x);
template <> __device__ inline float from_float<float>(float x) { return x; }
template <> __device__ inline __half from_float<__half>(float x) { return __float2half(x); }
template <> __device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16(x);
}
}  // namespace omlx_cuda
"""

__all__ = ["CONVERSIONS"]
