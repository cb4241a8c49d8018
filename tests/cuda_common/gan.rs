//! A DCGAN (generator, discriminator, one training step) written once over the `Backend`
//! trait from backend ops, so the CPU backend and the CUDA engines can run the same step
//! (the nn/model layers of the program are not used here, so this checks the kernels alone).
//! The step is DESIGN.md's: D on real and detached fake, then G through D.

use super::{random, rng};
use dcgan_train::backend::{Backend, DeviceBuf, View, ViewMut};
use dcgan_train::ops::activation::Activation;
use dcgan_train::ops::adam::AdamStep;
use dcgan_train::ops::batchnorm::BnGeom;
use dcgan_train::ops::conv::ConvGeom;

#[derive(Clone, Copy, Debug)]
pub struct Widths {
    pub batch: usize,
    pub nz: usize,
    pub g1: usize,
    pub g2: usize,
    pub d1: usize,
    pub d2: usize,
}

/// One parameter tensor with its gradient and Adam moments.
pub struct Param<B: Backend> {
    value: B::Buf,
    grad: B::Buf,
    m: B::Buf,
    v: B::Buf,
}

impl<B: Backend> Param<B> {
    fn new(be: &B, init: &[f32]) -> Self {
        let n = init.len();
        let mut value = be.alloc(n).unwrap();
        be.upload(init, ViewMut::whole(&mut value));
        Param { value, grad: be.alloc(n).unwrap(), m: be.alloc(n).unwrap(), v: be.alloc(n).unwrap() }
    }
    fn adam(&mut self, be: &B, h: &AdamStep) {
        be.adam(
            h,
            ViewMut::whole(&mut self.value),
            View::whole(&self.grad),
            ViewMut::whole(&mut self.m),
            ViewMut::whole(&mut self.v),
        );
    }
}

/// Batch norm state of one layer: gamma and beta as one [2C] parameter (the order of `sums`).
pub struct Bn<B: Backend> {
    pub geom: BnGeom,
    gb: Param<B>,
    stats: B::Buf,
    saved: B::Buf,
    running: B::Buf,
    sums: B::Buf,
}

impl<B: Backend> Bn<B> {
    fn new(be: &B, c: usize, count: usize, gamma: &[f32]) -> Self {
        let mut gb = gamma.to_vec();
        gb.extend(std::iter::repeat_n(0.0, c));
        let mut running = be.alloc(2 * c).unwrap();
        let init: Vec<f32> = (0..2 * c).map(|i| if i < c { 0.0 } else { 1.0 }).collect();
        be.upload(&init, ViewMut::whole(&mut running));
        Bn {
            geom: BnGeom::new(c, count),
            gb: Param::new(be, &gb),
            stats: be.alloc(2 * c).unwrap(),
            saved: be.alloc(2 * c).unwrap(),
            running,
            sums: be.alloc(2 * c).unwrap(),
        }
    }
    fn forward(&mut self, be: &B, x: &B::Buf, act: Activation, y: &mut B::Buf) {
        let c = self.geom.channels;
        be.bn_forward_stats(&self.geom, View::whole(x), ViewMut::whole(&mut self.stats));
        be.bn_forward_apply(
            &self.geom,
            View::whole(x),
            View::whole(&self.stats),
            self.geom.count as f64,
            View::range(&self.gb.value, 0..c),
            View::range(&self.gb.value, c..2 * c),
            act,
            ViewMut::whole(y),
            ViewMut::whole(&mut self.saved),
            ViewMut::whole(&mut self.running),
        );
    }
    /// dy (the gradient of the activation output) -> dx; gamma/beta gradients accumulated.
    fn backward(&mut self, be: &B, x: &B::Buf, y: &B::Buf, act: Activation, dy: &mut B::Buf, dx: &mut B::Buf) {
        let c = self.geom.channels;
        be.bn_backward_reduce(
            &self.geom,
            View::whole(x),
            View::whole(y),
            act,
            View::whole(&self.saved),
            ViewMut::whole(dy),
            ViewMut::whole(&mut self.sums),
        );
        be.axpy(1.0, View::whole(&self.sums), ViewMut::whole(&mut self.gb.grad));
        be.bn_backward_data(
            &self.geom,
            View::whole(x),
            View::whole(dy),
            View::whole(&self.saved),
            View::range(&self.gb.value, 0..c),
            View::whole(&self.sums),
            self.geom.count as f64,
            ViewMut::whole(dx),
        );
    }
}

pub struct Gan<B: Backend> {
    // G: z -ConvT(nz,g1,7,1,0)-BN-ReLU-ConvT(g1,g2,4,2,1)-BN-ReLU-ConvT(g2,1,4,2,1)-Tanh
    pub gc: [ConvGeom; 3],
    pub gw: [Param<B>; 3],
    pub gbn: [Bn<B>; 2],
    // D: x -Conv(1,d1,4,2,1)-LReLU-Conv(d1,d2,4,2,1)-BN-LReLU-Conv(d2,1,7,1,0)
    pub dc: [ConvGeom; 3],
    pub dw: [Param<B>; 3],
    pub dbn: Bn<B>,
    // Activations, allocated once.
    z: B::Buf,       // [nz, B, 1, 1]
    real: B::Buf,    // [1, B, 28, 28]
    h1: B::Buf,      // [g1, B, 7, 7] pre-BN
    a1: B::Buf,      // [g1, B, 7, 7]
    h2: B::Buf,      // [g2, B, 14, 14]
    a2: B::Buf,      // [g2, B, 14, 14]
    img: B::Buf,     // [1, B, 28, 28]
    e1: B::Buf,      // [d1, B, 14, 14] after LeakyReLU
    e2: B::Buf,      // [d2, B, 7, 7] pre-BN
    f2: B::Buf,      // [d2, B, 7, 7]
    logits: B::Buf,  // [1, B, 1, 1]
    dlogits: B::Buf, // [1, B, 1, 1]
    out: B::Buf,     // [2]: loss, mean sigmoid
    // Gradient scratch.
    df2: B::Buf,
    de2: B::Buf,
    de1: B::Buf,
    dimg: B::Buf,
    da2: B::Buf,
    dh2: B::Buf,
    da1: B::Buf,
    dh1: B::Buf,
}

/// Deterministic parameter values, the same on both backends.
fn init(rng: &mut rand_chacha::ChaCha8Rng, n: usize, mean: f32) -> Vec<f32> {
    random(rng, n, 0.035).iter().map(|v| v + mean).collect()
}

impl<B: Backend> Gan<B> {
    pub fn new(be: &B, w: Widths, seed: u64) -> Self {
        let b = w.batch;
        let mut rng = rng(seed);
        let gc = [
            ConvGeom::transposed(b, w.nz, 1, 1, w.g1, 7, 1, 0).unwrap(),
            ConvGeom::transposed(b, w.g1, 7, 7, w.g2, 4, 2, 1).unwrap(),
            ConvGeom::transposed(b, w.g2, 14, 14, 1, 4, 2, 1).unwrap(),
        ];
        let dc = [
            ConvGeom::conv(b, 1, 28, 28, w.d1, 4, 2, 1).unwrap(),
            ConvGeom::conv(b, w.d1, 14, 14, w.d2, 4, 2, 1).unwrap(),
            ConvGeom::conv(b, w.d2, 7, 7, 1, 7, 1, 0).unwrap(),
        ];
        let mut param = |g: &ConvGeom| Param::new(be, &init(&mut rng, g.w_len(), 0.0));
        let gw = [param(&gc[0]), param(&gc[1]), param(&gc[2])];
        let dw = [param(&dc[0]), param(&dc[1]), param(&dc[2])];
        let gbn = [
            Bn::new(be, w.g1, b * 49, &init(&mut rng, w.g1, 1.0)),
            Bn::new(be, w.g2, b * 196, &init(&mut rng, w.g2, 1.0)),
        ];
        let dbn = Bn::new(be, w.d2, b * 49, &init(&mut rng, w.d2, 1.0));
        let a = |n: usize| be.alloc(n).unwrap();
        Gan {
            z: a(w.nz * b),
            real: a(b * 784),
            h1: a(w.g1 * b * 49),
            a1: a(w.g1 * b * 49),
            h2: a(w.g2 * b * 196),
            a2: a(w.g2 * b * 196),
            img: a(b * 784),
            e1: a(w.d1 * b * 196),
            e2: a(w.d2 * b * 49),
            f2: a(w.d2 * b * 49),
            logits: a(b),
            dlogits: a(b),
            out: a(2),
            df2: a(w.d2 * b * 49),
            de2: a(w.d2 * b * 49),
            de1: a(w.d1 * b * 196),
            dimg: a(b * 784),
            da2: a(w.g2 * b * 196),
            dh2: a(w.g2 * b * 196),
            da1: a(w.g1 * b * 49),
            dh1: a(w.g1 * b * 49),
            gc,
            gw,
            gbn,
            dc,
            dw,
            dbn,
        }
    }

    fn generate(&mut self, be: &B) {
        let (gc, gw) = (&self.gc, &self.gw);
        be.conv2d_backward_data(&gc[0], View::whole(&self.z), View::whole(&gw[0].value), ViewMut::whole(&mut self.h1));
        self.gbn[0].forward(be, &self.h1, Activation::Relu, &mut self.a1);
        be.conv2d_backward_data(&gc[1], View::whole(&self.a1), View::whole(&gw[1].value), ViewMut::whole(&mut self.h2));
        self.gbn[1].forward(be, &self.h2, Activation::Relu, &mut self.a2);
        be.conv2d_backward_data(
            &gc[2],
            View::whole(&self.a2),
            View::whole(&gw[2].value),
            ViewMut::whole(&mut self.img),
        );
        be.act_forward(Activation::Tanh, ViewMut::whole(&mut self.img));
    }

    /// D on `real` (or on `img`), loss against `target`; returns (loss, mean D).
    fn discriminate(&mut self, be: &B, on_real: bool, target: f32) -> [f32; 2] {
        let x = if on_real { &self.real } else { &self.img };
        let (dc, dw) = (&self.dc, &self.dw);
        be.conv2d_forward(&dc[0], View::whole(x), View::whole(&dw[0].value), ViewMut::whole(&mut self.e1));
        be.act_forward(Activation::LeakyRelu, ViewMut::whole(&mut self.e1));
        be.conv2d_forward(&dc[1], View::whole(&self.e1), View::whole(&dw[1].value), ViewMut::whole(&mut self.e2));
        self.dbn.forward(be, &self.e2, Activation::LeakyRelu, &mut self.f2);
        be.conv2d_forward(&dc[2], View::whole(&self.f2), View::whole(&dw[2].value), ViewMut::whole(&mut self.logits));
        be.bce_with_logits(
            View::whole(&self.logits),
            target,
            ViewMut::whole(&mut self.dlogits),
            ViewMut::whole(&mut self.out),
        );
        let mut out = [0.0; 2];
        be.download(View::whole(&self.out), &mut out);
        out
    }

    /// Backward through D from dlogits: weight gradients (accumulated) when `weights`, and
    /// the image gradient into dimg when `into_image`.
    fn backward_d(&mut self, be: &B, on_real: bool, weights: bool, into_image: bool) {
        let x = if on_real { &self.real } else { &self.img };
        let (dc, dw) = (&self.dc, &mut self.dw);
        if weights {
            be.conv2d_backward_weight(
                &dc[2],
                View::whole(&self.f2),
                View::whole(&self.dlogits),
                ViewMut::whole(&mut dw[2].grad),
                true,
            );
        }
        be.conv2d_backward_data(
            &dc[2],
            View::whole(&self.dlogits),
            View::whole(&dw[2].value),
            ViewMut::whole(&mut self.df2),
        );
        // (In the G step the batch-norm parameter gradients are computed but unused.)
        self.dbn.backward(be, &self.e2, &self.f2, Activation::LeakyRelu, &mut self.df2, &mut self.de2);
        if weights {
            be.conv2d_backward_weight(
                &dc[1],
                View::whole(&self.e1),
                View::whole(&self.de2),
                ViewMut::whole(&mut dw[1].grad),
                true,
            );
        }
        be.conv2d_backward_data(
            &dc[1],
            View::whole(&self.de2),
            View::whole(&dw[1].value),
            ViewMut::whole(&mut self.de1),
        );
        be.act_backward(Activation::LeakyRelu, View::whole(&self.e1), ViewMut::whole(&mut self.de1));
        if weights {
            be.conv2d_backward_weight(
                &dc[0],
                View::whole(x),
                View::whole(&self.de1),
                ViewMut::whole(&mut dw[0].grad),
                true,
            );
        }
        if into_image {
            be.conv2d_backward_data(
                &dc[0],
                View::whole(&self.de1),
                View::whole(&dw[0].value),
                ViewMut::whole(&mut self.dimg),
            );
        }
    }

    /// Backward through G from dimg (the gradient of the Tanh output).
    fn backward_g(&mut self, be: &B) {
        let (gc, gw) = (&self.gc, &mut self.gw);
        be.act_backward(Activation::Tanh, View::whole(&self.img), ViewMut::whole(&mut self.dimg));
        // A ConvTranspose out = convT(in): d_in = conv(d_out), d_w = bwd_weight(x=d_out, dy=in).
        be.conv2d_backward_weight(
            &gc[2],
            View::whole(&self.dimg),
            View::whole(&self.a2),
            ViewMut::whole(&mut gw[2].grad),
            false,
        );
        be.conv2d_forward(&gc[2], View::whole(&self.dimg), View::whole(&gw[2].value), ViewMut::whole(&mut self.da2));
        self.gbn[1].backward(be, &self.h2, &self.a2, Activation::Relu, &mut self.da2, &mut self.dh2);
        be.conv2d_backward_weight(
            &gc[1],
            View::whole(&self.dh2),
            View::whole(&self.a1),
            ViewMut::whole(&mut gw[1].grad),
            false,
        );
        be.conv2d_forward(&gc[1], View::whole(&self.dh2), View::whole(&gw[1].value), ViewMut::whole(&mut self.da1));
        self.gbn[0].backward(be, &self.h1, &self.a1, Activation::Relu, &mut self.da1, &mut self.dh1);
        be.conv2d_backward_weight(
            &gc[0],
            View::whole(&self.dh1),
            View::whole(&self.z),
            ViewMut::whole(&mut gw[0].grad),
            false,
        );
    }

    fn zero_grads(&mut self, be: &B, d: bool) {
        if d {
            for p in self.dw.iter_mut().chain([&mut self.dbn.gb]) {
                be.fill(ViewMut::whole(&mut p.grad), 0.0);
            }
        } else {
            for p in self.gw.iter_mut().chain(self.gbn.iter_mut().map(|b| &mut b.gb)) {
                be.fill(ViewMut::whole(&mut p.grad), 0.0);
            }
        }
    }

    /// One GAN step on (real, z); returns (loss_D, loss_G). With `adam` false the gradients
    /// are left in place for inspection and no parameter changes.
    pub fn step(&mut self, be: &B, real: &[f32], z: &[f32], t: u64, adam: bool) -> (f32, f32) {
        be.upload(real, ViewMut::whole(&mut self.real));
        be.upload(z, ViewMut::whole(&mut self.z));
        self.generate(be);
        // D step: real -> 1, detached fake -> 0.
        self.zero_grads(be, true);
        let r = self.discriminate(be, true, 1.0);
        self.backward_d(be, true, true, false);
        let f = self.discriminate(be, false, 0.0);
        self.backward_d(be, false, true, false);
        let h = AdamStep::new(2e-4, t);
        if adam {
            for p in self.dw.iter_mut().chain([&mut self.dbn.gb]) {
                p.adam(be, &h);
            }
        }
        // G step: fake -> 1 through the updated D, data gradients only in D.
        self.zero_grads(be, false);
        let g = self.discriminate(be, false, 1.0);
        self.backward_d(be, false, false, true);
        self.backward_g(be);
        if adam {
            for p in self.gw.iter_mut().chain(self.gbn.iter_mut().map(|b| &mut b.gb)) {
                p.adam(be, &h);
            }
        }
        (r[0] + f[0], g[0])
    }

    /// Every gradient, named.
    pub fn grads(&self, be: &B) -> Vec<(String, Vec<f32>)> {
        let get = |b: &B::Buf| {
            let mut v = vec![0.0; b.len()];
            be.download(View::whole(b), &mut v);
            v
        };
        let mut out = Vec::new();
        for (i, p) in self.gw.iter().enumerate() {
            out.push((format!("G conv{i} weight"), get(&p.grad)));
        }
        for (i, b) in self.gbn.iter().enumerate() {
            out.push((format!("G bn{i} gamma/beta"), get(&b.gb.grad)));
        }
        for (i, p) in self.dw.iter().enumerate() {
            out.push((format!("D conv{i} weight"), get(&p.grad)));
        }
        out.push(("D bn gamma/beta".into(), get(&self.dbn.gb.grad)));
        out.push(("G image".into(), get(&self.img)));
        out
    }
}

pub fn widths(small: bool) -> Widths {
    if small {
        Widths { batch: 4, nz: 16, g1: 32, g2: 16, d1: 16, d2: 32 }
    } else {
        Widths { batch: 64, nz: 100, g1: 256, g2: 128, d1: 64, d2: 128 }
    }
}

/// The inputs of step `t`: real images in [-1, 1) and noise.
pub fn batch_inputs(w: &Widths, t: u64) -> (Vec<f32>, Vec<f32>) {
    let mut r = rng(1000 + t);
    (random(&mut r, w.batch * 784, 1.0), random(&mut r, w.nz * w.batch, 1.0))
}

/// FLOPs of one step, counted as bench-torch.py counts them: 2 per multiply-add of the
/// convolutions a minimal step computes.
pub fn step_flops<B: Backend>(gan: &Gan<B>) -> f64 {
    let m = |gs: &[ConvGeom]| gs.iter().map(|g| g.macs() as f64).sum::<f64>();
    let (g, d) = (&gan.gc[..], &gan.dc[..]);
    let macs = m(g) + 3.0 * m(d) + 2.0 * (m(d) + m(&d[1..])) + m(d) + m(g) + m(&g[1..]);
    2.0 * macs
}
