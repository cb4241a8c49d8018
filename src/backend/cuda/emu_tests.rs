//! The emulator's fibers on kernels of their own (not kernels/*.cu): a program built against
//! kernels/emu/cuda_emu.h runs them through `emu_launch` and prints what they computed, which
//! is checked here against sums done in Rust.

use super::{SHIM, compiler};
use std::process::Command;

/// Block sums through shared memory (a barrier per halving), a warp's butterfly sum through
/// shuffles, a barrier only some threads reach, and launches after it: the fibers it left
/// waiting mid-kernel must not leak into them.
const PROGRAM: &str = r#"
#include "cuda_emu.h"

__global__ void block_sums(const int* x, int* out) {
  __shared__ int s[1024];
  const int t = threadIdx.x;
  s[t] = x[blockIdx.x * blockDim.x + t];
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (t < half) s[t] += s[t + half];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

__global__ void warp_sums(const int* x, int* out) {
  int v = x[threadIdx.x];
  for (int m = 16; m > 0; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m);
  out[threadIdx.x] = v;
}

__global__ void half_at_a_barrier(int* out) {
  if (threadIdx.x % 2 == 0) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

EMU_KERNEL(block_sums)
EMU_KERNEL(warp_sums)
EMU_KERNEL(half_at_a_barrier)

static int launch(void (*tramp)(void**), unsigned grid, unsigned block, void** args) {
  const unsigned g[3] = {grid, 1, 1}, b[3] = {block, 1, 1};
  char err[256] = {0};
  const int rc = emu_launch(tramp, g, b, args, err, sizeof err);
  if (rc != 0) printf("error %s\n", err);
  return rc;
}

static void sums(unsigned blocks, unsigned threads) {
  const unsigned n = blocks * threads;
  int* x = (int*)malloc(n * sizeof(int));
  int* out = (int*)malloc(blocks * sizeof(int));
  for (unsigned i = 0; i < n; ++i) x[i] = (int)(i * 7 % 1000);
  void* args[2] = {&x, &out};
  if (launch(emu_tramp_block_sums, blocks, threads, args) == 0) {
    printf("sums %u %u", blocks, threads);
    for (unsigned i = 0; i < blocks; ++i) printf(" %d", out[i]);
    printf("\n");
  }
  free(x);
  free(out);
}

int main() {
  sums(3, 64);
  sums(2, 256);
  int x[64], out[64] = {0};
  for (int i = 0; i < 64; ++i) x[i] = i * i;
  int* px = x;
  int* pout = out;
  void* wargs[2] = {&px, &pout};
  if (launch(emu_tramp_warp_sums, 1, 64, wargs) == 0) {
    printf("warps");
    for (int i = 0; i < 64; ++i) printf(" %d", out[i]);
    printf("\n");
  }
  void* hargs[1] = {&pout};
  launch(emu_tramp_half_at_a_barrier, 1, 32, hargs);
  sums(4, 32);
  sums(1, 1024);
  return 0;
}
"#;

/// What the block-sum kernel must print for `blocks` blocks of `threads`: each block's sum of
/// x[i] = i * 7 % 1000, added up here.
fn expected_sums(blocks: usize, threads: usize) -> String {
    let x = |i: usize| (i * 7 % 1000) as i64;
    let sums: Vec<String> =
        (0..blocks).map(|b| (b * threads..(b + 1) * threads).map(x).sum::<i64>().to_string()).collect();
    format!("sums {blocks} {threads} {}", sums.join(" "))
}

#[test]
fn fibers_keep_barriers_report_one_not_all_reach_and_run_on_after_it() {
    if !super::is_available() {
        eprintln!("skipped: no C++ compiler ({}) to build the emulator", compiler());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cuda_emu.h"), SHIM).unwrap();
    std::fs::write(dir.path().join("main.cpp"), PROGRAM).unwrap();
    let exe = dir.path().join("emu-test");
    let built = Command::new(compiler())
        .args(super::FLAGS.iter().filter(|f| !matches!(**f, "-fPIC" | "-shared")))
        .arg("-I")
        .arg(dir.path())
        .arg(dir.path().join("main.cpp"))
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));
    let ran = Command::new(&exe).output().unwrap();
    assert!(ran.status.success(), "{}", String::from_utf8_lossy(&ran.stderr));
    let text = String::from_utf8(ran.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let warp = |lane: usize| -> i64 { (32 * (lane / 32)..32 * (lane / 32) + 32).map(|i| (i * i) as i64).sum() };
    let warps: Vec<String> = (0..64).map(|l| warp(l).to_string()).collect();
    let expected = [
        expected_sums(3, 64),
        expected_sums(2, 256),
        format!("warps {}", warps.join(" ")),
        "error block (0, 0, 0): 16 of 32 threads wait at a barrier that the others never reach".to_string(),
        expected_sums(4, 32),
        expected_sums(1, 1024),
    ];
    assert_eq!(lines, expected.iter().map(String::as_str).collect::<Vec<_>>());
}
