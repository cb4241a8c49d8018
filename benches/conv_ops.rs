//! Times the CPU convolution passes of every layer of the 28x28 model at batch 64:
//! `cargo bench --bench conv_ops` (RAYON_NUM_THREADS sets the threads).

use dcgan_train::backend::cpu::Cpu;
use dcgan_train::backend::{Backend, View, ViewMut};
use dcgan_train::model::dcgan::{DISCRIMINATOR_28, GENERATOR_28, NZ};
use dcgan_train::model::net::stage_geometry;
use std::time::Instant;

fn time(mut f: impl FnMut()) -> f64 {
    f();
    let mut v: Vec<f64> = (0..7)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    v.sort_by(|a, b| a.total_cmp(b));
    v[3]
}

fn main() {
    // As in the program (backend::threads::setup_threads): this thread is worker 0 of the pool, so the
    // ops run on it and keep the other workers spinning between them.
    let threads = std::env::var("RAYON_NUM_THREADS").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    rayon::ThreadPoolBuilder::new().num_threads(threads).use_current_thread().build_global().unwrap();
    let be = Cpu;
    let batch = 64;
    let nets = [
        ("G", stage_geometry(&GENERATOR_28, batch, (NZ, 1, 1)).unwrap(), true),
        ("D", stage_geometry(&DISCRIMINATOR_28, batch, (1, 28, 28)).unwrap(), false),
    ];
    println!("{:<4} {:>40} {:>10} {:>10} {:>10} {:>8}", "", "geometry", "fwd ms", "bwd-data", "bwd-wt", "GMAC");
    for (name, geoms, transposed) in nets {
        for (i, g) in geoms.iter().enumerate() {
            let x = vec![0.5f32; g.x_len()];
            let mut y = vec![0.0f32; g.y_len()];
            let w = vec![0.01f32; g.w_len()];
            let mut dw = vec![0.0f32; g.w_len()];
            let mut dx = vec![0.0f32; g.x_len()];
            let fwd = time(|| be.conv2d_forward(g, View::whole(&x), View::whole(&w), ViewMut::whole(&mut y)));
            let bwd_d = time(|| be.conv2d_backward_data(g, View::whole(&y), View::whole(&w), ViewMut::whole(&mut dx)));
            let bwd_w =
                time(|| be.conv2d_backward_weight(g, View::whole(&x), View::whole(&y), ViewMut::whole(&mut dw), false));
            let label = format!(
                "{name}.{} c{}->{} {}x{} k{} s{}{}",
                i + 1,
                g.c_in,
                g.c_out,
                g.h_in,
                g.w_in,
                g.k,
                g.stride,
                if transposed { " (T)" } else { "" }
            );
            println!("{:<4} {:>40} {fwd:>10.2} {bwd_d:>10.2} {bwd_w:>10.2} {:>8.3}", "", label, g.macs() as f64 / 1e9);
        }
    }
}
