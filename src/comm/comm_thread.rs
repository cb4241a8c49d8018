//! The comm thread's work loop: takes commands from the `CommHandle` in order, runs buckets
//! fragment by fragment and the blocking helpers on the transport, answers status queries when
//! idle, and ends the job when a collective fails or stalls.

use crate::codec::bf16;
use crate::comm::allreduce::select::SelectionTable;
use crate::comm::allreduce::{Algorithm, allreduce_mean};
use crate::comm::collectives;
use crate::comm::cpu_clock::thread_cpu_time;
use crate::comm::handle::{BucketDone, BucketRequest, Command, HelperOp, HelperOut, Shared, fragments};
use crate::comm::onebit::{self, OneBitStage, Residuals};
use crate::comm::options::Wire;
use crate::comm::stall::{self, STALL_EXIT_CODE};
use crate::comm::transport::counting::Counting;
use crate::comm::transport::group::Group;
use crate::comm::transport::{
    CommError, TAG_HELPER, TAG_PIPELINE, TAG_RESERVED, Tag, Transport, f32_bytes, f32s_from_bytes,
};
use anyhow::{anyhow, bail};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// What a 1-bit bucket reports as its algorithm.
pub const ONE_BIT_LABEL: &str = "1bit-stripes";

/// How often an idle comm thread wakes to answer status queries and check the abort flag.
const IDLE_POLL: Duration = Duration::from_millis(20);

pub(crate) struct CommThread {
    pub t: Box<dyn Transport>,
    pub table: SelectionTable,
    pub fragment_bytes: usize,
    pub stall_timeout: Duration,
    /// End the job on a failure (always under MPI); false lets tests see the error instead.
    pub abort_on_failure: bool,
    pub shared: Arc<Shared>,
    /// Set after a failure when not aborting: every later command fails with it.
    pub failed: Option<String>,
    /// How gradient buckets travel; the helper collectives always go as f32.
    pub wire: Wire,
    /// `--wire bf16` packed here: the fragment's values as bf16.
    pub bf16_stage: Vec<u16>,
    /// `--wire 1bit`: each bucket's error feedback on this rank, by bucket id.
    pub residuals: HashMap<u32, Residuals>,
    pub onebit_stage: OneBitStage,
    /// A nap before each fragment of a gradient bucket (`fault_hooks::comm_fragment_nap`).
    pub test_nap: Option<Duration>,
    /// The ranks gradient buckets are averaged among (None: all): one stage's replicas in
    /// pipelines side by side.
    pub bucket_group: Option<Vec<usize>>,
}

impl CommThread {
    pub fn run(mut self, rx: Receiver<Command>) {
        loop {
            let cmd = match rx.recv_timeout(IDLE_POLL) {
                Ok(c) => c,
                Err(RecvTimeoutError::Timeout) => {
                    let code = self.shared.abort.load(Ordering::Relaxed);
                    if code != 0 {
                        self.t.abort(code);
                    }
                    self.t.serve_status();
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => {
                    // The handle was dropped without shutdown: this rank is failing. Finalizing
                    // could block on ranks that are still in collectives; leave MPI as it is.
                    std::mem::forget(self.t);
                    return;
                }
            };
            match cmd {
                Command::Bucket { req, done } => {
                    let r = self.bucket(req);
                    let _ = done.send(r);
                }
                Command::Helper { op, done } => {
                    let r = self.helper(op);
                    let _ = done.send(r);
                }
                Command::Abort { code } => self.t.abort(code),
                Command::Configure { cfg, done } => {
                    let r = self.configure(cfg);
                    let _ = done.send(r);
                }
                Command::Shutdown { done } => {
                    drop(self.t); // MPI_Finalize
                    let _ = done.send(());
                    return;
                }
            }
        }
    }

    /// Agree on `cfg`'s table with every rank (each host reads its own tuning file), then use
    /// it with `cfg`'s fragments and wire.
    fn configure(&mut self, cfg: crate::comm::CommConfig) -> anyhow::Result<SelectionTable> {
        self.begin("agreeing on the allreduce table")?;
        let table = cfg.policy.table_on(self.t.size(), self.t.hosts());
        let table = collectives::agree(&mut *self.t, table, crate::comm::transport::TAG_SETUP);
        self.end();
        let table = table?;
        (self.table, self.fragment_bytes, self.wire) = (table.clone(), cfg.fragment_bytes, cfg.wire);
        Ok(table)
    }

    fn begin(&mut self, label: &str) -> anyhow::Result<()> {
        if let Some(f) = &self.failed {
            bail!("communication failed earlier: {f}");
        }
        let seq = self.t.activity().enter(label);
        self.shared.current_seq.store(seq, Ordering::Relaxed);
        let since = self.shared.base.elapsed().as_nanos() as u64 + 1;
        self.shared.busy_since_ns.store(since, Ordering::Relaxed);
        Ok(())
    }

    fn end(&mut self) {
        self.t.activity().leave();
        self.shared.busy_since_ns.store(0, Ordering::Relaxed);
    }

    /// Turn a failed collective into the job's end (or, in tests, an error).
    fn fail(&mut self, e: CommError) -> anyhow::Error {
        let msg = match &e {
            CommError::Aborted { code } => self.t.abort(*code),
            CommError::Stalled { .. } => stall::report(&mut *self.t, &e, self.stall_timeout),
            other => {
                let label = self.t.activity().label.clone();
                format!("rank {}: communication failed in {label}: {other}", self.t.rank())
            }
        };
        if self.abort_on_failure {
            eprintln!("{msg}");
            let code = if matches!(e, CommError::Stalled { .. }) { STALL_EXIT_CODE } else { 1 };
            self.t.abort(code);
        }
        self.shared.busy_since_ns.store(0, Ordering::Relaxed);
        self.failed = Some(msg.lines().next().unwrap_or_default().to_string());
        anyhow!(msg)
    }

    /// Average `data` fragment by fragment with the algorithm for the fragment size.
    fn bucket(&mut self, mut req: BucketRequest) -> anyhow::Result<BucketDone> {
        let started = Instant::now();
        let n = req.data.as_mut_slice().len();
        let frags = fragments(n, self.fragment_bytes);
        // Picked by the fragment's f32 size whatever the wire (as `scaling::cost` models it).
        let algorithm = self.table.pick(frags[0].len() * 4);
        let wire = if req.exact { Wire::F32 } else { self.wire };
        let tag = (req.id % TAG_RESERVED as u32) as Tag;
        self.begin(&format!(
            "bucket {} \"{}\" ({} bytes, {} fragment(s), {algorithm})",
            req.id,
            req.label,
            n * 4,
            frags.len()
        ))?;
        let (mut busy, mut cpu, mut sent) = (Duration::ZERO, Duration::ZERO, 0);
        if wire == Wire::OneBit && self.residuals.get(&req.id).is_none_or(|r| r.own.len() != n) {
            self.residuals.insert(req.id, Residuals::zeros(n));
        }
        for f in &frags {
            if let Some(hook) = req.before_fragment.as_mut() {
                hook(f.clone());
            }
            if let Some(nap) = self.test_nap.filter(|_| !req.exact) {
                std::thread::sleep(nap);
            }
            let start = Instant::now();
            let cpu_start = thread_cpu_time();
            // One fragment at a time: the owner may be reading the ones already averaged.
            let data = req.data.fragment_mut(f.clone());
            let mut counted = Counting::new(&mut *self.t);
            let mut grouped;
            let among: &mut dyn Transport = match &self.bucket_group {
                Some(members) => {
                    grouped = Group::new(&mut counted, members);
                    &mut grouped
                }
                None => &mut counted,
            };
            let r = match wire {
                Wire::F32 => allreduce_mean(among, algorithm, data, tag),
                Wire::Bf16 if req.packed => allreduce_mean(among, algorithm, bf16::packed_in_mut(data), tag),
                Wire::Bf16 => {
                    let stage = &mut self.bf16_stage;
                    stage.resize(data.len(), 0);
                    bf16::encode_into(data, stage);
                    let r = allreduce_mean(among, algorithm, stage, tag);
                    bf16::decode_into(stage, data);
                    r
                }
                Wire::OneBit if req.packed => {
                    let res = self.residuals.get_mut(&req.id).expect("made above").range_mut(f.clone());
                    onebit::allreduce_mean_packed(among, data, res.stripe, &mut self.onebit_stage, tag).map(|_| ())
                }
                Wire::OneBit => {
                    let res = self.residuals.get_mut(&req.id).expect("made above").range_mut(f.clone());
                    onebit::allreduce_mean(among, data, res, &mut self.onebit_stage, tag).map(|_| ())
                }
            };
            sent += counted.sent;
            cpu += thread_cpu_time().saturating_sub(cpu_start);
            let end = Instant::now();
            if let Err(e) = r {
                return Err(self.fail(e));
            }
            busy += end - start;
            if let Some(hook) = req.after_fragment.as_mut() {
                hook(f.clone());
            }
        }
        let residual_sq = (wire == Wire::OneBit).then(|| self.residuals[&req.id].sum_of_squares());
        let how = if wire == Wire::OneBit { ONE_BIT_LABEL } else { algorithm.name() };
        self.end();
        Ok(BucketDone {
            data: req.data,
            algorithm: how,
            bytes: n * 4,
            sent,
            residual_sq,
            started,
            finished: Instant::now(),
            busy,
            cpu,
        })
    }

    fn helper(&mut self, op: HelperOp) -> anyhow::Result<HelperOut> {
        // This rank's own state: no other rank takes part.
        let op = match op {
            HelperOp::Residuals => return Ok(HelperOut::Residuals(self.residuals.clone().into_iter().collect())),
            HelperOp::SetResiduals(r) => {
                self.residuals = r.into_iter().collect();
                return Ok(HelperOut::Unit);
            }
            HelperOp::SetBucketGroup(members) => {
                self.bucket_group = Some(members);
                return Ok(HelperOut::Unit);
            }
            other => other,
        };
        let label = match &op {
            HelperOp::MeanF32(v) => format!("allreduce_mean of {} floats", v.len()),
            HelperOp::MeanF64(v) => format!("allreduce_mean_f64 of {} values", v.len()),
            HelperOp::BroadcastF32(root, _) => format!("broadcast_f32 from rank {root}"),
            HelperOp::BroadcastBytes(root, _) => format!("broadcast_bytes from rank {root}"),
            HelperOp::GatherBytes(_) => "gather_bytes to rank 0".to_string(),
            HelperOp::Barrier => "barrier".to_string(),
            HelperOp::SendF32(to, v) => format!("pipeline send of {} floats to rank {to}", v.len()),
            HelperOp::RecvF32(from) => format!("pipeline receive from rank {from}"),
            HelperOp::Residuals | HelperOp::SetResiduals(_) | HelperOp::SetBucketGroup(_) => {
                unreachable!("answered above")
            }
        };
        self.begin(&label)?;
        let mut counted = Counting::new(&mut *self.t);
        let t = &mut counted;
        let r = match op {
            HelperOp::MeanF32(mut v) => {
                let frags = fragments(v.len(), self.fragment_bytes);
                let algo: Algorithm = self.table.pick(frags[0].len() * 4);
                frags
                    .into_iter()
                    .try_for_each(|f| allreduce_mean(t, algo, &mut v[f], TAG_HELPER))
                    .map(|_| HelperOut::F32(v))
            }
            HelperOp::MeanF64(v) => collectives::mean_f64(t, &v, TAG_HELPER).map(HelperOut::F64),
            HelperOp::BroadcastF32(root, v) => {
                let mut bytes = f32_bytes(&v).to_vec();
                collectives::broadcast(t, root, &mut bytes, TAG_HELPER).map(|_| HelperOut::F32(f32s_from_bytes(&bytes)))
            }
            HelperOp::BroadcastBytes(root, mut v) => {
                collectives::broadcast(t, root, &mut v, TAG_HELPER).map(|_| HelperOut::Bytes(v))
            }
            HelperOp::GatherBytes(v) => collectives::gather(t, v, TAG_HELPER).map(HelperOut::Gathered),
            HelperOp::Barrier => collectives::barrier(t, TAG_HELPER).map(|_| HelperOut::Unit),
            HelperOp::SendF32(to, v) => t.send(to, TAG_PIPELINE, f32_bytes(&v)).map(|_| HelperOut::Unit),
            HelperOp::RecvF32(from) => t.recv_vec(from, TAG_PIPELINE).map(|b| HelperOut::F32(f32s_from_bytes(&b))),
            HelperOp::Residuals | HelperOp::SetResiduals(_) | HelperOp::SetBucketGroup(_) => {
                unreachable!("answered above")
            }
        };
        let sent = counted.sent;
        self.shared.helper_sent.fetch_add(sent, Ordering::Relaxed);
        match r {
            Ok(out) => {
                self.end();
                Ok(out)
            }
            Err(e) => Err(self.fail(e)),
        }
    }
}
