//! CPU column matrices: im2col and its adjoint col2im, built from padded phase planes so that
//! every copy is a run of whole output rows instead of a per-pixel gather.
//!
//! A stride-s convolution reads input pixel (oh*s - p + ki, ow*s - p + kj). Split each image
//! into s*s phase planes, plane `(py, px)[i][j] = x[i*s + py][j*s + px]`; then kernel tap
//! (ki, kj) reads plane ((ki-p) mod s, (kj-p) mod s) at [oh + di][ow + dj] with
//! di = floor((ki-p)/s), dj = floor((kj-p)/s): a shifted window of one plane. The planes get
//! a border of zeros wide enough for every tap's shift, so a tap's window is OH rows of OW
//! floats with no bounds to check: the padding is read from the border. For the DCGAN's
//! k4 s2 p1 layers the border is one cell and each row a fixed-length copy of 7 or 14 floats.
//!
//! col2im adds the same windows back in tap order; since a tap touches an input pixel at
//! most once, every pixel's sum is formed in the same order as a per-pixel scatter, bitwise.

use super::ConvGeom;
use rayon::prelude::*;

/// The phase-plane view of one convolution geometry.
pub struct Columns {
    g: ConvGeom,
    /// Logical plane side: ceil(H / s) x ceil(W / s); cells past the image are zero.
    hp: usize,
    wp: usize,
    /// Zero border before the plane's first row and column, and after its last.
    lo: usize,
    hi_rows: usize,
    hi_cols: usize,
    /// Stride 1 with no border: an image is its own (only) plane and needs no copy.
    direct: bool,
}

/// Rows of at least this many floats per rayon task: below it, scheduling costs more than
/// copying.
const MIN_TASK_FLOATS: usize = 1 << 14;

impl Columns {
    pub fn new(g: &ConvGeom) -> Columns {
        let (s, p, k) = (g.stride as isize, g.pad as isize, g.k as isize);
        let (hp, wp) = g.phase_side();
        // Taps 0 and k-1 shift the most: by (-p)/s and (k-1-p)/s plane cells (floored), the
        // same along rows and columns.
        let (d_min, d_max) = ((-p).div_euclid(s), (k - 1 - p).div_euclid(s));
        let lo = (-d_min).max(0) as usize;
        // The last output row reads plane row OH-1 + d_max, which may lie past the plane.
        let hi_rows = (g.h_out as isize - 1 + d_max - (hp as isize - 1)).max(0) as usize;
        let hi_cols = (g.w_out as isize - 1 + d_max - (wp as isize - 1)).max(0) as usize;
        let direct = g.stride == 1 && lo == 0 && hi_rows == 0 && hi_cols == 0;
        Columns { g: *g, hp, wp, lo, hi_rows, hi_cols, direct }
    }

    /// Where output (0, 0) of tap t = ki*k + kj reads in an image's plane set: the plane's
    /// index times its padded size, plus the padded offset of `[di][dj]`.
    fn tap(&self, t: usize) -> usize {
        let (s, p) = (self.g.stride as isize, self.g.pad as isize);
        let (a, b) = ((t / self.g.k) as isize - p, (t % self.g.k) as isize - p);
        let (ph, pw) = self.padded();
        let plane = (a.rem_euclid(s) * s + b.rem_euclid(s)) as usize;
        let (row, col) = (a.div_euclid(s) + self.lo as isize, b.div_euclid(s) + self.lo as isize);
        plane * ph * pw + (row * pw as isize + col) as usize
    }

    /// Padded plane: [rows, columns].
    fn padded(&self) -> (usize, usize) {
        (self.lo + self.hp + self.hi_rows, self.lo + self.wp + self.hi_cols)
    }

    /// Floats of padded phase planes per image and channel (s*s planes).
    fn plane_set(&self) -> usize {
        let (ph, pw) = self.padded();
        self.g.stride * self.g.stride * ph * pw
    }

    /// Scratch floats the phase planes of `nb` images take (none where an image is its own
    /// plane).
    pub fn scratch_floats(&self, nb: usize) -> usize {
        if self.direct { 0 } else { self.g.c_in * nb * self.plane_set() }
    }

    /// col[r, j] for images [b0, b0+nb): r = (c, ki, kj), j = (b - b0)*OH*OW + oh*OW + ow.
    /// `planes` is scratch of `scratch_floats(nb)`.
    pub fn im2col(&self, x: &[f32], b0: usize, nb: usize, planes: &mut [f32], col: &mut [f32]) {
        let g = &self.g;
        let (kk, pix, hw) = (g.k * g.k, g.out_pixels(), g.in_pixels());
        // Image (c, b0 + bi)'s plane set: at first + c*per_channel + bi*per_image.
        let (src, first, per_channel, per_image) = if self.direct {
            (x, b0 * hw, g.batch * hw, hw)
        } else {
            let set = self.plane_set();
            planes[..g.c_in * nb * set].par_chunks_mut(nb * set).enumerate().for_each(|(c, pc)| {
                for (bi, ps) in pc.chunks_exact_mut(set).enumerate() {
                    self.split(&x[(c * g.batch + b0 + bi) * hw..][..hw], ps);
                }
            });
            (&planes[..], 0, nb * set, set)
        };
        let pw = self.padded().1;
        let row_len = nb * pix;
        let rows_per_task = MIN_TASK_FLOATS.div_ceil(row_len.max(1));
        col[..g.col_rows() * row_len].par_chunks_mut(row_len).with_min_len(rows_per_task).enumerate().for_each(
            |(r, row)| {
                let at = first + (r / kk) * per_channel + self.tap(r % kk);
                if pix == 1 {
                    // One output pixel (a kernel as large as the padded input): one value
                    // per image, a strided gather.
                    for (v, s) in row.iter_mut().zip(src[at..].iter().step_by(per_image)) {
                        *v = *s;
                    }
                    return;
                }
                for (bi, out) in row.chunks_exact_mut(pix).enumerate() {
                    copy_window(out, &src[at + bi * per_image..], g.w_out, pw);
                }
            },
        );
    }

    /// dx[c, b0.., :, :] = the columns of images [b0, b0+nb) added back onto their input pixels
    /// (the adjoint of `im2col`); dx outside those images is untouched. Where an image is its
    /// own plane the sums go straight into dx, which must then be zero there. Parallel over
    /// input channels, which own disjoint parts of dx; within a channel the order is fixed.
    pub fn col2im(&self, col: &[f32], b0: usize, nb: usize, planes: &mut [f32], dx: &mut [f32]) {
        let g = &self.g;
        let (kk, pix, hw) = (g.k * g.k, g.out_pixels(), g.in_pixels());
        let row_len = nb * pix;
        let pw = self.padded().1;
        let add_channel = |c: usize, sets: &mut [f32], per_image: usize| {
            for t in 0..kk {
                let tap = self.tap(t);
                let row = &col[(c * kk + t) * row_len..][..row_len];
                if pix == 1 {
                    for (d, v) in sets[tap..].iter_mut().step_by(per_image).zip(row) {
                        *d += v;
                    }
                    continue;
                }
                for (bi, src) in row.chunks_exact(pix).enumerate() {
                    add_window(&mut sets[bi * per_image + tap..], src, g.w_out, pw);
                }
            }
        };
        if self.direct {
            dx.par_chunks_mut(g.batch * hw).enumerate().for_each(|(c, dxc)| add_channel(c, &mut dxc[b0 * hw..], hw));
            return;
        }
        let set = self.plane_set();
        let planes = &mut planes[..g.c_in * nb * set];
        dx.par_chunks_mut(g.batch * hw).zip(planes.par_chunks_mut(nb * set)).enumerate().for_each(|(c, (dxc, pc))| {
            pc.fill(0.0);
            add_channel(c, pc, set);
            for (bi, ps) in pc.chunks_exact(set).enumerate() {
                self.merge(ps, &mut dxc[(b0 + bi) * hw..][..hw]);
            }
        });
    }

    /// planes[py*s + px][lo + i][lo + j] = img[i*s + py][j*s + px]; zero past the image and
    /// in the border.
    fn split(&self, img: &[f32], planes: &mut [f32]) {
        let (s, g, lo) = (self.g.stride, &self.g, self.lo);
        let (ph, pw) = self.padded();
        // One memset for the border and the cells past the image, then each image row is
        // dealt to its planes' rows.
        planes.fill(0.0);
        for (ih, irow) in img.chunks_exact(g.w_in).enumerate() {
            let (py, i) = (ih % s, ih / s);
            let row0 = py * s * ph * pw + (lo + i) * pw + lo;
            if s == 2 {
                // The DCGAN's stride: even columns to one plane, odd to the next.
                let (even, rest) = planes[row0..].split_at_mut(ph * pw);
                let (even, odd) = (&mut even[..self.wp], &mut rest[..self.wp]);
                for (j, pair) in irow.chunks_exact(2).enumerate() {
                    even[j] = pair[0];
                    odd[j] = pair[1];
                }
                if g.w_in % 2 == 1 {
                    even[g.w_in / 2] = irow[g.w_in - 1];
                }
                continue;
            }
            for px in 0..s {
                let prow = &mut planes[row0 + px * ph * pw..][..self.wp];
                for (d, v) in prow.iter_mut().zip(irow[px..].iter().step_by(s)) {
                    *d = *v;
                }
            }
        }
    }

    /// img[i*s + py][j*s + px] = planes[py*s + px][lo + i][lo + j]: the inverse of `split`.
    fn merge(&self, planes: &[f32], img: &mut [f32]) {
        let (s, g, lo) = (self.g.stride, &self.g, self.lo);
        let (ph, pw) = self.padded();
        for (p, plane) in planes.chunks_exact(ph * pw).enumerate() {
            let (py, px) = (p / s, p % s);
            for (i, ih) in (py..g.h_in).step_by(s).enumerate() {
                let prow = &plane[(lo + i) * pw + lo..];
                let irow = &mut img[ih * g.w_in..][..g.w_in];
                for (v, iw) in prow.iter().zip((px..g.w_in).step_by(s)) {
                    irow[iw] = *v;
                }
            }
        }
    }
}

/// Calls `$rows::<W>(args)` with the output width as a constant for the common widths, so
/// that each row is a few vector moves rather than a memcpy call; W = 0 reads it at run time.
macro_rules! by_width {
    ($ow:expr, $rows:ident($($arg:expr),*)) => {
        match $ow {
            1 => $rows::<1>($($arg),*),
            4 => $rows::<4>($($arg),*),
            7 => $rows::<7>($($arg),*),
            8 => $rows::<8>($($arg),*),
            14 => $rows::<14>($($arg),*),
            16 => $rows::<16>($($arg),*),
            32 => $rows::<32>($($arg),*),
            _ => $rows::<0>($($arg),*),
        }
    };
}

/// out [OH, OW] = the window at the start of `plane`, rows `pw` apart.
fn copy_window(out: &mut [f32], plane: &[f32], ow: usize, pw: usize) {
    fn rows<const W: usize>(out: &mut [f32], plane: &[f32], ow: usize, pw: usize) {
        let w = if W == 0 { ow } else { W };
        let oh = out.len() / w;
        assert!(out.len() == oh * w && (oh == 0 || plane.len() >= (oh - 1) * pw + w));
        for r in 0..oh {
            // SAFETY: row r of the window ends at r*pw + w <= plane.len(), checked above, and
            // out holds oh rows of w.
            unsafe { std::ptr::copy_nonoverlapping(plane.as_ptr().add(r * pw), out.as_mut_ptr().add(r * w), w) };
        }
    }
    by_width!(ow, rows(out, plane, ow, pw))
}

/// The window at the start of `plane` [OH rows `pw` apart, OW] += src [OH, OW].
fn add_window(plane: &mut [f32], src: &[f32], ow: usize, pw: usize) {
    fn rows<const W: usize>(plane: &mut [f32], src: &[f32], ow: usize, pw: usize) {
        let w = if W == 0 { ow } else { W };
        let oh = src.len() / w;
        assert!(src.len() == oh * w && (oh == 0 || plane.len() >= (oh - 1) * pw + w));
        for r in 0..oh {
            // SAFETY: as in copy_window; the two rows lie in different slices.
            let (d, v) = unsafe {
                (
                    std::slice::from_raw_parts_mut(plane.as_mut_ptr().add(r * pw), w),
                    std::slice::from_raw_parts(src.as_ptr().add(r * w), w),
                )
            };
            for (d, v) in d.iter_mut().zip(v) {
                *d += v;
            }
        }
    }
    by_width!(ow, rows(plane, src, ow, pw))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, one column entry at a time in col's order (c, ki, kj, b, oh, ow): the
    /// index into x [C, B, H, W] it reads, or None where it reads padding.
    fn naive_sources(g: &ConvGeom, b0: usize, nb: usize) -> Vec<Option<usize>> {
        let mut sources = Vec::new();
        for c in 0..g.c_in {
            for ki in 0..g.k {
                for kj in 0..g.k {
                    for b in b0..b0 + nb {
                        for oh in 0..g.h_out {
                            for ow in 0..g.w_out {
                                let ih = (oh * g.stride + ki) as isize - g.pad as isize;
                                let iw = (ow * g.stride + kj) as isize - g.pad as isize;
                                let inside = ih >= 0 && iw >= 0 && (ih as usize) < g.h_in && (iw as usize) < g.w_in;
                                sources.push(
                                    inside.then(|| ((c * g.batch + b) * g.h_in + ih as usize) * g.w_in + iw as usize),
                                );
                            }
                        }
                    }
                }
            }
        }
        sources
    }

    fn naive_im2col(g: &ConvGeom, x: &[f32], b0: usize, nb: usize) -> Vec<f32> {
        naive_sources(g, b0, nb).iter().map(|s| s.map_or(0.0, |i| x[i])).collect()
    }

    /// The adjoint, adding in col's order: taps in order, as `col2im` (so sums match bitwise).
    fn naive_col2im(g: &ConvGeom, col: &[f32], b0: usize, nb: usize, dx: &mut [f32]) {
        for (s, &v) in naive_sources(g, b0, nb).iter().zip(col) {
            if let Some(i) = s {
                dx[*i] += v;
            }
        }
    }

    /// (batch, c_in, h, w, k, stride, pad): the DCGAN layers, odd sides, strides 1 to 3, a
    /// kernel wider than the output, padding wider than a phase.
    const GEOMETRIES: [(usize, usize, usize, usize, usize, usize, usize); 9] = [
        (3, 2, 14, 14, 4, 2, 1),
        (2, 1, 28, 28, 4, 2, 1),
        (2, 3, 7, 7, 7, 1, 0),
        (2, 2, 5, 7, 3, 1, 1),
        (2, 2, 9, 8, 4, 3, 2),
        (3, 1, 11, 6, 5, 2, 2),
        (1, 2, 4, 4, 4, 1, 0),
        (2, 1, 3, 3, 3, 2, 3),
        (2, 2, 8, 8, 4, 2, 1),
    ];

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n).map(|i| ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 1000) as f32 / 997.0 - 0.5).collect()
    }

    #[test]
    fn im2col_matches_the_definition() {
        for (batch, c_in, h, w, k, s, p) in GEOMETRIES {
            let g = ConvGeom::conv(batch, c_in, h, w, 3, k, s, p).unwrap();
            let cols = Columns::new(&g);
            let x = values(g.x_len(), 7);
            for (b0, nb) in [(0, batch), (batch - 1, 1)] {
                let mut planes = vec![f32::NAN; cols.scratch_floats(nb)];
                // NaN where nothing should be left: every element must be written.
                let mut col = vec![f32::NAN; g.col_rows() * nb * g.out_pixels()];
                cols.im2col(&x, b0, nb, &mut planes, &mut col);
                assert_eq!(col, naive_im2col(&g, &x, b0, nb), "im2col for {g:?}, images {b0}+{nb}");
            }
        }
    }

    #[test]
    fn col2im_matches_the_definition_bitwise() {
        for (batch, c_in, h, w, k, s, p) in GEOMETRIES {
            let g = ConvGeom::conv(batch, c_in, h, w, 3, k, s, p).unwrap();
            let cols = Columns::new(&g);
            for (b0, nb) in [(0, batch), (batch - 1, 1)] {
                let col = values(g.col_rows() * nb * g.out_pixels(), 3);
                let mut planes = vec![f32::NAN; cols.scratch_floats(nb)];
                let mut dx = vec![0.0f32; g.x_len()];
                let mut expected = dx.clone();
                cols.col2im(&col, b0, nb, &mut planes, &mut dx);
                naive_col2im(&g, &col, b0, nb, &mut expected);
                let same = dx.iter().zip(&expected).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "col2im for {g:?}, images {b0}+{nb}");
            }
        }
    }
}
