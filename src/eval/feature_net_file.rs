//! Where a data set's feature network is kept, and getting it: loaded when its file is there,
//! trained and written when not. The file name records the image size and the data's
//! fingerprint, so every distance taken on one data set is taken with the same network.

use super::feature_net::{FeatureNet, file_name};
use super::train_classifier::{ClassifierTraining, EpochReport, train_classifier};
use crate::backend::Backend;
use crate::data::DataSource;
use crate::data::labelled::{Labelled, Split};
use anyhow::{Result, bail};
use std::path::{Path, PathBuf};

/// The folder feature networks are kept in by default: ~/.cache/dcgan-train/feature-nets (or
/// ./feature-nets where there is no home).
pub fn default_dir() -> PathBuf {
    match std::env::var_os("HOME") {
        Some(h) => PathBuf::from(h).join(".cache").join("dcgan-train").join("feature-nets"),
        None => PathBuf::from("feature-nets"),
    }
}

/// The data set's two splits, with labels.
pub struct Splits {
    pub train: Labelled,
    pub test: Labelled,
}

impl Splits {
    pub fn load(src: &DataSource) -> Result<Splits> {
        Ok(Splits { train: Labelled::load(src, Split::Train)?, test: Labelled::load(src, Split::Test)? })
    }
}

/// One line per epoch of training, on stderr.
pub fn print_epoch(r: &EpochReport) {
    eprintln!(
        "feature network: epoch {} loss {:.4}, accuracy {:.4} on the training split and {:.4} on the test split ({:.1} s)",
        r.epoch + 1,
        r.loss,
        r.train_accuracy,
        r.test_accuracy,
        r.seconds
    );
}

/// The feature network of `splits` at `image_size`: from `file` (default: its name in
/// `default_dir`), or trained with `how` and written there when the file does not exist and
/// `train_if_missing`. A file trained on other data or for another image size is refused.
pub fn obtain<B: Backend>(
    be: &B,
    splits: &Splits,
    image_size: usize,
    file: Option<&Path>,
    batch: usize,
    train_if_missing: Option<ClassifierTraining>,
) -> Result<(FeatureNet<B>, PathBuf)> {
    let fingerprint = splits.train.fingerprint();
    let path = file.map_or_else(|| default_dir().join(file_name(image_size, &fingerprint)), Path::to_path_buf);
    if path.exists() {
        let f = FeatureNet::load(be, &path, batch)?;
        if !f.info.measures(&fingerprint, image_size) {
            bail!(
                "{} was trained on {} at {}x{}, not on this data ({}) at {image_size}x{image_size}: pass the right --classifier, or leave it out to use (or train) this data's",
                path.display(),
                f.info.data,
                f.info.image_size,
                f.info.image_size,
                splits.train.set.description
            );
        }
        return Ok((f, path));
    }
    let Some(how) = train_if_missing else {
        bail!(
            "there is no feature network {}: train it with `dcgan-train classifier` (a few minutes on 2 cores)",
            path.display()
        );
    };
    eprintln!("training the feature network for {} into {} ...", splits.train.set.description, path.display());
    let trained =
        train_classifier(be, &splits.train, &splits.test, ClassifierTraining { image_size, ..how }, print_epoch)?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
    }
    trained.save(be, &path)?;
    Ok((FeatureNet::load(be, &path, batch)?, path))
}
