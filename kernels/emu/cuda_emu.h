// cuda_emu.h: run the kernels of kernels/*.cu on the CPU, for tests on machines without a GPU.
//
// src/backend/cuda/emu.rs compiles one C++ file that includes this header, every kernel
// family and one EMU_KERNEL(name) per kernel, into a shared library. Each thread of a block is
// a fiber on one OS thread; __syncthreads and warp shuffles switch between fibers, so a block
// runs with real barrier semantics, and shared memory is plain static storage (one block runs
// at a time). A barrier that not every thread reaches is reported instead of hanging.
//
// A fiber's stack is set up once with makecontext, and it lives from launch to launch: it
// runs a block's body, parks, and runs the next block's when resumed. Switches are
// _setjmp/_longjmp, not swapcontext, which saves and restores the signal mask with a system
// call each time: at a barrier per thread and tile, that was most of an emulated step. Device memory is host memory with guard pages (emu.rs), so an out-of-bounds access
// crashes the test instead of passing silently.
#pragma once

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <ucontext.h>

#include <mutex>
#include <type_traits>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)

struct emu_dim3 {
  unsigned int x, y, z;
};

namespace emu {

constexpr int kMaxThreads = 1024;
constexpr size_t kStackBytes = 64 * 1024;

struct Fiber {
  // The first entry only (makecontext's start on the fiber's own stack).
  ucontext_t ctx;
  // Where the fiber resumes: at its last barrier, or parked after a block.
  jmp_buf resume;
  emu_dim3 tid;
  int linear;
  // Finished the current block's body.
  bool done;
  // Entered once: its stack holds fiber_main's loop.
  bool started;
};

struct State {
  emu_dim3 block_idx, block_dim, grid_dim;
  Fiber* fibers = nullptr;
  char* stacks = nullptr;
  int capacity = 0;
  int nthreads = 0;
  int cur = 0;
  // Where a fiber switches back to: the scheduler in emu_launch.
  jmp_buf sched;
  // Fibers left waiting mid-kernel by a reported barrier error: their stacks are set up anew.
  bool stale = false;
  int bar_count = 0;
  unsigned bar_gen = 0;
  int warp_count[kMaxThreads / 32];
  unsigned warp_gen[kMaxThreads / 32];
  unsigned long long warp_buf[kMaxThreads / 32][32];
  // Each lane's A and B fragments (mma_tf32), in two buffers used in turn.
  float mma_a[2][kMaxThreads / 32][32][4];
  float mma_b[2][kMaxThreads / 32][32][2];
  unsigned mma_count[kMaxThreads];
  unsigned long long progress = 0;
  void (*tramp)(void**) = nullptr;
  void** args = nullptr;
};

inline State S;

inline void yield() {
  if (!_setjmp(S.fibers[S.cur].resume)) _longjmp(S.sched, 1);
}

inline void warp_sync(int w) {
  const int lanes = S.nthreads - 32 * w < 32 ? S.nthreads - 32 * w : 32;
  const unsigned gen = S.warp_gen[w];
  ++S.progress;
  if (++S.warp_count[w] == lanes) {
    S.warp_count[w] = 0;
    ++S.warp_gen[w];
    return;
  }
  while (S.warp_gen[w] == gen) yield();
}

template <class... A, size_t... I>
void call(void (*f)(A...), void** a, std::index_sequence<I...>) {
  f(*static_cast<std::remove_cv_t<std::remove_reference_t<A>>*>(a[I])...);
}
template <class... A>
void call(void (*f)(A...), void** a) {
  call(f, a, std::index_sequence_for<A...>{});
}

// A fiber's whole life: the body of whichever block the scheduler resumes it for, then park.
inline void fiber_main() {
  for (;;) {
    S.tramp(S.args);
    S.fibers[S.cur].done = true;
    yield();
  }
}

// Point fiber `t` at the start of fiber_main on its own stack.
inline void init_fiber(int t) {
  Fiber& f = S.fibers[t];
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = S.stacks + (size_t)t * kStackBytes;
  f.ctx.uc_stack.ss_size = kStackBytes;
  f.ctx.uc_link = nullptr;
  makecontext(&f.ctx, fiber_main, 0);
  f.started = false;
}

// Run fiber `t` until it next switches back (a barrier, or the end of its block's body).
inline void resume(int t) {
  S.cur = t;
  Fiber& f = S.fibers[t];
  if (_setjmp(S.sched)) return;
  if (f.started) _longjmp(f.resume, 1);
  f.started = true;
  setcontext(&f.ctx);
}

}  // namespace emu

#define threadIdx (emu::S.fibers[emu::S.cur].tid)
#define blockIdx (emu::S.block_idx)
#define blockDim (emu::S.block_dim)
#define gridDim (emu::S.grid_dim)

inline void __syncthreads() {
  const unsigned gen = emu::S.bar_gen;
  ++emu::S.progress;
  if (++emu::S.bar_count == emu::S.nthreads) {
    emu::S.bar_count = 0;
    ++emu::S.bar_gen;
    return;
  }
  while (emu::S.bar_gen == gen) emu::yield();
}

template <class T>
inline T __shfl_xor_sync(unsigned int, T v, int lane_mask) {
  static_assert(sizeof(T) <= 8, "shuffle of at most 8 bytes");
  const int t = emu::S.fibers[emu::S.cur].linear;
  const int w = t >> 5, lane = t & 31;
  memcpy(&emu::S.warp_buf[w][lane], &v, sizeof(T));
  emu::warp_sync(w);
  T r;
  memcpy(&r, &emu::S.warp_buf[w][lane ^ lane_mask], sizeof(T));
  emu::warp_sync(w);
  return r;
}

inline unsigned int __float_as_uint(float x) {
  unsigned int u;
  memcpy(&u, &x, 4);
  return u;
}
inline float __uint_as_float(unsigned int u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}

// kernels/tensor_core.cuh, emulated. cvt.rna.tf32.f32: add half of the last kept bit to the
// magnitude and clear the 13 dropped bits (ties away from zero); NaN stays NaN.
inline float tf32_round(float x) {
  if (x != x) return x;
  return __uint_as_float((__float_as_uint(x) + 0x1000u) & ~0x1fffu);
}

// mma.sync m16n8k8 TF32 for the calling thread's warp: every lane posts its fragments, then
// computes its four outputs from the whole warp's. The tensor cores read only the TF32 bits
// of each operand, so the low 13 are dropped here too. Their products are exact, and their
// sums are not IEEE: published measurements of A100 and H100 find them truncated. Modelled
// here as the sum of d and the eight products in double, truncated toward zero to f32 once
// per MMA (the hardware may lose a little more aligning the terms). A lane's next MMA posts
// into the other buffer, and cannot get further before every lane has reached it, so one warp
// barrier per MMA suffices.
inline void mma_tf32(float (&d)[4], const float (&a)[4], const float (&b)[2]) {
  const int lane_id = emu::S.fibers[emu::S.cur].linear;
  const int w = lane_id >> 5, lane = lane_id & 31;
  const int buf = emu::S.mma_count[lane_id]++ & 1;
  auto tf32_bits = [](float v) { return __uint_as_float(__float_as_uint(v) & ~0x1fffu); };
  for (int i = 0; i < 4; ++i) emu::S.mma_a[buf][w][lane][i] = tf32_bits(a[i]);
  for (int i = 0; i < 2; ++i) emu::S.mma_b[buf][w][lane][i] = tf32_bits(b[i]);
  emu::warp_sync(w);
  const int g = lane >> 2, t = lane & 3;
  for (int q = 0; q < 4; ++q) {
    const int row = g + 8 * (q >> 1), col = 2 * t + (q & 1);
    double s = d[q];
    for (int k = 0; k < 8; ++k) {
      // A[row][k] is held by lane (row % 8) * 4 + k % 4, register (k / 4) * 2 + row / 8;
      // B[k][col] by lane col * 4 + k % 4, register k / 4.
      const float av = emu::S.mma_a[buf][w][(row & 7) * 4 + (k & 3)][(k >> 2) * 2 + (row >> 3)];
      const float bv = emu::S.mma_b[buf][w][col * 4 + (k & 3)][k >> 2];
      s += (double)av * bv;
    }
    // To nearest, then one step toward zero where that rounded away; an overflow stays
    // infinite (as a diverging run's would on f32 sums), not the largest float.
    float f = (float)s;
    if (__builtin_isfinite(f) && __builtin_fabs((double)f) > __builtin_fabs(s)) f = __builtin_nextafterf(f, 0.0f);
    d[q] = f;
  }
}

inline unsigned int __umulhi(unsigned int a, unsigned int b) {
  return (unsigned int)(((unsigned long long)a * b) >> 32);
}

// Separately rounded arithmetic (never fused into a multiply-add). -O2 on x86-64 without
// -mfma emits no FMA, so plain operators round each step here.
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }

// Run `tramp(args)` as a kernel over grid x block, one block at a time. Returns 0, or 1 with
// a message in `err` when a block's threads wait at a barrier that not all of them reach.
extern "C" int emu_launch(void (*tramp)(void**), const unsigned int* grid,
                          const unsigned int* block, void** args, char* err, int err_len) {
  static std::mutex mu;
  std::lock_guard<std::mutex> guard(mu);
  using emu::S;
  const int n = (int)(block[0] * block[1] * block[2]);
  if (n <= 0 || n > emu::kMaxThreads) {
    snprintf(err, err_len, "block of %d threads (1..=1024 allowed)", n);
    return 1;
  }
  if (S.capacity < n) {
    free(S.fibers);
    free(S.stacks);
    S.fibers = (emu::Fiber*)calloc(n, sizeof(emu::Fiber));
    S.stacks = (char*)malloc((size_t)n * emu::kStackBytes);
    S.capacity = n;
    for (int t = 0; t < n; ++t) emu::init_fiber(t);
  } else if (S.stale) {
    for (int t = 0; t < S.capacity; ++t) emu::init_fiber(t);
  }
  S.stale = false;
  S.nthreads = n;
  S.block_dim = {block[0], block[1], block[2]};
  S.grid_dim = {grid[0], grid[1], grid[2]};
  S.tramp = tramp;
  S.args = args;
  for (int t = 0; t < n; ++t) {
    emu::Fiber& f = S.fibers[t];
    f.tid = {t % block[0], (t / block[0]) % block[1], t / (block[0] * block[1])};
    f.linear = t;
  }
  for (unsigned bz = 0; bz < grid[2]; ++bz)
    for (unsigned by = 0; by < grid[1]; ++by)
      for (unsigned bx = 0; bx < grid[0]; ++bx) {
        S.block_idx = {bx, by, bz};
        S.bar_count = 0;
        for (int w = 0; w < emu::kMaxThreads / 32; ++w) S.warp_count[w] = 0;
        for (int t = 0; t < n; ++t) {
          S.fibers[t].done = false;
          S.mma_count[t] = 0;
        }
        int alive = n;
        while (alive > 0) {
          const unsigned long long before = S.progress;
          for (int t = 0; t < n; ++t) {
            if (S.fibers[t].done) continue;
            emu::resume(t);
            if (S.fibers[t].done) {
              --alive;
              ++S.progress;
            }
          }
          if (alive > 0 && S.progress == before) {
            snprintf(err, err_len,
                     "block (%u, %u, %u): %d of %d threads wait at a barrier that the others "
                     "never reach",
                     bx, by, bz, alive, n);
            S.stale = true;
            return 1;
          }
        }
      }
  return 0;
}

#define EMU_KERNEL(name) \
  extern "C" void emu_tramp_##name(void** a) { emu::call(name, a); }
