//! Labelled images: a split of the data set (the training images or the held-out test images)
//! with each image's class, for the classifier the sample-quality distances are taken with.
//!
//! A directory holds them as IDX files: `train-images-idx3-ubyte` with `train-labels-idx1-ubyte`
//! and `t10k-images-idx3-ubyte` with `t10k-labels-idx1-ubyte` (`.gz` or not). `synthetic:N`
//! labels each image by its shape (3 classes); its test split is the next N images, which no
//! run on `synthetic:N` trains on.

use super::{DEFAULT_DIR, DataSource, Dataset, idx, synthetic};
use anyhow::{Result, bail};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Which images.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    Train,
    Test,
}

impl Split {
    /// The files' prefix in the MNIST layout.
    fn stem(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Test => "t10k",
        }
    }
}

/// Images `[count, height, width]` and their classes `[count]`.
#[derive(Clone, Debug)]
pub struct Labelled {
    pub set: Dataset,
    pub labels: Vec<u8>,
    /// Classes: labels lie in 0..classes.
    pub classes: usize,
}

/// The first of the MNIST spellings of `{stem}-{what}-idx{rank}-ubyte` present in `dir`.
pub fn find_idx(dir: &Path, stem: &str, what: &str, rank: u32) -> Option<PathBuf> {
    let names = [
        format!("{stem}-{what}-idx{rank}-ubyte"),
        format!("{stem}-{what}-idx{rank}-ubyte.gz"),
        format!("{stem}-{what}.idx{rank}-ubyte"),
        format!("{stem}-{what}.idx{rank}-ubyte.gz"),
    ];
    names.iter().map(|n| dir.join(n)).find(|p| p.is_file())
}

impl Labelled {
    /// The `split` of `src`, with its labels.
    pub fn load(src: &DataSource, split: Split) -> Result<Labelled> {
        let dir = match src {
            DataSource::Synthetic(n) => return Ok(synthetic_split(*n, split)),
            DataSource::FashionMnistDefault => PathBuf::from(DEFAULT_DIR),
            DataSource::Dir(d) if d.is_file() => d.parent().map(Path::to_path_buf).unwrap_or_default(),
            DataSource::Dir(d) => d.clone(),
        };
        let stem = split.stem();
        let (Some(images), Some(labels)) = (find_idx(&dir, stem, "images", 3), find_idx(&dir, stem, "labels", 1))
        else {
            bail!(
                "{}: no {stem}-images-idx3-ubyte[.gz] with {stem}-labels-idx1-ubyte[.gz]: the {} split with its labels is needed here (MNIST layout; Fashion-MNIST from `apt-get install dataset-fashion-mnist` has both)",
                dir.display(),
                if split == Split::Train { "training" } else { "test" }
            );
        };
        let (pixels, count, height, width) = idx::read_idx_images(&images)?;
        let labels_read = idx::read_idx_labels(&labels)?;
        if labels_read.len() != count {
            bail!(
                "{} has {} labels for the {count} images of {}",
                labels.display(),
                labels_read.len(),
                images.display()
            );
        }
        let classes = labels_read.iter().max().map_or(0, |&m| m as usize + 1);
        let description = format!("{count} images of {height}x{width} from {}", images.display());
        Ok(Labelled {
            set: Dataset { images: pixels, count, height, width, description },
            labels: labels_read,
            classes,
        })
    }

    /// A fingerprint of the images and labels (hex of SHA-256), the same on every machine
    /// that holds the same data.
    pub fn fingerprint(&self) -> String {
        let mut h = Sha256::new();
        h.update((self.set.count as u64).to_le_bytes());
        h.update((self.set.height as u64).to_le_bytes());
        h.update((self.set.width as u64).to_le_bytes());
        h.update(&self.set.images);
        h.update(&self.labels);
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// `synthetic:N`'s split: images 0..N to train on, N..2N held out; labelled by shape.
fn synthetic_split(n: usize, split: Split) -> Labelled {
    let first = if split == Split::Train { 0 } else { n };
    let plane = synthetic::SIDE * synthetic::SIDE;
    let mut images = vec![0u8; n * plane];
    let mut labels = vec![0u8; n];
    for (i, (img, label)) in images.chunks_exact_mut(plane).zip(labels.iter_mut()).enumerate() {
        *label = synthetic::draw((first + i) as u64, img) as u8;
    }
    let side = synthetic::SIDE;
    let which = if split == Split::Train { "training" } else { "held-out" };
    let description = format!("{n} synthetic {which} images of {side}x{side} (images {first}..{})", first + n);
    Labelled { set: Dataset { images, count: n, height: side, width: side, description }, labels, classes: 3 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_labels_are_the_shapes_and_the_test_split_is_not_trained_on() {
        let train = Labelled::load(&DataSource::Synthetic(50), Split::Train).unwrap();
        let test = Labelled::load(&DataSource::Synthetic(50), Split::Test).unwrap();
        // The training split is what `--data synthetic:50` trains on, image for image.
        assert_eq!(train.set.images, synthetic::generate(50));
        assert_eq!(test.set.images[..], synthetic::generate(100)[50 * 784..]);
        assert!(train.labels.iter().all(|&l| l < 3) && train.labels.iter().any(|&l| l != train.labels[0]));
        assert_ne!(train.fingerprint(), test.fingerprint());
        assert_eq!(
            train.fingerprint(),
            Labelled::load(&DataSource::Synthetic(50), Split::Train).unwrap().fingerprint()
        );
    }

    #[test]
    fn a_directory_without_labels_says_what_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("train-images-idx3-ubyte"), idx::encode_idx_images(&[0; 4], 1, 2, 2)).unwrap();
        let e = Labelled::load(&DataSource::Dir(dir.path().into()), Split::Train).unwrap_err().to_string();
        assert!(e.contains("train-labels-idx1-ubyte") && e.contains("training split"), "{e}");
        std::fs::write(dir.path().join("train-labels-idx1-ubyte"), idx::encode_idx_labels(&[7])).unwrap();
        let l = Labelled::load(&DataSource::Dir(dir.path().into()), Split::Train).unwrap();
        assert_eq!((l.set.count, l.labels.clone(), l.classes), (1, vec![7], 8));
        let e = Labelled::load(&DataSource::Dir(dir.path().into()), Split::Test).unwrap_err().to_string();
        assert!(e.contains("t10k-images-idx3-ubyte") && e.contains("test split"), "{e}");
    }
}
