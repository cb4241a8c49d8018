//! Value parsers of the command line: each says what is wrong with a value and how to write
//! a good one (clap puts the flag's name in front).

pub use crate::units::{parse_bytes, parse_timeout};

/// A count that must be at least 1.
pub fn at_least_one(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(n) if n >= 1 => Ok(n),
        Ok(_) => Err("must be at least 1".into()),
        Err(_) => Err(format!("'{s}' is not a whole number")),
    }
}

/// The most feature maps a layer of G or D may be given: 64 times the DCGAN paper's widest,
/// far past what fits in memory at any batch.
const MAX_FEATURE_MAPS: usize = 4096;

/// `--ngf` and `--ndf`: 1 to 4096 feature maps.
pub fn feature_maps(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=MAX_FEATURE_MAPS).contains(&n) => Ok(n),
        Ok(n) => Err(format!("{n} feature maps: give 1 to {MAX_FEATURE_MAPS} (the DCGAN paper's are 64)")),
        Err(_) => Err(format!("'{s}' is not a whole number")),
    }
}

/// The most images per rank: far past what fits in memory (a larger one overflowed the size
/// arithmetic instead of saying so).
const MAX_BATCH: u64 = 1 << 20;

/// Images per rank: 1 to 2^20.
pub fn batch_size(s: &str) -> Result<u64, String> {
    match at_least_one(s)? {
        n if n <= MAX_BATCH => Ok(n),
        _ => Err(format!("must be at most {MAX_BATCH} images per rank")),
    }
}

/// A finite number above 0 (the learning rate).
pub fn positive_f64(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        Ok(_) => Err("must be a finite number above 0".into()),
        Err(_) => Err(format!("'{s}' is not a number")),
    }
}

/// A finite number above 0 that an f32 holds (Adam's epsilon).
pub fn positive_f32(s: &str) -> Result<f32, String> {
    positive_f64(s).and_then(|v| {
        let f = v as f32;
        if f > 0.0 && f.is_finite() { Ok(f) } else { Err("must be above 0 and within f32's range".into()) }
    })
}

/// A weight that may be 0 (which turns its term off): 0 or above, finite in f32.
pub fn non_negative_f32(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(v) if v >= 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!("'{s}' is not a number of 0 or more")),
    }
}

/// Adam's beta1 and beta2: 0 <= beta < 1 (at 1 the bias correction divides by zero).
pub fn adam_beta(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(v) if (0.0..1.0).contains(&v) => Ok(v),
        Ok(_) => Err("must be at least 0 and below 1 (e.g. 0.5 or 0.999)".into()),
        Err(_) => Err(format!("'{s}' is not a number")),
    }
}

/// 28 or 64: the image sides the models are built for.
pub fn image_size(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n @ (28 | 64)) => Ok(n),
        _ => Err(format!("unknown image size '{s}': use 28 or 64")),
    }
}

/// A message of whole f32 values: a size in bytes that is a multiple of 4.
pub fn message_size(s: &str) -> Result<usize, String> {
    let b = parse_bytes(s)?;
    if b % 4 != 0 {
        return Err(format!("{b} bytes is not a whole number of f32 values: use multiples of 4 bytes"));
    }
    Ok(b)
}

/// `--fragment-bytes`: a multiple of 4 bytes, or 0 for buckets that are not cut.
pub fn fragment_bytes(s: &str) -> Result<usize, String> {
    let b = parse_bytes(s)?;
    if b % 4 != 0 {
        return Err(format!("{b} bytes is not a whole number of f32 values: use a multiple of 4 bytes (or 0)"));
    }
    Ok(b)
}

/// A ping-pong message: a positive multiple of 4 bytes.
pub fn positive_message_size(s: &str) -> Result<usize, String> {
    let b = parse_bytes(s)?;
    if b == 0 || b % 4 != 0 {
        return Err(format!("{b} bytes: sizes must be positive multiples of 4 bytes"));
    }
    Ok(b)
}

/// The most images one evaluation draws: a million (about 100 times the test split).
const MAX_EVAL_IMAGES: u64 = 1_000_000;

/// `--eval-n` and `evaluate --n`: enough images for a covariance of the feature network's
/// features (twice as many as it has), refused here rather than after an epoch of training.
pub fn evaluation_images(s: &str) -> Result<u64, String> {
    use crate::eval::{feature_net::FEATURES, frechet::min_samples};
    let least = min_samples(FEATURES) as u64;
    match s.parse::<u64>() {
        Ok(n) if (least..=MAX_EVAL_IMAGES).contains(&n) => Ok(n),
        Ok(n) if n < least => Err(format!(
            "{n} images are too few for a covariance of {FEATURES} features: use at least {least} (the usual is 10000)"
        )),
        Ok(_) => Err(format!("must be at most {MAX_EVAL_IMAGES} images")),
        Err(_) => Err(format!("'{s}' is not a whole number")),
    }
}
