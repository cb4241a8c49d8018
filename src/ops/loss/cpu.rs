//! CPU losses: sequential f64 sums over the batch (a few hundred samples), so the results do
//! not depend on threads.

use super::{bce_with_logits_one, check_softmax_xent_shapes, class_of, sigmoid};

/// dlogits = (sigmoid(x) - target) / n; out = [mean loss, mean sigmoid(x)].
pub fn bce_with_logits(logits: &[f32], target: f32, dlogits: &mut [f32], out: &mut [f32]) {
    assert_eq!(logits.len(), dlogits.len());
    let n = logits.len().max(1) as f32;
    let (mut loss, mut prob) = (0.0f64, 0.0f64);
    for (d, &x) in dlogits.iter_mut().zip(logits) {
        let s = sigmoid(x);
        loss += bce_with_logits_one(x, target) as f64;
        prob += s as f64;
        *d = (s - target) / n;
    }
    out[0] = (loss / n as f64) as f32;
    out[1] = (prob / n as f64) as f32;
}

/// Softmax cross-entropy of logits `[classes, B]` (class c of sample i at c*B + i) against
/// labels `[B]` (class indices as f32): dlogits `[classes, B]` = (softmax(x) - onehot(label)) / B,
/// out `[2]` = (mean loss, the share of samples whose first largest logit is their label).
/// Per sample in f32 after subtracting its largest logit, as kernels/loss.cu does.
pub fn softmax_xent(logits: &[f32], labels: &[f32], classes: usize, dlogits: &mut [f32], out: &mut [f32]) {
    let batch = labels.len();
    check_softmax_xent_shapes(logits.len(), batch, classes, dlogits.len(), out.len());
    let n = batch.max(1) as f32;
    let (mut loss, mut correct) = (0.0f64, 0.0f64);
    for (i, &l) in labels.iter().enumerate() {
        let label = class_of(l, i, classes);
        let x = |c: usize| logits[c * batch + i];
        // Ties: the lowest class wins (strictly greater replaces), as on the GPU.
        let (mut max, mut arg) = (x(0), 0);
        for c in 1..classes {
            if x(c) > max {
                (max, arg) = (x(c), c);
            }
        }
        let sum: f32 = (0..classes).map(|c| (x(c) - max).exp()).sum();
        loss += (sum.ln() - (x(label) - max)) as f64;
        correct += if arg == label { 1.0 } else { 0.0 };
        let inv = 1.0 / sum;
        for c in 0..classes {
            let onehot = if c == label { 1.0 } else { 0.0 };
            dlogits[c * batch + i] = ((x(c) - max).exp() * inv - onehot) / n;
        }
    }
    out[0] = (loss / n as f64) as f32;
    out[1] = (correct / n as f64) as f32;
}
