// batchnorm.cu: batch norm over channel-major [C, count] data (src/ops/batchnorm/cpu.rs).
//
// Reductions (forward statistics, backward sums) run as a grid of (splits, C) blocks: block
// (s, c) reduces chunk s of channel c in double with warp shuffles and writes one partial
// pair; bn_finalize then adds the partials of each channel in split order. No atomics, so
// the sums are the same on every run. Elementwise kernels use the same (splits, C) grid and
// recompute their per-channel scalars once per block.
#include "common.cuh"

// Block (s, c) of a reduction: partial[(c * splits + s) * 2 + {0, 1}] = (sum a, sum b).
__device__ __forceinline__ void store_partial(double* __restrict__ partial, double a, double b) {
  block_sum2(a, b);
  if (threadIdx.x == 0) {
    const int slot = blockIdx.y * gridDim.x + blockIdx.x;
    partial[2 * slot] = a;
    partial[2 * slot + 1] = b;
  }
}

// Partial (sum x, sum x^2) of chunk blockIdx.x of channel blockIdx.y.
extern "C" __global__ void __launch_bounds__(THREADS) bn_stats_partial(const float* __restrict__ x,
                                                      double* __restrict__ partial, int count,
                                                      int chunk) {
  const float* xc = x + (long long)blockIdx.y * count;
  const int end = imin(count, (blockIdx.x + 1) * chunk);
  double s = 0.0, q = 0.0;
  for (int i = blockIdx.x * chunk + threadIdx.x; i < end; i += blockDim.x) {
    const double v = (double)xc[i];
    s += v;
    q += v * v;
  }
  store_partial(partial, s, q);
}

// out[c] = sum of component 0 over the splits of channel c, out[C + c] = component 1.
extern "C" __global__ void __launch_bounds__(THREADS) bn_finalize(const double* __restrict__ partial,
                                                 float* __restrict__ out, int channels,
                                                 int splits) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  double a = 0.0, b = 0.0;
  for (int s = 0; s < splits; ++s) {
    a += partial[2 * (c * splits + s)];
    b += partial[2 * (c * splits + s) + 1];
  }
  out[c] = (float)a;
  out[channels + c] = (float)b;
}

// x * scale + shift rounded twice, as the CPU backend computes it, not as one fused
// multiply-add: when a channel's variance is tiny (one element per channel) the two terms
// cancel, and a fused and an unfused result then differ by far more than 1e-4 of y.
__device__ __forceinline__ float affine_rn(float x, float scale, float shift) {
  return __fadd_rn(__fmul_rn(x, scale), shift);
}

// Normalize with the batch statistics (sum, sum of squares over stats_count elements), apply
// gamma/beta and the activation. Block (0, c) also writes saved [2C] = (mean, 1/std) and updates
// running [2C] = (mean, var) with the unbiased variance, exactly as forward_apply on the CPU.
extern "C" __global__ void __launch_bounds__(THREADS)
bn_apply(const float* __restrict__ x, const float* __restrict__ stats, double stats_count,
         const float* __restrict__ gamma, const float* __restrict__ beta, int act,
         float* __restrict__ y, float* __restrict__ saved, float* __restrict__ running,
         int channels, int count, int chunk, float eps, float momentum) {
  const int c = blockIdx.y;
  const double mean = (double)stats[c] / stats_count;
  const double var = fmax((double)stats[channels + c] / stats_count - mean * mean, 0.0);
  const float mean_f = (float)mean;
  const float invstd_f = (float)(1.0 / sqrt(var + (double)eps));
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    const double m = (double)momentum;
    const double unbias = stats_count > 1.0 ? stats_count / (stats_count - 1.0) : 1.0;
    saved[c] = mean_f;
    saved[channels + c] = invstd_f;
    running[c] = (float)((1.0 - m) * (double)running[c] + m * mean);
    running[channels + c] = (float)((1.0 - m) * (double)running[channels + c] + m * var * unbias);
  }
  const float scale = gamma[c] * invstd_f;
  const float shift = __fsub_rn(beta[c], __fmul_rn(mean_f, scale));
  const long long base = (long long)c * count;
  const int end = imin(count, (blockIdx.x + 1) * chunk);
  for (int i = blockIdx.x * chunk + threadIdx.x; i < end; i += blockDim.x) {
    y[base + i] = act_apply(act, affine_rn(x[base + i], scale, shift));
  }
}

// Evaluation: normalize with the running statistics.
extern "C" __global__ void __launch_bounds__(THREADS)
bn_eval(const float* __restrict__ x, const float* __restrict__ gamma,
        const float* __restrict__ beta, const float* __restrict__ running, int act,
        float* __restrict__ y, int channels, int count, int chunk, float eps) {
  const int c = blockIdx.y;
  const float invstd = 1.0f / sqrtf(running[channels + c] + eps);
  const float scale = gamma[c] * invstd;
  const float shift = __fsub_rn(beta[c], __fmul_rn(running[c], scale));
  const long long base = (long long)c * count;
  const int end = imin(count, (blockIdx.x + 1) * chunk);
  for (int i = blockIdx.x * chunk + threadIdx.x; i < end; i += blockDim.x) {
    y[base + i] = act_apply(act, affine_rn(x[base + i], scale, shift));
  }
}

// Backward part 1: dy -> dz = dy * act'(y) in place, and partial (sum dz*xhat, sum dz).
extern "C" __global__ void __launch_bounds__(THREADS)
bn_backward_reduce_partial(const float* __restrict__ x, const float* __restrict__ y, int act,
                           const float* __restrict__ saved, float* __restrict__ dy,
                           double* __restrict__ partial, int channels, int count, int chunk) {
  const int c = blockIdx.y;
  const float mean = saved[c];
  const float invstd = saved[channels + c];
  const long long base = (long long)c * count;
  const int end = imin(count, (blockIdx.x + 1) * chunk);
  double s_dz_xhat = 0.0, s_dz = 0.0;
  for (int i = blockIdx.x * chunk + threadIdx.x; i < end; i += blockDim.x) {
    const float d = dy[base + i] * act_grad_from_output(act, y[base + i]);
    dy[base + i] = d;
    s_dz += (double)d;
    s_dz_xhat += (double)(d * (x[base + i] - mean) * invstd);
  }
  store_partial(partial, s_dz_xhat, s_dz);
}

// Backward part 2: dx = gamma/std * (dz - mean(dz) - xhat * mean(dz*xhat)), the means taken
// over sums_count elements (more than count when the sums were averaged over ranks).
extern "C" __global__ void __launch_bounds__(THREADS)
bn_backward_data(const float* __restrict__ x, const float* __restrict__ dz,
                 const float* __restrict__ saved, const float* __restrict__ gamma,
                 const float* __restrict__ sums, double sums_count, float* __restrict__ dx,
                 int channels, int count, int chunk) {
  const int c = blockIdx.y;
  const float mean = saved[c];
  const float invstd = saved[channels + c];
  const float mean_dz_xhat = (float)((double)sums[c] / sums_count);
  const float mean_dz = (float)((double)sums[channels + c] / sums_count);
  const float k = gamma[c] * invstd;
  const long long base = (long long)c * count;
  const int end = imin(count, (blockIdx.x + 1) * chunk);
  for (int i = blockIdx.x * chunk + threadIdx.x; i < end; i += blockDim.x) {
    const float xhat = (x[base + i] - mean) * invstd;
    dx[base + i] = k * (dz[base + i] - mean_dz - xhat * mean_dz_xhat);
  }
}
