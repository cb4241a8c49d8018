//! `dcgan-train classifier`: train the feature network the sample-quality distances are taken
//! with, on a data set's labelled training split, and write it (by default where `evaluate`
//! and `--eval-every` look for it).

use super::parse::at_least_one;
use crate::backend::cpu::Cpu;
use crate::data::DataSource;
use crate::eval::feature_net::{FeatureNet, file_name};
use crate::eval::feature_net_file::{Splits, default_dir, print_epoch};
use crate::eval::train_classifier::{ClassifierTraining, train_classifier};
use anyhow::{Result, bail};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug, Clone)]
pub struct ClassifierArgs {
    /// The data: a directory with train-* and t10k-* images and labels (MNIST layout), or
    /// synthetic:N. Default: Debian's Fashion-MNIST.
    #[arg(long)]
    pub data: Option<String>,
    /// The side of the images it classifies: that of the runs it will score (28 or 64).
    #[arg(long, default_value_t = 28, value_parser = super::parse::image_size)]
    pub image_size: usize,
    /// Where to write it (default: ~/.cache/dcgan-train/feature-nets/, under a name recording
    /// the image size and the data's fingerprint, where evaluate looks for it).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Passes over the training split.
    #[arg(long, default_value_t = 5, value_parser = at_least_one)]
    pub epochs: u64,
    /// Seed of the weights and the data order: the same seed and data give the same network.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Train again even if the file exists.
    #[arg(long)]
    pub force: bool,
}

pub fn run(a: ClassifierArgs) -> Result<()> {
    crate::backend::threads::setup_threads(None, 1)?;
    let splits = Splits::load(&DataSource::parse(a.data.as_deref())?)?;
    let out = a.out.unwrap_or_else(|| default_dir().join(file_name(a.image_size, &splits.train.fingerprint())));
    if out.exists() && !a.force {
        let f = FeatureNet::load(&Cpu, &out, 1)?;
        if !f.info.measures(&splits.train.fingerprint(), a.image_size) {
            bail!(
                "--out {} holds a feature network of {} at {}x{}, not of this data ({}) at {}x{}: choose another --out, or pass --force to train over it",
                out.display(),
                f.info.data,
                f.info.image_size,
                f.info.image_size,
                splits.train.set.description,
                a.image_size,
                a.image_size
            );
        }
        eprintln!(
            "{} is already trained on {} (test accuracy {:.4}): pass --force to train it again",
            out.display(),
            f.info.data,
            f.info.test_accuracy
        );
        return Ok(());
    }
    // Before minutes of training: a place the network cannot be written ends here.
    crate::report::check_writable(&out, "--out")?;
    let how = ClassifierTraining { image_size: a.image_size, epochs: a.epochs, seed: a.seed, ..Default::default() };
    eprintln!(
        "training the feature network on {} ({} test images)",
        splits.train.set.description, splits.test.set.count
    );
    let f = train_classifier(&Cpu, &splits.train, &splits.test, how, print_epoch)?;
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
    }
    f.save(&Cpu, &out)?;
    eprintln!("test accuracy {:.4}; written to {}", f.info.test_accuracy, out.display());
    Ok(())
}
