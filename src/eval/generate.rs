//! Images from a checkpoint's generator: G in evaluation mode (running statistics), on noise
//! given sample by sample, a batch at a time.

use crate::backend::{Backend, ViewMut};
use crate::checkpoint;
use crate::model::dcgan::{Discriminator, NZ, Widths, architecture, draw};
use crate::model::net::{BackwardOrder, Net};
use anyhow::Result;
use std::path::Path;

/// The key of the noise images are drawn on for evaluation (`seed_for(seed, EVAL_NOISE)`): apart
/// from every noise a run trains on, and the same for `evaluate` and `--eval-every`.
pub const EVAL_NOISE: u64 = 0x6576616c;

/// Which of a checkpoint's generators draws: `--generator`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WhichGenerator {
    /// The averaged one where the run kept it (--g-ema), else the trained one
    #[default]
    Auto,
    /// The exponential moving average of G's weights (G_ema.safetensors, from --g-ema)
    Averaged,
    /// G as trained (G.safetensors)
    Trained,
}

impl WhichGenerator {
    /// Whether it names the averaged generator of the checkpoint in `dir`; asking for one the
    /// checkpoint does not hold is refused.
    pub fn averaged_in(self, dir: &Path) -> Result<bool> {
        Ok(match self {
            WhichGenerator::Auto => checkpoint::has_averaged_generator(dir),
            WhichGenerator::Averaged if !checkpoint::has_averaged_generator(dir) => anyhow::bail!(
                "--generator averaged: {} has no G_ema.safetensors (its run did not keep an average, --g-ema): leave --generator out, or use --generator trained",
                dir.display()
            ),
            WhichGenerator::Averaged => true,
            WhichGenerator::Trained => false,
        })
    }
}

/// A generator loaded from a checkpoint.
pub struct Generator<B: Backend> {
    net: Net<B>,
    pub image_size: usize,
    /// Whether it is `--g-ema`'s averaged generator.
    pub averaged: bool,
}

impl<B: Backend> Generator<B> {
    /// The generator `which` of the checkpoint in `dir` (its digests checked), drawing
    /// `batch` images at a time.
    pub fn load(be: &B, dir: &Path, batch: usize, which: WhichGenerator) -> Result<Self> {
        let averaged = which.averaged_in(dir)?;
        let (image_size, ngf) = checkpoint::generator_shape_of(dir)?;
        // D's width is not G's to know; only G is built.
        let widths = Widths { ngf, ndf: ngf };
        let (specs, _) = architecture(image_size, widths, Discriminator::Dcgan).map_err(|_| {
            anyhow::anyhow!(
                "{} holds a generator for {image_size}x{image_size} images, which this program does not build",
                dir.display()
            )
        })?;
        let mut net = Net::new(be, "G", &specs, batch, (NZ, 1, 1), BackwardOrder::DataFirst, 0)?;
        let t = checkpoint::load_generator(dir, &net.store.layout, averaged)?;
        be.upload(&t.values, ViewMut::whole(&mut net.store.value));
        be.upload(&t.state, ViewMut::whole(&mut net.store.state));
        Ok(Generator { net, image_size, averaged })
    }

    /// A note where the checkpoint in `dir` falls inside a block of `--sync-every`: the
    /// generator drawn from is then one rank's, not the ranks' average. (A run with
    /// `--sync-every` keeps no averaged generator: training refuses it with `--g-ema`.)
    pub fn note(&self, dir: &Path) -> Option<String> {
        let (into, every) = checkpoint::load_progress(dir).ok()?.inside_a_block()?;
        Some(format!(
            "note: {} falls {into} step(s) into a block of --sync-every {every}: its generator is rank 0's own since the ranks' last sync, not their average (a checkpoint where an epoch or the run ends on a block's last step holds the average)",
            dir.display()
        ))
    }

    /// "the averaged generator (--g-ema) of DIR" or "the generator of DIR".
    pub fn describe(&self, dir: &Path) -> String {
        let which = if self.averaged { "averaged generator (--g-ema)" } else { "generator" };
        format!("the {which} of {}", dir.display())
    }

    /// Images [n, S, S] in [-1, 1] from `noise` [n, NZ] (sample-major).
    pub fn draw(&mut self, be: &B, noise: &[f32]) -> Vec<f32> {
        draw(be, &mut self.net, noise, NZ, self.image_size)
    }
}
