//! The two DCGAN architectures: 28x28 (the default, for MNIST-sized data) and 64x64 (the
//! DCGAN paper's, as in the PyTorch example), with nz = 100 and one channel, their widths
//! (ngf, ndf: the feature maps of G's last hidden layer and D's first) 64 unless asked.

use super::net::Norm::{self, Batch, None as NoNorm};
use super::net::{BackwardOrder, Net, NetPlan, NoObserver, StageSpec, plan_net};
use super::noise::to_channel_major;
use crate::backend::Backend;
use crate::backend::{View, ViewMut};
use crate::ops::activation::Activation::{self, LeakyRelu, Relu, Tanh};
use anyhow::{Result, bail};

/// Length of the generator's noise vector.
pub const NZ: usize = 100;

/// The networks' widths, as the PyTorch DCGAN example names them: G's hidden layers hold
/// ngf x 4 and ngf x 2 feature maps at 28x28 (ngf x 8 .. ngf at 64x64), D's ndf and ndf x 2
/// (ndf .. ndf x 8). The work of a step grows with their squares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Widths {
    pub ngf: usize,
    pub ndf: usize,
}

impl Widths {
    /// The DCGAN paper's: 64 and 64.
    pub const DCGAN: Widths = Widths { ngf: 64, ndf: 64 };
}

impl Default for Widths {
    fn default() -> Self {
        Widths::DCGAN
    }
}

/// G at 28x28: z `[B,100,1,1]` -> `[4ngf,7,7]` -> `[2ngf,14,14]` -> `[1,28,28]`.
pub const fn generator_28(ngf: usize) -> [StageSpec; 3] {
    [
        StageSpec::transposed(NZ, 4 * ngf, 7, 1, 0, Batch, Relu),
        StageSpec::transposed(4 * ngf, 2 * ngf, 4, 2, 1, Batch, Relu),
        StageSpec::transposed(2 * ngf, 1, 4, 2, 1, NoNorm, Tanh),
    ]
}

/// D at 28x28: `[1,28,28]` -> `[ndf,14,14]` -> `[2ndf,7,7]` -> logits `[1,1,1]`.
pub const fn discriminator_28(ndf: usize) -> [StageSpec; 3] {
    [
        StageSpec::conv(1, ndf, 4, 2, 1, NoNorm, LeakyRelu),
        StageSpec::conv(ndf, 2 * ndf, 4, 2, 1, Batch, LeakyRelu),
        StageSpec::conv(2 * ndf, 1, 7, 1, 0, NoNorm, Activation::None),
    ]
}

/// G at 64x64: z -> `[8ngf,4,4]` -> `[4ngf,8,8]` -> `[2ngf,16,16]` -> `[ngf,32,32]` ->
/// `[1,64,64]`.
pub const fn generator_64(ngf: usize) -> [StageSpec; 5] {
    [
        StageSpec::transposed(NZ, 8 * ngf, 4, 1, 0, Batch, Relu),
        StageSpec::transposed(8 * ngf, 4 * ngf, 4, 2, 1, Batch, Relu),
        StageSpec::transposed(4 * ngf, 2 * ngf, 4, 2, 1, Batch, Relu),
        StageSpec::transposed(2 * ngf, ngf, 4, 2, 1, Batch, Relu),
        StageSpec::transposed(ngf, 1, 4, 2, 1, NoNorm, Tanh),
    ]
}

/// D at 64x64: `[1,64,64]` -> `[ndf,32,32]` -> `[2ndf,16,16]` -> `[4ndf,8,8]` ->
/// `[8ndf,4,4]` -> logits `[1,1,1]`.
pub const fn discriminator_64(ndf: usize) -> [StageSpec; 5] {
    [
        StageSpec::conv(1, ndf, 4, 2, 1, NoNorm, LeakyRelu),
        StageSpec::conv(ndf, 2 * ndf, 4, 2, 1, Batch, LeakyRelu),
        StageSpec::conv(2 * ndf, 4 * ndf, 4, 2, 1, Batch, LeakyRelu),
        StageSpec::conv(4 * ndf, 8 * ndf, 4, 2, 1, Batch, LeakyRelu),
        StageSpec::conv(8 * ndf, 1, 4, 1, 0, NoNorm, Activation::None),
    ]
}

/// G: z `[B,100,1,1]` -> `[256,7,7]` -> `[128,14,14]` -> `[1,28,28]`.
pub const GENERATOR_28: [StageSpec; 3] = generator_28(64);

/// D: `[1,28,28]` -> `[64,14,14]` -> `[128,7,7]` -> logits `[1,1,1]`.
pub const DISCRIMINATOR_28: [StageSpec; 3] = discriminator_28(64);

/// G: z -> `[512,4,4]` -> `[256,8,8]` -> `[128,16,16]` -> `[64,32,32]` -> `[1,64,64]`.
pub const GENERATOR_64: [StageSpec; 5] = generator_64(64);

/// D: `[1,64,64]` -> `[64,32,32]` -> `[128,16,16]` -> `[256,8,8]` -> `[512,4,4]` ->
/// logits `[1,1,1]`.
pub const DISCRIMINATOR_64: [StageSpec; 5] = discriminator_64(64);

/// What D is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Discriminator {
    /// The DCGAN discriminator, with batch norm.
    Dcgan,
    /// WGAN-GP's critic: the same stages without batch norm (the gradient penalty is taken
    /// per input, and batch norm would tie each input's output to the rest of the batch);
    /// with `layer_norm`, layer norm where DCGAN has batch norm, as the WGAN-GP paper
    /// suggests. Its parameters are named as a PyTorch `nn.Sequential` of those layers.
    Critic { layer_norm: bool },
}

/// The architecture for an image size and widths: G's stages and D's.
pub fn architecture(
    image_size: usize,
    widths: Widths,
    kind: Discriminator,
) -> Result<(Vec<StageSpec>, Vec<StageSpec>)> {
    let Widths { ngf, ndf } = widths;
    if ngf == 0 || ndf == 0 {
        bail!("--ngf {ngf} --ndf {ndf}: a network needs at least one feature map a layer");
    }
    let (g, d) = match image_size {
        28 => (generator_28(ngf).to_vec(), discriminator_28(ndf).to_vec()),
        64 => (generator_64(ngf).to_vec(), discriminator_64(ndf).to_vec()),
        _ => bail!("unknown image size {image_size}: --image-size takes 28 or 64"),
    };
    let d = match kind {
        Discriminator::Dcgan => d,
        Discriminator::Critic { layer_norm } => critic_specs(&d, layer_norm),
    };
    Ok((g, d))
}

/// WGAN-GP's critic made from the discriminator `d`: its batch norms dropped, or with
/// `layer_norm` replaced by layer norm.
pub fn critic_specs(d: &[StageSpec], layer_norm: bool) -> Vec<StageSpec> {
    let norm = if layer_norm { Norm::Layer } else { Norm::None };
    d.iter().map(|s| StageSpec { norm: if s.norm == Norm::Batch { norm } else { s.norm }, ..*s }).collect()
}

/// What G and D of `image_size` and `widths` take at `batch` images per rank, before they
/// are built.
pub fn plan(image_size: usize, widths: Widths, batch: usize, kind: Discriminator) -> Result<[NetPlan; 2]> {
    let (g, d) = architecture(image_size, widths, kind)?;
    let nz = g.first().map_or(NZ, |s| s.c_in);
    Ok([plan_net(&g, batch, (nz, 1, 1))?, plan_net(&d, batch, (1, image_size, image_size))?])
}

/// Generator and discriminator for `batch` images per rank.
pub struct Dcgan<B: Backend> {
    pub g: Net<B>,
    pub d: Net<B>,
    pub image_size: usize,
    /// Length of the noise vector (G's input channels).
    pub nz: usize,
}

impl<B: Backend> Dcgan<B> {
    /// Weights from `seed` (G and D from distinct streams of it).
    pub fn new(
        be: &B,
        image_size: usize,
        widths: Widths,
        batch: usize,
        seed: u64,
        kind: Discriminator,
    ) -> Result<Self> {
        let (g_spec, d_spec) = architecture(image_size, widths, kind)?;
        Self::from_specs(be, &g_spec, &d_spec, image_size, batch, seed)
    }

    /// Any generator/discriminator pair (tests use narrow ones).
    pub fn from_specs(
        be: &B,
        g_spec: &[StageSpec],
        d_spec: &[StageSpec],
        image_size: usize,
        batch: usize,
        seed: u64,
    ) -> Result<Self> {
        let nz = g_spec.first().map_or(NZ, |s| s.c_in);
        // G: the first layer holds most of the gradient bytes, so its weight gradient goes
        // first (see BackwardOrder::DataFirst); D's are small and leave top to bottom.
        let g = Net::new(be, "G", g_spec, batch, (nz, 1, 1), BackwardOrder::DataFirst, seed_for(seed, 1))?;
        let d_input = (1, image_size, image_size);
        let d = Net::new(be, "D", d_spec, batch, d_input, BackwardOrder::LayerByLayer, seed_for(seed, 2))?;
        Ok(Dcgan { g, d, image_size, nz })
    }

    /// Adam's (beta1, beta2, eps) for both networks.
    pub fn set_adam(&mut self, beta1: f32, beta2: f32, eps: f32) {
        self.g.store.adam_betas_eps = (beta1, beta2, eps);
        self.d.store.adam_betas_eps = (beta1, beta2, eps);
    }
}

/// Images [n, S, S] from generator `g` in evaluation mode on `noise` [n, nz] (sample-major),
/// a batch of `g` at a time (the last padded with zeros), through `g`'s own buffers.
pub fn draw<B: Backend>(be: &B, g: &mut Net<B>, noise: &[f32], nz: usize, image_size: usize) -> Vec<f32> {
    let (b, plane) = (g.batch, image_size * image_size);
    let n = noise.len() / nz;
    let mut images = vec![0.0f32; n * plane];
    // [nz, b] noise and [b, S, S] output of one batch.
    let (mut z, mut out) = (vec![0.0f32; nz * b], vec![0.0f32; b * plane]);
    for start in (0..n).step_by(b) {
        let m = b.min(n - start);
        to_channel_major(&noise[start * nz..(start + m) * nz], nz, &mut z);
        be.upload(&z, ViewMut::whole(g.input_mut()));
        g.forward(be, false, None, &mut NoObserver);
        be.download(View::whole(g.output()), &mut out);
        images[start * plane..(start + m) * plane].copy_from_slice(&out[..m * plane]);
    }
    images
}

/// A seed for one purpose derived from the run's seed (splitmix64 of both).
pub fn seed_for(seed: u64, purpose: u64) -> u64 {
    let mut z = seed.wrapping_add(purpose.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::{Cpu, allocated};

    #[test]
    fn the_plan_is_what_building_allocates() {
        let narrow = Widths { ngf: 8, ndf: 12 };
        for (side, widths, batch, kind) in [
            (28, Widths::DCGAN, 3, Discriminator::Dcgan),
            (64, Widths::DCGAN, 2, Discriminator::Dcgan),
            (28, narrow, 3, Discriminator::Dcgan),
            (64, narrow, 2, Discriminator::Dcgan),
            (28, Widths::DCGAN, 2, Discriminator::Critic { layer_norm: false }),
            (28, narrow, 2, Discriminator::Critic { layer_norm: true }),
        ] {
            let before = allocated::floats();
            let model = Dcgan::new(&Cpu, side, widths, batch, 1, kind).unwrap();
            let built = allocated::floats() - before;
            let [g, d] = plan(side, widths, batch, kind).unwrap();
            assert_eq!(g.floats + d.floats, built, "{side}x{side}, batch {batch}");
            assert_eq!(g.params, model.g.store.layout.param_len());
            assert_eq!((g.convs.len(), d.convs.len()), (model.g.stages.len(), model.d.stages.len()));
        }
    }

    /// The widths scale the channels between the layers and nothing else: the image, the
    /// noise and the logit keep theirs, and the default is the paper's.
    #[test]
    fn widths_scale_the_hidden_channels() {
        let kind = Discriminator::Dcgan;
        let (g, d) = architecture(28, Widths { ngf: 16, ndf: 8 }, kind).unwrap();
        let channels = |s: &[StageSpec]| s.iter().map(|s| (s.c_in, s.c_out)).collect::<Vec<_>>();
        assert_eq!(channels(&g), [(NZ, 64), (64, 32), (32, 1)]);
        assert_eq!(channels(&d), [(1, 8), (8, 16), (16, 1)]);
        let (g, d) = architecture(64, Widths { ngf: 2, ndf: 3 }, kind).unwrap();
        assert_eq!(channels(&g), [(NZ, 16), (16, 8), (8, 4), (4, 2), (2, 1)]);
        assert_eq!(channels(&d), [(1, 3), (3, 6), (6, 12), (12, 24), (24, 1)]);
        let (g, d) = architecture(28, Widths::default(), kind).unwrap();
        assert_eq!((g, d), (GENERATOR_28.to_vec(), DISCRIMINATOR_28.to_vec()));
        let e = architecture(28, Widths { ngf: 0, ndf: 8 }, kind).unwrap_err().to_string();
        assert!(e.contains("--ngf 0"), "{e}");
    }
}
