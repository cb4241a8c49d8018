// layernorm.cu: layer norm over each sample's C x P values and its second-order terms for the
// gradient penalty (src/ops/layernorm/; the CPU reference is src/ops/layernorm/cpu.rs, the
// math in the module doc of src/ops/layernorm/mod.rs). Tensors are channel-major [C, B, P]:
// sample b's values are the C runs of P floats starting at (c * B + b) * P.
//
// The per-sample kernels run one block per sample: each thread accumulates a fixed stride of
// the sample's values in double, and ln_block_sum3 adds the warps' sums in a fixed order and
// gives every thread the totals, so the results are the same on every run. The final
// combination is in double, cast to float once, as on the CPU.
#include "common.cuh"

// Sum three doubles over the whole block (blockDim.x a multiple of 32, at most 1024); every
// thread gets the same totals. It ends with a barrier, so a kernel may call it again (its
// shared memory is reused).
__device__ __forceinline__ void ln_block_sum3(double& a, double& b, double& c) {
  __shared__ double part[3][32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  a = warp_sum(a);
  b = warp_sum(b);
  c = warp_sum(c);
  if (lane == 0) {
    part[0][warp] = a;
    part[1][warp] = b;
    part[2][warp] = c;
  }
  __syncthreads();
  a = 0.0;
  b = 0.0;
  c = 0.0;
  for (int w = 0; w < warps; ++w) {
    a += part[0][w];
    b += part[1][w];
    c += part[2][w];
  }
  __syncthreads();
}

// Where value i (of C * P) of sample b lies in a [C, B, P] tensor.
__device__ __forceinline__ long long ln_offset(int i, int b, int batch, int pixels) {
  const int c = i / pixels;
  return ((long long)c * batch + b) * pixels + (i - c * pixels);
}

// n = (x - mean) / sqrt(var + eps) per sample; stats [2B] = (mean, 1 / std). One block per
// sample, the variance from a second pass over x (as the CPU, not from the sum of squares).
extern "C" __global__ void __launch_bounds__(THREADS) ln_normalize(const float* __restrict__ x,
                                                  float* __restrict__ n, float* __restrict__ stats,
                                                  int channels, int batch, int pixels, float eps) {
  const int b = blockIdx.x;
  const int count = channels * pixels;
  double sum = 0.0, unused_a = 0.0, unused_b = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    sum += (double)x[ln_offset(i, b, batch, pixels)];
  }
  ln_block_sum3(sum, unused_a, unused_b);
  const double mean = sum / (double)count;
  double sq = 0.0;
  unused_a = 0.0;
  unused_b = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    const double d = (double)x[ln_offset(i, b, batch, pixels)] - mean;
    sq += d * d;
  }
  ln_block_sum3(sq, unused_a, unused_b);
  const double rstd = 1.0 / sqrt(sq / (double)count + (double)eps);
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    const long long o = ln_offset(i, b, batch, pixels);
    n[o] = (float)(((double)x[o] - mean) * rstd);
  }
  if (threadIdx.x == 0) {
    stats[b] = (float)mean;
    stats[batch + b] = (float)rstd;
  }
}

// y = gamma_c n + beta_c over n_total floats, channel c the c-th run of per_channel; the shift
// only where with_beta. Rounded twice, never fused, as the CPU computes it.
extern "C" __global__ void __launch_bounds__(THREADS) ln_affine(const float* __restrict__ n,
                                               const float* __restrict__ gamma_beta, int with_beta,
                                               float* __restrict__ y, long long n_total,
                                               long long per_channel, int channels) {
  GRID_STRIDE_LOOP(i, n_total) {
    const int c = (int)(i / per_channel);
    const float shift = with_beta ? gamma_beta[channels + c] : 0.0f;
    y[i] = __fadd_rn(__fmul_rn(gamma_beta[c], n[i]), shift);
  }
}

// dx = r (v - mean(v) - n mean(n v)) per sample, v = gamma_c dy where by_gamma, else dy. One
// block per sample.
extern "C" __global__ void __launch_bounds__(THREADS)
ln_backward_data(const float* __restrict__ n, const float* __restrict__ stats,
                 const float* __restrict__ gamma_beta, int by_gamma, const float* __restrict__ dy,
                 float* __restrict__ dx, int channels, int batch, int pixels) {
  const int b = blockIdx.x;
  const int count = channels * pixels;
  const double rstd = (double)stats[batch + b];
  double sum_v = 0.0, sum_nv = 0.0, unused = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    const long long o = ln_offset(i, b, batch, pixels);
    const double v = by_gamma ? (double)gamma_beta[i / pixels] * (double)dy[o] : (double)dy[o];
    sum_v += v;
    sum_nv += (double)n[o] * v;
  }
  ln_block_sum3(sum_v, sum_nv, unused);
  const double mean_v = sum_v / (double)count;
  const double nv = sum_nv / (double)count;
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    const long long o = ln_offset(i, b, batch, pixels);
    const double v = by_gamma ? (double)gamma_beta[i / pixels] * (double)dy[o] : (double)dy[o];
    dx[o] = (float)(rstd * (v - mean_v - (double)n[o] * nv));
  }
}

// dgamma_beta [2C] (+)= (sum dy n, sum dy) over channel c's per_channel values, contiguous
// from c * per_channel; (sum dy n, 0) unless with_beta. One block per channel.
extern "C" __global__ void __launch_bounds__(THREADS)
ln_param_grad(const float* __restrict__ n, const float* __restrict__ dy, int with_beta,
              float* __restrict__ dgamma_beta, int accumulate, int channels, long long per_channel) {
  const int c = blockIdx.x;
  const float* nc = n + (long long)c * per_channel;
  const float* dc = dy + (long long)c * per_channel;
  double dgamma = 0.0, dbeta = 0.0;
  for (long long i = threadIdx.x; i < per_channel; i += blockDim.x) {
    dgamma += (double)nc[i] * (double)dc[i];
    dbeta += (double)dc[i];
  }
  block_sum2(dgamma, dbeta);
  if (threadIdx.x == 0) {
    const float base_g = accumulate ? dgamma_beta[c] : 0.0f;
    dgamma_beta[c] = base_g + (float)dgamma;
    const float base_b = accumulate ? dgamma_beta[channels + c] : 0.0f;
    dgamma_beta[channels + c] = base_b + (with_beta ? (float)dbeta : 0.0f);
  }
}

// The adjoint of value o's n in the penalty's pass: gamma dy (dy null: zero), and what
// tn = r (P ta - n <n, ta> / N) adds through n (penalty_adjoint in cpu.rs).
__device__ __forceinline__ double ln_adjoint_of_n(long long o, double gamma, const float* dy,
                                                  const float* dty, const float* ta, double rstd,
                                                  double n_ta, double n_dtn) {
  const double direct = dy ? gamma * (double)dy[o] : 0.0;
  return direct - rstd * (n_ta * (gamma * (double)dty[o]) + n_dtn * (double)ta[o]);
}

// da = J dn - r <tn, dtn> n / N per sample, dtn = gamma dty, dn from ln_adjoint_of_n (the
// derivative of <gamma dty, J ta> through r adds the last term). One block per sample: one
// pass for <n, ta>, <n, dtn>, <tn, dtn>, one for mean(dn) and mean(n dn), one writing da.
extern "C" __global__ void __launch_bounds__(THREADS)
ln_penalty_adjoint(const float* __restrict__ n, const float* __restrict__ stats,
                   const float* __restrict__ gamma_beta, const float* __restrict__ ta,
                   const float* __restrict__ tn, const float* __restrict__ dty,
                   const float* __restrict__ dy, float* __restrict__ da, int channels, int batch,
                   int pixels) {
  const int b = blockIdx.x;
  const int count = channels * pixels;
  const double rstd = (double)stats[batch + b];
  double n_ta = 0.0, n_dtn = 0.0, tn_dtn = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    const long long o = ln_offset(i, b, batch, pixels);
    const double dtn = (double)gamma_beta[i / pixels] * (double)dty[o];
    n_ta += (double)n[o] * (double)ta[o];
    n_dtn += (double)n[o] * dtn;
    tn_dtn += (double)tn[o] * dtn;
  }
  ln_block_sum3(n_ta, n_dtn, tn_dtn);
  n_ta /= (double)count;
  n_dtn /= (double)count;
  double sum_dn = 0.0, sum_n_dn = 0.0, unused = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    const long long o = ln_offset(i, b, batch, pixels);
    const double gamma = (double)gamma_beta[i / pixels];
    const double dn = ln_adjoint_of_n(o, gamma, dy, dty, ta, rstd, n_ta, n_dtn);
    sum_dn += dn;
    sum_n_dn += (double)n[o] * dn;
  }
  ln_block_sum3(sum_dn, sum_n_dn, unused);
  const double mean_dn = sum_dn / (double)count;
  const double n_dn = sum_n_dn / (double)count;
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    const long long o = ln_offset(i, b, batch, pixels);
    const double gamma = (double)gamma_beta[i / pixels];
    const double dn = ln_adjoint_of_n(o, gamma, dy, dty, ta, rstd, n_ta, n_dtn);
    const double ni = (double)n[o];
    da[o] = (float)(rstd * (dn - mean_dn - ni * n_dn) - rstd * tn_dtn * ni / (double)count);
  }
}
