// common.cuh: helpers shared by every kernel family (activations, fast division, reductions).
//
// Compiled at run time by NVRTC (src/backend/cuda/nvrtc.rs) together with "params.cuh", which
// is generated from the Rust `#[repr(C)]` structs so that both sides always agree on layout.
// The same sources also compile as host C++ against kernels/emu/cuda_emu.h (the test emulator),
// so only plain C++17 and the CUDA built-ins that shim provides are used here.
#pragma once

#include "params.cuh"

#define THREADS 256

// Activation codes: keep in sync with Activation::code() in src/ops/activation/mod.rs.
#define ACT_NONE 0
#define ACT_RELU 1
#define ACT_LEAKY_RELU 2
#define ACT_TANH 3
#define ACT_SIGMOID 4
#define LEAKY_SLOPE 0.2f

__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ int imax(int a, int b) { return a > b ? a : b; }

// Activation::apply in src/ops/activation/mod.rs.
__device__ __forceinline__ float act_apply(int act, float x) {
  switch (act) {
    case ACT_RELU: return fmaxf(x, 0.0f);
    case ACT_LEAKY_RELU: return x > 0.0f ? x : LEAKY_SLOPE * x;
    case ACT_TANH: return tanhf(x);
    case ACT_SIGMOID: return 1.0f / (1.0f + expf(-x));
    default: return x;
  }
}

// Activation::grad_from_output: the derivative written in terms of the output y.
__device__ __forceinline__ float act_grad_from_output(int act, float y) {
  switch (act) {
    case ACT_RELU: return y > 0.0f ? 1.0f : 0.0f;
    case ACT_LEAKY_RELU: return y > 0.0f ? 1.0f : LEAKY_SLOPE;
    case ACT_TANH: return 1.0f - y * y;
    case ACT_SIGMOID: return y * (1.0f - y);
    default: return 1.0f;
  }
}

// n / d for 0 <= n < 2^31 with a multiply and a shift instead of a division (the round-up
// method that CUTLASS's FastDivmod uses). FastDiv is filled on the host by FastDiv::new in
// src/backend/cuda/kernel_table.rs, where a test checks it against real division.
__device__ __forceinline__ int fdiv(int n, FastDiv f) {
  return f.d == 1u ? n : (int)(__umulhi((unsigned int)n, f.mul) >> f.shr);
}
__device__ __forceinline__ void fdivmod(int n, FastDiv f, int& q, int& r) {
  q = fdiv(n, f);
  r = n - q * (int)f.d;
}

// Sum over the 32 lanes of a warp, in a fixed butterfly order (deterministic).
__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum two doubles over the whole block (blockDim.x a multiple of 32, at most 1024); the
// results are valid in thread 0. Called at most once per kernel (it owns its shared memory).
__device__ __forceinline__ void block_sum2(double& a, double& b) {
  __shared__ double part_a[32];
  __shared__ double part_b[32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  a = warp_sum(a);
  b = warp_sum(b);
  if (lane == 0) {
    part_a[warp] = a;
    part_b[warp] = b;
  }
  __syncthreads();
  if (warp == 0) {
    a = lane < warps ? part_a[lane] : 0.0;
    b = lane < warps ? part_b[lane] : 0.0;
    a = warp_sum(a);
    b = warp_sum(b);
  }
}

// Grid-stride loop bounds for elementwise kernels: 64-bit so that no length can overflow.
#define GRID_STRIDE_LOOP(i, n)                                                        \
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (long long)(n); \
       i += (long long)gridDim.x * blockDim.x)
