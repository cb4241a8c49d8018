// elementwise.cu: axpy and copy over a contiguous range (src/ops/elementwise/cpu.rs).
#include "common.cuh"

// y[i] += a * x[i]
extern "C" __global__ void __launch_bounds__(THREADS)
axpy_f32(float a, const float* __restrict__ x, float* __restrict__ y, long long n) {
  GRID_STRIDE_LOOP(i, n) { y[i] += a * x[i]; }
}

// y[i] = x[i]: a device copy a CUDA graph records as a kernel node (src/backend/cuda/graph.rs).
extern "C" __global__ void __launch_bounds__(THREADS)
copy_f32(const float* __restrict__ x, float* __restrict__ y, long long n) {
  GRID_STRIDE_LOOP(i, n) { y[i] = x[i]; }
}
