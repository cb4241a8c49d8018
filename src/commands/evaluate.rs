//! `dcgan-train evaluate`: the sample quality of a run's generator (or of images from
//! anywhere), as the Fréchet distance, KID, precision and recall against the test split in the
//! feature network's features, with what the classifier makes of the images and the same
//! figures for real training images beside them.

use crate::backend::cpu::Cpu;
use crate::checkpoint;
use crate::checkpoint::Progress;
use crate::data::{DataSource, Dataset, idx};
use crate::eval::evaluate::{Evaluation, Reference, images_of, score};
use crate::eval::feature_net_file::{Splits, obtain};
use crate::eval::generate::{EVAL_NOISE, Generator, WhichGenerator};
use crate::eval::train_classifier::ClassifierTraining;
use crate::model::dcgan::{NZ, seed_for};
use crate::model::noise::fixed_noise;
use crate::train::recorded_options::{DATA_ABSOLUTE, TEST_DATA_FINGERPRINT};
use anyhow::{Context, Result, bail};
use clap::Args;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Images the feature network takes at a time.
const BATCH: usize = 500;

#[derive(Args, Debug, Clone)]
pub struct EvaluateArgs {
    /// A run directory (its latest checkpoint), a checkpoint, or RUN/checkpoints/best: its
    /// generator's images.
    #[arg(long, required_unless_present = "images", conflicts_with = "images")]
    pub checkpoint: Option<PathBuf>,
    /// Score the images of an IDX file instead (e.g. `sample --out FILE.idx`).
    #[arg(long, value_name = "FILE.idx")]
    pub images: Option<PathBuf>,
    /// Images drawn from the generator (distances are comparable only at the same n).
    #[arg(long, default_value_t = 10_000, value_parser = super::parse::evaluation_images)]
    pub n: u64,
    /// The data whose test split is the reference (default: the run's own data, or
    /// Fashion-MNIST for --images).
    #[arg(long)]
    pub data: Option<String>,
    /// The feature network (default: the data's, trained first when there is none).
    #[arg(long, value_name = "FILE")]
    pub classifier: Option<PathBuf>,
    /// Seed of the generator's noise (default: the run's own `--seed`, whose noise its
    /// evaluations drew on, so that the figure is the one the run recorded).
    #[arg(long)]
    pub seed: Option<u64>,
    /// With --checkpoint, which generator draws: auto (the averaged one where the run kept it
    /// with --g-ema, else G), averaged, or trained.
    #[arg(long, value_enum, default_value_t = WhichGenerator::Auto, conflicts_with = "images")]
    pub generator: WhichGenerator,
    /// Also write the figures as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

pub fn run(a: EvaluateArgs) -> Result<()> {
    let started = Instant::now();
    crate::backend::threads::setup_threads(None, 1)?;
    // Before the feature network is trained or read: a place --json cannot be written ends here.
    if let Some(path) = &a.json {
        crate::report::check_writable(path, "--json")?;
    }
    let be = Cpu;
    let n = a.n as usize;
    // The images' source, size and data set.
    let ck = match &a.checkpoint {
        Some(p) => Some(checkpoint::locate(p, "--checkpoint")?.dir),
        None => None,
    };
    // A generator the checkpoint does not hold is refused before the feature network is
    // trained or read.
    if let Some(dir) = &ck {
        a.generator.averaged_in(dir)?;
    }
    let file = match &a.images {
        Some(p) => Some(read_images(p)?),
        None => None,
    };
    let side = match (&ck, &file) {
        (Some(d), _) => checkpoint::image_size_of(d)?,
        (None, Some(set)) => set.height,
        (None, None) => unreachable!("clap requires one"),
    };
    // The run's own data (its `--data`) unless given, and the test split it measured on.
    let progress = ck.as_deref().and_then(|dir| checkpoint::load_progress(dir).ok());
    let recorded = |key: &str| progress.as_ref().and_then(|p| p.recorded(key)).map(str::to_string);
    let data = match &a.data {
        Some(given) => Some(given.clone()),
        None => progress.as_ref().map_or(Ok(None), the_runs_data)?,
    };
    let splits = Splits::load(&DataSource::parse(data.as_deref())?)?;
    if let Some(run) = recorded(TEST_DATA_FINGERPRINT) {
        let now = splits.test.fingerprint();
        if run != now {
            eprintln!(
                "note: the run measured its samples against other test images (fingerprint {run}; these are {now}): these figures do not compare with its metrics.jsonl"
            );
        }
    }
    let (mut f, path) =
        obtain(&be, &splits, side, a.classifier.as_deref(), BATCH, Some(ClassifierTraining::default()))?;
    let reference_images = images_of(&splits.test.set, side, splits.test.set.count);
    let reference = Reference::of(
        &be,
        &mut f,
        &reference_images,
        &splits.test.labels,
        format!("the test split: {}", splits.test.set.description),
    )?;
    let (images, what) = match (&ck, file) {
        (Some(dir), _) => {
            let mut g = Generator::load(&be, dir, BATCH.min(n), a.generator)?;
            if let Some(note) = g.note(dir) {
                eprintln!("{note}");
            }
            let seed = match a.seed {
                Some(seed) => seed,
                None => checkpoint::load_progress(dir)?.seed,
            };
            (g.draw(&be, &fixed_noise(seed_for(seed, EVAL_NOISE), n, NZ)), g.describe(dir))
        }
        (None, Some(set)) => (images_of(&set, side, set.count), a.images.as_ref().unwrap().display().to_string()),
        (None, None) => unreachable!(),
    };
    let s = score(&be, &mut f, &images, &reference).with_context(|| format!("scoring {what}"))?;
    let mut e = Evaluation::new(what, s, &reference, path.display().to_string(), f.info.test_accuracy);
    let real = images_of(&splits.train.set, side, e.n);
    e.floor = Some(score(&be, &mut f, &real, &reference)?);
    e.seconds = started.elapsed().as_secs_f64();
    print!("{e}");
    if let Some(path) = &a.json {
        crate::report::write_atomically(path, |f| Ok(serde_json::to_writer_pretty(f, &e)?))
            .with_context(|| format!("cannot write --json {}", path.display()))?;
    }
    Ok(())
}

/// The run's `--data`: as it was typed where that is found from here, else where rank 0 found
/// it (a relative path, and `evaluate` run from another directory than the run).
fn the_runs_data(p: &Progress) -> Result<Option<String>> {
    let Some(typed) = p.recorded("data") else { return Ok(None) };
    match DataSource::parse(Some(typed))? {
        DataSource::Dir(dir) if !dir.exists() => match p.recorded(DATA_ABSOLUTE) {
            Some(found) if Path::new(found).exists() => Ok(Some(found.to_string())),
            found => bail!(
                "the run's --data {typed} is not found from here{}: give --data DIR with the run's images",
                found.map(|f| format!(" nor at {f}, where the run found it")).unwrap_or_default()
            ),
        },
        _ => Ok(Some(typed.to_string())),
    }
}

/// The images of an IDX file, as a data set.
fn read_images(path: &Path) -> Result<Dataset> {
    let (images, count, height, width) = idx::read_idx_images(path)?;
    if height != width || !height.is_multiple_of(4) {
        bail!(
            "--images {}: {height}x{width} images: the feature network takes square ones whose side is a multiple of 4",
            path.display()
        );
    }
    Ok(Dataset { images, count, height, width, description: path.display().to_string() })
}
