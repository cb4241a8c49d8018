//! Bilinear resizing with PyTorch's `align_corners=false` rule (`F.interpolate(mode=
//! "bilinear")`, torchvision's `Resize` without antialiasing), so 28x28 data becomes the
//! 64x64 input of the DCGAN paper's model exactly as the PyTorch example would make it.

/// For one axis: output pixel i reads input pixels `lo[i]` and `hi[i]` with weights
/// `1 - frac[i]` and `frac[i]`.
#[derive(Clone, Debug)]
pub struct AxisTaps {
    pub lo: Vec<usize>,
    pub hi: Vec<usize>,
    pub frac: Vec<f32>,
}

impl AxisTaps {
    /// Taps for resizing an axis of `input` pixels to `output` pixels.
    ///
    /// PyTorch's rule: src = (dst + 0.5) * input / output - 0.5, clamped below at 0;
    /// lo = floor(src), hi = min(lo + 1, input - 1), frac = src - lo.
    pub fn new(input: usize, output: usize) -> AxisTaps {
        assert!(input > 0 && output > 0, "resize from {input} to {output} pixels");
        let scale = input as f32 / output as f32;
        let mut taps = AxisTaps {
            lo: Vec::with_capacity(output),
            hi: Vec::with_capacity(output),
            frac: Vec::with_capacity(output),
        };
        for dst in 0..output {
            let src = ((dst as f32 + 0.5) * scale - 0.5).max(0.0);
            let lo = (src as usize).min(input - 1);
            let hi = (lo + 1).min(input - 1);
            taps.lo.push(lo);
            taps.hi.push(hi);
            taps.frac.push(src - lo as f32);
        }
        taps
    }
}

/// A precomputed resize from in_h x in_w to out_h x out_w.
#[derive(Clone, Debug)]
pub struct Resize {
    pub rows: AxisTaps,
    pub cols: AxisTaps,
    pub in_h: usize,
    pub in_w: usize,
}

impl Resize {
    pub fn new(in_h: usize, in_w: usize, out_h: usize, out_w: usize) -> Resize {
        Resize { rows: AxisTaps::new(in_h, out_h), cols: AxisTaps::new(in_w, out_w), in_h, in_w }
    }

    /// Resizes one image: `src` [in_h, in_w] -> `dst` [out_h, out_w], with a scratch buffer
    /// kept between calls (no allocation per image).
    ///
    /// Separable: every source row is first resized horizontally into scratch [in_h, out_w],
    /// then each output row blends two of those. That is the same arithmetic, in the same
    /// order, as blending four pixels per output, with about a third of the work for 28 -> 64.
    pub fn apply_with(&self, src: &[f32], dst: &mut [f32], scratch: &mut Vec<f32>) {
        let out_w = self.cols.lo.len();
        assert_eq!(src.len(), self.in_h * self.in_w, "src must be [in_h, in_w]");
        assert_eq!(dst.len(), self.rows.lo.len() * out_w, "dst must be [out_h, out_w]");
        scratch.resize(self.in_h * out_w, 0.0);
        for (src_row, wide) in src.chunks_exact(self.in_w).zip(scratch.chunks_exact_mut(out_w)) {
            for (x, out) in wide.iter_mut().enumerate() {
                let (fx, gx) = (self.cols.frac[x], 1.0 - self.cols.frac[x]);
                *out = gx * src_row[self.cols.lo[x]] + fx * src_row[self.cols.hi[x]];
            }
        }
        for (y, dst_row) in dst.chunks_exact_mut(out_w).enumerate() {
            let (fy, gy) = (self.rows.frac[y], 1.0 - self.rows.frac[y]);
            let top = &scratch[self.rows.lo[y] * out_w..][..out_w];
            let bottom = &scratch[self.rows.hi[y] * out_w..][..out_w];
            for ((out, &t), &b) in dst_row.iter_mut().zip(top).zip(bottom) {
                *out = gy * t + fy * b;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// PyTorch's bilinear rule written out directly for one output pixel (f64, no tables).
    fn reference(src: &[f32], in_h: usize, in_w: usize, out_h: usize, out_w: usize, y: usize, x: usize) -> f64 {
        let source = |dst: usize, input: usize, output: usize| -> f64 {
            let s = (dst as f64 + 0.5) * input as f64 / output as f64 - 0.5;
            if s < 0.0 { 0.0 } else { s }
        };
        let (sy, sx) = (source(y, in_h, out_h), source(x, in_w, out_w));
        let (y0, x0) = (sy.floor() as usize, sx.floor() as usize);
        let (y1, x1) = ((y0 + 1).min(in_h - 1), (x0 + 1).min(in_w - 1));
        let (ly, lx) = (sy - y0 as f64, sx - x0 as f64);
        let p = |yy: usize, xx: usize| src[yy * in_w + xx] as f64;
        (1.0 - ly) * ((1.0 - lx) * p(y0, x0) + lx * p(y0, x1)) + ly * ((1.0 - lx) * p(y1, x0) + lx * p(y1, x1))
    }

    fn ramp(h: usize, w: usize) -> Vec<f32> {
        // Not separable-linear, so an interpolation mistake cannot cancel out.
        (0..h * w).map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0).collect()
    }

    #[test]
    fn upsampling_28_to_64_matches_pytorch_rule() {
        let src = ramp(28, 28);
        let mut dst = vec![0f32; 64 * 64];
        Resize::new(28, 28, 64, 64).apply_with(&src, &mut dst, &mut Vec::new());
        for (y, x) in [(0, 0), (0, 63), (63, 0), (63, 63), (1, 2), (31, 32), (17, 50), (62, 5)] {
            let want = reference(&src, 28, 28, 64, 64, y, x);
            assert!((dst[y * 64 + x] as f64 - want).abs() < 1e-5, "({y},{x}) {} vs {want}", dst[y * 64 + x]);
        }
        // Every pixel, too.
        for y in 0..64 {
            for x in 0..64 {
                let want = reference(&src, 28, 28, 64, 64, y, x);
                assert!((dst[y * 64 + x] as f64 - want).abs() < 1e-5);
            }
        }
    }

    #[test]
    fn known_values_of_the_rule() {
        // 28 -> 64 (scale 0.4375): output 0 reads -0.28125, clamped to 0; output 1 reads
        // 0.15625; output 2 reads 0.59375; output 63 reads 27.28125 -> only pixel 27.
        let t = AxisTaps::new(28, 64);
        assert_eq!((t.lo[0], t.hi[0], t.frac[0]), (0, 1, 0.0));
        assert_eq!((t.lo[1], t.hi[1]), (0, 1));
        assert!((t.frac[1] - 0.15625).abs() < 1e-6);
        assert_eq!((t.lo[2], t.hi[2]), (0, 1));
        assert!((t.frac[2] - 0.59375).abs() < 1e-6);
        assert_eq!((t.lo[63], t.hi[63]), (27, 27));
        // Doubling: out 1 reads src 0.25 -> 0.75 * p0 + 0.25 * p1.
        let src = [0.0, 4.0];
        let mut dst = [0f32; 4];
        Resize::new(1, 2, 1, 4).apply_with(&src, &mut dst, &mut Vec::new());
        assert_eq!(dst, [0.0, 1.0, 3.0, 4.0]);
    }

    #[test]
    fn downsampling_and_non_square_match_the_rule() {
        let src = ramp(64, 40);
        let mut dst = vec![0f32; 28 * 17];
        Resize::new(64, 40, 28, 17).apply_with(&src, &mut dst, &mut Vec::new());
        for y in 0..28 {
            for x in 0..17 {
                let want = reference(&src, 64, 40, 28, 17, y, x);
                assert!((dst[y * 17 + x] as f64 - want).abs() < 1e-5, "({y},{x})");
            }
        }
    }

    #[test]
    fn same_size_is_the_identity() {
        let src = ramp(28, 28);
        let mut dst = vec![0f32; 28 * 28];
        Resize::new(28, 28, 28, 28).apply_with(&src, &mut dst, &mut Vec::new());
        assert_eq!(dst, src);
    }
}
