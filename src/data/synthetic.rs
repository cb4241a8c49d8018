//! Deterministic synthetic 28x28 images (blobs, rings, strokes) for tests and demos.
//!
//! Image i is drawn from its own ChaCha8 stream (fixed key, stream i), so it does not depend
//! on how many images are made: `synthetic:100` is the first 100 of `synthetic:1000`, on
//! every machine. The shapes have soft (anti-aliased) edges and random size, place and
//! brightness, so a GAN has a simple but real distribution to learn.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

pub const SIDE: usize = 28;
/// The fixed ChaCha key of the synthetic data set. Changing it changes every image.
const KEY: [u8; 32] = *b"dcgan-train synthetic images v1.";

/// The three kinds of image; image i's kind is drawn from its stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    Blob,
    Ring,
    Stroke,
}

/// `count` images, [count, 28, 28], background 0, shapes up to 255.
pub fn generate(count: usize) -> Vec<u8> {
    let mut pixels = vec![0u8; count * SIDE * SIDE];
    pixels.par_chunks_mut(SIDE * SIDE).enumerate().for_each(|(i, img)| {
        draw(i as u64, img);
    });
    pixels
}

/// Draws image `index` into img [28, 28] (which must be zero) and returns its main shape.
pub fn draw(index: u64, img: &mut [u8]) -> Shape {
    assert_eq!(img.len(), SIDE * SIDE);
    let mut rng = ChaCha8Rng::from_seed(KEY);
    rng.set_stream(index);
    let mut canvas = [0f32; SIDE * SIDE];
    let shape = match rng.random_range(0..3u32) {
        0 => Shape::Blob,
        1 => Shape::Ring,
        _ => Shape::Stroke,
    };
    paint(&mut canvas, &mut rng, shape);
    // A third of the images get a second, fainter stroke: more variety, same three kinds.
    if rng.random_bool(1.0 / 3.0) {
        paint(&mut canvas, &mut rng, Shape::Stroke);
    }
    for (dst, &v) in img.iter_mut().zip(&canvas) {
        *dst = (v.clamp(0.0, 1.0) * 255.0).round() as u8;
    }
    shape
}

/// One shape with its geometry (pixel units, centre of pixel (x, y) at (x + 0.5, y + 0.5)).
#[derive(Clone, Copy, Debug)]
pub enum Figure {
    /// A filled ellipse with radii (rx, ry), rotated by `angle`.
    Blob { cx: f32, cy: f32, rx: f32, ry: f32, angle: f32 },
    /// A circle of radius r drawn with a line `half` pixels either side.
    Ring { cx: f32, cy: f32, r: f32, half: f32 },
    /// A segment from (ax, ay) to (bx, by), `half` pixels either side.
    Stroke { ax: f32, ay: f32, bx: f32, by: f32, half: f32 },
}

impl Figure {
    /// Random geometry of the given kind, centred near the middle of the image.
    fn random(rng: &mut ChaCha8Rng, shape: Shape) -> Figure {
        let centre = SIDE as f32 / 2.0;
        let cx = centre + rng.random_range(-5.0..5.0f32);
        let cy = centre + rng.random_range(-5.0..5.0f32);
        match shape {
            Shape::Blob => Figure::Blob {
                cx,
                cy,
                rx: rng.random_range(3.0..8.0),
                ry: rng.random_range(3.0..8.0),
                angle: rng.random_range(0.0..std::f32::consts::PI),
            },
            Shape::Ring => Figure::Ring { cx, cy, r: rng.random_range(4.5..9.0), half: rng.random_range(0.8..1.8) },
            Shape::Stroke => {
                let len: f32 = rng.random_range(8.0..18.0);
                let angle: f32 = rng.random_range(0.0..std::f32::consts::PI);
                let (dx, dy) = (angle.cos() * len / 2.0, angle.sin() * len / 2.0);
                Figure::Stroke { ax: cx - dx, ay: cy - dy, bx: cx + dx, by: cy + dy, half: rng.random_range(0.8..2.0) }
            }
        }
    }

    /// Signed distance (pixels, negative inside) from the point (x, y) to the figure.
    fn distance(&self, x: f32, y: f32) -> f32 {
        match *self {
            Figure::Blob { cx, cy, rx, ry, angle } => {
                let (s, c) = angle.sin_cos();
                let (dx, dy) = (x - cx, y - cy);
                let (u, v) = (c * dx + s * dy, -s * dx + c * dy);
                // Exact on the axes, close enough elsewhere for a 1-pixel soft edge.
                ((u / rx).hypot(v / ry) - 1.0) * rx.min(ry)
            }
            Figure::Ring { cx, cy, r, half } => ((x - cx).hypot(y - cy) - r).abs() - half,
            Figure::Stroke { ax, ay, bx, by, half } => segment_distance(x, y, ax, ay, bx, by) - half,
        }
    }

    /// Paints the figure: each pixel takes the max of what it had and `brightness` times the
    /// figure's coverage (1 inside, 0 outside, linear over one pixel across the edge).
    pub fn paint(&self, canvas: &mut [f32; SIDE * SIDE], brightness: f32) {
        for y in 0..SIDE {
            for x in 0..SIDE {
                let d = self.distance(x as f32 + 0.5, y as f32 + 0.5);
                let coverage = (0.5 - d).clamp(0.0, 1.0);
                let p = &mut canvas[y * SIDE + x];
                *p = p.max(brightness * coverage);
            }
        }
    }
}

fn paint(canvas: &mut [f32; SIDE * SIDE], rng: &mut ChaCha8Rng, shape: Shape) {
    let figure = Figure::random(rng, shape);
    let brightness = rng.random_range(0.55..1.0f32);
    figure.paint(canvas, brightness);
}

/// Distance from (x, y) to the segment (ax, ay)-(bx, by).
fn segment_distance(x: f32, y: f32, ax: f32, ay: f32, bx: f32, by: f32) -> f32 {
    let (vx, vy) = (bx - ax, by - ay);
    let t = (((x - ax) * vx + (y - ay) * vy) / (vx * vx + vy * vy)).clamp(0.0, 1.0);
    (x - ax - t * vx).hypot(y - ay - t * vy)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_count_same_bytes_and_prefix_stable() {
        let a = generate(50);
        let b = generate(50);
        assert_eq!(a, b);
        let longer = generate(80);
        assert_eq!(&longer[..a.len()], &a[..]);
    }

    #[test]
    fn images_are_varied_and_not_blank() {
        let n = 300;
        let pixels = generate(n);
        let images: Vec<&[u8]> = pixels.chunks(SIDE * SIDE).collect();
        let mut distinct = images.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), n, "every image should differ");
        for (i, img) in images.iter().enumerate() {
            let lit = img.iter().filter(|&&p| p > 64).count();
            assert!(lit >= 10, "image {i} has only {lit} lit pixels");
            assert!(lit < SIDE * SIDE / 2, "image {i} is mostly lit ({lit})");
            // The background (the corners) stays dark: the shapes stay near the centre.
            assert_eq!(img[0], 0, "image {i} corner");
        }
        // Soft edges: intermediate grey levels exist, not just 0 and the peak.
        let greys = pixels.iter().filter(|&&p| p > 0 && p < 100).count();
        assert!(greys > n * 10, "only {greys} grey pixels");
        // All three kinds occur in roughly equal numbers.
        let mut kinds = [0usize; 3];
        let mut scratch = vec![0u8; SIDE * SIDE];
        for i in 0..n as u64 {
            scratch.fill(0);
            kinds[draw(i, &mut scratch) as usize] += 1;
        }
        for k in kinds {
            assert!(k > n / 6, "kinds {kinds:?}");
        }
    }

    #[test]
    fn figures_draw_what_they_claim() {
        let at = |c: &[f32; SIDE * SIDE], x: usize, y: usize| c[y * SIDE + x];
        // Centres at pixel centres (14.5) so the expected values are exact.
        let mut c = [0f32; SIDE * SIDE];
        Figure::Ring { cx: 14.5, cy: 14.5, r: 6.0, half: 1.0 }.paint(&mut c, 0.8);
        assert_eq!(at(&c, 14, 14), 0.0, "ring centre is empty");
        assert_eq!(at(&c, 20, 14), 0.8, "on the ring");
        assert_eq!(at(&c, 14, 8), 0.8, "on the ring");
        assert_eq!(at(&c, 23, 14), 0.0, "outside the ring");
        // Pixel centre 7 px from the centre: exactly on the outer edge, coverage 0.5.
        assert!((at(&c, 14, 21) - 0.4).abs() < 1e-6);
        let mut c = [0f32; SIDE * SIDE];
        Figure::Blob { cx: 14.5, cy: 14.5, rx: 6.0, ry: 3.0, angle: 0.0 }.paint(&mut c, 1.0);
        assert_eq!(at(&c, 14, 14), 1.0);
        assert_eq!(at(&c, 19, 14), 1.0, "inside along the long axis");
        assert_eq!(at(&c, 14, 19), 0.0, "outside along the short axis");
        // Edge pixel: distance exactly 0 on the x axis at 20.5 -> coverage 0.5.
        assert!((at(&c, 20, 14) - 0.5).abs() < 1e-6);
        let mut c = [0f32; SIDE * SIDE];
        Figure::Stroke { ax: 4.5, ay: 14.5, bx: 24.5, by: 14.5, half: 1.0 }.paint(&mut c, 1.0);
        assert_eq!(at(&c, 10, 14), 1.0);
        assert!((at(&c, 10, 15) - 0.5).abs() < 1e-6, "pixel centre on the edge: coverage 0.5");
        assert_eq!(at(&c, 10, 17), 0.0);
        assert_eq!(at(&c, 26, 14), 0.0, "past the end");
    }
}
