//! Sample grids as 8-bit grayscale PNG files (like torchvision's `save_image` of a batch),
//! marked as this program's so that a later write can tell its own grids from other files.

use super::write_atomically;
use anyhow::{Context, Result, bail};
use std::io::Write;
use std::path::Path;

/// Pixels between images and around the grid.
pub const PADDING: usize = 2;
/// Grey, not black: DCGAN samples of MNIST-like data have black backgrounds, and black
/// padding would make neighbouring images run together.
pub const PAD_VALUE: u8 = 128;

/// The tEXt chunk every grid carries (`Software` is PNG's registered keyword for the program
/// that made the file): the mark `written_here` looks for before a grid replaces a file.
const MARK: (&str, &str) = ("Software", "dcgan-train");

/// images [count, h, w] in [-1, 1] -> an 8-bit grayscale PNG grid with `cols` columns and
/// 2 px of padding; written to a temporary file in the same directory, then renamed.
///
/// Pixel value round((v + 1) * 127.5), clamped to [0, 255] (NaN becomes 0). Cells after the
/// last image in the last row are padding grey.
pub fn write_grid(path: &Path, images: &[f32], count: usize, h: usize, w: usize, cols: usize) -> Result<Grid> {
    let grid = encode_grid(images, count, h, w, cols)?;
    write_atomically(path, |file| Ok(file.write_all(&grid.png)?))
        .with_context(|| format!("cannot write the sample grid {}", path.display()))?;
    Ok(grid)
}

/// A grid encoded as PNG, and its size in pixels.
pub struct Grid {
    pub png: Vec<u8>,
    pub width: usize,
    pub height: usize,
}

/// The PNG `write_grid` writes, in memory.
pub fn encode_grid(images: &[f32], count: usize, h: usize, w: usize, cols: usize) -> Result<Grid> {
    let (pixels, height, width) = grid_pixels(images, count, h, w, cols)?;
    let mut png = Vec::new();
    let mut encoder = png::Encoder::new(&mut png, width as u32, height as u32);
    encoder.set_color(png::ColorType::Grayscale);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.add_text_chunk(MARK.0.into(), MARK.1.into())?;
    let mut writer = encoder.write_header()?;
    writer.write_image_data(&pixels)?;
    writer.finish()?;
    Ok(Grid { png, width, height })
}

/// Whether `path` is a PNG this program wrote (it carries the mark): a missing or unreadable
/// file, another image or any other file is not.
pub fn written_here(path: &Path) -> bool {
    let Ok(file) = std::fs::File::open(path) else { return false };
    let Ok(reader) = png::Decoder::new(std::io::BufReader::new(file)).read_info() else { return false };
    reader.info().uncompressed_latin1_text.iter().any(|t| (t.keyword.as_str(), t.text.as_str()) == MARK)
}

/// The grid as [height, width] bytes, with its height and width.
pub fn grid_pixels(images: &[f32], count: usize, h: usize, w: usize, cols: usize) -> Result<(Vec<u8>, usize, usize)> {
    if count == 0 || h == 0 || w == 0 || cols == 0 {
        bail!("image grid of {count} images of {h}x{w} in {cols} columns: all must be at least 1");
    }
    if images.len() != count * h * w {
        bail!("image grid: expected {count} images of {h}x{w} ({} values), found {}", count * h * w, images.len());
    }
    let cols = cols.min(count);
    let rows = count.div_ceil(cols);
    let width = cols * (w + PADDING) + PADDING;
    let height = rows * (h + PADDING) + PADDING;
    if u32::try_from(width).is_err() || u32::try_from(height).is_err() {
        bail!("image grid of {width}x{height} pixels is too large for a PNG");
    }
    let mut pixels = vec![PAD_VALUE; width * height];
    for (i, image) in images.chunks_exact(h * w).enumerate() {
        let (top, left) = (PADDING + (i / cols) * (h + PADDING), PADDING + (i % cols) * (w + PADDING));
        for (y, row) in image.chunks_exact(w).enumerate() {
            let dst = &mut pixels[(top + y) * width + left..][..w];
            for (d, &v) in dst.iter_mut().zip(row) {
                *d = to_byte(v);
            }
        }
    }
    Ok((pixels, height, width))
}

/// [-1, 1] -> [0, 255], rounded; NaN -> 0.
pub fn to_byte(v: f32) -> u8 {
    // `as u8` saturates and maps NaN to 0.
    ((v + 1.0) * 127.5).round() as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (pixels [height, width], height, width) of an 8-bit grayscale PNG.
    fn read_png_gray(path: &Path) -> (Vec<u8>, usize, usize) {
        let mut reader =
            png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap())).read_info().unwrap();
        assert_eq!(
            (reader.info().color_type, reader.info().bit_depth),
            (png::ColorType::Grayscale, png::BitDepth::Eight)
        );
        let mut pixels = vec![0u8; reader.output_buffer_size().unwrap()];
        let frame = reader.next_frame(&mut pixels).unwrap();
        pixels.truncate(frame.buffer_size());
        (pixels, frame.height as usize, frame.width as usize)
    }

    #[test]
    fn round_trip_places_every_pixel() {
        // 5 images of 3x4 in 2 columns -> 3 rows; every value distinct-ish and in range.
        let (count, h, w, cols) = (5, 3, 4, 2);
        let images: Vec<f32> = (0..count * h * w).map(|i| (i as f32 / 59.0) * 2.0 - 1.0).collect();
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("samples").join("epoch-001.png");
        write_grid(&path, &images, count, h, w, cols).unwrap();
        let (pixels, height, width) = read_png_gray(&path);
        assert_eq!((height, width), (3 * (h + 2) + 2, 2 * (w + 2) + 2));
        for i in 0..count {
            for y in 0..h {
                for x in 0..w {
                    let gy = 2 + (i / cols) * (h + 2) + y;
                    let gx = 2 + (i % cols) * (w + 2) + x;
                    let v = images[i * h * w + y * w + x];
                    let want = ((v + 1.0) * 127.5).round() as u8;
                    assert_eq!(pixels[gy * width + gx], want, "image {i} ({y},{x})");
                }
            }
        }
        // Padding: the border, the gap between columns, and the empty sixth cell.
        assert_eq!(pixels[0], PAD_VALUE);
        assert_eq!(pixels[3 * width + 2 + w], PAD_VALUE);
        let (ey, ex) = (2 + 2 * (h + 2), 2 + (w + 2));
        assert_eq!(pixels[ey * width + ex], PAD_VALUE);
        // No temporary file left behind.
        let names: Vec<_> =
            std::fs::read_dir(path.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("epoch-001.png")]);
    }

    #[test]
    fn byte_mapping_endpoints_and_out_of_range() {
        assert_eq!(to_byte(-1.0), 0);
        assert_eq!(to_byte(1.0), 255);
        assert_eq!(to_byte(0.0), 128); // 127.5 rounds away from zero
        assert_eq!(to_byte(3.0), 255);
        assert_eq!(to_byte(-7.0), 0);
        assert_eq!(to_byte(f32::NAN), 0);
    }

    #[test]
    fn wrong_sizes_are_errors() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        assert!(write_grid(&dir.join("a.png"), &[0.0; 10], 2, 2, 2, 2).is_err());
        assert!(write_grid(&dir.join("b.png"), &[], 0, 2, 2, 2).is_err());
        assert!(write_grid(&dir.join("c.png"), &[0.0; 8], 2, 2, 2, 0).is_err());
        assert!(std::fs::read_dir(dir).unwrap().next().is_none(), "nothing written");
    }

    #[test]
    fn only_the_programs_own_grids_carry_the_mark() {
        let tmp = tempfile::tempdir().unwrap();
        let grid = tmp.path().join("grid.png");
        write_grid(&grid, &[0.0; 4], 1, 2, 2, 1).unwrap();
        assert!(written_here(&grid));
        // A PNG from elsewhere: the same pixels, without the mark.
        let other = tmp.path().join("other.png");
        let mut bytes = Vec::new();
        let mut encoder = png::Encoder::new(&mut bytes, 2, 2);
        encoder.set_color(png::ColorType::Grayscale);
        encoder.add_text_chunk("Software".into(), "another program".into()).unwrap();
        let mut writer = encoder.write_header().unwrap();
        writer.write_image_data(&[128; 4]).unwrap();
        writer.finish().unwrap();
        std::fs::write(&other, bytes).unwrap();
        assert!(!written_here(&other));
        let text = tmp.path().join("notes.txt");
        std::fs::write(&text, "notes").unwrap();
        assert!(!written_here(&text));
        assert!(!written_here(&tmp.path().join("missing.png")));
        assert!(!written_here(tmp.path()), "a directory");
    }

    #[test]
    fn overwrites_an_existing_grid() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("g.png");
        write_grid(&path, &[-1.0; 4], 1, 2, 2, 8).unwrap();
        write_grid(&path, &[1.0; 4], 1, 2, 2, 8).unwrap();
        let (pixels, height, width) = read_png_gray(&path);
        assert_eq!((height, width), (6, 6), "cols is capped at count");
        assert_eq!(pixels[2 * 6 + 2], 255);
    }
}
