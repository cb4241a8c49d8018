//! The losses, mean over the batch: binary cross-entropy with logits against a constant target
//! (the GAN's real/fake label) and softmax cross-entropy over class logits (a classifier).
//! CPU sides in `cpu.rs`, CUDA launchers in `cuda.rs`, kernels in kernels/loss.cu.

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;

/// Loss of one logit, in the stable form max(x,0) - x*t + log(1 + exp(-|x|)).
#[inline(always)]
pub fn bce_with_logits_one(x: f32, target: f32) -> f32 {
    x.max(0.0) - x * target + (-x.abs()).exp().ln_1p()
}

/// sigmoid(x), written so that exp never overflows.
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// The shapes softmax cross-entropy takes, checked the same way on every backend: logits and
/// dlogits `[classes, batch]` with batch = the number of labels, out `[2]`.
pub fn check_softmax_xent_shapes(logits: usize, labels: usize, classes: usize, dlogits: usize, out: usize) {
    assert!(classes >= 1, "softmax cross-entropy over {classes} classes");
    assert_eq!(logits, classes * labels, "softmax cross-entropy: logits for {classes} classes of {labels} samples");
    assert_eq!(dlogits, logits, "softmax cross-entropy: logits and gradient lengths");
    assert_eq!(out, 2, "softmax cross-entropy writes 2 floats (loss, accuracy)");
}

/// The class a label names. Labels travel as f32; one that is not a whole number in
/// 0..classes is a bug upstream (and would make the kernel read another sample's logits).
pub fn class_of(label: f32, sample: usize, classes: usize) -> usize {
    assert!(
        label >= 0.0 && label < classes as f32 && label.fract() == 0.0,
        "softmax cross-entropy: sample {sample} has label {label}, not a class index in 0..{classes}"
    );
    label as usize
}
