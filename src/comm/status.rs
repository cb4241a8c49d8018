//! What a rank's comm thread is doing (`Activity`), and the answer it gives a stalled rank
//! that asks (`StatusReply`): the stall detector's raw material.

use serde::{Deserialize, Serialize};
use std::time::Instant;

/// Longest label sent in a status reply (the reply must fit a fixed receive buffer).
const MAX_LABEL: usize = 200;
/// Size of the buffer a status reply is received into.
pub const REPLY_BYTES: usize = 2048;

/// The comm thread's current or last collective. Collectives are numbered in the order they
/// are issued, which is the same on every rank, so numbers can be compared across ranks.
#[derive(Debug)]
pub struct Activity {
    /// Number of the collective entered last (1, 2, ...; 0 = none yet).
    pub seq: u64,
    /// What that collective is, e.g. `bucket 3 "D.conv2" (1.6 MB, vhd)`.
    pub label: String,
    /// Inside that collective now (false: finished it and idle).
    pub busy: bool,
    /// When it entered (busy) or left (idle) that collective.
    pub since: Instant,
    /// The rank a blocked wait inside the collective is waiting for.
    pub waiting_on: Option<usize>,
}

impl Activity {
    pub fn new() -> Self {
        Activity { seq: 0, label: String::new(), busy: false, since: Instant::now(), waiting_on: None }
    }

    /// Start the next collective (reuses the label's allocation: this is on the hot path).
    pub fn enter(&mut self, label: &str) -> u64 {
        self.seq += 1;
        self.label.clear();
        self.label.push_str(label);
        self.busy = true;
        self.since = Instant::now();
        self.waiting_on = None;
        self.seq
    }

    pub fn leave(&mut self) {
        self.busy = false;
        self.since = Instant::now();
        self.waiting_on = None;
    }

    pub fn reply(&self) -> StatusReply {
        let mut label = self.label.clone();
        if label.len() > MAX_LABEL {
            let mut cut = MAX_LABEL;
            while !label.is_char_boundary(cut) {
                cut -= 1;
            }
            label.truncate(cut);
        }
        StatusReply {
            seq: self.seq,
            label,
            busy: self.busy,
            for_secs: self.since.elapsed().as_secs_f64(),
            waiting_on: self.waiting_on,
        }
    }
}

impl Default for Activity {
    fn default() -> Self {
        Self::new()
    }
}

/// One rank's answer to "where are you?".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusReply {
    pub seq: u64,
    pub label: String,
    pub busy: bool,
    pub for_secs: f64,
    pub waiting_on: Option<usize>,
}

impl StatusReply {
    pub fn encode(&self) -> Vec<u8> {
        let bytes = serde_json::to_vec(self).expect("a status reply always serializes");
        debug_assert!(bytes.len() <= REPLY_BYTES);
        bytes
    }

    pub fn decode(bytes: &[u8]) -> Option<StatusReply> {
        serde_json::from_slice(bytes).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_round_trips_and_fits() {
        let mut a = Activity::new();
        a.enter(&"x".repeat(1000));
        a.waiting_on = Some(3);
        let r = a.reply();
        let bytes = r.encode();
        assert!(bytes.len() <= REPLY_BYTES, "{} bytes", bytes.len());
        let back = StatusReply::decode(&bytes).unwrap();
        assert_eq!(back.seq, 1);
        assert_eq!(back.waiting_on, Some(3));
        assert!(back.busy);
        assert_eq!(back.label.len(), MAX_LABEL);
        a.leave();
        assert!(!a.reply().busy);
        assert_eq!(a.enter("next"), 2);
    }
}
