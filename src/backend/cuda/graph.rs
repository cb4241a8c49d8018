//! `--cuda-graphs`: a training step's kernels recorded once and replayed as CUDA graphs, one
//! graph launch for each stretch of kernels between two host interactions.
//!
//! - `begin_step` .. `end_step` bracket one step, of a kind the trainer names (steps of one
//!   kind launch the same kernels: whether G's update is in flight, whether a WGAN-GP step
//!   includes the generator's or the penalty). A step whose kind has no record runs its
//!   kernels as usual and records each launch (kernel, grid, argument bytes); every host
//!   interaction (upload, download, a gradient staged to or from the host, a wait, an
//!   allocation) closes a segment. At the step's end each segment becomes a graph (on a GPU a
//!   chain of kernel nodes, instantiated once).
//! - The next steps of the kind replay: each launch is compared with the record at its place
//!   and held back; where only its arguments differ (Adam's bias corrections change every
//!   step) the node's arguments are updated; at the segment's end the graph runs, one launch
//!   for the whole stretch. Device work is asynchronous anyway: nothing can see a held-back kernel
//!   before the host interaction that closes its segment launches it.
//! - A launch of another kernel or grid, a segment that ends early, or a step with more or
//!   fewer segments than recorded: the held-back launches run one by one at once, the rest
//!   of the step runs eagerly, and the next step of its kind records afresh. Whatever a
//!   step does, it computes what launching its kernels would, bit for bit.

use super::kernel_table::{Dims, ParamKind};
use super::{Cuda, Engine, Family};
use crate::backend::GraphStats;
use std::ffi::c_void;

/// One kernel launch as recorded: which kernel, its grid and its argument bytes.
#[derive(Clone, Debug)]
pub(crate) struct LaunchRecord {
    pub family: Family,
    pub index: usize,
    pub name: &'static str,
    pub dims: Dims,
    /// Argument i's bytes start at `words[starts[i]]` (8-byte aligned, zero-padded).
    words: Vec<u64>,
    starts: Vec<usize>,
    /// Pointers to each argument, as a launch takes them (refilled by `params`, which
    /// replays call every step: the vector is reused, not allocated again).
    pointers: Vec<*mut c_void>,
}

// The pointers point into the record's own `words` (a heap buffer that moves with it), and
// are refilled before every use.
unsafe impl Send for LaunchRecord {}

fn param_bytes(kind: &ParamKind) -> usize {
    match kind {
        ParamKind::Ptr | ParamKind::I64 | ParamKind::F64 => 8,
        ParamKind::I32 | ParamKind::F32 => 4,
        ParamKind::Struct { size, .. } => *size,
    }
}

impl LaunchRecord {
    /// The launch of kernel `index` of `family` with the arguments `params` points at.
    pub fn new(family: Family, index: usize, name: &'static str, dims: Dims, params: &[*mut c_void]) -> Self {
        let mut rec =
            LaunchRecord { family, index, name, dims, words: Vec::new(), starts: Vec::new(), pointers: Vec::new() };
        rec.set_args(params);
        rec
    }

    fn set_args(&mut self, params: &[*mut c_void]) {
        let kinds = self.family.kernels().kernels[self.index].params;
        assert_eq!(kinds.len(), params.len(), "kernel {}: argument count", self.name);
        self.words.clear();
        self.starts.clear();
        for (kind, &p) in kinds.iter().zip(params) {
            let bytes = param_bytes(kind);
            let at = self.words.len();
            self.starts.push(at);
            self.words.resize(at + bytes.div_ceil(8), 0);
            // SAFETY: `p` points at a value of the kernel's parameter type, `bytes` long.
            unsafe { std::ptr::copy_nonoverlapping(p as *const u8, self.words.as_mut_ptr().add(at) as *mut u8, bytes) };
        }
    }

    /// Whether `params` point at the argument bytes recorded (no allocation: this runs for
    /// every held-back launch).
    fn has_args(&self, params: &[*mut c_void]) -> bool {
        let kinds = self.family.kernels().kernels[self.index].params;
        kinds.len() == params.len()
            && kinds.iter().zip(params).zip(&self.starts).all(|((kind, &p), &at)| {
                let bytes = param_bytes(kind);
                // SAFETY: `p` points at `bytes` bytes of the argument; `words[at..]` holds at
                // least as many.
                let (now, was) = unsafe {
                    (
                        std::slice::from_raw_parts(p as *const u8, bytes),
                        std::slice::from_raw_parts(self.words.as_ptr().add(at) as *const u8, bytes),
                    )
                };
                now == was
            })
    }

    /// The same kernel on the same grid (arguments aside).
    fn same_launch(&self, family: Family, index: usize, dims: &Dims) -> bool {
        self.family == family && self.index == index && self.dims == *dims
    }

    /// Pointers to each argument, as a launch takes them (valid while `self` is untouched).
    pub fn params(&mut self) -> &mut [*mut c_void] {
        let base = self.words.as_mut_ptr();
        self.pointers.clear();
        // SAFETY: every start is inside `words`.
        self.pointers.extend(self.starts.iter().map(|&s| unsafe { base.add(s) } as *mut c_void));
        &mut self.pointers
    }
}

/// One stretch of kernels between host interactions, and its graph on a GPU.
pub(crate) struct Segment {
    pub launches: Vec<LaunchRecord>,
    /// Places in `launches` whose arguments changed since the graph last ran.
    changed: Vec<usize>,
    exec: Option<super::graph_exec::GraphExec>,
}

enum Mode {
    /// No step bracketed: launches run at once.
    Off,
    /// Running and recording a step: the segments closed so far and the one open.
    Recording { segments: Vec<Segment>, open: Vec<LaunchRecord> },
    /// Replaying the record: `pos` launches of segment `seg` held back so far.
    Replaying { seg: usize, pos: usize },
    /// Left the record in this step: launches run at once until its end.
    Eager,
}

/// The recorder's state (behind a mutex in `Cuda`).
pub(crate) struct Graphs {
    mode: Mode,
    /// The record of the step under way (taken from `records` for its kind).
    record: Option<Vec<Segment>>,
    /// The step under way's kind, and the last recorded step of each kind that still
    /// describes its steps.
    kind: u64,
    records: std::collections::HashMap<u64, Vec<Segment>>,
    stats: GraphStats,
}

impl Graphs {
    pub fn new() -> Graphs {
        Graphs { mode: Mode::Off, record: None, kind: 0, records: Default::default(), stats: GraphStats::default() }
    }
}

impl Cuda {
    /// This backend replaying each training step's kernels as CUDA graphs (`--cuda-graphs`).
    pub fn with_graphs(mut self, on: bool) -> Cuda {
        self.graphs = on.then(|| std::sync::Mutex::new(Graphs::new()));
        self
    }

    /// What the graphs did so far (None: graphs off).
    pub fn graph_stats(&self) -> Option<GraphStats> {
        self.graphs.as_ref().map(|g| g.lock().unwrap().stats)
    }

    /// Whether a step is being recorded or replayed (copies then run as kernels, which a
    /// graph records).
    pub(super) fn in_graph_step(&self) -> bool {
        self.graphs
            .as_ref()
            .is_some_and(|g| matches!(g.lock().unwrap().mode, Mode::Recording { .. } | Mode::Replaying { .. }))
    }

    /// Start a step of `kind`: replay its kind's record if there is one, else record it.
    pub(super) fn begin_graph_step(&self, kind: u64) {
        let Some(g) = &self.graphs else { return };
        let mut g = g.lock().unwrap();
        assert!(matches!(g.mode, Mode::Off), "a graph step began inside another");
        g.kind = kind;
        g.record = g.records.remove(&kind);
        g.mode = match g.record {
            Some(_) => Mode::Replaying { seg: 0, pos: 0 },
            None => Mode::Recording { segments: Vec::new(), open: Vec::new() },
        };
    }

    /// End a step: every held-back launch runs; a recorded step becomes the record.
    pub(super) fn end_graph_step(&self) {
        let Some(g) = &self.graphs else { return };
        let mut g = g.lock().unwrap();
        self.close_segment(&mut g);
        match std::mem::replace(&mut g.mode, Mode::Off) {
            Mode::Recording { mut segments, .. } => {
                if let Engine::Driver(d) = &self.engine {
                    for s in &mut segments {
                        s.exec = Some(d.build_graph(&mut s.launches));
                    }
                }
                g.stats.recorded_steps += 1;
                g.record = Some(segments);
            }
            Mode::Replaying { seg, .. } => {
                if seg == g.record.as_ref().map_or(0, |r| r.len()) {
                    g.stats.replayed_steps += 1;
                } else {
                    // Fewer segments than recorded: everything ran; record the next step.
                    g.stats.diverged_steps += 1;
                    g.record = None;
                }
            }
            Mode::Eager | Mode::Off => {}
        }
        if let Some(r) = g.record.take() {
            let kind = g.kind;
            g.records.insert(kind, r);
        }
        self.mem.deferred.store(false, std::sync::atomic::Ordering::Relaxed);
    }

    /// A kernel launch: true when it is held back for its segment's graph; false when the
    /// caller launches it now (no step bracketed, the step being recorded, or run eagerly
    /// after leaving the record).
    pub(super) fn graph_launch(
        &self,
        family: Family,
        index: usize,
        name: &'static str,
        dims: Dims,
        params: &mut [*mut c_void],
    ) -> bool {
        let Some(g) = &self.graphs else { return false };
        let mut g = g.lock().unwrap();
        let g = &mut *g;
        match &mut g.mode {
            Mode::Off | Mode::Eager => return false,
            Mode::Recording { open, .. } => {
                open.push(LaunchRecord::new(family, index, name, dims, params));
                return false;
            }
            Mode::Replaying { seg, pos } => {
                let record = g.record.as_mut().expect("replaying without a record");
                if let Some(s) = record.get_mut(*seg)
                    && let Some(r) = s.launches.get_mut(*pos)
                    && r.same_launch(family, index, &dims)
                {
                    if !r.has_args(params) {
                        r.set_args(params);
                        s.changed.push(*pos);
                    }
                    *pos += 1;
                    self.mem.deferred.store(true, std::sync::atomic::Ordering::Relaxed);
                    return true;
                }
            }
        }
        // Another kernel or grid than recorded here.
        self.leave_record(g);
        false
    }

    /// A host interaction: the open segment ends (recording), or its graph runs (replaying).
    pub(super) fn graph_boundary(&self) {
        if let Some(g) = &self.graphs {
            self.close_segment(&mut g.lock().unwrap());
        }
    }

    fn close_segment(&self, g: &mut Graphs) {
        match &mut g.mode {
            Mode::Recording { segments, open } => {
                if !open.is_empty() {
                    segments.push(Segment { launches: std::mem::take(open), changed: Vec::new(), exec: None });
                }
            }
            Mode::Replaying { seg, pos } => {
                if *pos == 0 {
                    return;
                }
                let s = &mut g.record.as_mut().expect("replaying without a record")[*seg];
                if *pos < s.launches.len() {
                    // The segment ended early.
                    self.leave_record(g);
                    return;
                }
                self.run_segment(s);
                g.stats.graph_launches += 1;
                g.stats.graphed_kernels += s.launches.len() as u64;
                g.stats.patched_kernels += s.changed.len() as u64;
                s.changed.clear();
                *seg += 1;
                *pos = 0;
                self.mem.deferred.store(false, std::sync::atomic::Ordering::Relaxed);
            }
            Mode::Off | Mode::Eager => {}
        }
    }

    /// The step differs from the record: run what was held back, one launch at a time, and
    /// the rest of the step eagerly; the next step records afresh.
    fn leave_record(&self, g: &mut Graphs) {
        if let (Mode::Replaying { seg, pos }, Some(record)) = (&g.mode, &mut g.record)
            && let Some(s) = record.get_mut(*seg)
        {
            for r in &mut s.launches[..*pos] {
                self.engine_launch(r);
            }
        }
        g.mode = Mode::Eager;
        g.record = None;
        g.stats.diverged_steps += 1;
        self.mem.deferred.store(false, std::sync::atomic::Ordering::Relaxed);
    }

    /// Run a segment whose launches all matched: its graph (arguments updated first) on a
    /// GPU, its kernels in order on the emulator.
    fn run_segment(&self, s: &mut Segment) {
        match &self.engine {
            Engine::Driver(d) => {
                let exec = s.exec.as_ref().expect("a recorded segment without its graph");
                for &i in &s.changed {
                    d.patch_graph_kernel(exec, i, &mut s.launches[i]);
                }
                d.launch_graph(exec);
            }
            Engine::Emulator(_) => {
                for r in &mut s.launches {
                    self.engine_launch(r);
                }
            }
        }
    }

    fn engine_launch(&self, r: &mut LaunchRecord) {
        let (family, index, name, dims) = (r.family, r.index, r.name, r.dims);
        self.launch_now(family, index, name, dims, r.params());
    }
}
