// loss.cu: the losses of src/ops/loss/, mean over the batch: binary cross-entropy with
// logits against a constant target, and softmax cross-entropy over class logits. One block
// each: the logits are a few per image (a few hundred images).
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

// Softmax cross-entropy over logits [classes, batch] (channel-major: class c of sample i at
// c*batch + i) against labels [batch], class indices held as floats (src/ops/loss/cpu.rs):
// dlogits = (softmax(x) - onehot(label)) / batch; out[0] = mean loss, out[1] = accuracy.
// Each thread takes samples i, i + blockDim.x, ..., so consecutive threads read consecutive
// floats of each class row. Per sample in float after subtracting the largest logit (exp
// never overflows); sums in double, reduced in a fixed order. One block of THREADS threads.
extern "C" __global__ void __launch_bounds__(THREADS) softmax_xent(const float* __restrict__ logits,
                                                  const float* __restrict__ labels,
                                                  float* __restrict__ dlogits,
                                                  float* __restrict__ out, int batch, int classes) {
  const float nf = (float)imax(batch, 1);
  double loss = 0.0;
  double correct = 0.0;
  for (int i = threadIdx.x; i < batch; i += blockDim.x) {
    const float* x = logits + i;  // class c at x[c * batch]
    // Ties: the lowest class wins (strictly greater replaces), as on the CPU.
    float m = x[0];
    int arg = 0;
    for (int c = 1; c < classes; ++c) {
      const float v = x[c * batch];
      if (v > m) {
        m = v;
        arg = c;
      }
    }
    float sum = 0.0f;
    for (int c = 0; c < classes; ++c) sum += expf(x[c * batch] - m);
    // The launcher has refused labels outside 0..classes, which would index past the logits.
    const int label = (int)labels[i];
    loss += (double)(logf(sum) - (x[label * batch] - m));
    correct += arg == label ? 1.0 : 0.0;
    const float inv = 1.0f / sum;
    for (int c = 0; c < classes; ++c) {
      const float onehot = c == label ? 1.0f : 0.0f;
      dlogits[c * batch + i] = (expf(x[c * batch] - m) * inv - onehot) / nf;
    }
  }
  block_sum2(loss, correct);
  if (threadIdx.x == 0) {
    out[0] = (float)(loss / (double)nf);
    out[1] = (float)(correct / (double)nf);
  }
}
