// wire.cu: `--wire 1bit`'s columns (src/codec/onebit.rs) and `--wire bf16`'s values
// (src/codec/bf16.rs) packed and unpacked on the device, so that the copies between device and
// host, and the comm thread, carry the small form. Every kernel here computes bit for bit what
// its CPU side (src/ops/wire/cpu.rs, i.e. the codec) does.
#include "common.cuh"

// CNTK's 1-bit columns (codec::onebit): cols[3c..3c+3] = value start, length, first 32-bit
// word of column c's encoding [r+][r-][sign bits]. A thread per column: its sums run in the
// CPU's order, one value after the other, so that the encodings are the same bits. col_sq[c]:
// the sum of squares of the column's new residual (summed in double; each square is exact).
extern "C" __global__ void __launch_bounds__(THREADS)
wire_onebit_quantize(const unsigned int* __restrict__ cols, int ncols, const float* __restrict__ values,
                     float* __restrict__ residual, unsigned int* __restrict__ out,
                     float* __restrict__ col_sq) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= ncols) return;
  const unsigned int start = cols[3 * c], len = cols[3 * c + 1], word = cols[3 * c + 2];
  const float* v = values + start;
  float* r = residual + start;
  // x = value + residual, kept in the residual until the reconstruction values are known.
  float pos_sum = 0.0f, neg_sum = 0.0f;
  unsigned int pos_n = 0;
  for (unsigned int i = 0; i < len; ++i) {
    const float x = __fadd_rn(v[i], r[i]);
    r[i] = x;
    if (x >= 0.0f) {
      pos_sum = __fadd_rn(pos_sum, x);
      ++pos_n;
    } else {
      neg_sum = __fadd_rn(neg_sum, x);
    }
  }
  const unsigned int neg_n = len - pos_n;
  const float pos = pos_n > 0 ? pos_sum / (float)pos_n : 0.0f;
  const float neg = neg_n > 0 ? neg_sum / (float)neg_n : 0.0f;
  out[word] = __float_as_uint(pos);
  out[word + 1] = __float_as_uint(neg);
  double sq = 0.0;
  for (unsigned int w = 0; 32 * w < len; ++w) {
    const unsigned int end = imin(32, (int)(len - 32 * w));
    unsigned int bits = 0;
    for (unsigned int i = 0; i < end; ++i) {
      const float x = r[32 * w + i];
      const bool non_negative = x >= 0.0f;
      bits |= (unsigned int)non_negative << i;
      const float left = __fsub_rn(x, non_negative ? pos : neg);
      r[32 * w + i] = left;
      sq += (double)left * (double)left;
    }
    out[word + 2 + w] = bits;
  }
  col_sq[c] = (float)sq;
}

// out = the decoded columns: a block per column (grid.x = ncols), its values across threads.
extern "C" __global__ void __launch_bounds__(THREADS)
wire_onebit_decode(const unsigned int* __restrict__ cols, const unsigned int* __restrict__ enc,
                   float* __restrict__ out) {
  const int c = blockIdx.x;
  const unsigned int start = cols[3 * c], len = cols[3 * c + 1], word = cols[3 * c + 2];
  const float pos = __uint_as_float(enc[word]);
  const float neg = __uint_as_float(enc[word + 1]);
  for (unsigned int i = threadIdx.x; i < len; i += blockDim.x) {
    const unsigned int bits = enc[word + 2 + i / 32];
    out[start + i] = (bits >> (i & 31)) & 1u ? pos : neg;
  }
}

// out[i] = the bf16 of x[i] [n], two to a 32-bit word in memory order: round to nearest, ties
// to even, overflow to infinity, NaN kept quiet, as codec::bf16::encode (the integer form, so
// that it is the same bits as the host's whatever the compiler makes of float conversions).
extern "C" __global__ void __launch_bounds__(THREADS)
wire_bf16_encode(const float* __restrict__ x, int n, unsigned short* __restrict__ out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const unsigned int b = __float_as_uint(x[i]);
  const unsigned int rounded = (b + 0x7FFFu + ((b >> 16) & 1u)) >> 16;
  const bool nan = (b & 0x7FFFFFFFu) > 0x7F800000u;
  out[i] = (unsigned short)(nan ? ((b >> 16) | 0x0040u) : rounded);
}

// out[i] = the f32 of bf16 enc[i] [n] (exact).
extern "C" __global__ void __launch_bounds__(THREADS)
wire_bf16_decode(const unsigned short* __restrict__ enc, int n, float* __restrict__ out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = __uint_as_float((unsigned int)enc[i] << 16);
}
