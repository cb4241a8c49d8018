// adam.cu: fused Adam step, PyTorch's formula without weight decay (AdamStep::update in
// src/ops/adam/mod.rs): one pass over parameter, gradient and both moments.
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(THREADS)
adam_step(float* __restrict__ param, const float* __restrict__ grad, float* __restrict__ m,
          float* __restrict__ v, long long n, float beta1, float beta2, float eps,
          float step_size, float bias2_sqrt) {
  GRID_STRIDE_LOOP(i, n) {
    const float g = grad[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float denom = sqrtf(vi) / bias2_sqrt + eps;
    param[i] -= step_size * mi / denom;
  }
}
