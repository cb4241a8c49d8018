//! The run's last phase: the final checkpoint, the trace gathered from every rank, and either
//! the stop message (a run cut short by a signal) or the final grid and summary.json.

use super::Run;
use crate::backend::Backend;
use crate::comm::PeerFailed;
use crate::record::{LineType, StoppedRecord};
use crate::report::trace::Trace;
use crate::train::summary::{RunEnd, build_summary};
use anyhow::{Context, Result, bail};
use std::path::Path;

/// The end of the run's last line with `--trace`: the trace is written outside the run's
/// folder, so say where, and what reads it (`trace-report` reports on the exchange: only a
/// trace with one, `exchanged`, has something for it).
fn where_the_trace_went(trace: &Path, exchanged: bool) -> String {
    let report = match exchanged {
        true => format!("`dcgan-train trace-report {}`, or ", trace.display()),
        false => String::new(),
    };
    format!("; trace of every rank in {} ({report}open it in ui.perfetto.dev)", trace.display())
}

impl<B: Backend> Run<'_, B> {
    /// Everything after the last step; `train_seconds`: the training loop's wall time.
    pub(super) fn finish(mut self, train_seconds: f64) -> Result<()> {
        self.trainer.finish_pending();
        let ck_dir = self.save_checkpoint();
        self.write_trace()?;
        self.gather_pipeline_stages()?;
        // A stop that came with the last step is the run's end, not an interruption: resuming
        // would find nothing left to run.
        let max_steps = self.args.max_steps.unwrap_or(u64::MAX);
        let finished = self.trainer.step >= max_steps
            || self.progress.epoch >= self.args.epoch_limit().unwrap_or(u64::MAX)
            || self.facts.early_stop.is_some();
        let ck = ck_dir.as_ref().map(|d| d.display().to_string()).unwrap_or_default();
        if self.stopped && !finished {
            return self.stopped_before_the_end(&ck);
        }
        let Some(out) = self.outputs.as_mut() else { return Ok(()) };
        let (job, side) = (self.job, self.args.model.image_size);
        let (final_grid, _) = job.or_fail(out.grid("final", &self.trainer.sample(&self.grid_noise), side));
        let f = &mut self.facts;
        f.steps_run = self.trainer.step - self.steps_at_start;
        f.train_seconds = train_seconds;
        f.wall_seconds = self.started.elapsed().as_secs_f64();
        let end = RunEnd { data: &self.data.description, facts: f, last: &self.last, final_grid: &final_grid };
        let summary = build_summary(self.args, job, &self.settings, &self.trainer, end);
        job.or_fail(out.summary(&summary));
        let lines: Vec<String> =
            [summary.step_line(), summary.exchange_line(), summary.graphs_line()].into_iter().flatten().collect();
        for line in &lines {
            eprintln!("{line}");
        }
        if !lines.is_empty() {
            job.or_fail(out.text(self.trainer.step, "summary", &lines.join("\n\n")));
        }
        let ck_name = ck_dir.as_ref().and_then(|d| d.file_name()).map(|n| n.to_string_lossy().to_string());
        let parallel = &self.args.parallel;
        let exchanged = parallel.exchanges_gradients(job.world.size);
        let trace = parallel.trace.as_deref().map(|p| where_the_trace_went(p, exchanged));
        let best = crate::checkpoint::best::read(&out.dir.join("checkpoints")).map_or(String::new(), |b| {
            format!(", checkpoints/best ({}: FID {:.3} after epoch {})", b.checkpoint, b.fid, b.epoch + 1)
        });
        eprintln!(
            "done: {} steps in {:.1} s; in {}: summary.json, metrics.jsonl, samples/, checkpoints/{}{best}{}",
            f.steps_run,
            f.wall_seconds,
            out.dir.display(),
            ck_name.unwrap_or_default(),
            trace.unwrap_or_default()
        );
        Ok(())
    }

    /// `--pipeline`: each stage's share of its steps spent waiting for the other, and its
    /// median busy time per step, on rank 0. Collective.
    fn gather_pipeline_stages(&mut self) -> Result<()> {
        if !self.args.parallel.pipeline {
            return Ok(());
        }
        let f = &self.facts;
        let total: f64 = f.step_ms.iter().sum();
        let waited: f64 = f.step_ms.iter().zip(&f.compute_ms).map(|(s, c)| s - c).sum();
        let mine = [(waited / total.max(1e-9)) as f32, crate::train::summary::median(&f.compute_ms) as f32];
        if let Some(all) = crate::train::ddp::sync::gather_f32(self.job, &mine)? {
            self.facts.pipeline_stages = all.iter().map(|v| (v[0] as f64, v[1] as f64)).collect();
        }
        Ok(())
    }

    /// Every rank's part of the trace, merged by rank 0 into `--trace`.
    fn write_trace(&mut self) -> Result<()> {
        let Some(path) = &self.args.parallel.trace else { return Ok(()) };
        let parts = self.job.comm.gather_bytes(self.trainer.timeline.trace.to_json_events())?;
        if let Some(parts) = parts {
            let written =
                Trace::write_merged(path, &parts).with_context(|| format!("cannot write --trace {}", path.display()));
            self.job.or_fail(written);
        }
        Ok(())
    }

    /// A signal ended the run before its end: say (and record) how to continue from `ck`.
    fn stopped_before_the_end(mut self, ck: &str) -> Result<()> {
        let (step, ranks) = (self.trainer.step, self.job.world.size);
        let Some(out) = self.outputs.as_mut() else {
            return Err(PeerFailed.into());
        };
        let resume = crate::train::resume::resume_command(ranks, &out.dir);
        // Also in the run itself: mpiexec may stop relaying output while the job ends.
        let rec = StoppedRecord { kind: LineType::Stopped, step, checkpoint: ck.to_string(), resume: resume.clone() };
        self.job.or_fail(out.stopped(&rec));
        bail!("stopped by a signal after step {step}; checkpoint in {ck}: continue with {resume}");
    }

    /// A stop that could not wait dropped step `dropped` (1-based): say (and record) where the
    /// run can go on from, and end it. With other ranks the job is aborted: they are in the
    /// middle of the step, in collectives this rank will not join.
    pub(super) fn dropped_step(&mut self, dropped: u64) -> anyhow::Error {
        let ranks = self.job.world.size;
        let Some(out) = self.outputs.as_mut() else { return PeerFailed.into() };
        let last = crate::checkpoint::resolve(&out.dir).ok();
        let ck = last.as_ref().map(|d| d.display().to_string()).unwrap_or_default();
        let then = match last {
            Some(_) => format!("continue with {}", crate::train::resume::resume_command(ranks, &out.dir)),
            None => format!("no checkpoint was written yet: start again with --out {}", out.dir.display()),
        };
        let rec =
            StoppedRecord { kind: LineType::Stopped, step: dropped - 1, checkpoint: ck.clone(), resume: then.clone() };
        self.job.or_fail(out.stopped(&rec));
        let grace = crate::train::interrupt::GRACE.as_secs_f64();
        let at = if ck.is_empty() { String::new() } else { format!("; the last checkpoint is {ck}") };
        let e = anyhow::anyhow!(
            "stopped by a signal during step {dropped}, which was dropped (still running {grace} s after the signal){at}: {then}"
        );
        if ranks > 1 {
            self.job.fail(e);
        }
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trace_report_is_offered_only_for_a_trace_with_an_exchange() {
        let p = Path::new("runs/t.json");
        let with = where_the_trace_went(p, true);
        assert!(with.contains("runs/t.json (`dcgan-train trace-report runs/t.json`, or open it"), "{with}");
        let without = where_the_trace_went(p, false);
        assert!(without.contains("runs/t.json (open it in ui.perfetto.dev)"), "{without}");
    }
}
