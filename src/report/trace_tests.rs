//! Tests of the Chrome trace writer: the output parses as JSON and holds the right events.

use super::*;
use serde_json::Value;
use std::time::Duration;

fn parse(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    doc["traceEvents"].as_array().unwrap().clone()
}

fn by_ph<'a>(events: &'a [Value], ph: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["ph"] == ph).collect()
}

/// Microseconds as the file has them, as f64 (what a viewer reads).
fn us(v: &Value) -> f64 {
    v.as_f64().unwrap()
}

#[test]
fn two_ranks_merge_into_one_valid_trace_with_the_expected_events() {
    let t0 = Instant::now();
    let mut r0 = Trace::enabled(0, 16);
    let mut r1 = Trace::enabled(1, 16);
    let at = |us: u64| t0 + Duration::from_micros(us);
    r0.span(Track::Compute, "forward D", "compute", at(0), at(1500), &[]);
    r0.span(
        Track::CommThread,
        String::from("allreduce \"conv1\""), // an owned name with quotes to escape
        "comm",
        at(1000),
        at(1250),
        &[("bytes", 8192usize.into()), ("algorithm", "rd".into()), ("busbw", f64::NAN.into())],
    );
    r1.span(Track::Compute, "forward D", "compute", at(0), at(1700), &[("step", 3u64.into())]);
    r1.span(Track::CopyStream, "d2h", "copy", at(1600), at(1700), &[("neg", (-2i64).into()), ("ok", true.into())]);
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("merged.json");
    Trace::write_merged(&path, &[r0.to_json_events(), r1.to_json_events()]).unwrap();
    let events = parse(&path);

    // Metadata: one process per rank, named with rank and host; thread names for used tracks.
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    let names: Vec<(u64, String)> = by_ph(&events, "M")
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| (e["pid"].as_u64().unwrap(), e["args"]["name"].as_str().unwrap().to_string()))
        .collect();
    // pid = rank + 1 (Perfetto takes pid 0 for the kernel's).
    assert_eq!(names, vec![(1, format!("rank 0 ({host})")), (2, format!("rank 1 ({host})"))]);
    let threads: Vec<(u64, u64, &str)> = by_ph(&events, "M")
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .map(|e| (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap(), e["args"]["name"].as_str().unwrap()))
        .collect();
    assert_eq!(threads, vec![(1, 10, "compute"), (1, 11, "comm thread"), (2, 20, "compute"), (2, 22, "copy stream")]);

    // Complete events: tid = 10 * pid + track (unique in the file, never 0), durations
    // from the Instants.
    let spans = by_ph(&events, "X");
    assert_eq!(spans.len(), 4);
    let find = |pid: u64, name: &str| *spans.iter().find(|e| e["pid"] == pid && e["name"] == name).unwrap();
    let fwd0 = find(1, "forward D");
    let fwd1 = find(2, "forward D");
    let ar = find(1, "allreduce \"conv1\"");
    assert_eq!((fwd0["tid"].as_u64(), ar["tid"].as_u64()), (Some(10), Some(11)));
    assert!((us(&fwd0["dur"]) - 1500.0).abs() < 1e-6);
    assert!((us(&ar["dur"]) - 250.0).abs() < 1e-6);
    // The same Instant on two ranks of one process is the same timestamp: they line up.
    assert_eq!(fwd0["ts"], fwd1["ts"]);
    assert!((us(&ar["ts"]) - us(&fwd0["ts"]) - 1000.0).abs() < 1e-3);
    assert_eq!(ar["cat"], "comm");
    assert_eq!(ar["args"]["bytes"], 8192);
    assert_eq!(ar["args"]["algorithm"], "rd");
    assert!(ar["args"]["busbw"].is_null(), "NaN is written as null");
    let d2h = find(2, "d2h");
    assert_eq!(
        (d2h["tid"].as_u64(), d2h["args"]["neg"].as_i64(), d2h["args"]["ok"].as_bool()),
        (Some(22), Some(-2), Some(true))
    );
    assert_eq!(fwd1["args"]["step"], 3);
    assert!(fwd0.get("args").is_none());
}

#[test]
fn timestamps_follow_the_wall_clock() {
    let mut t = Trace::enabled(0, 1);
    let now = Instant::now();
    let wall_us =
        SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_micros() as f64 - TRACE_EPOCH_UNIX_S as f64 * 1e6;
    t.span(Track::Compute, "x", "c", now, now, &[]);
    let text = format!("[{}]", String::from_utf8(t.to_json_events()).unwrap());
    let events: Vec<Value> = serde_json::from_str(&text).unwrap();
    let ts = us(&by_ph(&events, "X")[0]["ts"]);
    // Within a second of the system clock (generous: only a gross unit error fails this).
    assert!((ts - wall_us).abs() < 1e6, "ts {ts} vs wall {wall_us}");
}

#[test]
fn flows_link_two_tracks_with_one_id_and_ranks_do_not_collide() {
    let t0 = Instant::now();
    let mut r0 = Trace::enabled(0, 4);
    let mut r1 = Trace::enabled(1, 4);
    for r in [&mut r0, &mut r1] {
        r.span(Track::Compute, "backward conv2", "compute", t0, t0 + Duration::from_micros(100), &[]);
        r.span(
            Track::CommThread,
            "allreduce conv2",
            "comm",
            t0 + Duration::from_micros(120),
            t0 + Duration::from_micros(300),
            &[],
        );
        r.flow(
            7,
            "grad conv2",
            "flow",
            Track::Compute,
            t0 + Duration::from_micros(99),
            Track::CommThread,
            t0 + Duration::from_micros(121),
        );
    }
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("flow.json");
    Trace::write_merged(&path, &[r0.to_json_events(), r1.to_json_events()]).unwrap();
    let events = parse(&path);
    let starts = by_ph(&events, "s");
    let ends = by_ph(&events, "f");
    assert_eq!((starts.len(), ends.len()), (2, 2));
    for pid in [1u64, 2] {
        let s = starts.iter().find(|e| e["pid"] == pid).unwrap();
        let f = ends.iter().find(|e| e["pid"] == pid).unwrap();
        assert_eq!(s["id"], f["id"]);
        assert_eq!((s["tid"].as_u64(), f["tid"].as_u64()), (Some(pid * 10), Some(pid * 10 + 1)));
        assert_eq!(f["bp"], "e");
        assert!(us(&f["ts"]) > us(&s["ts"]));
    }
    assert_ne!(starts[0]["id"], starts[1]["id"], "two ranks' flow 7 must be different arrows");
}

#[test]
fn disabled_records_nothing_and_empty_parts_still_make_valid_json() {
    let mut t = Trace::disabled();
    let now = Instant::now();
    t.span(Track::Compute, "x", "c", now, now, &[("a", 1u64.into())]);
    t.flow(1, "f", "c", Track::Compute, now, Track::CommThread, now);
    assert!(t.events.is_empty() && !t.is_enabled());
    assert!(t.to_json_events().is_empty());
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("empty.json");
    Trace::write_merged(&path, &[t.to_json_events(), Vec::new()]).unwrap();
    assert!(parse(&path).is_empty());
    // A disabled part between real ones leaves no stray comma.
    let mut real = Trace::enabled(2, 1);
    real.span(Track::Compute, "x", "c", now, now, &[]);
    Trace::write_merged(&path, &[Vec::new(), real.to_json_events(), Vec::new(), real.to_json_events()]).unwrap();
    assert_eq!(by_ph(&parse(&path), "X").len(), 2);
}

#[test]
fn recording_does_not_grow_past_the_capacity_hint() {
    let mut t = Trace::enabled(0, 100);
    let (events, args) = (t.events.capacity(), t.args.capacity());
    let now = Instant::now();
    for i in 0..100u64 {
        t.span(Track::Compute, "step", "compute", now, now, &[("i", i.into()), ("b", 1.5f32.into())]);
    }
    assert_eq!(t.events.len(), 100);
    assert_eq!((t.events.capacity(), t.args.capacity()), (events, args), "no reallocation");
}

/// A hint as large as `--trace-steps` can make it reserves no more than the cap (rather than
/// failing on capacity overflow) and still records past it.
#[test]
fn a_huge_capacity_hint_reserves_only_the_cap() {
    let mut t = Trace::enabled(0, usize::MAX);
    assert!(t.events.capacity() <= MAX_RESERVED_EVENTS && t.args.capacity() <= 2 * MAX_RESERVED_EVENTS);
    let now = Instant::now();
    t.span(Track::Compute, "step", "compute", now, now, &[]);
    assert_eq!(t.events.len(), 1);
}

#[test]
fn microseconds_are_exact() {
    let mut out = Vec::new();
    write_us(&mut out, 1_234_567);
    out.push(b' ');
    write_us(&mut out, -5);
    out.push(b' ');
    write_us(&mut out, 0);
    assert_eq!(String::from_utf8(out).unwrap(), "1234.567 -0.005 0.000");
}
