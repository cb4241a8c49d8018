//! `dcgan-train tune-allreduce`: time every algorithm at every message size on the ranks of
//! this job and write the fastest per size range as a rules file for `--allreduce-tuning`.

use crate::comm::allreduce::Algorithm;
use crate::comm::allreduce::select::{NO_LIMIT, Policy, RulesFile, format_rules, large_message_algorithm_on};
use crate::comm::bench::{Case, bench_expected, bench_input, default_iters, fatal, median, time_cases};
use crate::comm::options::{AllreduceChoice, CommOptions};
use crate::comm::{CommConfig, run_on_comm_thread};
use crate::units::format_bytes;
use anyhow::Context;
use std::io::Write;
use std::path::{Path, PathBuf};

/// What `tune-allreduce` measures and where it writes the rules.
#[derive(Clone, Debug)]
pub struct TuneOptions {
    pub comm: CommOptions,
    /// The rules file (CSV: ranks,min_bytes,max_bytes,algorithm).
    pub out: PathBuf,
    /// Message sizes in bytes, multiples of 4 (empty: `default_tune_sizes`).
    pub sizes: Vec<usize>,
    /// Each measurement repeated this many times; the median is kept.
    pub repeats: u64,
    /// Replace only this rank count's lines of an existing `out`.
    pub append: bool,
    /// Replace an existing `out` that is not a rules file.
    pub force: bool,
}

/// Whether rank 0 may write `out`: a place it can write, and no file there but a rules file
/// (which tuning again replaces) unless `force`.
fn may_write_rules(out: &Path, force: bool) -> anyhow::Result<()> {
    crate::report::check_writable(out, "--out")?;
    if out.is_file() && !force && RulesFile::load(out).is_err() {
        anyhow::bail!(
            "--out {} exists and is not a rules file: choose another --out, or pass --force to replace it",
            out.display()
        );
    }
    Ok(())
}

/// A later size keeps the previous size's winner unless another algorithm is this much faster
/// (measurement noise should not split the rules into many tiny ranges).
const KEEP_MARGIN: f64 = 1.05;

/// Default sizes: 4 B to 64 MiB in x2 steps.
pub fn default_tune_sizes() -> Vec<usize> {
    (0..=24).map(|k| 4usize << k).collect()
}

/// Winner per size (sizes ascending, `scores[i][a]` = time of algorithm a at size i), with
/// hysteresis, merged into rules (min_bytes, max_bytes) covering 0..=NO_LIMIT.
pub fn rules_from_scores(sizes: &[usize], algos: &[Algorithm], scores: &[Vec<f64>]) -> Vec<(usize, usize, Algorithm)> {
    let mut winners: Vec<Algorithm> = Vec::with_capacity(sizes.len());
    for row in scores {
        let (best_i, best) = row
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, v)| (i, *v))
            .expect("at least one algorithm");
        let keep = winners.last().and_then(|prev| {
            let i = algos.iter().position(|a| a == prev)?;
            (row[i] <= best * KEEP_MARGIN).then_some(*prev)
        });
        winners.push(keep.unwrap_or(algos[best_i]));
    }
    let mut rules: Vec<(usize, usize, Algorithm)> = Vec::new();
    for (i, &w) in winners.iter().enumerate() {
        match rules.last_mut() {
            Some(last) if last.2 == w => {}
            Some(last) => {
                last.1 = sizes[i] - 1;
                rules.push((sizes[i], NO_LIMIT, w));
            }
            None => rules.push((0, NO_LIMIT, w)),
        }
    }
    rules
}

pub fn run(args: TuneOptions) -> anyhow::Result<()> {
    args.comm.wire.require_f32("tune-allreduce")?;
    let cfg = CommConfig::from_options(&args.comm)?;
    let mut sizes = if args.sizes.is_empty() { default_tune_sizes() } else { args.sizes.clone() };
    sizes.sort();
    sizes.dedup();
    if sizes.first() == Some(&0) {
        sizes.remove(0); // nothing to time: an empty message never communicates
    }
    anyhow::ensure!(!sizes.is_empty(), "tune-allreduce: --sizes has no non-zero size");
    super::bench::ensure_sizes_fit(&sizes, "tune-allreduce")?;
    // Keep the lines for other rank counts when appending; fail early on a broken file.
    let existing = if args.append && args.out.exists() { Some(RulesFile::load(&args.out)?) } else { None };
    let repeats = args.repeats;
    let (out, force) = (args.out.clone(), args.force);
    let checked_out = out.clone();
    let options = format!("{args:?}");
    let (rank, text, table) = run_on_comm_thread(cfg.stall_timeout, move |t, world| {
        crate::comm::collectives::same_options(t, "tune-allreduce", &options, crate::comm::transport::TAG_BENCH)?;
        // Before anything is timed or written: a one-rank rules file would steer nothing.
        super::bench::ensure_two_ranks(t.size(), "tune-allreduce")?;
        let writable = if t.rank() == 0 { may_write_rules(&checked_out, force) } else { Ok(()) };
        crate::comm::collectives::agree(t, writable, crate::comm::transport::TAG_BENCH)?;
        let p = t.size();
        // On one host, or one rank per host, hier is ring or vhd under another name: timing it
        // there could write `hier` into rules that a job of this rank count spread over
        // several hosts would then run untimed.
        let two_levels = large_message_algorithm_on(p, t.hosts()) == Algorithm::Hier;
        let algos: Vec<Algorithm> =
            Algorithm::all().iter().copied().filter(|&a| a != Algorithm::Hier || two_levels).collect();
        let cases: Vec<Case> = algos
            .iter()
            .map(|&a| {
                // Rules select by message size: time whole messages, not fragments.
                let table = Policy::Fixed(a).table(p).expect("fixed policy");
                Case::new(AllreduceChoice::Fixed(a), &table, 0, 0)
            })
            .collect();
        if world.rank == 0 {
            println!(
                "# tune-allreduce: {p} rank(s) on {} host(s), {}; median of {repeats} repeat(s)",
                world.host_count(),
                world.mpi_library
            );
            let names: Vec<String> = algos.iter().map(|a| format!("{:>10}", a.name())).collect();
            println!("# {:>10} {}  fastest (median us per call)", "bytes", names.join(" "));
        }
        let mut scores = Vec::with_capacity(sizes.len());
        for &bytes in &sizes {
            let n = bytes / 4;
            let input: Vec<f32> = (0..n).map(|i| bench_input(t.rank(), i)).collect();
            let expected = bench_expected(p, n);
            let iters = (default_iters(bytes) / 4).max(5);
            let mut per_repeat: Vec<Vec<f64>> = vec![Vec::new(); algos.len()];
            t.activity().enter(&format!("tune-allreduce at {bytes} bytes"));
            for _ in 0..repeats {
                let timings = time_cases(t, &cases, &input, &expected, iters, 2, false)
                    .unwrap_or_else(|e| fatal(t, e, cfg.stall_timeout));
                for (k, tm) in timings.iter().enumerate() {
                    anyhow::ensure!(tm.correct, "tune-allreduce: {} gave a wrong result at {bytes} bytes", algos[k]);
                    per_repeat[k].push(median(&tm.seconds));
                }
            }
            t.activity().leave();
            let row: Vec<f64> = per_repeat.iter().map(|v| median(v)).collect();
            if world.rank == 0 {
                let best = row
                    .iter()
                    .enumerate()
                    .min_by(|a, b| a.1.total_cmp(b.1))
                    .map(|(i, _)| algos[i])
                    .expect("algorithms");
                let cells: Vec<String> = row.iter().map(|s| format!("{:>10.2}", s * 1e6)).collect();
                println!("  {bytes:>10} {}  {best}", cells.join(" "));
                let _ = std::io::stdout().flush();
            }
            scores.push(row);
        }
        let rules = rules_from_scores(&sizes, &algos, &scores);
        let comments = vec![
            format!(
                "written by dcgan-train tune-allreduce on {} ({} rank(s), {}), {}",
                world.hosts.first().map(String::as_str).unwrap_or("?"),
                p,
                world.mpi_library,
                chrono::Local::now().format("%Y-%m-%d %H:%M")
            ),
            "use with: dcgan-train --allreduce auto --allreduce-tuning FILE".to_string(),
        ];
        let mut all: Vec<(usize, usize, usize, Algorithm)> = Vec::new();
        if let Some(old) = &existing {
            all.extend(
                old.rules.iter().filter(|r| r.ranks != p).map(|r| (r.ranks, r.min_bytes, r.max_bytes, r.algorithm)),
            );
        }
        all.extend(rules.iter().map(|&(lo, hi, a)| (p, lo, hi, a)));
        all.sort_by_key(|r| (r.0, r.1));
        let summary: Vec<String> = rules
            .iter()
            .map(|&(lo, hi, a)| {
                let hi = if hi == NO_LIMIT { String::new() } else { format_bytes(hi + 1) };
                format!("{}..{hi}: {a}", format_bytes(lo))
            })
            .collect();
        Ok((world.rank, format_rules(&comments, &all), summary.join(", ")))
    })?;
    if rank == 0 {
        crate::report::write_atomically(&out, |f| Ok(f.write_all(text.as_bytes())?))
            .with_context(|| format!("cannot write --out {}", out.display()))?;
        // Read it back the way training will.
        RulesFile::parse(&out, &text)?;
        println!(
            "# rules: {table} (the smaller size's algorithm is kept while within {:.0}% of the fastest, so that noise does not flip the choice)",
            (KEEP_MARGIN - 1.0) * 100.0
        );
        println!("# wrote {}", out.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_merge_and_cover_everything() {
        let sizes = [4, 8, 16, 32, 64];
        let algos = [Algorithm::Rd, Algorithm::Vhd];
        // rd wins below 32 bytes, vhd from 32 on; at 16 vhd is only 2% faster: keep rd.
        let scores = vec![vec![1.0, 2.0], vec![1.0, 2.0], vec![1.0, 0.98], vec![3.0, 1.0], vec![4.0, 1.0]];
        let rules = rules_from_scores(&sizes, &algos, &scores);
        assert_eq!(rules, vec![(0, 31, Algorithm::Rd), (32, NO_LIMIT, Algorithm::Vhd)]);
        let text = format_rules(&[], &rules.iter().map(|&(a, b, c)| (2, a, b, c)).collect::<Vec<_>>());
        let f = RulesFile::parse(std::path::Path::new("t.csv"), &text).unwrap();
        let t = Policy::Rules(f).table(2).unwrap();
        assert_eq!(t.pick(31), Algorithm::Rd);
        assert_eq!(t.pick(32), Algorithm::Vhd);
    }
}
