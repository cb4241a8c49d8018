// activation.cu: pointwise activations (src/ops/activation/cpu.rs); codes in common.cuh.
#include "common.cuh"

// x[i] = act(x[i]), in place.
extern "C" __global__ void __launch_bounds__(THREADS) act_forward(float* __restrict__ x, long long n, int act) {
  GRID_STRIDE_LOOP(i, n) { x[i] = act_apply(act, x[i]); }
}

// dy[i] *= act'(.) computed from the saved output y[i].
extern "C" __global__ void __launch_bounds__(THREADS)
act_backward(const float* __restrict__ y, float* __restrict__ dy, long long n, int act) {
  GRID_STRIDE_LOOP(i, n) { dy[i] *= act_grad_from_output(act, y[i]); }
}
