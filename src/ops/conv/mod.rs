//! 2-D convolution: geometry (the one place output sizes and im2col shapes are computed),
//! with the CPU side in `cpu.rs` and the CUDA launchers in `cuda.rs`.
//!
//! A `ConvGeom` always describes a forward convolution x `[C_in,B,H,W]` -> y `[C_out,B,OH,OW]`
//! with weight `[C_out,C_in,k,k]`. A ConvTranspose2d(in, out) is the same geometry read
//! backwards: its forward is this conv's backward-data with C_in = out, C_out = in, and its
//! weight `[in,out,k,k]` is exactly this conv's weight.

pub mod cpu;
mod cpu_columns;
#[cfg(feature = "cuda")]
pub mod cuda;

use anyhow::{Result, bail};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConvGeom {
    pub batch: usize,
    pub c_in: usize,
    pub h_in: usize,
    pub w_in: usize,
    pub c_out: usize,
    pub k: usize,
    pub stride: usize,
    pub pad: usize,
    pub h_out: usize,
    pub w_out: usize,
}

impl ConvGeom {
    /// Conv2d(c_in, c_out, k, stride, pad) applied to [c_in, batch, h, w].
    #[allow(clippy::too_many_arguments)] // PyTorch's constructor arguments plus the input shape
    pub fn conv(
        batch: usize,
        c_in: usize,
        h: usize,
        w: usize,
        c_out: usize,
        k: usize,
        stride: usize,
        pad: usize,
    ) -> Result<Self> {
        if stride == 0 || k == 0 {
            bail!("convolution with kernel {k} and stride {stride}: both must be at least 1");
        }
        if h + 2 * pad < k || w + 2 * pad < k {
            bail!("convolution kernel {k} is larger than the padded input {h}x{w} (+{pad})");
        }
        let h_out = (h + 2 * pad - k) / stride + 1;
        let w_out = (w + 2 * pad - k) / stride + 1;
        Ok(ConvGeom { batch, c_in, h_in: h, w_in: w, c_out, k, stride, pad, h_out, w_out })
    }

    /// The conv whose backward-data is ConvTranspose2d(c_in, c_out, k, stride, pad) applied
    /// to [c_in, batch, h, w]; its output is [c_out, batch, (h-1)*stride - 2*pad + k, ...].
    #[allow(clippy::too_many_arguments)] // PyTorch's constructor arguments plus the input shape
    pub fn transposed(
        batch: usize,
        c_in: usize,
        h: usize,
        w: usize,
        c_out: usize,
        k: usize,
        stride: usize,
        pad: usize,
    ) -> Result<Self> {
        if stride == 0 || k == 0 {
            bail!("transposed convolution with kernel {k} and stride {stride}: both must be at least 1");
        }
        let big_h = ((h - 1) * stride + k).checked_sub(2 * pad);
        let big_w = ((w - 1) * stride + k).checked_sub(2 * pad);
        let (Some(big_h), Some(big_w)) = (big_h, big_w) else {
            bail!("transposed convolution padding {pad} is too large for kernel {k}");
        };
        let g = Self::conv(batch, c_out, big_h, big_w, c_in, k, stride, pad)?;
        debug_assert_eq!((g.h_out, g.w_out), (h, w));
        Ok(g)
    }

    /// Floats in x [C_in, B, H, W].
    pub fn x_len(&self) -> usize {
        self.c_in * self.batch * self.h_in * self.w_in
    }
    /// Floats in y [C_out, B, OH, OW].
    pub fn y_len(&self) -> usize {
        self.c_out * self.batch * self.h_out * self.w_out
    }
    /// Floats in w [C_out, C_in, k, k].
    pub fn w_len(&self) -> usize {
        self.c_out * self.c_in * self.k * self.k
    }
    /// Rows of the im2col matrix: C_in * k * k.
    pub fn col_rows(&self) -> usize {
        self.c_in * self.k * self.k
    }
    /// Output pixels per image: OH * OW.
    pub fn out_pixels(&self) -> usize {
        self.h_out * self.w_out
    }
    /// Input pixels per image: H * W.
    pub fn in_pixels(&self) -> usize {
        self.h_in * self.w_in
    }
    /// Side of one of the stride*stride phase planes of an input image, [ceil(H/s), ceil(W/s)]:
    /// plane `(py, px)[i][j] = x[i*s + py][j*s + px]`. Backward-data runs per phase on the GPU,
    /// and the CPU's columns are read from these planes.
    pub fn phase_side(&self) -> (usize, usize) {
        (self.h_in.div_ceil(self.stride), self.w_in.div_ceil(self.stride))
    }
    /// Multiply-adds of one forward pass (the same for backward-data and backward-weight).
    pub fn macs(&self) -> u64 {
        (self.c_out * self.col_rows() * self.batch * self.out_pixels()) as u64
    }
    /// Panics unless the input, weight and output lengths fit this geometry (the CPU and
    /// CUDA sides both check before touching memory).
    pub fn check_lengths(&self, x: usize, w: usize, y: usize) {
        assert_eq!(x, self.x_len(), "conv input length for {self:?}");
        assert_eq!(w, self.w_len(), "conv weight length for {self:?}");
        assert_eq!(y, self.y_len(), "conv output length for {self:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_sizes_match_pytorch_formulas() {
        // Conv2d(1, 64, 4, 2, 1) on 28x28 -> 14x14; Conv2d(128, 1, 7, 1, 0) on 7x7 -> 1x1.
        let g = ConvGeom::conv(8, 1, 28, 28, 64, 4, 2, 1).unwrap();
        assert_eq!((g.h_out, g.w_out), (14, 14));
        let g = ConvGeom::conv(8, 128, 7, 7, 1, 7, 1, 0).unwrap();
        assert_eq!((g.h_out, g.w_out), (1, 1));
        // ConvTranspose2d(100, 256, 7, 1, 0) on 1x1 -> 7x7; (256, 128, 4, 2, 1) on 7x7 -> 14x14.
        let t = ConvGeom::transposed(8, 100, 1, 1, 256, 7, 1, 0).unwrap();
        assert_eq!((t.c_in, t.h_in, t.c_out, t.h_out), (256, 7, 100, 1));
        let t = ConvGeom::transposed(8, 256, 7, 7, 128, 4, 2, 1).unwrap();
        assert_eq!((t.c_in, t.h_in, t.w_in, t.c_out), (128, 14, 14, 256));
        assert!(ConvGeom::conv(1, 1, 2, 2, 1, 5, 1, 0).is_err());
    }
}
