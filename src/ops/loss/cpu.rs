//! CPU BCE with logits: a sequential f64 sum over the batch (a few hundred logits).

use super::{bce_with_logits_one, sigmoid};

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
