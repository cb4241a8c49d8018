// tensor_core.cuh: TF32 tensor-core primitives for the convolution GEMMs (kernels/conv.cu).
//
//   tf32_round(x)     x rounded to TF32 (10 mantissa bits), to nearest with ties away from
//                     zero (cvt.rna.tf32.f32), returned as an f32 whose low 13 bits are zero.
//   mma_tf32(d, a, b) d += A * B for one warp: A 16x8 (row-major), B 8x8 (column-major),
//                     d 16x8 in f32 (mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32).
//
// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k8", .tf32), with g = lane / 4 and
// t = lane % 4 of the calling thread:
//   a[0] = A[g][t]      a[1] = A[g+8][t]      a[2] = A[g][t+4]      a[3] = A[g+8][t+4]
//   b[0] = B[t][g]      b[1] = B[t+4][g]
//   d[0] = D[g][2t]     d[1] = D[g][2t+1]     d[2] = D[g+8][2t]     d[3] = D[g+8][2t+1]
//
// On the GPU these are single instructions (compute capability 8.0 and newer; older devices
// are refused before a tensor-core kernel is launched, and trap if one is). The emulator
// (kernels/emu/cuda_emu.h) defines both itself: the MMA through the warp's shared exchange,
// its products exact and their sum truncated toward zero once per MMA, as the hardware's are
// (whose alignment of the terms may lose a little more, so results agree to the accumulation
// error, not bit for bit).
#pragma once

#ifdef __CUDA_ARCH__
__device__ __forceinline__ float tf32_round(float x) {
#if __CUDA_ARCH__ >= 800
  unsigned int u;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(u) : "f"(x));
  return __uint_as_float(u);
#else
  __trap();
  return x;
#endif
}

__device__ __forceinline__ void mma_tf32(float (&d)[4], const float (&a)[4], const float (&b)[2]) {
#if __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(__float_as_uint(a[0])), "r"(__float_as_uint(a[1])), "r"(__float_as_uint(a[2])),
        "r"(__float_as_uint(a[3])), "r"(__float_as_uint(b[0])), "r"(__float_as_uint(b[1])));
#else
  __trap();
#endif
}
#endif  // __CUDA_ARCH__

// x = big + small, both TF32: x becomes big = tf32(x), `small` what that left off, rounded.
__device__ __forceinline__ void split_tf32(float& x, float& small) {
  const float big = tf32_round(x);
  small = tf32_round(x - big);
  x = big;
}

// One shared-memory step of KS (a multiple of 8) for a warp's MI x NI MMA tiles: As [KS][LDA]
// and Bs [KS][LDB] k-major, acc [2*MI][2*NI] with acc[2*mi + h][2*ni + e] the output at row
// 16*mi + g + 8*h and column 8*ni + 2*t + e of the warp's piece. `row` and `col` are this
// thread's first A row and B column (the warp's first plus g), `t` its lane % 4. With
// THREE_TF32, CUTLASS's error-corrected products (conv.cu's PREC_3XTF32); otherwise the
// operands must already be TF32.
template <bool THREE_TF32, int MI, int NI, int KS, int LDA, int LDB>
__device__ __forceinline__ void mma_step(const float (&As)[KS][LDA], const float (&Bs)[KS][LDB],
                                         int row, int col, int t, float (&acc)[2 * MI][2 * NI]) {
  static_assert(KS % 8 == 0, "k in steps of 8");
#pragma unroll
  for (int k0 = 0; k0 < KS; k0 += 8) {
    float a[MI][4], b[NI][2];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
      const int r = row + 16 * mi;
      a[mi][0] = As[k0 + t][r];
      a[mi][1] = As[k0 + t][r + 8];
      a[mi][2] = As[k0 + t + 4][r];
      a[mi][3] = As[k0 + t + 4][r + 8];
    }
#pragma unroll
    for (int ni = 0; ni < NI; ++ni) {
      b[ni][0] = Bs[k0 + t][col + 8 * ni];
      b[ni][1] = Bs[k0 + t + 4][col + 8 * ni];
    }
    // 3xTF32: the small parts, each what rounding to TF32 left off its operand (A's split
    // one row block at a time, which keeps fewer registers live).
    float b_small[NI][2];
    if constexpr (THREE_TF32) {
#pragma unroll
      for (int ni = 0; ni < NI; ++ni)
#pragma unroll
        for (int q = 0; q < 2; ++q) split_tf32(b[ni][q], b_small[ni][q]);
    }
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
      float a_small[4];
      if constexpr (THREE_TF32) {
#pragma unroll
        for (int q = 0; q < 4; ++q) split_tf32(a[mi][q], a_small[q]);
      }
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) {
        float d[4] = {acc[2 * mi][2 * ni], acc[2 * mi][2 * ni + 1], acc[2 * mi + 1][2 * ni],
                      acc[2 * mi + 1][2 * ni + 1]};
        if constexpr (THREE_TF32) {
          // This step's three products in an accumulator of their own (the small terms
          // first, CUTLASS's order), then one IEEE add into the running sum: the tensor
          // cores truncate each MMA's sum, and three MMAs a step into the running sum would
          // truncate it three times at its own size (docs/cuda.md).
          float step[4] = {0.f, 0.f, 0.f, 0.f};
          mma_tf32(step, a_small, b[ni]);
          mma_tf32(step, a[mi], b_small[ni]);
          mma_tf32(step, a[mi], b[ni]);
#pragma unroll
          for (int q = 0; q < 4; ++q) d[q] = __fadd_rn(d[q], step[q]);
        } else {
          mma_tf32(d, a[mi], b[ni]);
        }
        acc[2 * mi][2 * ni] = d[0];
        acc[2 * mi][2 * ni + 1] = d[1];
        acc[2 * mi + 1][2 * ni] = d[2];
        acc[2 * mi + 1][2 * ni + 1] = d[3];
      }
    }
  }
}
