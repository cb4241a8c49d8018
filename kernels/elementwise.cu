// elementwise.cu: axpy over a contiguous range (src/ops/elementwise/cpu.rs).
#include "common.cuh"

// y[i] += a * x[i]
extern "C" __global__ void __launch_bounds__(THREADS)
axpy_f32(float a, const float* __restrict__ x, float* __restrict__ y, long long n) {
  GRID_STRIDE_LOOP(i, n) { y[i] += a * x[i]; }
}
