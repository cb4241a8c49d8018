//! Kernel benchmark (ignored by default; scripts/gpu/gpu-check.sh runs it on a GPU): every conv
//! direction and batch-norm pass at the DCGAN's layer shapes, timed as the step loop sees them
//! (launch included: host clock around N back-to-back launches and one synchronization).
//! One JSON line per (op, layer, batch, and for convolutions each `--precision`): microseconds
//! per call and GFLOP/s for convolutions. Each timed op is first checked against the CPU
//! backend (within its precision's tolerance), so every figure is of a correct run.
#![cfg(feature = "cuda")]

mod cuda_common;

use cuda_common::*;
use dcgan_train::backend::cpu::Cpu;
use dcgan_train::backend::cuda::Cuda;
use dcgan_train::backend::{Backend, Precision, View, ViewMut};
use dcgan_train::ops::activation::Activation;
use dcgan_train::ops::batchnorm::BnGeom;
use dcgan_train::ops::conv::ConvGeom;
use dcgan_train::ops::conv::cuda::{Direction, backward_data_direction, plan};

fn time_us(cu: &Cuda, iters: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..3 {
        f();
    }
    cu.synchronize();
    let mut runs: Vec<f64> = (0..5)
        .map(|_| {
            let t = std::time::Instant::now();
            for _ in 0..iters {
                f();
            }
            cu.synchronize();
            t.elapsed().as_secs_f64() * 1e6 / iters as f64
        })
        .collect();
    runs.sort_by(f64::total_cmp);
    runs[2]
}

/// Tile, grid depth and splits the launcher picks, e.g. "T64x64 z=4 splits=1".
fn plan_summary(cu: &Cuda, g: &ConvGeom, op: &str) -> String {
    let dir = match op {
        "forward" => Direction::Forward,
        "backward-weight" => Direction::BackwardWeight,
        _ => backward_data_direction(g),
    };
    let p = plan(g, dir, cu.sm_count());
    // The one-channel kernel is not tiled: its plan's tile means nothing.
    let tile = if dir == Direction::BackwardDataOneChannel { "untiled".into() } else { format!("{:?}", p.tile) };
    format!("{:?} {tile} M={} N={} K={} z={} splits={}", p.dir, p.m, p.n, p.k, p.z, p.splits)
}

fn layers(batch: usize) -> Vec<(&'static str, ConvGeom)> {
    let c = |ci, h, co, k, s, p| ConvGeom::conv(batch, ci, h, h, co, k, s, p).unwrap();
    let t = |ci, h, co, k, s, p| ConvGeom::transposed(batch, ci, h, h, co, k, s, p).unwrap();
    vec![
        ("G28.convT1", t(100, 1, 256, 7, 1, 0)),
        ("G28.convT2", t(256, 7, 128, 4, 2, 1)),
        ("G28.convT3", t(128, 14, 1, 4, 2, 1)),
        ("D28.conv1", c(1, 28, 64, 4, 2, 1)),
        ("D28.conv2", c(64, 14, 128, 4, 2, 1)),
        ("D28.conv3", c(128, 7, 1, 7, 1, 0)),
    ]
}

/// Every convolution is timed in each precision.
const PRECISIONS: [Precision; 3] = [Precision::Fp32, Precision::Tf32, Precision::ThreeTf32];

#[test]
#[ignore]
fn bench_kernels() {
    let Some(mut cu) = engines("bench_kernels").into_iter().find(|c| !c.is_emulated() || bench_on_emulator()) else {
        eprintln!("bench_kernels: skipped: needs a GPU");
        return;
    };
    let gpu = cu.describe();
    let iters = if cu.is_emulated() { 1 } else { 50 };
    let mut rng = rng(31);
    for batch in bench_batches() {
        for (name, g) in layers(batch) {
            for precision in PRECISIONS {
                cu.set_precision(precision).unwrap();
                bench_conv(&cu, name, &g, batch, &mut rng, iters);
            }
        }
        for (name, c, pix) in [("G28.bn1", 256, 49), ("G28.bn2", 128, 196), ("D28.bn2", 128, 49)] {
            let g = BnGeom::new(c, batch * pix);
            cu.prepare_bn(&g).unwrap();
            let x = up(&cu, &random(&mut rng, g.len(), 1.0));
            let gb = up(&cu, &vec![1.0; 2 * c]);
            let mut y = cu.alloc(g.len()).unwrap();
            let mut stats = cu.alloc(2 * c).unwrap();
            let mut saved = cu.alloc(2 * c).unwrap();
            let mut running = cu.alloc(2 * c).unwrap();
            let mut sums = cu.alloc(2 * c).unwrap();
            let mut dy = up(&cu, &random(&mut rng, g.len(), 1.0));
            let mut dx = cu.alloc(g.len()).unwrap();
            let fwd = time_us(&cu, iters, || {
                cu.bn_forward_stats(&g, View::whole(&x), ViewMut::whole(&mut stats));
                cu.bn_forward_apply(
                    &g,
                    View::whole(&x),
                    View::whole(&stats),
                    g.count as f64,
                    View::range(&gb, 0..c),
                    View::range(&gb, c..2 * c),
                    Activation::Relu,
                    ViewMut::whole(&mut y),
                    ViewMut::whole(&mut saved),
                    ViewMut::whole(&mut running),
                );
            });
            let bwd = time_us(&cu, iters, || {
                cu.bn_backward_reduce(
                    &g,
                    View::whole(&x),
                    View::whole(&y),
                    Activation::Relu,
                    View::whole(&saved),
                    ViewMut::whole(&mut dy),
                    ViewMut::whole(&mut sums),
                );
                cu.bn_backward_data(
                    &g,
                    View::whole(&x),
                    View::whole(&dy),
                    View::whole(&saved),
                    View::range(&gb, 0..c),
                    View::whole(&sums),
                    g.count as f64,
                    ViewMut::whole(&mut dx),
                );
            });
            for (op, us) in [("bn forward (stats+apply)", fwd), ("bn backward (reduce+data)", bwd)] {
                // Bytes moved at least: forward reads x twice and writes y; backward reads
                // x, y, dy and writes dz, then reads x, dz and writes dx.
                let floats = if op.contains("forward") { 3 } else { 7 } * g.len();
                println!(
                    "{{\"gpu\": \"{gpu}\", \"op\": \"{op}\", \"layer\": \"{name}\", \"batch\": {batch}, \"us\": {us:.2}, \"gbytes_per_s\": {:.1}}}",
                    4.0 * floats as f64 / (us / 1e6) / 1e9
                );
            }
            let mut out = vec![0.0; 2 * c];
            cu.download(View::whole(&sums), &mut out);
            assert!(out.iter().all(|v| v.is_finite()));
        }
    }
}

/// Check the three directions of `g` against the CPU in `cu`'s precision, then time each.
fn bench_conv(cu: &Cuda, name: &str, g: &ConvGeom, batch: usize, rng: &mut rand_chacha::ChaCha8Rng, iters: usize) {
    let gpu = cu.describe();
    cu.prepare_conv(g).unwrap();
    let (precision, tol) = (cu.precision().name(), if cu.precision() == Precision::Tf32 { 2e-3 } else { 1e-4 });
    let x = random(rng, g.x_len(), 1.0);
    let w = random(rng, g.w_len(), 0.1);
    let dy = random(rng, g.y_len(), 1.0);
    let (bx, bw, bdy) = (up(cu, &x), up(cu, &w), up(cu, &dy));
    let mut by = cu.alloc(g.y_len()).unwrap();
    let mut bdx = cu.alloc(g.x_len()).unwrap();
    let mut bdw = cu.alloc(g.w_len()).unwrap();
    // Correct first: compare one call of each direction with the CPU.
    cu.conv2d_forward(g, View::whole(&bx), View::whole(&bw), ViewMut::whole(&mut by));
    cu.conv2d_backward_data(g, View::whole(&bdy), View::whole(&bw), ViewMut::whole(&mut bdx));
    cu.conv2d_backward_weight(g, View::whole(&bx), View::whole(&bdy), ViewMut::whole(&mut bdw), false);
    let (mut cy, mut cdx, mut cdw) = (vec![0.0; g.y_len()], vec![0.0; g.x_len()], vec![0.0; g.w_len()]);
    Cpu.conv2d_forward(g, View::whole(&x), View::whole(&w), ViewMut::whole(&mut cy));
    Cpu.conv2d_backward_data(g, View::whole(&dy), View::whole(&w), ViewMut::whole(&mut cdx));
    Cpu.conv2d_backward_weight(g, View::whole(&x), View::whole(&dy), ViewMut::whole(&mut cdw), false);
    assert_close(&format!("{name} {precision} forward"), &down(cu, &by), &cy, tol);
    assert_close(&format!("{name} {precision} backward-data"), &down(cu, &bdx), &cdx, tol);
    assert_close(&format!("{name} {precision} backward-weight"), &down(cu, &bdw), &cdw, tol);

    let gflop = 2.0 * g.macs() as f64 / 1e9;
    let report = |op: &str, us: f64| {
        println!(
            "{{\"gpu\": \"{gpu}\", \"op\": \"conv {op}\", \"layer\": \"{name}\", \"batch\": {batch}, \"precision\": \"{precision}\", \"us\": {us:.2}, \"gflops\": {:.1}, \"plan\": \"{}\"}}",
            gflop / (us / 1e6),
            plan_summary(cu, g, op)
        )
    };
    let us = time_us(cu, iters, || cu.conv2d_forward(g, View::whole(&bx), View::whole(&bw), ViewMut::whole(&mut by)));
    report("forward", us);
    let us = time_us(cu, iters, || {
        cu.conv2d_backward_data(g, View::whole(&bdy), View::whole(&bw), ViewMut::whole(&mut bdx))
    });
    report("backward-data", us);
    let us = time_us(cu, iters, || {
        cu.conv2d_backward_weight(g, View::whole(&bx), View::whole(&bdy), ViewMut::whole(&mut bdw), false)
    });
    report("backward-weight", us);
}
