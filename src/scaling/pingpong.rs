//! `dcgan-train ping-pong`: the cost model's constants measured on the links a job runs on.
//! Ranks 0 and 1 bounce messages of each size through the same `Transport::exchange` path the
//! allreduce algorithms use; half a round trip is one message, alpha + n * beta. Alpha is the
//! median one-way time of the sizes up to 4 KiB, beta the least-squares slope over the sizes of
//! 64 KiB and above (where bandwidth dominates); each size's fastest trip stands in for its
//! median where the medians do not grow with the size. Gamma is timed on rank 0: adding one vector
//! into another with the comm layer's own reduction.

use crate::comm::reduce::combine;
use crate::comm::transport::{Combine, CommError, TAG_BENCH, Transport};
use crate::comm::{collectives, run_on_comm_thread};
use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What `ping-pong` measures.
#[derive(Clone, Debug)]
pub struct PingPongOptions {
    /// Message sizes in bytes (positive multiples of 4).
    pub sizes: Vec<usize>,
    /// Round trips per size (None: about 0.3 s per size, 5 to 2000).
    pub iters: Option<u64>,
    /// Also write the report as JSON here (the input of `simulate-scaling --links`).
    pub json: Option<PathBuf>,
    /// A message that waits this long ends the job.
    pub stall_timeout: Duration,
}

/// Sizes at and above this many bytes fit beta.
pub const BETA_FROM_BYTES: usize = 64 << 10;
/// Sizes up to this many bytes give alpha (the median of their one-way times less n * beta).
pub const ALPHA_UP_TO_BYTES: usize = 4 << 10;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Point {
    pub bytes: usize,
    pub round_trips: u64,
    pub one_way_us_median: f64,
    pub one_way_us_min: f64,
}

/// What `ping-pong --json` writes and `simulate-scaling --links` reads.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LinkReport {
    pub alpha_us: f64,
    pub beta_ns_per_byte: f64,
    pub gamma_ns_per_byte: f64,
    /// Intercept of the large-message fit (includes the rendezvous handshake).
    pub alpha_large_us: f64,
    /// 8 / beta.
    pub bandwidth_gbit_per_s: f64,
    /// Host of rank 0 and of rank 1.
    pub hosts: Vec<String>,
    /// Fitted to each size's fastest trip (`min_us`): the medians did not grow with the size.
    #[serde(default)]
    pub fitted_on_fastest_trips: bool,
    pub points: Vec<Point>,
}

/// Least-squares line through (x, y): (intercept, slope).
pub fn fit_line(xs: &[f64], ys: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let (mx, my) = (xs.iter().sum::<f64>() / n, ys.iter().sum::<f64>() / n);
    let sxy: f64 = xs.iter().zip(ys).map(|(x, y)| (x - mx) * (y - my)).sum();
    let sxx: f64 = xs.iter().map(|x| (x - mx) * (x - mx)).sum();
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    (my - slope * mx, slope)
}

/// The link's constants fitted to the ping-pong's one-way times.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkFit {
    /// Seconds per message.
    pub alpha: f64,
    /// Seconds per byte.
    pub beta: f64,
    /// Intercept (s) of the large-message line.
    pub alpha_large: f64,
    /// Fitted to each size's fastest trip: the medians did not grow with the size.
    pub on_fastest_trips: bool,
}

/// Alpha, beta and the large-message intercept from each size's median one-way time; where
/// those give no slope (the ranks were descheduled through some sizes' trips, as on a shared
/// machine of few cores), from each size's fastest trip, which a descheduled trip never sets.
/// `beta` is zero when neither grows with the size.
pub fn fit_alpha_beta(points: &[Point]) -> LinkFit {
    let (alpha, beta, alpha_large) = fit_times(points, |p| p.one_way_us_median);
    if beta > 0.0 {
        return LinkFit { alpha, beta, alpha_large, on_fastest_trips: false };
    }
    let (alpha, beta, alpha_large) = fit_times(points, |p| p.one_way_us_min);
    LinkFit { alpha, beta, alpha_large, on_fastest_trips: true }
}

/// (alpha, beta, large-message intercept) in seconds fitted to `time_us` of each point.
fn fit_times(points: &[Point], time_us: fn(&Point) -> f64) -> (f64, f64, f64) {
    let large: Vec<&Point> = points.iter().filter(|p| p.bytes >= BETA_FROM_BYTES).collect();
    let use_pts: Vec<&Point> = if large.len() >= 2 { large } else { points.iter().collect() };
    let xs: Vec<f64> = use_pts.iter().map(|p| p.bytes as f64).collect();
    let ys: Vec<f64> = use_pts.iter().map(|p| time_us(p) * 1e-6).collect();
    let (intercept, beta) = fit_line(&xs, &ys);
    let beta = beta.max(0.0);
    // Alpha: the median over the small sizes, so that one size disturbed by a neighbour on a
    // shared machine (tens of times the others' time) does not set it.
    let mut small: Vec<f64> = points
        .iter()
        .filter(|p| p.bytes <= ALPHA_UP_TO_BYTES)
        .map(|p| time_us(p) * 1e-6 - p.bytes as f64 * beta)
        .collect();
    if small.is_empty() {
        let p = points.iter().min_by_key(|p| p.bytes).expect("at least one size");
        small.push(time_us(p) * 1e-6 - p.bytes as f64 * beta);
    }
    (median(&mut small).max(0.0), beta, intercept.max(0.0))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Seconds per byte of `dst += src` over 4 MiB vectors (median of 15).
pub fn measure_gamma() -> f64 {
    let n = 1 << 20;
    let src = vec![1.0f32; n];
    let mut dst = vec![0.5f32; n];
    let mut t: Vec<f64> = (0..15)
        .map(|_| {
            let t0 = Instant::now();
            combine(&mut dst, &src, Combine::Add);
            t0.elapsed().as_secs_f64()
        })
        .collect();
    std::hint::black_box(&dst);
    median(&mut t) / (n * 4) as f64
}

/// Round trips that take about 0.3 s at `bytes` (the `--iters` default), timed on this link
/// from a few probe trips: a guess from the size alone gave a 1 Gbit/s link enough trips and
/// a fast one five, too few to fit beta on. Rank 0 decides and tells rank 1 (both must make
/// the same number).
fn iters_for(t: &mut dyn Transport, bytes: usize) -> Result<u64, CommError> {
    let mut probe = bounce(t, bytes, 4)?;
    if t.rank() == 0 {
        let one_way = median(&mut probe).max(1e-9);
        let iters = (0.3 / (2.0 * one_way)).clamp(5.0, 2000.0) as u64;
        t.send(1, TAG_BENCH, &iters.to_le_bytes())?;
        Ok(iters)
    } else {
        let v = t.recv_vec(0, TAG_BENCH)?;
        let count: [u8; 8] =
            v.as_slice().try_into().map_err(|_| CommError::Protocol("ping-pong: a bad trip count".into()))?;
        Ok(u64::from_le_bytes(count))
    }
}

/// Rank 0's one-way times (s) of `iters` round trips of `bytes` with rank 1.
fn bounce(t: &mut dyn Transport, bytes: usize, iters: u64) -> Result<Vec<f64>, CommError> {
    let n = bytes / 4;
    let mut buf = vec![0.0f32; n];
    let (me, peer) = (t.rank(), 1 - t.rank());
    let mut out = Vec::with_capacity(iters as usize);
    for i in 0..iters + iters / 10 + 1 {
        let t0 = Instant::now();
        if me == 0 {
            t.exchange(&mut buf, Some((peer, 0..n)), None, TAG_BENCH)?;
            t.exchange(&mut buf, None, Some((peer, 0..n, Combine::Copy)), TAG_BENCH)?;
        } else {
            t.exchange(&mut buf, None, Some((peer, 0..n, Combine::Copy)), TAG_BENCH)?;
            t.exchange(&mut buf, Some((peer, 0..n)), None, TAG_BENCH)?;
        }
        // The first tenth warms up (connections, caches).
        if i > iters / 10 {
            out.push(t0.elapsed().as_secs_f64() / 2.0);
        }
    }
    Ok(out)
}

pub fn run(args: PingPongOptions) -> anyhow::Result<()> {
    let json = args.json.clone();
    let options = format!("{args:?}");
    let report = run_on_comm_thread(args.stall_timeout, move |t, world| {
        collectives::same_options(t, "ping-pong", &options, TAG_BENCH)?;
        if t.size() < 2 {
            bail!("ping-pong needs two ranks: run it as mpiexec -n 2 dcgan-train ping-pong (one rank per host)");
        }
        crate::comm::bench::agree_root_can_write(t, args.json.as_deref(), "--json")?;
        let mut points = Vec::new();
        for &bytes in &args.sizes {
            collectives::barrier(t, TAG_BENCH).context("barrier before a ping-pong size")?;
            if t.rank() < 2 {
                let iters = match args.iters {
                    Some(n) => n,
                    None => iters_for(t, bytes).with_context(|| format!("probing ping-pong of {bytes} bytes"))?,
                };
                let mut v = bounce(t, bytes, iters).with_context(|| format!("ping-pong of {bytes} bytes"))?;
                let min = v.iter().copied().fold(f64::INFINITY, f64::min);
                points.push(Point {
                    bytes,
                    round_trips: iters,
                    one_way_us_median: median(&mut v) * 1e6,
                    one_way_us_min: min * 1e6,
                });
            }
        }
        collectives::barrier(t, TAG_BENCH).context("barrier after the ping-pong")?;
        if t.rank() != 0 {
            return Ok(None);
        }
        let LinkFit { alpha, beta, alpha_large, on_fastest_trips } = fit_alpha_beta(&points);
        // Rank 0 alone, after the last collective: the others are already finishing.
        if beta <= 0.0 {
            bail!(
                "ping-pong: the one-way times did not grow with the message size (beta fitted at zero: the ranks \
                 were descheduled while timing, or the sizes are too close); rerun on a quieter machine, or with \
                 sizes that span more (--sizes 4B,64KiB,1MiB,4MiB)"
            );
        }
        if on_fastest_trips {
            eprintln!(
                "ping-pong: note: the median times did not grow with the message size (the ranks were descheduled \
                 while timing), so the link is fitted to each size's fastest trip (min_us)"
            );
        }
        let gamma = measure_gamma();
        Ok(Some(LinkReport {
            alpha_us: alpha * 1e6,
            beta_ns_per_byte: beta * 1e9,
            gamma_ns_per_byte: gamma * 1e9,
            alpha_large_us: alpha_large * 1e6,
            bandwidth_gbit_per_s: 8.0 / (beta * 1e9),
            hosts: world.hosts.iter().take(2).cloned().collect(),
            fitted_on_fastest_trips: on_fastest_trips,
            points,
        }))
    })?;
    let Some(r) = report else { return Ok(()) };
    println!("# dcgan-train ping-pong: rank 0 on {} <-> rank 1 on {}", r.hosts[0], r.hosts[1]);
    println!("# one way = half a round trip through Transport::exchange (the allreduce path)");
    println!("# {:>10} {:>8} {:>14} {:>12} {:>14}", "bytes", "trips", "one_way_us", "min_us", "model_us");
    for p in &r.points {
        let model = r.alpha_us + p.bytes as f64 * r.beta_ns_per_byte * 1e-3;
        println!(
            "  {:>10} {:>8} {:>14.2} {:>12.2} {:>14.2}",
            p.bytes, p.round_trips, p.one_way_us_median, p.one_way_us_min, model
        );
    }
    println!(
        "alpha {:.2} us, beta {:.4} ns/B ({:.3} Gbit/s; fit over sizes >= 64KiB, intercept {:.1} us), gamma {:.4} ns/B",
        r.alpha_us, r.beta_ns_per_byte, r.bandwidth_gbit_per_s, r.alpha_large_us, r.gamma_ns_per_byte
    );
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(&r)? + "\n";
        crate::report::write_atomically(&path, |f| Ok(std::io::Write::write_all(f, text.as_bytes())?))
            .with_context(|| format!("cannot write --json {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(bytes: usize, us: f64) -> Point {
        Point { bytes, round_trips: 1, one_way_us_median: us, one_way_us_min: us }
    }

    #[test]
    fn fit_recovers_a_hockney_line() {
        // t = 12 us + n * 8 ns, exactly, plus a small size whose time is alpha alone.
        let pts: Vec<Point> = [4usize, 65536, 262144, 1 << 20].iter().map(|&b| pt(b, 12.0 + b as f64 * 8e-3)).collect();
        let fit = fit_alpha_beta(&pts);
        assert!((fit.alpha - 12e-6).abs() < 1e-9, "{fit:?}");
        assert!((fit.beta - 8e-9).abs() < 1e-13, "{fit:?}");
        assert!((fit.alpha_large - 12e-6).abs() < 1e-9, "{fit:?}");
        assert!(!fit.on_fastest_trips);
    }

    #[test]
    fn medians_flattened_by_descheduling_fall_back_to_the_fastest_trips() {
        // The fastest trips follow t = 12 us + n * 8 ns; the medians of the small large sizes
        // were inflated by descheduling until the line through them falls.
        let sizes = [4usize, 65536, 262144, 1 << 20];
        let medians = [12.0, 20000.0, 15000.0, 9000.0];
        let pts: Vec<Point> = sizes
            .iter()
            .zip(medians)
            .map(|(&b, m)| Point {
                bytes: b,
                round_trips: 9,
                one_way_us_median: m,
                one_way_us_min: 12.0 + b as f64 * 8e-3,
            })
            .collect();
        let fit = fit_alpha_beta(&pts);
        assert!(fit.on_fastest_trips);
        assert!((fit.beta - 8e-9).abs() < 1e-13, "{fit:?}");
        assert!((fit.alpha - 12e-6).abs() < 1e-9, "{fit:?}");
        // Neither growing: no slope, which the command reports as an error.
        let flat: Vec<Point> = sizes.iter().map(|&b| pt(b, 50.0)).collect();
        assert_eq!(fit_alpha_beta(&flat).beta, 0.0);
    }

    #[test]
    fn gamma_is_a_plausible_memory_speed() {
        let g = measure_gamma();
        // Between 100 GB/s and 0.1 GB/s per byte reduced.
        assert!(g > 1e-11 && g < 1e-8, "{g}");
    }
}
