//! What happened when, per step: spans on the compute thread, the comm thread and the copy
//! stream, kept in a reused buffer (no allocation once warm) for the Chrome trace.

use std::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Track {
    Compute,
    Comm,
    Copy,
}

#[derive(Clone, Debug)]
pub struct Span {
    pub track: Track,
    /// "forward", "backward-data", "allreduce", ...
    pub cat: &'static str,
    /// The stage or bucket label.
    pub name: &'static str,
    pub start: Instant,
    pub end: Instant,
    pub step: u64,
    /// Bytes moved, for copies and allreduces.
    pub bytes: usize,
    /// The allreduce algorithm, when the span is one.
    pub algorithm: &'static str,
}

#[derive(Default)]
pub struct Timeline {
    pub enabled: bool,
    pub step: u64,
    pub spans: Vec<Span>,
}

impl Timeline {
    pub fn new(enabled: bool) -> Self {
        Timeline { enabled, step: 0, spans: Vec::new() }
    }

    pub fn span(&mut self, track: Track, cat: &'static str, name: &'static str, start: Instant, end: Instant) {
        self.span_with(track, cat, name, start, end, 0, "");
    }

    #[allow(clippy::too_many_arguments)]
    pub fn span_with(
        &mut self,
        track: Track,
        cat: &'static str,
        name: &'static str,
        start: Instant,
        end: Instant,
        bytes: usize,
        algorithm: &'static str,
    ) {
        if self.enabled {
            self.spans.push(Span { track, cat, name, start, end, step: self.step, bytes, algorithm });
        }
    }
}
