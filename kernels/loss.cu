// loss.cu: mean binary cross-entropy with logits against a constant target
// (src/ops/loss/cpu.rs). One block: the logits are one per image (a few hundred).
#include "common.cuh"

// sigmoid(x) written so that exp never overflows (src/ops/loss/mod.rs).
__device__ __forceinline__ float stable_sigmoid(float x) {
  if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
  const float e = expf(x);
  return e / (1.0f + e);
}

// dlogits[i] = (sigmoid(x_i) - target) / n; out[0] = mean loss, out[1] = mean sigmoid.
// Sums in double over a fixed thread/lane order, so the result does not vary run to run.
// Launched with a single block of THREADS threads.
extern "C" __global__ void __launch_bounds__(THREADS) bce_with_logits(const float* __restrict__ logits, float target,
                                                     float* __restrict__ dlogits,
                                                     float* __restrict__ out, int n) {
  const float nf = (float)imax(n, 1);
  double loss = 0.0;
  double prob = 0.0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float x = logits[i];
    const float s = stable_sigmoid(x);
    loss += (double)(fmaxf(x, 0.0f) - x * target + log1pf(expf(-fabsf(x))));
    prob += (double)s;
    dlogits[i] = (s - target) / nf;
  }
  block_sum2(loss, prob);
  if (threadIdx.x == 0) {
    out[0] = (float)(loss / (double)nf);
    out[1] = (float)(prob / (double)nf);
  }
}
