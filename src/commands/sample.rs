//! `dcgan-train sample`: a grid of generated images from a saved generator, as a PNG, or the
//! images themselves as an IDX file (`--out FILE.idx`, the input data's layout) for other tools
//! and `evaluate --images`; with `--interpolate K`, rows that walk between noise vectors (the
//! DCGAN paper's walk in the latent space).

use crate::backend::cpu::Cpu;
use crate::checkpoint;
use crate::data::idx::encode_idx_images;
use crate::eval::generate::{Generator, WhichGenerator};
use crate::model::dcgan::{NZ, seed_for};
use crate::model::noise::{fixed_noise, slerp_path};
use crate::report::png::{to_byte, write_grid, written_here};
use crate::report::write_atomically;
use anyhow::{Result, bail};
use clap::Args;
use std::path::{Path, PathBuf};

#[derive(Args, Debug, Clone)]
pub struct SampleArgs {
    /// A run directory (its latest checkpoint), a checkpoint directory, or RUN/checkpoints/best
    /// (the epoch of the lowest FID).
    #[arg(long)]
    pub checkpoint: PathBuf,
    /// Number of images.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub n: u64,
    /// The PNG to write, or with a name ending in .idx the images themselves (uint8, the IDX
    /// layout of the input data). An existing file is replaced only if it is a PNG this
    /// program wrote (or with --force).
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
    /// Which generator draws: auto (the averaged one where the run kept it with --g-ema,
    /// else G), averaged, or trained.
    #[arg(long, value_enum, default_value_t = WhichGenerator::Auto)]
    pub generator: WhichGenerator,
    /// Rows of K images that walk from one noise vector to the next along the sphere the noise
    /// lies near, each row starting where the one before ended: ceil(n / K) rows, K a row.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u64).range(2..=64))]
    pub interpolate: Option<u64>,
}

/// The key that sets `--seed`'s noise apart from the run's own grid noise of that seed.
const OTHER_NOISE: u64 = 0x73616d70;

/// Whether `out` names an IDX file (the raw images, in the input data's layout).
fn is_idx(out: &Path) -> bool {
    out.extension().is_some_and(|e| e == "idx" || e == "idx3-ubyte")
}

/// Refuses an `out` that holds something other than a grid this program wrote: a mistyped
/// --out must not turn someone's file into a PNG (or into images).
fn ensure_replaceable(out: &Path) -> Result<()> {
    if std::fs::symlink_metadata(out).is_ok() && (is_idx(out) || !written_here(out)) {
        let what = if is_idx(out) { "" } else { " and is not a PNG that dcgan-train wrote" };
        bail!(
            "sample --out {}: the file exists{what}: choose another --out, or pass --force to overwrite it",
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
    // A walk draws whole rows of K, between rows + 1 noise vectors.
    let (n, cols, vectors) = match args.interpolate.map(|k| k as usize) {
        Some(k) => {
            let rows = (args.n as usize).div_ceil(k);
            (rows * k, k, rows + 1)
        }
        None => (args.n as usize, (args.n as f64).sqrt().ceil() as usize, args.n as usize),
    };
    let be = Cpu;
    let mut g = Generator::load(&be, &dir, n, args.generator)?;
    if let Some(note) = g.note(&dir) {
        eprintln!("{note}");
    }
    let size = g.image_size;
    // Without --seed: the noise of the run's own sample grids (its first 64 images are the
    // grid the run drew with these weights); --seed picks other noise.
    let (mut noise, mut whose) = match args.seed {
        Some(seed) => (fixed_noise(seed_for(seed, OTHER_NOISE), vectors, NZ), format!("--seed {seed}")),
        None => match checkpoint::load_progress(&dir) {
            Ok(p) => (fixed_noise(p.seed, vectors, NZ), format!("the run's grid noise (its seed {})", p.seed)),
            // A generator on its own (G.safetensors, no optimizer file) has no run to ask.
            Err(_) => (fixed_noise(seed_for(0, OTHER_NOISE), vectors, NZ), "--seed 0 (no run's seed beside it)".into()),
        },
    };
    if args.interpolate.is_some() {
        // [rows * K, NZ]: row r from vector r to vector r + 1.
        noise = noise
            .chunks_exact(NZ)
            .zip(noise.chunks_exact(NZ).skip(1))
            .flat_map(|(a, b)| slerp_path(a, b, cols))
            .collect();
        whose = format!("walks of {cols} between {vectors} vectors of {whose}");
    }
    let images = g.draw(&be, &noise);
    if is_idx(&args.out) {
        let pixels: Vec<u8> = images.iter().map(|&v| to_byte(v)).collect();
        let bytes = encode_idx_images(&pixels, n, size, size);
        write_atomically(&args.out, |f| Ok(std::io::Write::write_all(f, &bytes)?))?;
    } else {
        write_grid(&args.out, &images, n, size, size, cols)?;
    }
    eprintln!("{n} samples from {} with {whose} written to {}", g.describe(&dir), args.out.display());
    Ok(())
}
