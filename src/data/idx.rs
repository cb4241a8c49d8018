//! IDX files (the MNIST / Fashion-MNIST format), raw or gzip-compressed: images and labels.
//!
//! Images (big-endian): magic `00 00 08 03` (unsigned bytes, 3 dimensions), then the
//! dimensions count, rows, cols as u32, then count*rows*cols pixel bytes, nothing else.
//! Labels: magic `00 00 08 01` (1 dimension), the count as u32, then one byte per label.

use anyhow::{Context, Result, bail};
use flate2::read::MultiGzDecoder;
use std::io::Read;
use std::path::Path;

/// The IDX magic for u8 data with 3 dimensions: 0x00 0x00, type 0x08, rank 3.
const IMAGE_MAGIC: u32 = 0x0000_0803;
/// The same with 1 dimension: a labels file.
const LABEL_MAGIC: u32 = 0x0000_0801;
const LABEL_HEADER_BYTES: usize = 8;
const HEADER_BYTES: usize = 16;
/// gzip streams start with these two bytes (RFC 1952), whatever the file is called.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Reads an IDX image file. Returns (pixels [count, height, width], count, height, width).
/// Compressed or not is decided by the first two bytes, not by the name.
pub fn read_idx_images(path: &Path) -> Result<(Vec<u8>, usize, usize, usize)> {
    parse_idx_images(&read_maybe_gz(path)?).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// Reads an IDX labels file: one class byte per image.
pub fn read_idx_labels(path: &Path) -> Result<Vec<u8>> {
    parse_idx_labels(&read_maybe_gz(path)?).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// The bytes of `path`, decompressed when they start as gzip does.
fn read_maybe_gz(path: &Path) -> Result<Vec<u8>> {
    let raw = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    if !raw.starts_with(&GZIP_MAGIC) {
        return Ok(raw);
    }
    let mut out = Vec::with_capacity(raw.len() * 2);
    MultiGzDecoder::new(raw.as_slice())
        .read_to_end(&mut out)
        .with_context(|| format!("{}: corrupt gzip data (truncated or damaged download?)", path.display()))?;
    Ok(out)
}

/// Parses the bytes of an (uncompressed) IDX labels file.
pub fn parse_idx_labels(bytes: &[u8]) -> Result<Vec<u8>> {
    if bytes.len() < LABEL_HEADER_BYTES || be_u32(bytes, 0) != LABEL_MAGIC {
        bail!("not an IDX labels file: expected magic 0x{LABEL_MAGIC:08x} (unsigned bytes, 1 dimension) and a count");
    }
    let count = be_u32(bytes, 4) as usize;
    let found = bytes.len() - LABEL_HEADER_BYTES;
    if found != count {
        bail!("the header says {count} labels but the file has {found}");
    }
    Ok(bytes[LABEL_HEADER_BYTES..].to_vec())
}

/// Parses the bytes of an (uncompressed) IDX image file.
pub fn parse_idx_images(bytes: &[u8]) -> Result<(Vec<u8>, usize, usize, usize)> {
    if bytes.len() < 4 {
        bail!("not an IDX image file: expected at least a 16-byte header, found {} bytes", bytes.len());
    }
    let magic = be_u32(bytes, 0);
    if magic != IMAGE_MAGIC {
        let rank = bytes[3];
        if bytes[0] == 0 && bytes[1] == 0 && bytes[2] == 0x08 && rank != 3 {
            bail!(
                "wrong dimensions: expected an IDX image file with 3 dimensions \
                 (count, rows, cols), found {rank} dimension(s) (a labels file?)"
            );
        }
        bail!(
            "not an IDX image file: expected magic 0x{IMAGE_MAGIC:08x} \
             (unsigned bytes, 3 dimensions), found 0x{magic:08x}"
        );
    }
    if bytes.len() < HEADER_BYTES {
        bail!("truncated IDX file: expected a {HEADER_BYTES}-byte header, found {} bytes", bytes.len());
    }
    let count = be_u32(bytes, 4) as usize;
    let height = be_u32(bytes, 8) as usize;
    let width = be_u32(bytes, 12) as usize;
    if count == 0 || height == 0 || width == 0 {
        bail!(
            "wrong dimensions: expected count, rows and cols all at least 1, \
             found {count} x {height} x {width}"
        );
    }
    let expected = count
        .checked_mul(height)
        .and_then(|n| n.checked_mul(width))
        .filter(|&n| n <= isize::MAX as usize)
        .with_context(|| format!("wrong dimensions: {count} x {height} x {width} images is too large"))?;
    let found = bytes.len() - HEADER_BYTES;
    if found < expected {
        bail!(
            "truncated IDX file: expected {expected} bytes of pixels \
             ({count} images of {height}x{width}), found {found}"
        );
    }
    if found > expected {
        bail!(
            "wrong dimensions: the header says {count} images of {height}x{width} \
             ({expected} bytes of pixels) but the file has {found}"
        );
    }
    Ok((bytes[HEADER_BYTES..].to_vec(), count, height, width))
}

fn be_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// The bytes of an IDX image file of `count` images [count, height, width].
pub fn encode_idx_images(pixels: &[u8], count: usize, height: usize, width: usize) -> Vec<u8> {
    assert_eq!(pixels.len(), count * height * width, "pixels must be [count, h, w]");
    let mut out = Vec::with_capacity(HEADER_BYTES + pixels.len());
    out.extend_from_slice(&IMAGE_MAGIC.to_be_bytes());
    for d in [count, height, width] {
        out.extend_from_slice(&u32::try_from(d).expect("IDX dimensions are u32").to_be_bytes());
    }
    out.extend_from_slice(pixels);
    out
}

/// The bytes of an IDX labels file.
pub fn encode_idx_labels(labels: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(LABEL_HEADER_BYTES + labels.len());
    out.extend_from_slice(&LABEL_MAGIC.to_be_bytes());
    out.extend_from_slice(&u32::try_from(labels.len()).expect("IDX counts are u32").to_be_bytes());
    out.extend_from_slice(labels);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::{Compression, write::GzEncoder};
    use std::io::Write;

    /// 3 images of 2x4 with distinct bytes, so a swapped dimension or offset shows.
    fn sample() -> (Vec<u8>, Vec<u8>) {
        let pixels: Vec<u8> = (0..24u8).map(|i| i * 10 + 1).collect();
        let file = encode_idx_images(&pixels, 3, 2, 4);
        (pixels, file)
    }

    fn temp_file(dir: &tempfile::TempDir, name: &str, bytes: &[u8]) -> std::path::PathBuf {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    #[test]
    fn header_bytes_are_the_idx_layout() {
        let (_, file) = sample();
        assert_eq!(&file[..4], &[0, 0, 8, 3]);
        assert_eq!(&file[4..16], &[0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 4]);
    }

    #[test]
    fn reads_a_good_raw_file() {
        let (pixels, file) = sample();
        let tmp = tempfile::tempdir().unwrap();
        let path = temp_file(&tmp, "good-raw", &file);
        let (got, count, h, w) = read_idx_images(&path).unwrap();
        assert_eq!((count, h, w), (3, 2, 4));
        assert_eq!(got, pixels);
    }

    #[test]
    fn reads_a_gzip_file_by_its_magic_bytes_not_its_name() {
        let (pixels, file) = sample();
        let mut enc = GzEncoder::new(Vec::new(), Compression::default());
        enc.write_all(&file).unwrap();
        let gz = enc.finish().unwrap();
        // No .gz in the name: detection must come from the content.
        let tmp = tempfile::tempdir().unwrap();
        let path = temp_file(&tmp, "good-compressed-no-suffix", &gz);
        let (got, count, h, w) = read_idx_images(&path).unwrap();
        assert_eq!((count, h, w), (3, 2, 4));
        assert_eq!(got, pixels);
        // And a raw file named .gz is read as raw.
        let tmp = tempfile::tempdir().unwrap();
        let path = temp_file(&tmp, "raw-named.gz", &file);
        assert_eq!(read_idx_images(&path).unwrap().0, pixels);
    }

    #[test]
    fn truncated_gzip_is_an_error_naming_the_file() {
        let (_, file) = sample();
        let mut enc = GzEncoder::new(Vec::new(), Compression::default());
        enc.write_all(&file).unwrap();
        let gz = enc.finish().unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let path = temp_file(&tmp, "cut.gz", &gz[..gz.len() / 2]);
        let msg = format!("{:#}", read_idx_images(&path).unwrap_err());
        assert!(msg.contains("cut.gz") && msg.contains("gzip"), "{msg}");
    }

    #[test]
    fn wrong_magic_names_expected_and_found() {
        let (_, mut file) = sample();
        file[2] = 0x0d; // float data instead of unsigned bytes
        let tmp = tempfile::tempdir().unwrap();
        let path = temp_file(&tmp, "wrong-magic", &file);
        let msg = format!("{:#}", read_idx_images(&path).unwrap_err());
        assert!(msg.contains("wrong-magic"), "{msg}");
        assert!(msg.contains("0x00000803") && msg.contains("0x00000d03"), "{msg}");
        // A PNG or text file is not mistaken for IDX either.
        let msg = parse_idx_images(b"\x89PNG\r\n\x1a\n0000000000").unwrap_err().to_string();
        assert!(msg.contains("magic"), "{msg}");
    }

    #[test]
    fn labels_file_is_wrong_dimensions() {
        // train-labels-idx1-ubyte: magic 00 00 08 01, one dimension.
        let mut file = vec![0, 0, 8, 1, 0, 0, 0, 2];
        file.extend_from_slice(&[3, 7]);
        let msg = parse_idx_images(&file).unwrap_err().to_string();
        assert!(msg.contains("3 dimensions") && msg.contains("found 1"), "{msg}");
    }

    #[test]
    fn truncated_pixels_and_header_are_errors() {
        let (_, file) = sample();
        let tmp = tempfile::tempdir().unwrap();
        let path = temp_file(&tmp, "truncated", &file[..file.len() - 1]);
        let msg = format!("{:#}", read_idx_images(&path).unwrap_err());
        assert!(msg.contains("truncated") && msg.contains("expected 24") && msg.contains("found 23"), "{msg}");
        let msg = parse_idx_images(&file[..10]).unwrap_err().to_string();
        assert!(msg.contains("16-byte header") && msg.contains("found 10"), "{msg}");
        let msg = parse_idx_images(&file[..2]).unwrap_err().to_string();
        assert!(msg.contains("found 2 bytes"), "{msg}");
    }

    #[test]
    fn dimensions_that_disagree_with_the_length_are_errors() {
        let (_, mut file) = sample();
        file[15] = 3; // header now says 3 images of 2x3 = 18 bytes, file has 24
        let msg = parse_idx_images(&file).unwrap_err().to_string();
        assert!(msg.contains("wrong dimensions") && msg.contains("18") && msg.contains("24"), "{msg}");
        let (_, mut file) = sample();
        file[11] = 0; // zero rows
        let msg = parse_idx_images(&file).unwrap_err().to_string();
        assert!(msg.contains("wrong dimensions") && msg.contains("3 x 0 x 4"), "{msg}");
        let (_, mut file) = sample();
        file[4..16].copy_from_slice(&[0xff; 12]); // overflowing sizes must not allocate or panic
        assert!(parse_idx_images(&file).is_err());
    }

    #[test]
    fn missing_file_names_the_path() {
        let msg = format!("{:#}", read_idx_images(Path::new("/nonexistent/x-idx3")).unwrap_err());
        assert!(msg.contains("/nonexistent/x-idx3"), "{msg}");
    }

    #[test]
    fn labels_round_trip_and_images_are_not_labels() {
        let labels = [3u8, 0, 9, 9, 1];
        assert_eq!(parse_idx_labels(&encode_idx_labels(&labels)).unwrap(), labels);
        let mut short = encode_idx_labels(&labels);
        short.pop();
        assert!(parse_idx_labels(&short).unwrap_err().to_string().contains("says 5 labels but the file has 4"));
        let images = encode_idx_images(&[0; 8], 2, 2, 2);
        assert!(parse_idx_labels(&images).unwrap_err().to_string().contains("not an IDX labels file"));
    }
}
