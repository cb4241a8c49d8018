//! Device probing, errors without a GPU, the gradient path (pinned memory, copy stream,
//! events), memory accounting, and steps replayed as CUDA graphs. Without a GPU the "no GPU"
//! behaviour and the graphs on the emulator are checked; with one, the rest.
#![cfg(feature = "cuda")]

mod cuda_common;

use cuda_common::*;
use dcgan_train::backend::cuda::{self, Cuda, NoGpu};
use dcgan_train::backend::{Backend, GraphStats, View, ViewMut};
use dcgan_train::ops::activation::Activation;
use dcgan_train::ops::conv::ConvGeom;

/// `Some(reason)` when no GPU is usable here (a failure under DCGAN_REQUIRE_GPU=1).
fn no_gpu() -> Option<NoGpu> {
    let why = cuda::probe().err();
    if let Some(w) = &why {
        assert!(!require_gpu(), "DCGAN_REQUIRE_GPU=1 but {w}");
    }
    why
}

#[test]
fn without_a_gpu_probe_and_new_fail_with_one_clear_line() {
    let Some(why) = cuda::probe().err() else {
        eprintln!("skipped: a GPU is usable here");
        return;
    };
    let line = why.to_string();
    assert!(!line.contains('\n'), "{line}");
    assert!(line.starts_with("no GPU: "), "{line}");
    assert!(line.contains("--device cpu") || line.contains("ordinal"), "{line}");
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        assert_eq!(why, NoGpu::DriverLibrary);
        assert!(line.contains("libcuda.so"), "{line}");
    }
    // Cuda::new must report the same thing as an error, never panic.
    let err = Cuda::new(0).err().expect("Cuda::new succeeded without a GPU");
    assert_eq!(format!("{err:#}"), line);
}

#[test]
fn probe_reports_a_sane_device() {
    if let Some(why) = no_gpu() {
        eprintln!("skipped: {why}");
        return;
    }
    let p = cuda::probe().unwrap();
    eprintln!("{p}");
    assert!(p.count >= 1 && !p.name.is_empty());
    assert!(p.total_mem > 1 << 30, "{p}");
    assert!(p.cc >= (5, 0), "{p}");
    assert!(p.driver_version >= (11, 0), "{p}");
    assert_eq!(cuda::probe_device(p.count), Err(NoGpu::BadOrdinal { ordinal: p.count, count: p.count }));
}

#[test]
fn staging_through_pinned_memory_round_trips_in_order() {
    if let Some(why) = no_gpu() {
        eprintln!("skipped: {why}");
        return;
    }
    let cu = Cuda::new(0).unwrap();
    let mut r = rng(21);
    let n = 1 << 20;
    let a = random(&mut r, n, 1.0);
    let a_dev = up(&cu, &a);
    let mut grad = up(&cu, &a);
    let mut pinned = cu.alloc_pinned(2 * n + 10).unwrap();
    assert!(pinned.as_slice().unwrap().iter().all(|&v| v == 0.0));

    // A kernel issued just before the copy must be visible in it: the copy waits for the
    // compute stream.
    cu.axpy(1.0, View::whole(&a_dev), ViewMut::whole(&mut grad));
    let ev = cu.stage_to_host(View::range(&grad, 0..n), &mut pinned, 7).unwrap();
    ev.synchronize().unwrap();
    let host = pinned.as_slice().unwrap();
    assert!(host[..7].iter().all(|&v| v == 0.0));
    assert!(host[n + 7..].iter().all(|&v| v == 0.0));
    let doubled: Vec<f32> = a.iter().map(|v| 2.0 * v).collect();
    assert_eq!(&host[7..n + 7], &doubled[..]);

    // The "comm thread" changes the values; back on the device after the event.
    for v in &mut pinned.as_mut_slice().unwrap()[7..n + 7] {
        *v += 1.0;
    }
    let mut back = cu.alloc(n).unwrap();
    let ev = cu.stage_to_device(&pinned, 7, ViewMut::whole(&mut back)).unwrap();
    cu.compute_wait(&ev).unwrap();
    // Issued on the compute stream after the wait: sees the staged values.
    cu.axpy(-0.5, View::whole(&a_dev), ViewMut::whole(&mut back));
    // 0.5 * x rounds nothing, so a fused multiply-add and this sum round the same, once.
    let want: Vec<f32> = doubled.iter().zip(&a).map(|(v, x)| (v + 1.0) - 0.5 * x).collect();
    assert_eq!(down(&cu, &back), want);
    cu.try_synchronize().unwrap();
}

#[test]
fn peak_bytes_counts_buffers_and_workspace() {
    let Some(cu) = engines("peak bytes").into_iter().next() else {
        return;
    };
    assert_eq!(cu.peak_bytes(), 0);
    let a = cu.alloc(1000).unwrap();
    let b = cu.alloc(500).unwrap();
    assert_eq!(cu.allocated_bytes(), 6000);
    drop(a);
    assert_eq!(cu.allocated_bytes(), 2000);
    assert_eq!(cu.peak_bytes(), 6000);
    drop(b);
    // Reserving a conv's split-K workspace up front counts too.
    let g = ConvGeom::conv(2, 32, 7, 7, 1, 7, 1, 0).unwrap();
    cu.prepare_conv(&g).unwrap();
    let ws = cu.allocated_bytes();
    assert!(ws > 0, "a split-K conv reserved no workspace");
    // ... and an op on that geometry allocates nothing more.
    let x = up(&cu, &vec![0.5; g.x_len()]);
    let w = up(&cu, &vec![0.25; g.w_len()]);
    let mut y = cu.alloc(g.y_len()).unwrap();
    let before = cu.allocated_bytes();
    cu.conv2d_forward(&g, View::whole(&x), View::whole(&w), ViewMut::whole(&mut y));
    assert_eq!(cu.allocated_bytes(), before);
    let want = 0.5 * 0.25 * g.col_rows() as f32;
    assert!(down(&cu, &y).iter().all(|&v| (v - want).abs() < 1e-3 * want));
}

#[test]
fn the_backend_and_its_buffers_can_cross_threads() {
    // Compile-time: the trainer may build the backend on one thread and use it on another,
    // and hands pinned buffers and events to the comm thread.
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Cuda>();
    send_sync::<<Cuda as Backend>::Buf>();
    send_sync::<cuda::PinnedHostSlice<f32>>();
    send_sync::<cuda::CudaEvent>();
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Shape {
    /// axpy, axpy, tanh | upload | axpy, axpy
    Usual,
    /// The third kernel a copy instead of the tanh.
    OtherKernel,
    /// No third kernel: the first segment ends early.
    Short,
}

/// A small "step" of `kind` and `shape` over x, y and z (kept between steps), `x_next`
/// uploaded into x mid-step (the kernels before must read the old x); y and z after it.
fn graph_step(
    cu: &Cuda,
    (kind, shape): (u64, Shape),
    x: &mut CudaBufOf,
    y: &mut CudaBufOf,
    z: &mut CudaBufOf,
    x_next: &[f32],
    a: f32,
) -> (Vec<f32>, Vec<f32>) {
    cu.begin_step(kind);
    cu.axpy(a, View::whole(x), ViewMut::whole(y));
    cu.axpy(0.5, View::whole(y), ViewMut::whole(z));
    match shape {
        Shape::Usual => cu.act_forward(Activation::Tanh, ViewMut::whole(z)),
        Shape::OtherKernel => cu.copy(View::whole(x), ViewMut::whole(z)),
        Shape::Short => {}
    }
    cu.upload(x_next, ViewMut::whole(x));
    cu.axpy(1.0, View::whole(z), ViewMut::whole(y));
    cu.axpy(0.25, View::whole(x), ViewMut::whole(y));
    cu.end_step();
    (down(cu, y), down(cu, z))
}

type CudaBufOf = <Cuda as Backend>::Buf;

/// Steps replayed from graphs equal launched ones bit for bit, with a changing argument
/// patched in, and a step that leaves the record (another kernel, a segment ending early)
/// runs what was held back before going on; the counts follow the recorder's rules.
#[test]
fn graphed_steps_equal_launched_ones_and_leave_the_record_safely() {
    for cu in engines("cuda graphs") {
        let graphed = graphed_twin(&cu);
        let n = 3000;
        let run = |be: &Cuda| {
            let (mut x, mut y, mut z) =
                (up(be, &random(&mut rng(31), n, 1.0)), up(be, &vec![0.25; n]), be.alloc(n).unwrap());
            use Shape::*;
            // (kind, shape): kind 0 changes shape twice; kind 1's other kernel is its own.
            let steps = [(0, Usual), (0, Usual), (0, Usual), (0, OtherKernel), (0, Usual), (0, Usual), (0, Short)];
            let steps = steps.into_iter().chain([
                (0, Usual),
                (0, Usual),
                (1, OtherKernel),
                (0, Usual),
                (1, OtherKernel),
                (0, Usual),
            ]);
            let mut r = rng(32);
            steps
                .enumerate()
                .map(|(t, step)| {
                    graph_step(be, step, &mut x, &mut y, &mut z, &random(&mut r, n, 1.0), 0.1 * (t + 1) as f32)
                })
                .collect::<Vec<_>>()
        };
        let want = run(&cu);
        let got = run(&graphed);
        for (t, (w, g)) in want.iter().zip(&got).enumerate() {
            assert!(w.0 == g.0 && w.1 == g.1, "step {}: the graphed step differs from the launched one", t + 1);
        }
        assert_ne!(want[1], want[2], "the steps computed nothing new");
        // Recorded: steps 1, 5 (after the other kernel), 8 (after the short step) and 10 (kind
        // 1's first); replayed: 2, 3, 6, 9, 11, 12, 13 (kind 0's record survives kind 1's
        // steps), each with two graphs of 3 + 2 kernels and its first axpy's new factor
        // patched in.
        let s = graphed.graph_stats().unwrap();
        let want_stats = GraphStats {
            recorded_steps: 4,
            replayed_steps: 7,
            diverged_steps: 2,
            graph_launches: 14,
            graphed_kernels: 35,
            patched_kernels: 7,
        };
        assert_eq!(s, want_stats);
        assert_eq!(cu.graph_stats(), None);
    }
}

/// A held-back kernel may read the workspace: when an op of a replayed step grows it, what
/// was held back runs before the old workspace is freed, and the results stay the launched
/// ones (split-K convolutions, the last one needing more scratch than reserved).
#[test]
fn a_workspace_growing_in_a_replayed_step_frees_nothing_under_held_back_kernels() {
    for cu in engines("cuda graphs and the workspace") {
        let graphed = graphed_twin(&cu);
        let small = ConvGeom::conv(2, 32, 7, 7, 1, 7, 1, 0).unwrap();
        let large = ConvGeom::conv(4, 64, 7, 7, 1, 7, 1, 0).unwrap();
        let run = |be: &Cuda| {
            let mut r = rng(41);
            let x = up(be, &random(&mut r, large.x_len(), 1.0));
            let w = up(be, &random(&mut r, large.w_len(), 1.0));
            let mut y = be.alloc(large.y_len()).unwrap();
            let mut acc = up(be, &vec![1.0; large.x_len()]);
            // As training does: the workspace reserved before the steps (for the small one).
            be.prepare_conv(&small).unwrap();
            let mut outs = Vec::new();
            let mut grown = Vec::new();
            for g in [small, small, large] {
                be.begin_step(0);
                be.axpy(0.5, View::whole(&x), ViewMut::whole(&mut acc));
                let xs = View::range(&acc, 0..g.x_len());
                be.conv2d_forward(&g, xs, View::range(&w, 0..g.w_len()), ViewMut::range(&mut y, 0..g.y_len()));
                be.end_step();
                outs.push(down(be, &y));
                grown.push(be.allocated_bytes());
            }
            (outs, grown)
        };
        let (want, _) = run(&cu);
        let (got, bytes) = run(&graphed);
        assert!(want == got, "the graphed steps differ from the launched ones");
        assert!(bytes[2] > bytes[1], "the last step did not grow the workspace: {bytes:?}");
        let s = graphed.graph_stats().unwrap();
        assert_eq!((s.recorded_steps, s.replayed_steps, s.diverged_steps), (1, 1, 1), "{s:?}");
    }
}
