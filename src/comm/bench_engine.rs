//! `bench-allreduce --via-engine`: the same measurement through the comm thread's queue, as
//! training uses it: the calling thread submits a bucket and waits for it, so each call also
//! pays the hand-over to the comm thread and back.

use crate::comm::bench::{
    BenchOptions, Row, bench_expected, bench_input, default_iters, default_sizes, format_row, median,
};
use crate::comm::handle::HostData;
use crate::comm::{BucketRequest, CommConfig, start};
use crate::units::format_bytes;
use std::io::Write;
use std::time::Instant;

/// Rows for every size, algorithm column "engine" (selected = what the engine picked), and
/// this process's rank.
pub fn run(args: &BenchOptions) -> anyhow::Result<(Vec<Row>, usize)> {
    let cfg = CommConfig::from_options(&args.comm)?;
    let comm = start(cfg.clone())?;
    let (rank, p) = (comm.world().rank, comm.world().size);
    let sizes = if args.sizes.is_empty() { default_sizes() } else { args.sizes.clone() };
    super::bench::ensure_sizes_fit(&sizes, "bench-allreduce")?;
    super::bench::ensure_two_ranks(p, "bench-allreduce")?;
    // Rank 0's --json, checked before anything is timed; every rank learns the outcome.
    let writable = match (&args.json, rank) {
        (Some(path), 0) => crate::report::check_writable(path, "--json"),
        _ => Ok(()),
    };
    let refused = comm.broadcast_bytes(0, vec![u8::from(writable.is_err())])?;
    writable?;
    if refused.first() != Some(&0) {
        return Err(crate::comm::PeerFailed.into());
    }
    if rank == 0 {
        println!(
            "# dcgan-train bench-allreduce --via-engine: {p} rank(s), {}; buckets submitted to \
             the comm thread and waited for; {}; fragments of {}",
            comm.world().mpi_library,
            cfg.policy.describe(),
            format_bytes(cfg.fragment_bytes)
        );
        println!(
            "# {:>10}  {:<10} {:>6} {:>10} {:>10} {:>10} {:>10} {:>11} {:>11}  correct",
            "bytes", "algorithm", "calls", "avg_us", "median_us", "min_us", "max_us", "algbw_GB/s", "busbw_GB/s"
        );
    }
    let mut rows = Vec::new();
    for &bytes in &sizes {
        let n = bytes / 4;
        let input: Vec<f32> = (0..n).map(|i| bench_input(rank, i)).collect();
        let expected = bench_expected(p, n);
        let iters = args.iters.unwrap_or_else(|| default_iters(bytes));
        let warmup = args.warmup.unwrap_or((iters / 10).max(2));
        let mut data: Box<dyn HostData> = Box::new(input.clone());
        let mut times = Vec::with_capacity(iters as usize);
        let mut wrong = 0usize;
        for i in 0..warmup + iters {
            data.as_mut_slice().copy_from_slice(&input);
            let req = BucketRequest {
                id: 7,
                label: format!("bench {bytes} bytes"),
                data,
                before_fragment: None,
                after_fragment: None,
                exact: true,
                packed: false,
            };
            let t0 = Instant::now();
            let done = comm.wait(comm.submit(req))?;
            let dt = t0.elapsed().as_secs_f64();
            data = done.data;
            if i >= warmup {
                times.push(dt);
                if args.check || i == warmup || i + 1 == warmup + iters {
                    wrong +=
                        data.as_mut_slice().iter().zip(&expected).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
                }
            }
        }
        // The slowest rank's time per call, and any wrong result anywhere.
        let mut mine = times.clone();
        mine.push(wrong as f64);
        let bytes_out: Vec<u8> = mine.iter().flat_map(|v| v.to_ne_bytes()).collect();
        let all = comm.gather_bytes(bytes_out)?;
        let summary = all.map(|parts| {
            let mut maxed = vec![0.0f64; mine.len()];
            for part in parts {
                for (m, c) in maxed.iter_mut().zip(part.chunks_exact(8)) {
                    *m = m.max(f64::from_ne_bytes(c.try_into().expect("8 bytes")));
                }
            }
            maxed
        });
        // Rank 0 decides; everyone learns whether the results were right.
        let verdict =
            comm.broadcast_bytes(0, summary.as_ref().map_or(vec![], |m| vec![u8::from(m[m.len() - 1] == 0.0)]))?;
        let correct = verdict.first() == Some(&1);
        let x = summary.map(|mut m| {
            m.pop();
            m
        });
        let x = x.unwrap_or(times);
        let avg = x.iter().sum::<f64>() / x.len() as f64;
        let algbw = if avg > 0.0 { bytes as f64 / avg / 1e9 } else { 0.0 };
        let row = Row {
            bytes,
            algorithm: "engine".into(),
            selected: comm.algorithm_for(bytes).name().into(),
            ranks: p,
            fragments: crate::comm::handle::fragments(n, cfg.fragment_bytes).len(),
            iters,
            avg_us: avg * 1e6,
            median_us: median(&x) * 1e6,
            min_us: x.iter().copied().fold(f64::INFINITY, f64::min) * 1e6,
            max_us: x.iter().copied().fold(0.0, f64::max) * 1e6,
            algbw,
            busbw: algbw * 2.0 * (p as f64 - 1.0) / p as f64,
            correct,
            placement: None,
        };
        if rank == 0 {
            println!("{}", format_row(&row));
            let _ = std::io::stdout().flush();
        }
        rows.push(row);
    }
    comm.shutdown()?;
    Ok((rows, rank))
}
