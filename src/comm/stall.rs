//! The stall detector's report: when a collective has waited past `--stall-timeout`, ask every
//! rank what it is doing and say which ranks have not arrived and which bucket is waiting.

use crate::comm::status::StatusReply;
use crate::comm::transport::{CommError, Transport};
use std::time::Duration;

/// How long to wait for the other ranks' answers.
pub const GRACE: Duration = Duration::from_secs(2);

/// Exit code of a job ended by the stall detector.
pub const STALL_EXIT_CODE: i32 = 3;

/// Build the report for `err` (a `Stalled` error) in the collective this rank is in now.
pub fn report<T: Transport + ?Sized>(t: &mut T, err: &CommError, timeout: Duration) -> String {
    let me = t.rank();
    let (seq, label) = {
        let a = t.activity();
        (a.seq, a.label.clone())
    };
    let replies = t.query_status(GRACE);
    let (peer, waited) = match err {
        CommError::Stalled { peer, waited } => (*peer, *waited),
        _ => (me, Duration::ZERO),
    };
    let mut lines = vec![format!(
        "rank {me}: stall: {label} (collective #{seq}) has waited {:.1} s for rank {peer} \
         (--stall-timeout {})",
        waited.as_secs_f64(),
        format_timeout(timeout)
    )];
    let (not_arrived, details) = classify(me, seq, &replies);
    lines.extend(details);
    if not_arrived.is_empty() {
        lines.push(all_arrived(seq, timeout));
    } else {
        let list: Vec<String> = not_arrived.iter().map(|r| r.to_string()).collect();
        lines.push(format!("  ranks that have not arrived at collective #{seq}: {}", list.join(", ")));
    }
    lines.push("  ending the job".to_string());
    lines.join("\n")
}

/// The diagnosis when every rank has reached the collective that stalled. Under a short
/// timeout the likelier cause is that one rank's side simply took longer (a busy core, a
/// slow link) than the timeout allows.
fn all_arrived(seq: u64, timeout: Duration) -> String {
    let mut line = format!(
        "  every rank has reached collective #{seq}: they disagree about it (buckets submitted in a \
         different order, or of different sizes, on some ranks)"
    );
    if timeout < SHORT_TIMEOUT {
        line += &format!(
            ", or --stall-timeout {} is shorter than a collective can take here: raise it (default 60s)",
            format_timeout(timeout)
        );
    }
    line
}

/// Below this, a stall among ranks that all arrived is more likely the timeout than a bug.
const SHORT_TIMEOUT: Duration = Duration::from_secs(5);

fn format_timeout(d: Duration) -> String {
    if d < Duration::from_secs(1) { format!("{}ms", d.as_millis()) } else { format!("{}s", d.as_secs_f64()) }
}

/// Which ranks have not reached collective `seq`, and one line per other rank.
pub fn classify(me: usize, seq: u64, replies: &[Option<StatusReply>]) -> (Vec<usize>, Vec<String>) {
    let mut not_arrived = Vec::new();
    let mut lines = Vec::new();
    for (r, reply) in replies.iter().enumerate() {
        if r == me {
            continue;
        }
        let line = match reply {
            None => {
                not_arrived.push(r);
                "no answer (busy outside communication, hung, or dead)".to_string()
            }
            Some(s) if s.seq < seq => {
                not_arrived.push(r);
                let state = if s.busy { "still in" } else { "idle after" };
                if s.seq == 0 {
                    format!("has not arrived: no collective yet ({:.1} s)", s.for_secs)
                } else {
                    format!("has not arrived: {state} collective #{} {} for {:.1} s", s.seq, s.label, s.for_secs)
                }
            }
            Some(s) if s.seq == seq && s.busy => match s.waiting_on {
                Some(w) => format!("in collective #{seq}, waiting for rank {w} for {:.1} s", s.for_secs),
                None => format!("in collective #{seq} for {:.1} s", s.for_secs),
            },
            Some(s) if s.seq == seq => format!("finished collective #{seq}"),
            Some(s) => format!("ahead, at collective #{} {}: the ranks issued different collectives", s.seq, s.label),
        };
        lines.push(format!("  rank {r}: {line}"));
    }
    (not_arrived, lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seq: u64, busy: bool, waiting_on: Option<usize>) -> Option<StatusReply> {
        Some(StatusReply { seq, label: format!("bucket {seq}"), busy, for_secs: 1.0, waiting_on })
    }

    #[test]
    fn a_short_timeout_is_named_as_a_likely_cause() {
        let short = all_arrived(4, Duration::from_millis(1));
        assert!(short.contains("different order") && short.contains("--stall-timeout 1ms"), "{short}");
        let long = all_arrived(4, Duration::from_secs(60));
        assert!(long.contains("different order") && !long.contains("--stall-timeout"), "{long}");
    }

    #[test]
    fn names_the_ranks_behind() {
        let replies = vec![None, at(7, true, Some(3)), at(6, false, None), None, at(7, false, None)];
        let (missing, lines) = classify(0, 7, &replies);
        assert_eq!(missing, vec![2, 3]);
        assert_eq!(lines.len(), 4);
        assert!(lines[0].contains("rank 1: in collective #7, waiting for rank 3"), "{lines:?}");
        assert!(lines[1].contains("rank 2: has not arrived: idle after collective #6"));
        assert!(lines[2].contains("rank 3: no answer"));
        assert!(lines[3].contains("rank 4: finished collective #7"));
    }
}
