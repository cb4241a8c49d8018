// conv.cu: 2-D convolution as implicit GEMM with shared-memory tiling (no im2col buffer).
//
// Layouts (src/ops/conv/mod.rs): x [C_in, B, H, W], w [C_out, C_in, k, k], y [C_out, B, OH, OW].
// One tiled GEMM C[M, N] = sum_k A[M, k] * B[k, N] serves every direction; only how A and B
// are gathered from memory and where C is written differ (MODE):
//
//   MODE_FWD            y = conv(x, w)      M = C_out, N = B*OH*OW, K = C_in*k*k
//                       A = w (row-major), B = im2col(x) gathered on the fly.
//   MODE_BWD_DATA       dx = conv_transpose(dy, w), split into stride*stride phases
//                       (blockIdx.z): output pixels with ih % s == ph, iw % s == pw only meet
//                       kernel taps ki = kh0 + s*th, so each phase is a dense GEMM with
//                       M = C_in, N = B*ceil(H/s)*ceil(W/s), K = C_out*ceil(k/s)^2 and every
//                       dx element is written exactly once (no col2im, no atomics).
//   MODE_BWD_DATA_DENSE the same when the conv covers its whole input (OH = OW = 1, k = H = W,
//                       pad 0, as in the first ConvTranspose of G): dx_col = w^T dy,
//                       M = C_in*k*k, N = B, K = C_out, written straight into dx.
//   MODE_BWD_WEIGHT     dw = dy * im2col(x)^T, M = C_out, N = C_in*k*k, K = B*OH*OW.
//
// FWD and BWD_WEIGHT can split K over blockIdx.z: each split writes its partial tile to a
// workspace and conv_splitk_reduce adds the splits in order (deterministic, no atomics).
//
// Tiles: BM x BN outputs per block of 256 threads, each thread TM x TN of them, K in steps of
// BK = 16 through double-buffered shared memory, with the next step's global loads in flight
// (in registers) while the current step is multiplied.
//
// PREC says how a tile is multiplied (`--precision`, src/ops/conv/cuda.rs):
//   PREC_FP32    FFMA on the CUDA cores, every tile shape.
//   PREC_TF32    tensor-core MMAs (tensor_core.cuh) on operands rounded to TF32 as they are
//                stored to shared memory: products of 10-bit mantissas, sums in f32.
//   PREC_3XTF32  CUTLASS's error-corrected TF32: each operand split as big = tf32(x) and
//                small = tf32(x - big), and a*b as small*big + big*small + big*big (the
//                small*small term, 2^-22 of the product, is dropped): FP32 accuracy.
// The tensor-core kernels exist for the two wide tiles, whose 8 warps each own a
// (BM/2) x (BN/4) piece; the narrow tiles (M <= 16) stay FFMA in every precision.
#include "common.cuh"
#include "tensor_core.cuh"

#define MODE_FWD 0
#define MODE_BWD_DATA 1
#define MODE_BWD_DATA_DENSE 2
#define MODE_BWD_WEIGHT 3
#define BK 16
#define PREC_FP32 0
#define PREC_TF32 1
#define PREC_3XTF32 2

template <int MODE, int BM, int BN, int TM, int TN, int PREC>
__device__ __forceinline__ void conv_gemm(const ConvParams& p, const float* __restrict__ A,
                                          const float* __restrict__ B, float* __restrict__ C) {
  static_assert((BM / TM) * (BN / TN) == THREADS, "a tile must use all THREADS threads");
  // Tensor cores: 8 warps as 2 x 4, each (BM/2) x (BN/4) outputs in 16 x 8 MMA tiles, which
  // puts TM = 2 * (BM/2)/16 and TN = 2 * (BN/4)/8 accumulators in each thread.
  static_assert(PREC == PREC_FP32 || (THREADS == 256 && TM * 16 == BM && TN * 16 == BN),
                "a tensor-core tile is 8 warps of (BM/2) x (BN/4) outputs");
  static_assert(THREADS % BN == 0 && THREADS % BK == 0 && THREADS % BM == 0, "load mappings");
  constexpr int A_LOADS = (BM * BK + THREADS - 1) / THREADS;
  constexpr int B_LOADS = BK * BN / THREADS;
  constexpr bool A_ALONG_M = MODE == MODE_BWD_DATA_DENSE;  // coalesce A reads along m
  constexpr bool B_ALONG_K = MODE == MODE_BWD_WEIGHT;      // coalesce B reads along k

  // Padded by 4 floats so that column-wise stores hit different banks; rows stay 16-byte
  // aligned for vector loads. Two of each: step t multiplies one while step t+1's tile is
  // stored into the other, so each K step needs one barrier instead of two. The MMA
  // fragments read rows k = t and columns g (t < 4, g < 8): a pad of 8 puts those 32 reads
  // in 32 different banks.
  constexpr int PAD = PREC == PREC_FP32 ? 4 : 8;
  __shared__ __align__(16) float As[2][BK][BM + PAD];
  __shared__ __align__(16) float Bs[2][BK][BN + PAD];

  const int tid = threadIdx.x;
  const int m0 = blockIdx.y * BM;
  const int n0 = blockIdx.x * BN;
  const int M = p.gemm_m;
  const int N = p.gemm_n;
  const int K = p.gemm_k;
  const int s = p.stride;
  const int H = p.h_in, W = p.w_in, OH = p.h_out, OW = p.w_out;
  const int plane_in = p.batch * H * W;     // one channel of x / dx
  const int plane_out = p.batch * OH * OW;  // one channel of y / dy

  // This block's reduction range: one split of [0, K) (FWD, BWD_WEIGHT) or all of it.
  int kbeg = 0, kend = K;
  // BWD_DATA phase: output rows ih = ph + s*i' meet kernel rows ki = kh0 + s*th at
  // oh = i' + qh - th (and the same for columns).
  int ph = 0, pw = 0, kh0 = 0, kw0 = 0, qh = 0, qw = 0;
  if constexpr (MODE == MODE_BWD_DATA) {
    ph = (int)blockIdx.z / s;
    pw = (int)blockIdx.z % s;
    kh0 = (ph + p.pad) % s;
    kw0 = (pw + p.pad) % s;
    qh = (ph + p.pad - kh0) / s;
    qw = (pw + p.pad - kw0) / s;
  } else if constexpr (MODE == MODE_FWD || MODE == MODE_BWD_WEIGHT) {
    kbeg = (int)blockIdx.z * p.k_chunk;
    kend = imin(K, kbeg + p.k_chunk);
  }

  // ---- which elements this thread loads ----
  // A along k: column a_k = tid % BK, rows a_m + i*(THREADS/BK).
  // A along m: row a_m = tid % BM, columns a_k + i*(THREADS/BM).
  const int a_k = A_ALONG_M ? tid / BM : tid % BK;
  const int a_m = A_ALONG_M ? tid % BM : tid / BK;
  // B along n: column b_n = tid % BN (fixed for the whole block), rows b_k + i*(THREADS/BN).
  // B along k: row b_k = tid % BK, columns b_n + i*(THREADS/BK).
  const int b_k = B_ALONG_K ? tid % BK : tid / BN;
  const int b_n = B_ALONG_K ? tid / BK : tid % BN;

  // Per-thread facts about its fixed B column (loads along n).
  bool col_ok = false;
  int col_base = 0;        // FWD: b*H*W; BWD_DATA: b*OH*OW
  int col_h = 0, col_w = 0;  // FWD: oh*s - pad, ow*s - pad; BWD_DATA: i' + qh, j' + qw
  if constexpr (MODE == MODE_FWD) {
    const int n = n0 + b_n;
    col_ok = n < N;
    if (col_ok) {
      int b, rem, oh, ow;
      fdivmod(n, p.div_pix, b, rem);
      fdivmod(rem, p.div_w_out, oh, ow);
      col_base = b * H * W;
      col_h = oh * s - p.pad;
      col_w = ow * s - p.pad;
    }
  } else if constexpr (MODE == MODE_BWD_DATA) {
    const int n = n0 + b_n;
    if (n < N) {
      int b, rem, i, j;
      fdivmod(n, p.div_phase_pix, b, rem);
      fdivmod(rem, p.div_w_phase, i, j);
      col_ok = ph + s * i < H && pw + s * j < W;
      col_base = b * OH * OW;
      col_h = i + qh;
      col_w = j + qw;
    }
  } else if constexpr (MODE == MODE_BWD_DATA_DENSE) {
    col_ok = n0 + b_n < N;
  }

  // Per-thread facts about its B columns r = (ci, ki, kj) (BWD_WEIGHT, loads along k).
  constexpr int R_COLS = B_ALONG_K ? B_LOADS : 1;
  int r_off[R_COLS];  // ci*plane_in + ki*W + kj, or -1 past the end of N
  int r_ki[R_COLS];
  int r_kj[R_COLS];
  if constexpr (B_ALONG_K) {
#pragma unroll
    for (int i = 0; i < R_COLS; ++i) {
      const int r = n0 + b_n + i * (THREADS / BK);
      r_off[i] = -1;
      r_ki[i] = 0;
      r_kj[i] = 0;
      if (r < N) {
        int ci, q, ki, kj;
        fdivmod(r, p.div_kk, ci, q);
        fdivmod(q, p.div_k, ki, kj);
        r_off[i] = ci * plane_in + ki * W + kj;
        r_ki[i] = ki;
        r_kj[i] = kj;
      }
    }
  }

  float a_reg[A_LOADS];
  float b_reg[B_LOADS];

  // Global -> registers for the K step starting at k0.
  auto load_tile = [&](int k0) {
    // ---- A ----
    if constexpr (MODE == MODE_FWD || MODE == MODE_BWD_WEIGHT) {
      // FWD: A = w [C_out, C_in*k*k]; BWD_WEIGHT: A = dy [C_out, B*OH*OW]; both [M, K].
      const int kk = k0 + a_k;
#pragma unroll
      for (int i = 0; i < A_LOADS; ++i) {
        const int row = a_m + i * (THREADS / BK);
        const int m = m0 + row;
        a_reg[i] = (row < BM && m < M && kk < kend) ? A[(long long)m * K + kk] : 0.0f;
      }
    } else if constexpr (MODE == MODE_BWD_DATA) {
      // A[ci, r] = w[co, ci, ki, kj] for r = (co, th, tw) of this phase.
      const int r = k0 + a_k;
      int co, rem, th, tw;
      fdivmod(r, p.div_taps2, co, rem);
      fdivmod(rem, p.div_taps, th, tw);
      const int ki = kh0 + s * th;
      const int kj = kw0 + s * tw;
      const bool ok = r < kend && ki < p.k && kj < p.k;
      const int kk2 = p.k * p.k;
      const long long w_off = ((long long)co * p.c_in * p.k + ki) * p.k + kj;
#pragma unroll
      for (int i = 0; i < A_LOADS; ++i) {
        const int row = a_m + i * (THREADS / BK);
        const int ci = m0 + row;
        a_reg[i] = (ok && row < BM && ci < M) ? A[w_off + (long long)ci * kk2] : 0.0f;
      }
    } else {  // MODE_BWD_DATA_DENSE: A[r, co] = w[co, r], w is [K, M].
      const int m = m0 + a_m;
#pragma unroll
      for (int i = 0; i < A_LOADS; ++i) {
        const int kcol = a_k + i * (THREADS / BM);
        const int co = k0 + kcol;
        a_reg[i] = (kcol < BK && m < M && co < kend) ? A[(long long)co * M + m] : 0.0f;
      }
    }
    // ---- B ----
    if constexpr (MODE == MODE_FWD) {
      // B[r, n] = x[ci, b, oh*s - pad + ki, ow*s - pad + kj], zero in the padding.
#pragma unroll
      for (int i = 0; i < B_LOADS; ++i) {
        const int r = k0 + b_k + i * (THREADS / BN);
        float v = 0.0f;
        if (col_ok && r < kend) {
          int ci, q, ki, kj;
          fdivmod(r, p.div_kk, ci, q);
          fdivmod(q, p.div_k, ki, kj);
          const int ih = col_h + ki;
          const int iw = col_w + kj;
          if ((unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W)
            v = B[(long long)ci * plane_in + col_base + ih * W + iw];
        }
        b_reg[i] = v;
      }
    } else if constexpr (MODE == MODE_BWD_DATA) {
      // B[r, n] = dy[co, b, i' + qh - th, j' + qw - tw], zero outside dy.
#pragma unroll
      for (int i = 0; i < B_LOADS; ++i) {
        const int r = k0 + b_k + i * (THREADS / BN);
        float v = 0.0f;
        if (col_ok && r < kend) {
          int co, rem, th, tw;
          fdivmod(r, p.div_taps2, co, rem);
          fdivmod(rem, p.div_taps, th, tw);
          const int oh = col_h - th;
          const int ow = col_w - tw;
          if (kh0 + s * th < p.k && kw0 + s * tw < p.k && (unsigned)oh < (unsigned)OH &&
              (unsigned)ow < (unsigned)OW)
            v = B[(long long)co * plane_out + col_base + oh * OW + ow];
        }
        b_reg[i] = v;
      }
    } else if constexpr (MODE == MODE_BWD_DATA_DENSE) {
      // B = dy [C_out, B] (OH = OW = 1).
#pragma unroll
      for (int i = 0; i < B_LOADS; ++i) {
        const int co = k0 + b_k + i * (THREADS / BN);
        b_reg[i] = (col_ok && co < kend) ? B[(long long)co * N + n0 + b_n] : 0.0f;
      }
    } else {  // MODE_BWD_WEIGHT: B[pix, r] = x at pixel pix = (b, oh, ow) and tap r.
      const int pix = k0 + b_k;
      const bool pix_ok = pix < kend;
      int row_off = 0, ih0 = 0, iw0 = 0;
      if (pix_ok) {
        int b, rem, oh, ow;
        fdivmod(pix, p.div_pix, b, rem);
        fdivmod(rem, p.div_w_out, oh, ow);
        ih0 = oh * s - p.pad;
        iw0 = ow * s - p.pad;
        row_off = b * H * W + ih0 * W + iw0;
      }
#pragma unroll
      for (int i = 0; i < B_LOADS; ++i) {
        float v = 0.0f;
        const int ih = ih0 + r_ki[i];
        const int iw = iw0 + r_kj[i];
        if (pix_ok && r_off[i] >= 0 && (unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W)
          v = B[(long long)r_off[i] + row_off];
        b_reg[i] = v;
      }
    }
  };

  // Registers -> shared memory buffer `buf` (TF32: rounded once here, not per fragment).
  auto stored = [](float v) {
    if constexpr (PREC == PREC_TF32) return tf32_round(v);
    else return v;
  };
  auto store_tile = [&](int buf) {
#pragma unroll
    for (int i = 0; i < A_LOADS; ++i) {
      if constexpr (A_ALONG_M) {
        const int kcol = a_k + i * (THREADS / BM);
        if (kcol < BK) As[buf][kcol][a_m] = stored(a_reg[i]);
      } else {
        const int row = a_m + i * (THREADS / BK);
        if (row < BM) As[buf][a_k][row] = stored(a_reg[i]);
      }
    }
#pragma unroll
    for (int i = 0; i < B_LOADS; ++i) {
      if constexpr (B_ALONG_K)
        Bs[buf][b_k][b_n + i * (THREADS / BK)] = stored(b_reg[i]);
      else
        Bs[buf][b_k + i * (THREADS / BN)][b_n] = stored(b_reg[i]);
    }
  };

  // ---- the multiply ----
  // A thread owns TM rows and TN columns of the tile, in groups of (up to) 4 consecutive
  // ones, the groups a quarter/half tile apart: its shared-memory reads are then 16-byte
  // vectors that a warp reads without bank conflicts.
  // With tensor cores, acc[2*mi + h][2*ni + e] is the output at row 16*mi + g + 8*h and
  // column 8*ni + 2*t + e of the warp's piece (the MMA's d fragment, tensor_core.cuh).
  constexpr int GM = TM % 4 == 0 ? 4 : TM;
  constexpr int GN = TN % 4 == 0 ? 4 : TN;
  const int tx = tid % (BN / TN);
  const int ty = tid / (BN / TN);
  const int lane_g = (tid & 31) >> 2, lane_t = tid & 3;
  const int warp_m0 = (tid >> 5) / 4 * (BM / 2), warp_n0 = (tid >> 5) % 4 * (BN / 4);
  auto row_of = [&](int i) {
    if constexpr (PREC == PREC_FP32) return ty * GM + i % GM + (i / GM) * (BM / TM) * GM;
    else return warp_m0 + (i >> 1) * 16 + lane_g + 8 * (i & 1);
  };
  auto col_of = [&](int j) {
    if constexpr (PREC == PREC_FP32) return tx * GN + j % GN + (j / GN) * (BN / TN) * GN;
    else return warp_n0 + (j >> 1) * 8 + 2 * lane_t + (j & 1);
  };
  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

  const int steps = kend > kbeg ? (kend - kbeg + BK - 1) / BK : 0;
  if (steps > 0) {
    load_tile(kbeg);
    store_tile(0);
  }
  __syncthreads();
  for (int t = 0; t < steps; ++t) {
    const int cur = t & 1;
    if (t + 1 < steps) load_tile(kbeg + (t + 1) * BK);
    if constexpr (PREC == PREC_FP32) {
#pragma unroll
      for (int kk = 0; kk < BK; ++kk) {
        float av[TM], bv[TN];
#pragma unroll
        for (int i = 0; i < TM; ++i) av[i] = As[cur][kk][row_of(i)];
#pragma unroll
        for (int j = 0; j < TN; ++j) bv[j] = Bs[cur][kk][col_of(j)];
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
          for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
      }
    } else {
      mma_step<PREC == PREC_3XTF32, TM / 2, TN / 2>(As[cur], Bs[cur], warp_m0 + lane_g,
                                                    warp_n0 + lane_g, lane_t, acc);
    }
    // The other buffer was last read in step t-1, which every thread finished before the
    // barrier that ended it.
    if (t + 1 < steps) store_tile(cur ^ 1);
    __syncthreads();
  }

  // ---- the epilogue: where C[m, n] lives ----
  if constexpr (MODE == MODE_FWD || MODE == MODE_BWD_WEIGHT) {
    // y [C_out, B*OH*OW] or dw [C_out, C_in*k*k]: row-major [M, N]. A split writes its
    // partial [M, N] slab of the workspace; the reduce kernel adds the slabs.
    float* out = C;
    if (p.split_out) out += (long long)blockIdx.z * M * N;
    const bool add = p.accumulate && !p.split_out;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int m = m0 + row_of(i);
      if (m >= M) continue;
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const int n = n0 + col_of(j);
        if (n >= N) continue;
        const long long idx = (long long)m * N + n;
        out[idx] = add ? out[idx] + acc[i][j] : acc[i][j];
      }
    }
  } else if constexpr (MODE == MODE_BWD_DATA) {
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const int n = n0 + col_of(j);
      if (n >= N) continue;
      int b, rem, i2, j2;
      fdivmod(n, p.div_phase_pix, b, rem);
      fdivmod(rem, p.div_w_phase, i2, j2);
      const int ih = ph + s * i2;
      const int iw = pw + s * j2;
      if (ih >= H || iw >= W) continue;
      const int pix = b * H * W + ih * W + iw;
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        const int m = m0 + row_of(i);
        if (m < M) C[(long long)m * plane_in + pix] = acc[i][j];
      }
    }
  } else {  // MODE_BWD_DATA_DENSE: C[r, b] -> dx[ci, b, q] with r = (ci, q), q < k*k.
    const int kk2 = p.k * p.k;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int m = m0 + row_of(i);
      if (m >= M) continue;
      int ci, q;
      fdivmod(m, p.div_kk, ci, q);
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const int n = n0 + col_of(j);
        if (n < N) C[(long long)ci * plane_in + (long long)n * kk2 + q] = acc[i][j];
      }
    }
  }
}

#define CONV_KERNEL_P(name, MODE, BM, BN, TM, TN, PREC)                                  \
  extern "C" __global__ void __launch_bounds__(THREADS)                                  \
      name(ConvParams p, const float* __restrict__ a, const float* __restrict__ b,       \
           float* __restrict__ c) {                                                      \
    conv_gemm<MODE, BM, BN, TM, TN, PREC>(p, a, b, c);                                   \
  }
#define CONV_KERNEL(name, MODE, BM, BN, TM, TN) CONV_KERNEL_P(name, MODE, BM, BN, TM, TN, PREC_FP32)
// The wide tiles also on tensor cores: name_tf32 and name_3xtf32.
#define CONV_KERNEL_TC(name, MODE, BM, BN, TM, TN)                   \
  CONV_KERNEL_P(name##_tf32, MODE, BM, BN, TM, TN, PREC_TF32)        \
  CONV_KERNEL_P(name##_3xtf32, MODE, BM, BN, TM, TN, PREC_3XTF32)

// Four tile shapes: 128x128 (8x8 per thread) for large GEMMs, 64x64 where 128-wide tiles
// would leave multiprocessors idle, 16x128 and 4x256 for layers with few output rows
// (C_out = 1 in D's last conv, C_in = 1 in G's last ConvTranspose), where a 64-row tile
// would compute mostly padding.
CONV_KERNEL(conv_fwd_128x128, MODE_FWD, 128, 128, 8, 8)
CONV_KERNEL(conv_fwd_64x64, MODE_FWD, 64, 64, 4, 4)
CONV_KERNEL(conv_fwd_16x128, MODE_FWD, 16, 128, 2, 4)
CONV_KERNEL(conv_fwd_4x256, MODE_FWD, 4, 256, 1, 4)
CONV_KERNEL(conv_bwd_data_128x128, MODE_BWD_DATA, 128, 128, 8, 8)
CONV_KERNEL(conv_bwd_data_64x64, MODE_BWD_DATA, 64, 64, 4, 4)
CONV_KERNEL(conv_bwd_data_16x128, MODE_BWD_DATA, 16, 128, 2, 4)
CONV_KERNEL(conv_bwd_data_4x256, MODE_BWD_DATA, 4, 256, 1, 4)
CONV_KERNEL(conv_bwd_data_dense_128x128, MODE_BWD_DATA_DENSE, 128, 128, 8, 8)
CONV_KERNEL(conv_bwd_data_dense_64x64, MODE_BWD_DATA_DENSE, 64, 64, 4, 4)
CONV_KERNEL(conv_bwd_data_dense_16x128, MODE_BWD_DATA_DENSE, 16, 128, 2, 4)
CONV_KERNEL(conv_bwd_data_dense_4x256, MODE_BWD_DATA_DENSE, 4, 256, 1, 4)
CONV_KERNEL(conv_bwd_weight_128x128, MODE_BWD_WEIGHT, 128, 128, 8, 8)
CONV_KERNEL(conv_bwd_weight_64x64, MODE_BWD_WEIGHT, 64, 64, 4, 4)
CONV_KERNEL(conv_bwd_weight_16x128, MODE_BWD_WEIGHT, 16, 128, 2, 4)
CONV_KERNEL(conv_bwd_weight_4x256, MODE_BWD_WEIGHT, 4, 256, 1, 4)
CONV_KERNEL_TC(conv_fwd_128x128, MODE_FWD, 128, 128, 8, 8)
CONV_KERNEL_TC(conv_fwd_64x64, MODE_FWD, 64, 64, 4, 4)
CONV_KERNEL_TC(conv_bwd_data_128x128, MODE_BWD_DATA, 128, 128, 8, 8)
CONV_KERNEL_TC(conv_bwd_data_64x64, MODE_BWD_DATA, 64, 64, 4, 4)
CONV_KERNEL_TC(conv_bwd_data_dense_128x128, MODE_BWD_DATA_DENSE, 128, 128, 8, 8)
CONV_KERNEL_TC(conv_bwd_data_dense_64x64, MODE_BWD_DATA_DENSE, 64, 64, 4, 4)
CONV_KERNEL_TC(conv_bwd_weight_128x128, MODE_BWD_WEIGHT, 128, 128, 8, 8)
CONV_KERNEL_TC(conv_bwd_weight_64x64, MODE_BWD_WEIGHT, 64, 64, 4, 4)

// Backward-data into a single input channel (C_in = 1: the image side of G's last
// ConvTranspose and of D's first conv). As a GEMM this has one row, so a tile computes mostly
// padding rows and gathers every dy element for one useful row; instead a thread owns one dx
// pixel and walks its contributing taps, the weights ([C_out, 1, k, k], at most CIN1_MAX_W
// floats) in shared memory. Neighbouring threads read neighbouring dy elements.
#define CIN1_MAX_W 4096
extern "C" __global__ void __launch_bounds__(THREADS)
conv_bwd_data_cin1(ConvParams p, const float* __restrict__ w, const float* __restrict__ dy,
                   float* __restrict__ dx) {
  __shared__ float ws[CIN1_MAX_W];
  const int kk = p.k * p.k;
  for (int i = threadIdx.x; i < p.c_out * kk; i += blockDim.x) ws[i] = w[i];
  __syncthreads();
  const int H = p.h_in, W = p.w_in, OH = p.h_out, OW = p.w_out, s = p.stride;
  const int n = blockIdx.x * blockDim.x + threadIdx.x;  // (b, ih, iw) of dx [1, B, H, W]
  if (n >= p.batch * H * W) return;
  const int b = n / (H * W), ih = (n / W) % H, iw = n % W;
  const long long plane_out = (long long)p.batch * OH * OW;
  const float* dyb = dy + (long long)b * OH * OW;
  float acc = 0.0f;
  // Only taps with ki = ih + pad (mod s) meet an output row, oh = (ih + pad - ki) / s (an
  // exact division, also when negative); the same for columns.
  for (int ki = (ih + p.pad) % s; ki < p.k; ki += s) {
    const int oh = (ih + p.pad - ki) / s;
    if ((unsigned)oh >= (unsigned)OH) continue;
    for (int kj = (iw + p.pad) % s; kj < p.k; kj += s) {
      const int ow = (iw + p.pad - kj) / s;
      if ((unsigned)ow >= (unsigned)OW) continue;
      const float* d = dyb + oh * OW + ow;
      const float* wt = ws + ki * p.k + kj;
#pragma unroll 4
      for (int co = 0; co < p.c_out; ++co) acc = fmaf(wt[co * kk], d[co * plane_out], acc);
    }
  }
  dx[n] = acc;
}

// out[i] (+)= sum over the splits z = 0, 1, ... of ws[z * mn + i], in that order.
extern "C" __global__ void __launch_bounds__(THREADS)
conv_splitk_reduce(const float* __restrict__ ws, float* __restrict__ out, long long mn,
                   int splits, int accumulate) {
  GRID_STRIDE_LOOP(i, mn) {
    float v = accumulate ? out[i] : 0.0f;
    for (int z = 0; z < splits; ++z) v += ws[(long long)z * mn + i];
    out[i] = v;
  }
}
