//! A timeline of the run in the Chrome trace event format (open trace.json in
//! <https://ui.perfetto.dev> or chrome://tracing): one process per rank (pid = rank + 1, named
//! "rank r (host)"), one thread per track
//! (compute, comm thread, copy stream), a complete ("X") event per span, flow arrows from a
//! gradient's hand-off to its allreduce.
//!
//! Timestamps are wall-clock microseconds since [`TRACE_EPOCH_UNIX_S`]: each process reads
//! the system clock once, together with an `Instant`, and places every `Instant` relative to
//! that pair, so ranks on one machine line up exactly and ranks on several machines line up
//! as well as their clocks agree (NTP: typically well under a millisecond).

use super::write_atomically;
use anyhow::{Context, Result};
use std::borrow::Cow;
use std::io::Write;
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// 2025-01-01T00:00:00Z. Counting from here rather than from 1970 keeps timestamps near
/// 10^13 us, where an f64 (what trace viewers parse them into) still resolves nanoseconds.
pub const TRACE_EPOCH_UNIX_S: i64 = 1_735_689_600;

/// The process's clock pair: an `Instant` and the wall-clock time (ns since the Unix epoch)
/// read at the same moment. Set on first use; call [`init_clock`] at start to fix it early.
fn clock() -> &'static (Instant, i128) {
    static CLOCK: OnceLock<(Instant, i128)> = OnceLock::new();
    CLOCK.get_or_init(|| {
        let wall = SystemTime::now();
        let instant = Instant::now();
        let unix_ns = match wall.duration_since(UNIX_EPOCH) {
            Ok(d) => d.as_nanos() as i128,
            Err(e) => -(e.duration().as_nanos() as i128),
        };
        (instant, unix_ns)
    })
}

/// Reads the clock pair now (the start of `main` is a good place).
pub fn init_clock() {
    clock();
}

/// Nanoseconds from [`TRACE_EPOCH_UNIX_S`] to `t`, on this process's clock pair.
fn trace_ns(t: Instant) -> i128 {
    let (origin, origin_unix_ns) = *clock();
    let offset = if t >= origin { (t - origin).as_nanos() as i128 } else { -((origin - t).as_nanos() as i128) };
    origin_unix_ns + offset - TRACE_EPOCH_UNIX_S as i128 * 1_000_000_000
}

/// A timeline row of one rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Track {
    /// Forward, backward, Adam: the main thread (and its GPU compute stream).
    Compute,
    /// The allreduce thread.
    CommThread,
    /// Device-to-host and host-to-device copies of gradients.
    CopyStream,
}

impl Track {
    const ALL: [Track; 3] = [Track::Compute, Track::CommThread, Track::CopyStream];

    /// Position of the track within its rank (also its sort order).
    fn index(self) -> u64 {
        match self {
            Track::Compute => 0,
            Track::CommThread => 1,
            Track::CopyStream => 2,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Track::Compute => "compute",
            Track::CommThread => "comm thread",
            Track::CopyStream => "copy stream",
        }
    }

    /// The track a thread name of the trace stands for (the inverse of its label).
    pub fn from_label(label: &str) -> Option<Track> {
        Track::ALL.into_iter().find(|t| t.label() == label)
    }
}

/// A value in a span's `args` (shown when the span is selected in the viewer).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ArgValue {
    U64(u64),
    I64(i64),
    F64(f64),
    Bool(bool),
    Str(&'static str),
}

impl From<u64> for ArgValue {
    fn from(v: u64) -> Self {
        ArgValue::U64(v)
    }
}
impl From<usize> for ArgValue {
    fn from(v: usize) -> Self {
        ArgValue::U64(v as u64)
    }
}
impl From<u32> for ArgValue {
    fn from(v: u32) -> Self {
        ArgValue::U64(v as u64)
    }
}
impl From<i64> for ArgValue {
    fn from(v: i64) -> Self {
        ArgValue::I64(v)
    }
}
impl From<f64> for ArgValue {
    fn from(v: f64) -> Self {
        ArgValue::F64(v)
    }
}
impl From<f32> for ArgValue {
    fn from(v: f32) -> Self {
        ArgValue::F64(v as f64)
    }
}
impl From<bool> for ArgValue {
    fn from(v: bool) -> Self {
        ArgValue::Bool(v)
    }
}
impl From<&'static str> for ArgValue {
    fn from(v: &'static str) -> Self {
        ArgValue::Str(v)
    }
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    /// "X": a span of `dur_ns`.
    Complete {
        dur_ns: u64,
    },
    /// "s" / "f": the two ends of a flow arrow.
    FlowStart {
        id: u64,
    },
    FlowEnd {
        id: u64,
    },
}

#[derive(Clone, Debug)]
struct Event {
    kind: Kind,
    track: Track,
    name: Cow<'static, str>,
    cat: &'static str,
    /// ns since TRACE_EPOCH_UNIX_S.
    ts_ns: i128,
    /// This event's args are `Trace::args[first_arg..first_arg + arg_count]`.
    first_arg: u32,
    arg_count: u32,
}

/// The most events `Trace::enabled` reserves room for up front (a few MB with their args).
const MAX_RESERVED_EVENTS: usize = 1 << 16;

/// One rank's recorded events. Recording pushes onto two vectors (events, args): with static
/// names nothing else is allocated, and with enough `capacity_hint` not even that.
pub struct Trace {
    enabled: bool,
    rank: usize,
    host: String,
    events: Vec<Event>,
    args: Vec<(&'static str, ArgValue)>,
}

impl Trace {
    /// A trace that records nothing (every call returns at once).
    pub fn disabled() -> Trace {
        Trace { enabled: false, rank: 0, host: String::new(), events: Vec::new(), args: Vec::new() }
    }

    /// A recording trace for `rank`, with room for `capacity_hint` events (at most
    /// `MAX_RESERVED_EVENTS`) before growing.
    pub fn enabled(rank: usize, capacity_hint: usize) -> Trace {
        init_clock();
        // A `--trace-steps` beyond the run would reserve memory it never fills (or more than
        // there is): past the cap the vectors grow as events come.
        let capacity_hint = capacity_hint.min(MAX_RESERVED_EVENTS);
        Trace {
            enabled: true,
            rank,
            host: gethostname::gethostname().to_string_lossy().into_owned(),
            events: Vec::with_capacity(capacity_hint),
            args: Vec::with_capacity(capacity_hint * 2),
        }
    }

    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Records `name` on `track` from `start` to `end` (an "X" event).
    pub fn span(
        &mut self,
        track: Track,
        name: impl Into<Cow<'static, str>>,
        cat: &'static str,
        start: Instant,
        end: Instant,
        args: &[(&'static str, ArgValue)],
    ) {
        if !self.enabled {
            return;
        }
        let dur_ns = end.saturating_duration_since(start).as_nanos() as u64;
        self.push(Kind::Complete { dur_ns }, track, name.into(), cat, trace_ns(start), args);
    }

    /// An arrow from the span enclosing `from_time` on `from` to the span enclosing
    /// `to_time` on `to` (e.g. a layer's backward to the allreduce of its gradient).
    /// `id` must be unique among this rank's flows; ranks are kept apart here.
    #[allow(clippy::too_many_arguments)]
    pub fn flow(
        &mut self,
        id: u64,
        name: &'static str,
        cat: &'static str,
        from: Track,
        from_time: Instant,
        to: Track,
        to_time: Instant,
    ) {
        if !self.enabled {
            return;
        }
        // Flow ids are global to the trace file: put the rank in the top bits.
        let id = ((self.rank as u64) << 40) ^ id;
        self.push(Kind::FlowStart { id }, from, Cow::Borrowed(name), cat, trace_ns(from_time), &[]);
        self.push(Kind::FlowEnd { id }, to, Cow::Borrowed(name), cat, trace_ns(to_time), &[]);
    }

    fn push(
        &mut self,
        kind: Kind,
        track: Track,
        name: Cow<'static, str>,
        cat: &'static str,
        ts_ns: i128,
        args: &[(&'static str, ArgValue)],
    ) {
        let first_arg = self.args.len() as u32;
        self.args.extend_from_slice(args);
        self.events.push(Event { kind, track, name, cat, ts_ns, first_arg, arg_count: args.len() as u32 });
    }

    /// This rank's events as JSON objects separated by commas (a fragment of the body of a
    /// JSON array; empty when disabled). Metadata names the process "rank r (host)" and
    /// each used track.
    pub fn to_json_events(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.events.len() * 160);
        if !self.enabled {
            return out;
        }
        // Perfetto reads pid and tid the Linux way: tid 0 and pid 0 are the kernel's idle
        // task, and a tid names one thread system-wide. So pid = rank + 1 and every track
        // gets a tid unique in the file: 10 * pid + track (rank 0: 10, 11, 12).
        let pid = self.rank as u64 + 1;
        let tid = |track: Track| pid * 10 + track.index();
        let mut sep = "";
        let mut meta = |out: &mut Vec<u8>, name: &str, tid: u64, key: &str, value: &dyn ToJson| {
            let _ = write!(
                out,
                "{sep}{{\"name\":\"{name}\",\"ph\":\"M\",\"pid\":{pid},\"tid\":{tid},\"args\":{{\"{key}\":"
            );
            value.to_json(out);
            out.extend_from_slice(b"}}");
            sep = ",\n";
        };
        let process = format!("rank {} ({})", self.rank, self.host);
        meta(&mut out, "process_name", tid(Track::Compute), "name", &process.as_str());
        meta(&mut out, "process_sort_index", tid(Track::Compute), "sort_index", &(self.rank as u64));
        for track in Track::ALL {
            if self.events.iter().any(|e| e.track == track) {
                meta(&mut out, "thread_name", tid(track), "name", &track.label());
                meta(&mut out, "thread_sort_index", tid(track), "sort_index", &track.index());
            }
        }
        for e in &self.events {
            out.extend_from_slice(b",\n{\"name\":");
            e.name.as_ref().to_json(&mut out);
            out.extend_from_slice(b",\"cat\":");
            e.cat.to_json(&mut out);
            let ph = match e.kind {
                Kind::Complete { .. } => "X",
                Kind::FlowStart { .. } => "s",
                Kind::FlowEnd { .. } => "f",
            };
            let _ = write!(out, ",\"ph\":\"{ph}\",\"pid\":{pid},\"tid\":{},\"ts\":", tid(e.track));
            write_us(&mut out, e.ts_ns);
            match e.kind {
                Kind::Complete { dur_ns } => {
                    out.extend_from_slice(b",\"dur\":");
                    write_us(&mut out, dur_ns as i128);
                }
                Kind::FlowStart { id } => {
                    let _ = write!(out, ",\"id\":{id}");
                }
                // Bind to the slice that encloses the end point, not the next one.
                Kind::FlowEnd { id } => {
                    let _ = write!(out, ",\"id\":{id},\"bp\":\"e\"");
                }
            }
            if e.arg_count > 0 {
                out.extend_from_slice(b",\"args\":{");
                let args = &self.args[e.first_arg as usize..][..e.arg_count as usize];
                for (i, (key, value)) in args.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    key.to_json(&mut out);
                    out.push(b':');
                    value.to_json(&mut out);
                }
                out.push(b'}');
            }
            out.push(b'}');
        }
        out
    }

    /// Rank 0 merges all ranks' `to_json_events` parts into one valid JSON file
    /// {"traceEvents":[...]}, written to a temporary file and renamed.
    pub fn write_merged(path: &Path, parts: &[Vec<u8>]) -> Result<()> {
        write_atomically(path, |file| {
            let mut w = std::io::BufWriter::new(file);
            w.write_all(b"{\"traceEvents\":[\n")?;
            let mut first = true;
            for part in parts.iter().filter(|p| !p.is_empty()) {
                if !first {
                    w.write_all(b",\n")?;
                }
                w.write_all(part)?;
                first = false;
            }
            w.write_all(b"\n],\"displayTimeUnit\":\"ms\"}\n")?;
            w.flush()?;
            Ok(())
        })
        .with_context(|| format!("cannot write the trace {}", path.display()))
    }
}

/// Microseconds with three decimals, from integer nanoseconds (exact, no float rounding).
fn write_us(out: &mut Vec<u8>, ns: i128) {
    let sign = if ns < 0 { "-" } else { "" };
    let ns = ns.unsigned_abs();
    let _ = write!(out, "{sign}{}.{:03}", ns / 1000, ns % 1000);
}

trait ToJson {
    fn to_json(&self, out: &mut Vec<u8>);
}

impl ToJson for &str {
    fn to_json(&self, out: &mut Vec<u8>) {
        // serde_json escapes quotes, backslashes and control characters.
        let _ = serde_json::to_writer(out, self);
    }
}

impl ToJson for u64 {
    fn to_json(&self, out: &mut Vec<u8>) {
        let _ = write!(out, "{self}");
    }
}

impl ToJson for ArgValue {
    fn to_json(&self, out: &mut Vec<u8>) {
        match *self {
            ArgValue::U64(v) => v.to_json(out),
            ArgValue::I64(v) => {
                let _ = write!(out, "{v}");
            }
            // Non-finite values become null (JSON has no NaN).
            ArgValue::F64(v) => {
                let _ = serde_json::to_writer(out, &v);
            }
            ArgValue::Bool(v) => {
                let _ = write!(out, "{v}");
            }
            ArgValue::Str(v) => v.to_json(out),
        }
    }
}

#[cfg(test)]
#[path = "trace_tests.rs"]
mod tests;
