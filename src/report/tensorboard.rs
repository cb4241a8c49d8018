//! TensorBoard's event files: `tensorboard --logdir runs` shows every run's losses, step
//! times, sample quality and sample grids, live as they train.
//!
//! An event file is a sequence of TFRecords (a little-endian u64 length, its masked CRC-32C,
//! the bytes, their masked CRC-32C), each holding one `Event` protocol buffer (TensorBoard's
//! `event.proto`, `summary.proto`; only the fields written here are declared). The first
//! event names the format (`brain.Event:2`). Each record goes to the file in one `write` call,
//! so TensorBoard reading a run in progress sees whole records.

use anyhow::{Context, Result};
use prost::Message;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// `tensorflow.Event`.
#[derive(Clone, PartialEq, prost::Message)]
struct Event {
    #[prost(double, tag = "1")]
    wall_time: f64,
    #[prost(int64, tag = "2")]
    step: i64,
    #[prost(string, optional, tag = "3")]
    file_version: Option<String>,
    #[prost(message, optional, tag = "5")]
    summary: Option<Summary>,
    #[prost(message, optional, tag = "7")]
    session_log: Option<SessionLog>,
}

/// `tensorflow.SessionLog`: only START, which tells TensorBoard the run starts again at the
/// event's step.
#[derive(Clone, PartialEq, prost::Message)]
struct SessionLog {
    /// `SessionLog.SessionStatus`; START is 1.
    #[prost(int32, tag = "1")]
    status: i32,
}

/// `tensorflow.Summary`.
#[derive(Clone, PartialEq, prost::Message)]
struct Summary {
    #[prost(message, repeated, tag = "1")]
    value: Vec<SummaryValue>,
}

/// `tensorflow.Summary.Value`: a scalar, an image, or a plugin's tensor under a tag.
#[derive(Clone, PartialEq, prost::Message)]
struct SummaryValue {
    #[prost(string, tag = "1")]
    tag: String,
    #[prost(float, optional, tag = "2")]
    simple_value: Option<f32>,
    #[prost(message, optional, tag = "4")]
    image: Option<SummaryImage>,
    #[prost(message, optional, tag = "8")]
    tensor: Option<TensorProto>,
    #[prost(message, optional, tag = "9")]
    metadata: Option<SummaryMetadata>,
}

/// `tensorflow.SummaryMetadata`: which plugin shows the value.
#[derive(Clone, PartialEq, prost::Message)]
struct SummaryMetadata {
    #[prost(message, optional, tag = "1")]
    plugin_data: Option<PluginData>,
}

/// `tensorflow.SummaryMetadata.PluginData`.
#[derive(Clone, PartialEq, prost::Message)]
struct PluginData {
    #[prost(string, tag = "1")]
    plugin_name: String,
}

/// `tensorflow.TensorProto`, as the text plugin takes it: a scalar string.
#[derive(Clone, PartialEq, prost::Message)]
struct TensorProto {
    /// `DataType`; DT_STRING is 7.
    #[prost(int32, tag = "1")]
    dtype: i32,
    /// A scalar's shape: no dimensions.
    #[prost(message, optional, tag = "2")]
    tensor_shape: Option<TensorShape>,
    #[prost(bytes = "vec", repeated, tag = "8")]
    string_val: Vec<Vec<u8>>,
}

/// `tensorflow.TensorShapeProto` (only a scalar's, which has no fields set).
#[derive(Clone, PartialEq, prost::Message)]
struct TensorShape {}

/// `tensorflow.Summary.Image`: an encoded (PNG) image.
#[derive(Clone, PartialEq, prost::Message)]
struct SummaryImage {
    #[prost(int32, tag = "1")]
    height: i32,
    #[prost(int32, tag = "2")]
    width: i32,
    /// 1: grey.
    #[prost(int32, tag = "3")]
    colorspace: i32,
    #[prost(bytes = "vec", tag = "4")]
    encoded_image_string: Vec<u8>,
}

/// The CRC-32C of `bytes`, masked as TFRecord stores it (a CRC of data that holds CRCs is
/// otherwise prone to collide).
fn masked_crc(bytes: &[u8]) -> u32 {
    let crc = crc32c::crc32c(bytes);
    (crc.rotate_right(15)).wrapping_add(0xa282_ead8)
}

/// One TFRecord holding `data`.
fn record(data: &[u8]) -> Vec<u8> {
    let len = (data.len() as u64).to_le_bytes();
    let mut r = Vec::with_capacity(data.len() + 16);
    r.extend_from_slice(&len);
    r.extend_from_slice(&masked_crc(&len).to_le_bytes());
    r.extend_from_slice(data);
    r.extend_from_slice(&masked_crc(data).to_le_bytes());
    r
}

fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// Writes one run's events.
pub struct EventWriter {
    file: File,
    path: PathBuf,
}

impl EventWriter {
    /// A new event file in `dir` (`events.out.tfevents.<unix seconds>.<host>`, the name
    /// TensorBoard looks for). A resumed run writes a file of its own beside the first (see
    /// `restart_at`).
    pub fn create(dir: &Path) -> Result<EventWriter> {
        let secs = now() as u64;
        let host = gethostname::gethostname().to_string_lossy().to_string();
        let name = (0..)
            .map(|k| match k {
                0 => format!("events.out.tfevents.{secs:010}.{host}"),
                k => format!("events.out.tfevents.{secs:010}.{host}.{k}"),
            })
            .find(|n| !dir.join(n).exists())
            .expect("an unused name");
        let path = dir.join(name);
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        let mut w = EventWriter { file, path };
        let version = Event { wall_time: now(), file_version: Some("brain.Event:2".into()), ..Default::default() };
        w.write(&version)?;
        Ok(w)
    }

    /// Tell TensorBoard that the run goes on from `step` again (a resume from an earlier
    /// checkpoint): it drops what the earlier files hold from that step on, so a step is
    /// never shown twice.
    pub fn restart_at(&mut self, step: u64) -> Result<()> {
        let start = SessionLog { status: 1 };
        self.write(&Event { wall_time: now(), step: step as i64, session_log: Some(start), ..Default::default() })
    }

    fn write(&mut self, event: &Event) -> Result<()> {
        let bytes = record(&event.encode_to_vec());
        self.file.write_all(&bytes).with_context(|| format!("cannot write {}", self.path.display()))
    }

    /// The values of one summary at `step`, in one event.
    fn summary(&mut self, step: u64, value: Vec<SummaryValue>) -> Result<()> {
        let summary = Some(Summary { value });
        self.write(&Event { wall_time: now(), step: step as i64, summary, ..Default::default() })
    }

    /// Scalars (tag, value) at `step`, in one event.
    pub fn scalars(&mut self, step: u64, scalars: &[(String, f32)]) -> Result<()> {
        let value = scalars
            .iter()
            .map(|(tag, v)| SummaryValue { tag: tag.clone(), simple_value: Some(*v), ..Default::default() })
            .collect();
        self.summary(step, value)
    }

    /// A grey PNG image of `width` x `height` under `tag` at `step`.
    pub fn image(&mut self, step: u64, tag: &str, png: Vec<u8>, width: usize, height: usize) -> Result<()> {
        let image =
            SummaryImage { height: height as i32, width: width as i32, colorspace: 1, encoded_image_string: png };
        self.summary(step, vec![SummaryValue { tag: tag.into(), image: Some(image), ..Default::default() }])
    }

    /// Markdown under `tag` at `step`, for TensorBoard's text tab (the text plugin's scalar
    /// string tensor).
    pub fn text(&mut self, step: u64, tag: &str, markdown: &str) -> Result<()> {
        let string_val = vec![markdown.as_bytes().to_vec()];
        let tensor = TensorProto { dtype: 7, tensor_shape: Some(TensorShape {}), string_val };
        let metadata = SummaryMetadata { plugin_data: Some(PluginData { plugin_name: "text".into() }) };
        let value =
            SummaryValue { tag: tag.into(), tensor: Some(tensor), metadata: Some(metadata), ..Default::default() };
        self.summary(step, vec![value])
    }
}

/// Every number of a JSON object (a metrics line) as a scalar tagged `<group>/<key>`, except
/// the keys in `skip`; nested objects are not looked into.
pub fn numbers_of(group: &str, record: &serde_json::Value, skip: &[&str]) -> Vec<(String, f32)> {
    let Some(object) = record.as_object() else { return Vec::new() };
    object
        .iter()
        .filter(|(k, _)| !skip.contains(&k.as_str()))
        .filter_map(|(k, v)| Some((format!("{group}/{k}"), v.as_f64()? as f32)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_carry_the_masked_crcs_tensorboard_computes() {
        // Values from TensorBoard's own reader (`masked_crc32c` of
        // tensorboard.compat.tensorflow_stub.pywrap_tensorflow); CRC-32C("123456789") is
        // 0xE3069283 (RFC 3720's check value) before masking.
        assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(masked_crc(b"123456789"), 0xC78A_B0E5);
        let r = record(b"abc");
        assert_eq!(r.len(), 8 + 4 + 3 + 4);
        assert_eq!(&r[..8], &3u64.to_le_bytes());
        assert_eq!(&r[8..12], &0x0E49_99B0u32.to_le_bytes(), "the length's CRC");
        assert_eq!(&r[12..15], b"abc");
        assert_eq!(&r[15..], &0x21F1_576Eu32.to_le_bytes(), "the data's CRC");
    }

    #[test]
    fn numbers_are_taken_by_key_and_the_rest_left() {
        let v = serde_json::json!({"type": "step", "step": 3, "loss_d": 0.5, "note": "x", "fid": null});
        let mut got = numbers_of("train", &v, &["step"]);
        got.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(got, [("train/loss_d".to_string(), 0.5)]);
    }
}
