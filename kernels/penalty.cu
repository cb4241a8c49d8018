// penalty.cu: the WGAN-GP critic's terms of src/ops/penalty/ (the CPU reference is
// src/ops/penalty/cpu.rs). Images are channel-major [C, B, P]: run r = c * B + b of P floats is
// channel c of sample b. Sums in double, reduced in a fixed order.
#include "common.cuh"

// doutputs[i] = sign / n; out[0] = mean(outputs). One block of THREADS threads.
extern "C" __global__ void __launch_bounds__(THREADS) critic_mean(const float* __restrict__ outputs, float sign,
                                                 float* __restrict__ doutputs, float* __restrict__ out,
                                                 int n) {
  const float nf = (float)imax(n, 1);
  double sum = 0.0;
  double unused = 0.0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    sum += (double)outputs[i];
    doutputs[i] = sign / nf;
  }
  block_sum2(sum, unused);
  if (threadIdx.x == 0) out[0] = (float)(sum / (double)nf);
}

// out = eps[b] * real + (1 - eps[b]) * fake over n floats of runs of p.
extern "C" __global__ void __launch_bounds__(THREADS) interpolate(const float* __restrict__ real,
                                                 const float* __restrict__ fake,
                                                 const float* __restrict__ eps,
                                                 float* __restrict__ out, long long n, long long p,
                                                 int batch) {
  GRID_STRIDE_LOOP(i, n) {
    const float e = eps[(i / p) % batch];
    out[i] = e * real[i] + (1.0f - e) * fake[i];
  }
}

// norms[b] = ||g_b|| over the channels runs of sample b. One block per sample.
extern "C" __global__ void __launch_bounds__(THREADS) penalty_norms(const float* __restrict__ g,
                                                   float* __restrict__ norms, long long p, int batch,
                                                   int channels) {
  const int b = blockIdx.x;
  double sq = 0.0;
  double unused = 0.0;
  for (int c = 0; c < channels; ++c) {
    const float* x = g + ((long long)c * batch + b) * p;
    for (long long j = threadIdx.x; j < p; j += blockDim.x) sq += (double)x[j] * (double)x[j];
  }
  block_sum2(sq, unused);
  if (threadIdx.x == 0) norms[b] = (float)sqrt(sq);
}

// seed = 2 lambda / B (||g_b|| - 1) g / ||g_b|| (0 where ||g_b|| = 0: seed_factor in
// src/ops/penalty/mod.rs).
extern "C" __global__ void __launch_bounds__(THREADS) penalty_seed(const float* __restrict__ g,
                                                  const float* __restrict__ norms,
                                                  float* __restrict__ seed, float lambda, long long n,
                                                  long long p, int batch) {
  const double scale = (double)lambda / (double)batch;
  GRID_STRIDE_LOOP(i, n) {
    const double norm = (double)norms[(i / p) % batch];
    const double f = norm > 0.0 ? scale * 2.0 * (norm - 1.0) / norm : 0.0;
    seed[i] = (float)f * g[i];
  }
}

// out[0] = lambda * mean (||g_b|| - 1)^2, out[1] = mean ||g_b||. One block of THREADS threads.
extern "C" __global__ void __launch_bounds__(THREADS) penalty_stats(const float* __restrict__ norms,
                                                   float* __restrict__ out, float lambda, int batch) {
  double penalty = 0.0;
  double sum = 0.0;
  for (int b = threadIdx.x; b < batch; b += blockDim.x) {
    const double v = (double)norms[b];
    penalty += (v - 1.0) * (v - 1.0);
    sum += v;
  }
  block_sum2(penalty, sum);
  if (threadIdx.x == 0) {
    out[0] = (float)((double)lambda * penalty / (double)batch);
    out[1] = (float)(sum / (double)batch);
  }
}
