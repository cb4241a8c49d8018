//! The DCGAN's generator and discriminator, forward and backward, and whole training steps,
//! written once over the `Backend` trait and run on the CPU backend and on the CUDA engines
//! (tests/cuda_common): every gradient of the first step within 1e-4 of the CPU's (relative
//! to its size), and the losses of 20 steps within 1e-3.
//!
//! The step (tests/cuda_common/gan.rs) is DESIGN.md's, built directly from backend ops; on
//! the emulator the widths are reduced.
#![cfg(feature = "cuda")]

mod cuda_common;

use cuda_common::gan::*;
use cuda_common::*;
use dcgan_train::backend::Backend;
use dcgan_train::backend::cpu::Cpu;

#[test]
fn generator_and_discriminator_gradients_match_the_cpu() {
    for cu in engines("dcgan gradients") {
        let w = widths(small(&cu));
        let mut cpu = Gan::new(&Cpu, w, 11);
        let mut gpu = Gan::new(&cu, w, 11);
        let (real, z) = batch_inputs(&w, 1);
        let lc = cpu.step(&Cpu, &real, &z, 1, false);
        let lg = gpu.step(&cu, &real, &z, 1, false);
        assert!((lc.0 - lg.0).abs() < 1e-4 && (lc.1 - lg.1).abs() < 1e-4, "{lc:?} vs {lg:?}");
        let (gc, gg) = (cpu.grads(&Cpu), gpu.grads(&cu));
        for ((name, c), (_, g)) in gc.iter().zip(&gg) {
            assert!(c.iter().any(|&v| v != 0.0), "{name}: the CPU gradient is all zero");
            eprintln!("{} {name}: relative error {:.2e}", cu.describe(), rel_err(g, c));
            assert_close(&format!("{w:?} {name}"), g, c, 1e-4);
        }
    }
}

#[test]
fn twenty_training_steps_follow_the_cpu_losses() {
    for cu in engines("dcgan training") {
        let w = widths(small(&cu));
        let mut cpu = Gan::new(&Cpu, w, 12);
        let mut gpu = Gan::new(&cu, w, 12);
        let (mut first, mut last, mut worst) = (None, (0.0, 0.0), 0f32);
        for t in 1..=20 {
            let (real, z) = batch_inputs(&w, t);
            let lc = cpu.step(&Cpu, &real, &z, t, true);
            let lg = gpu.step(&cu, &real, &z, t, true);
            assert!(
                (lc.0 - lg.0).abs() <= 1e-3 && (lc.1 - lg.1).abs() <= 1e-3,
                "step {t}: losses (D, G) CPU {lc:?} vs CUDA {lg:?}"
            );
            worst = worst.max((lc.0 - lg.0).abs()).max((lc.1 - lg.1).abs());
            first.get_or_insert(lc);
            last = lc;
        }
        eprintln!(
            "{}: 20 steps, largest loss difference {worst:.2e}, losses {:?} -> {last:?}",
            cu.describe(),
            first.unwrap()
        );
        // The run must actually train, or matching losses would prove little.
        assert_ne!(first.unwrap(), last, "the losses never changed");
    }
}

/// Not a correctness check but a benchmark (run by scripts/gpu-check.sh): the step above at
/// the full DCGAN widths, timed on the GPU, one JSON line per batch size in bench-torch.py's
/// format. The step uploads its batch and reads the three losses back (three host
/// synchronizations), as a training loop that reports losses every step would.
/// Batch sizes from DCGAN_BENCH_BATCHES (default "64,256").
#[test]
#[ignore]
fn bench_step() {
    let Some(cu) = engines("bench_step").into_iter().find(|c| !c.is_emulated() || bench_on_emulator()) else {
        eprintln!("bench_step: skipped: needs a GPU");
        return;
    };
    let batches = bench_batches();
    for batch in batches {
        let emu = cu.is_emulated();
        let w = Widths { batch, ..widths(emu) };
        let mut gan = Gan::new(&cu, w, 13);
        for &conv in gan.gc.iter().chain(&gan.dc) {
            cu.prepare_conv(&conv).unwrap();
        }
        for bn in gan.gbn.iter().chain([&gan.dbn]) {
            cu.prepare_bn(&bn.geom).unwrap();
        }
        let inputs: Vec<_> = (0..4).map(|t| batch_inputs(&w, t)).collect();
        let mut t = 0u64;
        let mut run = |steps: usize| -> f64 {
            let start = std::time::Instant::now();
            let mut last = (0.0, 0.0);
            for _ in 0..steps {
                t += 1;
                let (real, z) = &inputs[t as usize % inputs.len()];
                last = gan.step(&cu, real, z, t, true);
            }
            cu.synchronize();
            assert!(last.0.is_finite() && last.1.is_finite(), "losses {last:?}");
            start.elapsed().as_secs_f64() * 1e3 / steps as f64
        };
        let (warmup, steps) = if emu { (1, 2) } else { (10, 30) };
        run(warmup);
        let mem_before = cu.allocated_bytes();
        let mut runs: Vec<f64> = (0..5).map(|_| run(steps)).collect();
        assert_eq!(cu.allocated_bytes(), mem_before, "the step loop allocated");
        let all = runs.clone();
        runs.sort_by(f64::total_cmp);
        let ms = runs[runs.len() / 2];
        let flops = step_flops(&gan);
        println!(
            "{{\"impl\": \"dcgan-train-kernels\", \"gpu\": \"{}\", \"image_size\": 28, \"batch\": {batch}, \"ms_per_step\": {ms:.4}, \"ms_per_step_runs\": {all:.4?}, \"images_per_s\": {:.1}, \"step_gflop\": {:.3}, \"tflops\": {:.3}, \"peak_bytes\": {}}}",
            cu.describe(),
            batch as f64 / (ms / 1e3),
            flops / 1e9,
            flops / (ms / 1e3) / 1e12,
            cu.peak_bytes()
        );
    }
}

#[test]
fn step_flops_match_bench_torch() {
    // bench-torch.py --flops-only: 17.078 GFLOP at batch 64, 68.31 at 256 (28x28 model).
    for (batch, gflop) in [(64, 17.078), (256, 68.31)] {
        let gan = Gan::new(&Cpu, Widths { batch, ..widths(false) }, 1);
        let got = step_flops(&gan) / 1e9;
        assert!((got - gflop).abs() < 1e-3, "batch {batch}: {got} GFLOP, bench-torch.py says {gflop}");
    }
}
