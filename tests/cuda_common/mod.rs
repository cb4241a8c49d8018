//! Shared by the tests/cuda_* files: which CUDA engines to test (a real GPU, the CPU
//! emulator of the kernels, or both), random inputs, and the comparison with the CPU backend.
#![allow(dead_code)]

use dcgan_train::backend::cuda::{self, Cuda};
use dcgan_train::backend::{Backend, View, ViewMut};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The engines to test: `DCGAN_TEST_ENGINES` = "gpu", "emu" or "gpu,emu" (the default). An
/// engine that is not usable here is skipped with the reason printed; a GPU that probes as
/// usable but fails to start is a test failure.
pub fn engines(test: &str) -> Vec<Cuda> {
    let want = std::env::var("DCGAN_TEST_ENGINES").unwrap_or_else(|_| "gpu,emu".into());
    let mut out = Vec::new();
    if want.split(',').any(|e| e.trim() == "gpu") {
        match cuda::probe() {
            Ok(p) => {
                let cu = Cuda::new(0).unwrap_or_else(|e| panic!("{test}: {p} is usable but: {e:#}"));
                out.push(cu);
            }
            Err(why) if require_gpu() => panic!("{test}: DCGAN_REQUIRE_GPU=1 but {why}"),
            Err(why) => eprintln!("{test}: GPU skipped: {why}"),
        }
    }
    if want.split(',').any(|e| e.trim() == "emu") {
        if cuda::emu::is_available() {
            // Four "multiprocessors", so that small test shapes exercise split-K too.
            out.push(Cuda::emulated(4).unwrap_or_else(|e| panic!("{test}: emulator: {e:#}")));
        } else {
            eprintln!("{test}: emulator skipped: no C++ compiler (c++ or $CXX)");
        }
    }
    out
}

/// DCGAN_REQUIRE_GPU=1 (set by scripts/gpu/gpu-check.sh): a GPU that is not usable fails the
/// tests instead of skipping them, so that nothing passes without having run.
pub fn require_gpu() -> bool {
    std::env::var("DCGAN_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

/// Whether tests should use their small shapes: on the (slow) emulator, and on a GPU when
/// DCGAN_TEST_SMALL=1 (compute-sanitizer runs, which are slow too).
pub fn small(cu: &Cuda) -> bool {
    cu.is_emulated() || std::env::var("DCGAN_TEST_SMALL").is_ok_and(|v| v == "1")
}

pub fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

/// `n` uniform values in [-scale, scale).
pub fn random(rng: &mut ChaCha8Rng, n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-scale..scale)).collect()
}

/// max |got - want| / max |want|: the error relative to the size of the result.
pub fn rel_err(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len(), "compared lengths");
    let scale = want.iter().fold(0f64, |m, &v| m.max((v as f64).abs()));
    let diff = got.iter().zip(want).fold(0f64, |m, (&g, &w)| m.max((g as f64 - w as f64).abs()));
    if scale == 0.0 { diff } else { diff / scale }
}

#[track_caller]
pub fn assert_close(what: &str, got: &[f32], want: &[f32], tol: f64) {
    assert!(got.iter().all(|v| v.is_finite()), "{what}: non-finite values in the CUDA result");
    let e = rel_err(got, want);
    assert!(e <= tol, "{what}: relative error {e:.3e} > {tol:.0e}");
}

/// A device buffer holding `data`.
pub fn up(cu: &Cuda, data: &[f32]) -> <Cuda as Backend>::Buf {
    let mut b = cu.alloc(data.len()).unwrap();
    cu.upload(data, ViewMut::whole(&mut b));
    b
}

/// The contents of a device buffer.
pub fn down(cu: &Cuda, b: &<Cuda as Backend>::Buf) -> Vec<f32> {
    let mut out = vec![0.0; dcgan_train::backend::DeviceBuf::len(b)];
    cu.download(View::whole(b), &mut out);
    out
}

/// DCGAN_BENCH_ON_EMULATOR=1 lets the (ignored) benchmarks run on the emulator, at tiny
/// batches, only to check that they work; their timings mean nothing there.
pub fn bench_on_emulator() -> bool {
    std::env::var("DCGAN_BENCH_ON_EMULATOR").is_ok_and(|v| v == "1")
}

/// Batch sizes for the benchmarks: DCGAN_BENCH_BATCHES (comma-separated), default 64,256.
pub fn bench_batches() -> Vec<usize> {
    std::env::var("DCGAN_BENCH_BATCHES")
        .unwrap_or_else(|_| "64,256".into())
        .split(',')
        .map(|b| b.trim().parse().expect("DCGAN_BENCH_BATCHES: comma-separated numbers"))
        .collect()
}

/// The same engine as `cu` (a GPU or the emulator), a fresh backend, with `--cuda-graphs` on.
pub fn graphed_twin(cu: &Cuda) -> Cuda {
    let twin = if cu.is_emulated() { Cuda::emulated(cu.sm_count()) } else { Cuda::new(0) };
    twin.unwrap().with_graphs(true)
}

/// The convolutions of the 28x28 and 64x64 DCGANs (G's as transposed ones) at batch `b`.
pub fn dcgan_layers(b: usize) -> Vec<dcgan_train::ops::conv::ConvGeom> {
    use dcgan_train::ops::conv::ConvGeom;
    let c = |b, ci, h, w, co, k, s, p| ConvGeom::conv(b, ci, h, w, co, k, s, p).unwrap();
    let t = |b, ci, h, w, co, k, s, p| ConvGeom::transposed(b, ci, h, w, co, k, s, p).unwrap();
    vec![
        c(b, 1, 28, 28, 64, 4, 2, 1),
        c(b, 64, 14, 14, 128, 4, 2, 1),
        c(b, 128, 7, 7, 1, 7, 1, 0),
        t(b, 100, 1, 1, 256, 7, 1, 0),
        t(b, 256, 7, 7, 128, 4, 2, 1),
        t(b, 128, 14, 14, 1, 4, 2, 1),
        // The 64x64 model.
        t(b, 100, 1, 1, 512, 4, 1, 0),
        t(b, 512, 4, 4, 256, 4, 2, 1),
        t(b, 64, 32, 32, 1, 4, 2, 1),
        c(b, 1, 64, 64, 64, 4, 2, 1),
        c(b, 256, 8, 8, 512, 4, 2, 1),
        c(b, 512, 4, 4, 1, 4, 1, 0),
    ]
}
