//! `dcgan-train sample`: render a grid of generated images from a saved generator.

use crate::backend::cpu::Cpu;
use crate::backend::{Backend, View, ViewMut};
use crate::checkpoint;
use crate::model::dcgan::{GENERATOR_28, GENERATOR_64, NZ, seed_for};
use crate::model::net::{BackwardOrder, Net, NoObserver};
use crate::report::png::{write_grid, written_here};
use crate::train::noise::fixed_noise;
use anyhow::{Result, bail};
use clap::Args;
use std::path::{Path, PathBuf};

#[derive(Args, Debug, Clone)]
pub struct SampleArgs {
    /// A run directory (its latest checkpoint) or a checkpoint directory.
    #[arg(long)]
    pub checkpoint: PathBuf,
    /// Number of images.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub n: u64,
    /// The PNG to write. An existing file is replaced only if it is a PNG this program wrote
    /// (or with --force).
    #[arg(long, default_value = "samples.png")]
    pub out: PathBuf,
    /// Replace --out even if it is not a PNG this program wrote.
    #[arg(long)]
    pub force: bool,
    /// Seed of other noise; without it, the noise of the run's own sample grids, so that the
    /// first 64 images are the grid the run drew with these weights (samples/final.png for
    /// its latest checkpoint).
    #[arg(long)]
    pub seed: Option<u64>,
}

/// The key that sets `--seed`'s noise apart from the run's own grid noise of that seed.
const OTHER_NOISE: u64 = 0x73616d70;

/// Refuses an `out` that holds something other than a grid this program wrote: a mistyped
/// --out must not turn someone's file into a PNG.
fn ensure_replaceable(out: &Path) -> Result<()> {
    if std::fs::symlink_metadata(out).is_ok() && !written_here(out) {
        bail!(
            "sample --out {}: the file exists and is not a PNG that dcgan-train wrote: choose another --out, or pass --force to overwrite it",
            out.display()
        );
    }
    Ok(())
}

pub fn run(args: SampleArgs) -> Result<()> {
    if !args.force {
        ensure_replaceable(&args.out)?;
    }
    let found = checkpoint::locate(&args.checkpoint, "--checkpoint")?;
    for note in found.notes() {
        eprintln!("warning: {note}");
    }
    let dir = found.dir;
    let size = checkpoint::image_size_of(&dir)?;
    let specs = match size {
        28 => &GENERATOR_28[..],
        64 => &GENERATOR_64[..],
        s => bail!("{} holds a generator for {s}x{s} images, which this program does not build", dir.display()),
    };
    let n = args.n as usize;
    let be = Cpu;
    let mut g = Net::new(&be, "G", specs, n, (NZ, 1, 1), BackwardOrder::DataFirst, 0)?;
    let t = checkpoint::load_generator(&dir, &g.store.layout)?;
    be.upload(&t.values, ViewMut::whole(&mut g.store.value));
    be.upload(&t.state, ViewMut::whole(&mut g.store.state));
    // Without --seed: the noise of the run's own sample grids (its first 64 images are the
    // grid the run drew with these weights); --seed picks other noise.
    let (noise, whose) = match args.seed {
        Some(seed) => (fixed_noise(seed_for(seed, OTHER_NOISE), n, NZ), format!("--seed {seed}")),
        None => match checkpoint::load_progress(&dir) {
            Ok(p) => (fixed_noise(p.seed, n, NZ), format!("the run's grid noise (its seed {})", p.seed)),
            // A generator on its own (G.safetensors, no optimizer file) has no run to ask.
            Err(_) => (fixed_noise(seed_for(0, OTHER_NOISE), n, NZ), "--seed 0 (no run's seed beside it)".into()),
        },
    };
    let mut z = vec![0.0f32; NZ * n];
    for i in 0..n {
        for c in 0..NZ {
            z[c * n + i] = noise[i * NZ + c];
        }
    }
    be.upload(&z, ViewMut::whole(g.input_mut()));
    g.forward(&be, false, None, &mut NoObserver);
    let mut images = vec![0.0f32; n * size * size];
    be.download(View::whole(g.output()), &mut images);
    let cols = (n as f64).sqrt().ceil() as usize;
    write_grid(&args.out, &images, n, size, size, cols)?;
    eprintln!("{n} samples from {} with {whose} written to {}", dir.display(), args.out.display());
    Ok(())
}
