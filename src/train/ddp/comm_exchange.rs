//! The multi-rank `Exchange`: each bucket is copied to host memory as soon as backward
//! completes it and handed to the comm thread; the step later waits for each bucket in
//! submission order, copies the average back and runs that bucket's Adam at once. Both
//! copies go fragment by fragment (the comm thread's fragments), so that the device-to-host
//! copy of fragment k+1, the allreduce of fragment k and the copy back of fragment k-1
//! overlap.

use super::buckets::Bucket;
use super::device_packing::PackedBucket;
use super::exchange::{BucketStats, Exchange, ExchangeStats, NetId, Update};
use super::fragment_progress::FragmentProgress;
use super::over_ranks::MetricsOverRanks;
use crate::backend::{Backend, HostBuffer, StageWaiter, View, ViewMut};
use crate::comm::{BucketRequest, CommHandle, HostData, Ticket, Wire};
use crate::nn::params::ParamStore;
use crate::train::timeline::{Timeline, Track};
use anyhow::Result;
use std::cell::RefCell;
use std::ops::Range;
use std::rc::Rc;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// A bucket's host memory lent to the comm thread while it is in flight. The exchange owns
/// the memory; while the bucket is in flight it only has the device copy back fragments the
/// comm thread has reported averaged (and no longer touches). `alive` is the owner's: the
/// exchange waits for its buckets before it frees their memory (its `Drop`), and a fragment
/// asked for after the owner is gone is a panic, not a write into freed memory.
struct Lent {
    ptr: *mut f32,
    len: usize,
    alive: Weak<()>,
}

impl Lent {
    fn check_alive(&self) {
        assert!(self.alive.strong_count() > 0, "internal error: a gradient bucket's memory was freed while in flight");
    }
}

// While the bucket is in flight the comm thread alone writes the memory, one fragment at a
// time; the exchange only reads fragments the comm thread reported done.
unsafe impl Send for Lent {}

impl HostData for Lent {
    fn as_mut_slice(&mut self) -> &mut [f32] {
        self.check_alive();
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
    // No reference to the whole bucket: the exchange reads averaged fragments meanwhile.
    fn fragment_mut(&mut self, r: Range<usize>) -> &mut [f32] {
        self.check_alive();
        assert!(r.start <= r.end && r.end <= self.len, "fragment {r:?} of {}", self.len);
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(r.start), r.len()) }
    }
}

/// Buckets of one network: their plan, and where each one is this step.
struct NetBuckets<H> {
    plan: Vec<Bucket>,
    /// Bucket index of each stage.
    bucket_of_stage: Vec<usize>,
    /// Groups still missing for each bucket this step.
    missing: Vec<usize>,
    /// Complete buckets not yet submitted (`--no-overlap`).
    held: Vec<usize>,
    in_flight: Vec<InFlight>,
    /// Dropped just before `host` (fields drop in order): what the comm thread's `Lent` checks.
    alive: Arc<()>,
    /// Host memory of each bucket ([bucket floats], pinned on CUDA), made once.
    host: Vec<H>,
    /// The comm thread's fragments of each bucket (element ranges within it), made once.
    fragments: Vec<Vec<Range<usize>>>,
    /// `--wire 1bit`: each bucket's residuals' sum of squares after its last exchange.
    residual_sq: Vec<Option<f64>>,
}

impl<H: HostBuffer> NetBuckets<H> {
    fn new<B: Backend<Host = H>>(be: &B, comm: &CommHandle, plan: Vec<Bucket>, stages: usize) -> Result<Self> {
        let mut bucket_of_stage = vec![usize::MAX; stages];
        for (b, bucket) in plan.iter().enumerate() {
            for &s in &bucket.stages {
                bucket_of_stage[s] = b;
            }
        }
        let missing = plan.iter().map(|b| b.stages.len()).collect();
        let host = plan.iter().map(|b| be.alloc_host(b.range.len())).collect::<Result<_>>()?;
        let fragments = plan.iter().map(|b| comm.fragments_of(b.range.len())).collect();
        let alive = Arc::new(());
        let (held, in_flight) = (Vec::new(), Vec::new());
        let residual_sq = vec![None; plan.len()];
        Ok(NetBuckets { plan, bucket_of_stage, missing, held, in_flight, alive, host, fragments, residual_sq })
    }
}

/// A submitted bucket.
struct InFlight {
    bucket: usize,
    ticket: Ticket,
    /// The step that submitted it.
    step: u64,
    /// Sent as f32 whatever the wire (the 1-bit warm-up).
    exact: bool,
    /// Quantized by the device (`device_packing`): what comes back is encoded.
    packed: bool,
    /// Bytes copied to the host (and back): the encodings' where packed.
    copied: usize,
    /// The middle of its staging out: where the trace's hand-off arrow starts.
    staged_at: Instant,
    /// Each fragment (elements of the bucket) and the waiter of its copy to the host.
    staged: Vec<(Range<usize>, StageWaiter)>,
    progress: Arc<FragmentProgress>,
}

/// Copy averaged fragments `first..` of `bucket` (`fragments`) from its host memory back
/// into the gradients; packed ones into the device's encodings, decoded there.
fn copy_back<B: Backend>(
    be: &B,
    host: &B::Host,
    grad: &mut B::Buf,
    bucket: &Bucket,
    (first, fragments): (usize, &[(Range<usize>, StageWaiter)]),
    mut packed: Option<&mut PackedBucket<B>>,
) -> Result<()> {
    for (k, (f, _)) in (first..).zip(fragments) {
        match packed.as_deref_mut() {
            Some(pk) => {
                be.stage_in(host, f.start, pk.encodings_mut(k, f))?;
                pk.unpack(be, k, grad, &bucket.range);
            }
            None => {
                let dst = ViewMut::range(grad, bucket.range.start + f.start..bucket.range.start + f.end);
                be.stage_in(host, f.start, dst)?;
            }
        }
    }
    Ok(())
}

/// How long the training thread waits for the next fragment before it falls back to waiting
/// for the whole bucket (where the stall watchdog lives).
const FRAGMENT_PATIENCE: Duration = Duration::from_secs(1);

/// The exchange of several ranks: gradient buckets averaged by the comm thread.
pub struct CommExchange<B: Backend> {
    comm: Rc<CommHandle>,
    nets: [NetBuckets<B::Host>; 2],
    metrics: MetricsOverRanks,
    /// Submit each bucket the moment it is complete (false: `--no-overlap`).
    overlap: bool,
    /// Gradients of steps before this one travel exact (`--wire-warmup-steps`).
    compressed_from: u64,
    /// The last step that submitted a bucket, and whether it was compressed (counts
    /// `stats.sent_steps`).
    last_submit: Option<u64>,
    /// The wire packed on the device (`device_packing`): per network and bucket (None: the
    /// comm thread packs it, or the wire is f32).
    packed: [Vec<Option<PackedBucket<B>>>; 2],
    /// The packed buckets' column sums of squares as of their last exchange finished, and
    /// the host memory they are downloaded into each step.
    packed_sums: Option<B::Buf>,
    packed_sums_host: RefCell<Vec<f32>>,
    pub stats: ExchangeStats,
}

/// A step that fails (a diverging loss, say) returns while buckets may still be averaged
/// into this exchange's host memory: wait for each before that memory is freed. The comm
/// thread's stall detection and the handle's watchdog bound the wait.
impl<B: Backend> Drop for CommExchange<B> {
    fn drop(&mut self) {
        for nb in &mut self.nets {
            for flight in nb.in_flight.drain(..) {
                let _ = self.comm.wait(flight.ticket);
            }
        }
    }
}

impl<B: Backend> CommExchange<B> {
    /// `buckets` from `plan_buckets`; `stages` = (G's, D's) stage counts; `pack`: the wire the
    /// backend packs beside the gradients (`Backend::packs_wire`; f32: none).
    pub fn new(
        be: &B,
        comm: Rc<CommHandle>,
        buckets: [Vec<Bucket>; 2],
        stages: (usize, usize),
        overlap: bool,
        pack: Wire,
    ) -> Result<Self> {
        let [g, d] = buckets;
        let mut stats = ExchangeStats::default();
        for b in g.iter().chain(&d) {
            stats.buckets.push(BucketStats {
                label: b.label,
                algorithm: comm.algorithm_for(b.bytes()).name(),
                comm_busy: Duration::ZERO,
                exposed: Duration::ZERO,
            });
        }
        let nets = [NetBuckets::new(be, &comm, g, stages.0)?, NetBuckets::new(be, &comm, d, stages.1)?];
        // A pipeline stage's buckets are averaged among its replicas alone.
        let (ranks, mut sums) = (comm.bucket_ranks(), 0);
        let mut packed_net = |nb: &NetBuckets<B::Host>| -> Result<Vec<_>> {
            nb.plan
                .iter()
                .zip(&nb.fragments)
                .map(|(b, f)| PackedBucket::new(be, pack, b.range.len(), f, ranks, &mut sums))
                .collect()
        };
        let packed = [packed_net(&nets[0])?, packed_net(&nets[1])?];
        let packed_sums = if sums > 0 { Some(be.alloc(sums)?) } else { None };
        Ok(CommExchange {
            metrics: MetricsOverRanks::new(comm.clone()),
            comm,
            nets,
            overlap,
            compressed_from: 0,
            last_submit: None,
            packed,
            packed_sums,
            packed_sums_host: RefCell::new(vec![0.0; sums]),
            stats,
        })
    }

    /// Stage bucket `b` out of the gradient buffer, one copy per fragment, and hand it to
    /// the comm thread, which waits for each fragment's copy before averaging it and reports
    /// each averaged fragment.
    fn submit(&mut self, be: &B, net: NetId, store: &ParamStore<B>, b: usize, tl: &mut Timeline) {
        let nb = &mut self.nets[net as usize];
        let bucket = &nb.plan[b];
        let exact = tl.step < self.compressed_from;
        let mut packed = self.packed[net as usize][b].as_mut().filter(|_| !exact);
        let t0 = Instant::now();
        if let Some(pk) = packed.as_deref_mut() {
            pk.pack(be, &store.grad, &bucket.range);
        }
        let (mut staged, mut copied) = (Vec::new(), 0);
        for (k, f) in nb.fragments[b].iter().enumerate() {
            let src = match packed.as_deref() {
                Some(pk) => pk.encodings(k, f),
                None => View::range(&store.grad, bucket.range.start + f.start..bucket.range.start + f.end),
            };
            copied += 4 * src.len;
            match be.stage_out(src, &mut nb.host[b], f.start) {
                Ok(w) => staged.push((f.clone(), w)),
                Err(e) => self.comm.abort(1, &format!("staging {}: {e:#}", bucket.label)),
            }
        }
        let t1 = Instant::now();
        tl.span_with(Track::CopyStream, "device-to-host", bucket.label, t0, t1, copied, "");
        let for_comm = staged.clone();
        let (progress, sender) = FragmentProgress::new();
        let packed = packed.is_some();
        if self.last_submit != Some(tl.step) {
            self.last_submit = Some(tl.step);
            self.stats.sent_steps[usize::from(!exact)] += 1;
        }
        let (ptr, len) = nb.host[b].raw_parts();
        let ticket = self.comm.submit(BucketRequest {
            id: bucket.id,
            label: bucket.label.to_string(),
            data: Box::new(Lent { ptr, len, alive: Arc::downgrade(&nb.alive) }),
            before_fragment: Some(Box::new(move |f| {
                for (r, w) in &for_comm {
                    if r.start < f.end && f.start < r.end {
                        w();
                    }
                }
            })),
            after_fragment: Some(Box::new(move |f| sender.averaged(f.end))),
            exact,
            packed,
        });
        let staged_at = t0 + (t1 - t0) / 2;
        let flight = InFlight { bucket: b, ticket, step: tl.step, exact, packed, copied, staged_at, staged, progress };
        nb.in_flight.push(flight);
    }

    /// Wait for one submitted bucket, copy its average back fragment by fragment and run
    /// its Adam.
    fn finish_one(
        &mut self,
        be: &B,
        net: NetId,
        store: &mut ParamStore<B>,
        flight: InFlight,
        u: Update,
        tl: &mut Timeline,
    ) {
        let InFlight { bucket: b, ticket, step, exact, packed, copied, staged_at, staged, progress } = flight;
        // On an asynchronous device the bucket may still be computing or copying: that
        // wait is the device's work, not communication, so it is timed apart.
        let t0 = Instant::now();
        for (_, w) in &staged {
            w();
        }
        let t_ready = Instant::now();
        // Each fragment goes back as soon as it is averaged, while the next is averaged.
        let nb = &self.nets[net as usize];
        let (host, bucket) = (&nb.host[b], &nb.plan[b]);
        let mut device_side = self.packed[net as usize][b].as_mut().filter(|_| packed);
        let mut back = |first: usize, fragments: &[(Range<usize>, StageWaiter)], grad: &mut B::Buf| {
            if let Err(e) = copy_back(be, host, grad, bucket, (first, fragments), device_side.as_deref_mut()) {
                self.comm.abort(1, &format!("staging {} back: {e:#}", bucket.label));
            }
        };
        let mut t_first_back = None;
        let mut returned = 0;
        while returned < staged.len() && progress.wait_for(staged[returned].0.end, FRAGMENT_PATIENCE) {
            t_first_back.get_or_insert_with(Instant::now);
            back(returned, &staged[returned..returned + 1], &mut store.grad);
            returned += 1;
        }
        let done = match self.comm.wait(ticket) {
            Ok(d) => d,
            Err(e) => self.comm.abort(1, &format!("gradient exchange failed: {e:#}")),
        };
        let t1 = Instant::now();
        back(returned, &staged[returned..], &mut store.grad);
        self.stats.device_wait += t_ready - t0;
        self.stats.exposed += t1 - t_ready;
        self.stats.comm_busy += done.busy;
        self.stats.comm_cpu += done.cpu;
        self.stats.bytes += done.bytes as u64;
        self.stats.staged += copied as u64;
        self.stats.sent[usize::from(!exact)] += done.sent;
        if let Some(sq) = done.residual_sq {
            self.nets[net as usize].residual_sq[b] = Some(sq);
        }
        if let (Some(pk), Some(sums)) = (
            self.packed[net as usize][b].as_mut().filter(|_| packed).and_then(PackedBucket::one_bit_mut),
            &mut self.packed_sums,
        ) {
            pk.exchanged(be, sums);
        }
        // The stats list G's buckets, then D's.
        let first_of_net = if net == NetId::D { self.nets[0].plan.len() } else { 0 };
        let per_bucket = &mut self.stats.buckets[first_of_net + b];
        per_bucket.exposed += t1 - t_ready;
        per_bucket.algorithm = done.algorithm;
        per_bucket.comm_busy += done.busy;
        let nb = &mut self.nets[net as usize];
        let bucket = &nb.plan[b];
        tl.span(Track::Compute, "wait-device", bucket.label, t0, t_ready);
        tl.span(Track::Compute, "wait", bucket.label, t_ready, t1);
        let algo = done.algorithm;
        tl.span_of_step(
            step,
            Track::CommThread,
            "allreduce",
            bucket.label,
            done.started,
            done.finished,
            done.bytes,
            algo,
        );
        let mid = done.started + done.finished.saturating_duration_since(done.started) / 2;
        tl.flow_of_step(step, bucket.id, bucket.label, Track::CopyStream, staged_at, Track::CommThread, mid);
        let t2 = Instant::now();
        tl.span_of_step(
            step,
            Track::CopyStream,
            "host-to-device",
            bucket.label,
            t_first_back.unwrap_or(t1),
            t2,
            copied,
            "",
        );
        store.adam(be, bucket.range.clone(), u.lr, u.t);
        tl.span(Track::Compute, "adam", bucket.label, t2, Instant::now());
    }
}

impl<B: Backend> Exchange<B> for CommExchange<B> {
    fn group_ready(&mut self, be: &B, net: NetId, store: &ParamStore<B>, stage: usize, tl: &mut Timeline) {
        let nb = &mut self.nets[net as usize];
        let b = nb.bucket_of_stage[stage];
        nb.missing[b] -= 1;
        if nb.missing[b] == 0 {
            nb.missing[b] = nb.plan[b].stages.len();
            if self.overlap {
                self.submit(be, net, store, b, tl);
            } else {
                nb.held.push(b);
            }
        }
    }

    fn flush(&mut self, be: &B, net: NetId, store: &ParamStore<B>, tl: &mut Timeline) {
        let held = std::mem::take(&mut self.nets[net as usize].held);
        for &b in &held {
            self.submit(be, net, store, b, tl);
        }
        self.nets[net as usize].held = held;
        self.nets[net as usize].held.clear();
    }

    fn finish(&mut self, be: &B, net: NetId, store: &mut ParamStore<B>, u: Update, tl: &mut Timeline) {
        // One at a time, the rest left in place: should finishing one panic, `Drop` still
        // waits for the others before their memory goes.
        while !self.nets[net as usize].in_flight.is_empty() {
            let flight = self.nets[net as usize].in_flight.remove(0);
            self.finish_one(be, net, store, flight, u, tl);
        }
    }

    fn finish_stage(
        &mut self,
        be: &B,
        net: NetId,
        store: &mut ParamStore<B>,
        stage: usize,
        u: Update,
        tl: &mut Timeline,
    ) {
        let nb = &mut self.nets[net as usize];
        let b = nb.bucket_of_stage[stage];
        // Tickets answer in any order; the buckets before this one stay in flight.
        if let Some(at) = nb.in_flight.iter().position(|f| f.bucket == b) {
            let flight = nb.in_flight.remove(at);
            self.finish_one(be, net, store, flight, u, tl);
        }
    }

    fn buckets(&self, net: NetId) -> &[Bucket] {
        &self.nets[net as usize].plan
    }

    fn stats(&self) -> ExchangeStats {
        self.stats.clone()
    }

    fn residuals(&self, be: &B) -> Result<Option<crate::checkpoint::RankResiduals>> {
        let mut held = super::residuals::collect(&self.comm, [&self.nets[0].plan, &self.nets[1].plan])?;
        // Buckets packed on the device: their own residuals are there.
        for ((nb, packed), [own, _]) in self.nets.iter().zip(&self.packed).zip(held.iter_mut().flatten()) {
            for (b, pk) in nb.plan.iter().zip(packed).filter_map(|(b, pk)| Some((b, pk.as_ref()?.one_bit()?))) {
                own[b.range.clone()].copy_from_slice(&pk.residual(be));
            }
        }
        Ok(held)
    }

    fn set_residuals(&mut self, be: &B, r: &crate::checkpoint::RankResiduals) -> Result<()> {
        // Buckets packed on the device take their own residuals there; the comm thread keeps
        // zeros in their place (so that its sums of squares count each value once).
        let mut r = r.clone();
        for ((nb, packed), [own, _]) in self.nets.iter().zip(&mut self.packed).zip(r.iter_mut()) {
            for (b, pk) in nb.plan.iter().zip(packed).filter_map(|(b, pk)| Some((b, pk.as_mut()?.one_bit_mut()?))) {
                pk.set_residual(be, &own[b.range.clone()]);
                own[b.range.clone()].fill(0.0);
            }
        }
        let squares = super::residuals::install(&self.comm, [&self.nets[0].plan, &self.nets[1].plan], &r)?;
        // The norms the metrics report until each bucket travels again.
        for (nb, sq) in self.nets.iter_mut().zip(squares) {
            nb.residual_sq = sq.into_iter().map(Some).collect();
        }
        Ok(())
    }

    fn compress_from(&mut self, step: u64) {
        self.compressed_from = step;
    }

    fn residual_norms(&self, be: &B) -> [Option<f32>; 2] {
        // One small download a step for every bucket packed on the device.
        let mut sums = self.packed_sums_host.borrow_mut();
        if let Some(s) = &self.packed_sums {
            be.download(View::whole(s), &mut sums);
        }
        let norm = |nb: &NetBuckets<B::Host>, packed: &[Option<PackedBucket<B>>]| -> Option<f32> {
            if nb.plan.is_empty() {
                return None;
            }
            let held = nb.residual_sq.iter().copied().sum::<Option<f64>>()?;
            let on_device: f64 =
                packed.iter().flatten().filter_map(PackedBucket::one_bit).map(|pk| pk.residual_sq(&sums)).sum();
            Some((held + on_device).sqrt() as f32)
        };
        [norm(&self.nets[0], &self.packed[0]), norm(&self.nets[1], &self.packed[1])]
    }

    fn exposed(&self) -> Duration {
        self.stats.exposed
    }

    fn start_metrics(&mut self, values: &[f32]) {
        self.metrics.start(values);
    }

    fn finish_metrics(&mut self, out: &mut [f32]) {
        self.metrics.finish(out);
    }
}
