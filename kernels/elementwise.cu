// elementwise.cu: fill, scale, axpy over a contiguous range (src/ops/elementwise/cpu.rs).
#include "common.cuh"

// x[i] = value
extern "C" __global__ void __launch_bounds__(THREADS) fill_f32(float* __restrict__ x, long long n, float value) {
  GRID_STRIDE_LOOP(i, n) { x[i] = value; }
}

// x[i] *= a
extern "C" __global__ void __launch_bounds__(THREADS) scale_f32(float* __restrict__ x, long long n, float a) {
  GRID_STRIDE_LOOP(i, n) { x[i] *= a; }
}

// y[i] += a * x[i]
extern "C" __global__ void __launch_bounds__(THREADS)
axpy_f32(float a, const float* __restrict__ x, float* __restrict__ y, long long n) {
  GRID_STRIDE_LOOP(i, n) { y[i] += a * x[i]; }
}
