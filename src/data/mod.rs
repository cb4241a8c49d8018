//! Training data: where it comes from (`--data`), loading it, and turning dataset indices into
//! a batch tensor in [-1, 1] at the model's image size.

pub mod idx;
pub mod labelled;
pub mod resize;
pub mod shard;
pub mod synthetic;

pub use shard::{EpochOrder, Shard};

use anyhow::{Result, bail};
use std::path::{Path, PathBuf};

/// Where the Debian package `dataset-fashion-mnist` installs Fashion-MNIST.
pub const DEFAULT_DIR: &str = "/usr/share/datasets/fashion-mnist";
/// Enough for any test or demo; bigger would only be a way to run out of memory.
const MAX_SYNTHETIC: usize = 10_000_000;

/// The value of `--data`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DataSource {
    /// No `--data`: Fashion-MNIST from [`DEFAULT_DIR`].
    FashionMnistDefault,
    /// `--data DIR`: a directory with train-images-idx3-ubyte[.gz] (or that file itself).
    Dir(PathBuf),
    /// `--data synthetic:N`: N generated 28x28 images.
    Synthetic(usize),
}

impl DataSource {
    /// None -> the default; "synthetic:N"; anything else is a directory.
    pub fn parse(arg: Option<&str>) -> Result<DataSource> {
        let Some(arg) = arg else {
            return Ok(DataSource::FashionMnistDefault);
        };
        if arg.is_empty() {
            bail!("--data is empty: give a directory with train-images-idx3-ubyte[.gz] or synthetic:N");
        }
        if let Some(n) = arg.strip_prefix("synthetic:") {
            return match n.parse::<usize>() {
                Ok(n @ 1..=MAX_SYNTHETIC) => Ok(DataSource::Synthetic(n)),
                _ => bail!(
                    "--data {arg}: the number of synthetic images must be a whole number from 1 \
                     to {MAX_SYNTHETIC}, e.g. --data synthetic:1024"
                ),
            };
        }
        if arg == "synthetic" {
            bail!("--data synthetic needs a count: e.g. --data synthetic:1024");
        }
        Ok(DataSource::Dir(PathBuf::from(arg)))
    }
}

/// Training images in memory.
#[derive(Clone, Debug)]
pub struct Dataset {
    /// [count, height, width] pixels, 0 = black.
    pub images: Vec<u8>,
    pub count: usize,
    pub height: usize,
    pub width: usize,
    /// One line saying what was loaded and from where (the caller prints it).
    pub description: String,
}

impl Dataset {
    /// The images' fingerprint: the xxh3-64 of their count, sides and pixels, in hex. A
    /// specified hash, so that a checkpoint's record of it compares with any later build's.
    pub fn fingerprint(&self) -> String {
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        for n in [self.count, self.height, self.width] {
            h.update(&(n as u64).to_le_bytes());
        }
        h.update(&self.images);
        format!("{:016x}", h.digest())
    }

    /// Loads the images. Prints nothing; the caller prints `description`.
    pub fn load(src: &DataSource) -> Result<Dataset> {
        match src {
            DataSource::Synthetic(n) => Ok(Dataset {
                images: synthetic::generate(*n),
                count: *n,
                height: synthetic::SIDE,
                width: synthetic::SIDE,
                description: format!("{n} synthetic images of 28x28 (blobs, rings and strokes; --data synthetic:{n})"),
            }),
            DataSource::FashionMnistDefault => Dataset::load_default(Path::new(DEFAULT_DIR)),
            DataSource::Dir(path) => {
                let file = if path.is_file() {
                    path.clone()
                } else {
                    find_images(path).map_err(|problem| {
                        anyhow::anyhow!(
                            "--data {}: {problem}: pass --data DIR with a directory holding \
                             train-images-idx3-ubyte[.gz] (MNIST or Fashion-MNIST layout), or \
                             install Fashion-MNIST with `apt-get install dataset-fashion-mnist` \
                             and leave out --data",
                            path.display()
                        )
                    })?
                };
                Dataset::from_file(&file)
            }
        }
    }

    /// The default data set from `dir` (DEFAULT_DIR; a parameter so tests can point it at a
    /// missing directory).
    fn load_default(dir: &Path) -> Result<Dataset> {
        let file = find_images(dir).map_err(|problem| {
            anyhow::anyhow!(
                "{problem} (Fashion-MNIST, the default when --data is not given): install \
                 it with `apt-get install dataset-fashion-mnist`, or pass --data DIR (a \
                 directory with train-images-idx3-ubyte[.gz]) or --data synthetic:N"
            )
        })?;
        let mut set = Dataset::from_file(&file)?;
        set.description = format!(
            "Fashion-MNIST, {} images of {}x{} from {} (the default; --data DIR for other data)",
            set.count,
            set.height,
            set.width,
            file.display()
        );
        Ok(set)
    }

    fn from_file(file: &Path) -> Result<Dataset> {
        let (images, count, height, width) = idx::read_idx_images(file)?;
        Ok(Dataset {
            images,
            count,
            height,
            width,
            description: format!("{count} images of {height}x{width} from {}", file.display()),
        })
    }

    /// Images `indices`, scaled from `[0,255]` to `[-1,1]` (x/127.5 - 1) and resized (bilinear,
    /// align_corners=false like PyTorch's) to size x size when size != native, into
    /// out [B, size, size] (= [1, B, size, size] channel-major, B = indices.len()).
    pub fn fill_batch(&self, indices: &[usize], size: usize, out: &mut [f32]) {
        let plane = size * size;
        assert_eq!(out.len(), indices.len() * plane, "fill_batch: out must be [B={}, {size}, {size}]", indices.len());
        let native = self.height * self.width;
        let resize = (self.height != size || self.width != size)
            .then(|| resize::Resize::new(self.height, self.width, size, size));
        // [height, width] scratch for one scaled image before resizing.
        let mut scaled = vec![0f32; if resize.is_some() { native } else { 0 }];
        // [height, size] scratch of the separable resize.
        let mut wide = Vec::new();
        for (&index, dst) in indices.iter().zip(out.chunks_exact_mut(plane)) {
            assert!(index < self.count, "image index {index} out of {}", self.count);
            let src = &self.images[index * native..(index + 1) * native];
            match &resize {
                None => scale_pixels(src, dst),
                Some(r) => {
                    scale_pixels(src, &mut scaled);
                    r.apply_with(&scaled, dst, &mut wide);
                }
            }
        }
    }
}

/// [0, 255] -> [-1, 1]: x / 127.5 - 1, the same as torchvision's ToTensor + Normalize(0.5, 0.5).
fn scale_pixels(src: &[u8], dst: &mut [f32]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = s as f32 / 127.5 - 1.0;
    }
}

/// The first training-image file present in `dir`, or what is wrong (without the fix).
fn find_images(dir: &Path) -> std::result::Result<PathBuf, String> {
    if !dir.is_dir() {
        return Err(format!("data directory {} does not exist", dir.display()));
    }
    labelled::find_idx(dir, "train", "images", 3)
        .ok_or_else(|| format!("no train-images-idx3-ubyte[.gz] in {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_data_argument() {
        assert_eq!(DataSource::parse(None).unwrap(), DataSource::FashionMnistDefault);
        assert_eq!(DataSource::parse(Some("synthetic:64")).unwrap(), DataSource::Synthetic(64));
        assert_eq!(DataSource::parse(Some("/data/mnist")).unwrap(), DataSource::Dir(PathBuf::from("/data/mnist")));
        for bad in ["synthetic:0", "synthetic:x", "synthetic:", "synthetic:-3", "synthetic", ""] {
            let msg = DataSource::parse(Some(bad)).unwrap_err().to_string();
            assert!(msg.contains("--data"), "{bad}: {msg}");
        }
    }

    fn tiny() -> Dataset {
        // 3 images of 2x3; image i has pixels 100*i + 10*y + x (so each pixel is identifiable)
        let images = (0..3u8).flat_map(|i| (0..6u8).map(move |p| i * 100 + (p / 3) * 10 + p % 3)).collect();
        Dataset { images, count: 3, height: 2, width: 3, description: String::new() }
    }

    #[test]
    fn fill_batch_scales_and_orders_by_index() {
        let set = Dataset { images: vec![0, 255, 51, 204], count: 4, height: 1, width: 1, description: String::new() };
        let mut out = [0f32; 3];
        set.fill_batch(&[1, 0, 3], 1, &mut out);
        assert_eq!(out, [1.0, -1.0, 204.0 / 127.5 - 1.0]);
        // Native size: a plain scaled copy, image by image in the order of `indices`.
        let square = Dataset { images: (0..8).collect(), count: 2, height: 2, width: 2, description: String::new() };
        let mut out = [0f32; 8];
        square.fill_batch(&[1, 0], 2, &mut out);
        let want: Vec<f32> = [4, 5, 6, 7, 0, 1, 2, 3].iter().map(|&v| v as f32 / 127.5 - 1.0).collect();
        assert_eq!(out.to_vec(), want);
    }

    #[test]
    fn fill_batch_resizes_each_scaled_image() {
        let set = tiny();
        let mut out = vec![0f32; 2 * 4];
        set.fill_batch(&[2, 1], 2, &mut out);
        // 2x3 -> 2x2 with resize::Resize (checked against PyTorch's rule in its own tests).
        let r = resize::Resize::new(2, 3, 2, 2);
        for (k, &i) in [2usize, 1].iter().enumerate() {
            let scaled: Vec<f32> = set.images[i * 6..(i + 1) * 6].iter().map(|&v| v as f32 / 127.5 - 1.0).collect();
            let mut want = [0f32; 4];
            r.apply_with(&scaled, &mut want, &mut Vec::new());
            assert_eq!(&out[k * 4..(k + 1) * 4], &want);
        }
        // Columns 0..3 -> 2: output column 0 reads source 0.25 (between columns 0 and 1).
        let p = |x: u8| (200 + x) as f32 / 127.5 - 1.0;
        assert!((out[0] - (0.75 * p(0) + 0.25 * p(1))).abs() < 1e-6);
    }

    #[test]
    fn synthetic_to_64_is_in_range_and_keeps_the_image() {
        let set = Dataset::load(&DataSource::Synthetic(8)).unwrap();
        assert_eq!((set.count, set.height, set.width, set.images.len()), (8, 28, 28, 8 * 784));
        assert!(set.description.contains("8 synthetic"));
        let mut out = vec![0f32; 2 * 64 * 64];
        set.fill_batch(&[5, 6], 64, &mut out);
        assert!(out.iter().all(|v| (-1.0..=1.0).contains(v)));
        // Mean brightness is (nearly) preserved by bilinear upsampling.
        let mean28: f32 = set.images[5 * 784..6 * 784].iter().map(|&v| v as f32 / 127.5 - 1.0).sum::<f32>() / 784.0;
        let mean64: f32 = out[..4096].iter().sum::<f32>() / 4096.0;
        assert!((mean28 - mean64).abs() < 0.02, "{mean28} vs {mean64}");
    }

    #[test]
    fn missing_directory_names_the_path_and_both_fixes() {
        let src = DataSource::Dir(PathBuf::from("/nonexistent/mnist"));
        let msg = format!("{:#}", Dataset::load(&src).unwrap_err());
        assert!(msg.contains("/nonexistent/mnist"), "{msg}");
        assert!(msg.contains("apt-get install dataset-fashion-mnist") && msg.contains("--data DIR"), "{msg}");
        assert!(!msg.contains('\n'), "one line: {msg}");
    }

    #[test]
    fn missing_default_data_names_the_path_and_both_fixes() {
        let msg = format!("{:#}", Dataset::load_default(Path::new("/nonexistent/fmnist")).unwrap_err());
        assert!(msg.contains("/nonexistent/fmnist") && msg.contains("does not exist"), "{msg}");
        assert!(msg.contains("apt-get install dataset-fashion-mnist") && msg.contains("--data DIR"), "{msg}");
        assert!(!msg.contains('\n'), "one line: {msg}");
    }

    #[test]
    fn directory_without_the_file_says_which_file() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let msg = format!("{:#}", Dataset::load(&DataSource::Dir(dir.clone())).unwrap_err());
        assert!(msg.contains("train-images-idx3-ubyte") && msg.contains(&*dir.to_string_lossy()), "{msg}");
        assert!(msg.contains("apt-get install dataset-fashion-mnist"), "{msg}");
    }

    #[test]
    fn loads_a_directory_and_a_file() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let set = tiny();
        let file = dir.join("train-images-idx3-ubyte");
        std::fs::write(&file, idx::encode_idx_images(&set.images, 3, 2, 3)).unwrap();
        for src in [DataSource::Dir(dir.clone()), DataSource::Dir(file.clone())] {
            let got = Dataset::load(&src).unwrap();
            assert_eq!((got.count, got.height, got.width), (3, 2, 3));
            assert_eq!(got.images, set.images);
            assert!(got.description.contains("3 images of 2x3"), "{}", got.description);
        }
    }
}
