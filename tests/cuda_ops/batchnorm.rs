//! Batch norm's kernels (statistics, apply, backward, evaluation) against the CPU backend,
//! with and without an activation, as on one rank and as if from two.

use crate::cuda_common::*;
use crate::{TOL, padded, unpad};
use dcgan_train::backend::cpu::Cpu;
use dcgan_train::backend::cuda::Cuda;
use dcgan_train::backend::{Backend, View, ViewMut};
use dcgan_train::ops::activation::Activation;
use dcgan_train::ops::batchnorm::BnGeom;

/// Small shapes on the emulator; on a GPU, sizes of the DCGAN's layers.
fn bn_shapes(cu: &Cuda) -> Vec<BnGeom> {
    if small(cu) {
        vec![BnGeom::new(3, 50), BnGeom::new(5, 3000), BnGeom::new(2, 1)]
    } else {
        vec![
            BnGeom::new(256, 64 * 49),
            BnGeom::new(128, 64 * 196),
            BnGeom::new(128, 64 * 49),
            BnGeom::new(64, 256 * 1024),
            BnGeom::new(512, 256 * 16),
            BnGeom::new(3, 1000),
        ]
    }
}

#[test]
fn batchnorm_forward_and_backward_match_the_cpu() {
    for cu in engines("batchnorm") {
        let mut rng = rng(5);
        for g in bn_shapes(&cu) {
            let (c, len) = (g.channels, g.len());
            // An offset mean, so that sum x^2 carries real cancellation.
            let x: Vec<f32> = random(&mut rng, len, 1.5).iter().map(|v| v + 0.7).collect();
            let gamma: Vec<f32> = random(&mut rng, c, 0.1).iter().map(|v| v + 1.0).collect();
            let beta = random(&mut rng, c, 0.3);
            let inputs = BnInputs { x: &x, gamma: &gamma, beta: &beta };
            let running0: Vec<f32> = (0..2 * c).map(|i| if i < c { 0.1 } else { 0.9 }).collect();
            for act in [Activation::None, Activation::Relu, Activation::LeakyRelu] {
                let what = format!("{g:?} {act:?}");
                let bx = up(&cu, &x);
                let (bgamma, bbeta) = (up(&cu, &gamma), up(&cu, &beta));
                let (mut bstats, rs) = padded(&cu, &vec![0.0; 2 * c], 1);
                cu.bn_forward_stats(&g, View::whole(&bx), ViewMut::range(&mut bstats, rs.clone()));
                let mut cstats = vec![0.0; 2 * c];
                Cpu.bn_forward_stats(&g, View::whole(&x), ViewMut::whole(&mut cstats));
                assert_close(&format!("{what} stats"), &unpad(&cu, &bstats, rs.clone()), &cstats, TOL);

                // Statistics as if from two ranks: both sides use the same (CPU) sums.
                let stats2: Vec<f32> = cstats.iter().map(|v| 2.0 * v).collect();
                for (stats, count) in [(&cstats, g.count as f64), (&stats2, 2.0 * g.count as f64)] {
                    let bst = up(&cu, stats);
                    let mut by = cu.alloc(len).unwrap();
                    let (mut bsaved, rsv) = padded(&cu, &vec![0.0; 2 * c], 2);
                    let mut brun = up(&cu, &running0);
                    cu.bn_forward_apply(
                        &g,
                        View::whole(&bx),
                        View::whole(&bst),
                        count,
                        View::whole(&bgamma),
                        View::whole(&bbeta),
                        act,
                        ViewMut::whole(&mut by),
                        ViewMut::range(&mut bsaved, rsv.clone()),
                        ViewMut::whole(&mut brun),
                    );
                    let (mut cy, mut csaved, mut crun) = (vec![0.0; len], vec![0.0; 2 * c], running0.clone());
                    Cpu.bn_forward_apply(
                        &g,
                        View::whole(&x),
                        View::whole(stats),
                        count,
                        View::whole(&gamma),
                        View::whole(&beta),
                        act,
                        ViewMut::whole(&mut cy),
                        ViewMut::whole(&mut csaved),
                        ViewMut::whole(&mut crun),
                    );
                    assert_close(&format!("{what} y"), &down(&cu, &by), &cy, TOL);
                    assert_close(&format!("{what} saved"), &unpad(&cu, &bsaved, rsv), &csaved, TOL);
                    assert_close(&format!("{what} running"), &down(&cu, &brun), &crun, TOL);

                    // Backward from the CPU's forward state, so only backward is compared.
                    let dy = random(&mut rng, len, 1.0);
                    let (bcy, bcs) = (up(&cu, &cy), up(&cu, &csaved));
                    let mut bdy = up(&cu, &dy);
                    let (mut bsums, rsu) = padded(&cu, &vec![0.0; 2 * c], 3);
                    cu.bn_backward_reduce(
                        &g,
                        View::whole(&bx),
                        View::whole(&bcy),
                        act,
                        View::whole(&bcs),
                        ViewMut::whole(&mut bdy),
                        ViewMut::range(&mut bsums, rsu.clone()),
                    );
                    let (mut cdz, mut csums) = (dy.clone(), vec![0.0; 2 * c]);
                    Cpu.bn_backward_reduce(
                        &g,
                        View::whole(&x),
                        View::whole(&cy),
                        act,
                        View::whole(&csaved),
                        ViewMut::whole(&mut cdz),
                        ViewMut::whole(&mut csums),
                    );
                    assert_close(&format!("{what} dz"), &down(&cu, &bdy), &cdz, TOL);
                    assert_close(&format!("{what} sums"), &unpad(&cu, &bsums, rsu), &csums, TOL);

                    let host = BnBackward { dz: &cdz, saved: &csaved, sums: &csums };
                    bn_backward_data_matches_the_cpu(&cu, &g, &inputs, &host, count, &what);
                }

                bn_eval_matches_the_cpu(&cu, &g, act, &inputs, &what);
            }
        }
    }
}

/// The host side of a batch-norm layer's forward: its input, gamma and beta.
#[derive(Clone, Copy)]
struct BnInputs<'a> {
    x: &'a Vec<f32>,
    gamma: &'a Vec<f32>,
    beta: &'a Vec<f32>,
}

/// Batch norm in evaluation mode (from running statistics) on `cu` against the CPU.
fn bn_eval_matches_the_cpu(cu: &Cuda, g: &BnGeom, act: Activation, inputs: &BnInputs, what: &str) {
    let BnInputs { x, gamma, beta } = *inputs;
    let (c, len) = (g.channels, g.len());
    let run: Vec<f32> = (0..2 * c).map(|i| if i < c { 0.3 } else { 1.7 }).collect();
    let brun = up(cu, &run);
    let mut by = cu.alloc(len).unwrap();
    cu.bn_forward_eval(
        g,
        View::whole(&up(cu, x)),
        View::whole(&up(cu, gamma)),
        View::whole(&up(cu, beta)),
        View::whole(&brun),
        act,
        ViewMut::whole(&mut by),
    );
    let mut cy = vec![0.0; len];
    Cpu.bn_forward_eval(
        g,
        View::whole(x),
        View::whole(gamma),
        View::whole(beta),
        View::whole(&run),
        act,
        ViewMut::whole(&mut cy),
    );
    assert_close(&format!("{what} eval"), &down(cu, &by), &cy, TOL);
}

/// The host side of batch norm's backward-data: the gradient past the activation, the saved
/// statistics and the reduced sums.
struct BnBackward<'a> {
    dz: &'a Vec<f32>,
    saved: &'a Vec<f32>,
    sums: &'a Vec<f32>,
}

/// Batch norm's backward-data on `cu` against the CPU, from the same (CPU) inputs.
fn bn_backward_data_matches_the_cpu(cu: &Cuda, g: &BnGeom, inputs: &BnInputs, h: &BnBackward, count: f64, what: &str) {
    let BnInputs { x, gamma, .. } = *inputs;
    let len = g.len();
    let (bdz, bsm) = (up(cu, h.dz), up(cu, h.sums));
    let mut bdx = cu.alloc(len).unwrap();
    cu.bn_backward_data(
        g,
        View::whole(&up(cu, x)),
        View::whole(&bdz),
        View::whole(&up(cu, h.saved)),
        View::whole(&up(cu, gamma)),
        View::whole(&bsm),
        count,
        ViewMut::whole(&mut bdx),
    );
    let mut cdx = vec![0.0; len];
    Cpu.bn_backward_data(
        g,
        View::whole(x),
        View::whole(h.dz),
        View::whole(h.saved),
        View::whole(gamma),
        View::whole(h.sums),
        count,
        ViewMut::whole(&mut cdx),
    );
    assert_close(&format!("{what} dx"), &down(cu, &bdx), &cdx, TOL);
}
