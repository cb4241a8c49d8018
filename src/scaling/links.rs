//! The links the cost model prices: between nodes and inside one, from flags, from
//! `ping-pong --json` files, or the defaults.

use super::cost::Link;
use super::pingpong::{LinkReport, measure_gamma};
use super::two_level::Links;
use anyhow::{Context, Result, bail};
use std::path::PathBuf;

/// The links as given: a file of `ping-pong --json` and single values that override it.
#[derive(Clone, Debug, Default)]
pub struct LinkOptions {
    /// alpha, beta and gamma between nodes.
    pub links: Option<PathBuf>,
    /// Microseconds per message.
    pub alpha: Option<f64>,
    /// Nanoseconds per byte sent.
    pub beta: Option<f64>,
    /// Nanoseconds per byte reduced.
    pub gamma: Option<f64>,
    /// alpha and beta between two ranks of one node.
    pub intra_links: Option<PathBuf>,
    pub intra_alpha: Option<f64>,
    pub intra_beta: Option<f64>,
}

fn link_report(path: &Option<PathBuf>, flag: &str) -> Result<Option<LinkReport>> {
    let Some(p) = path else { return Ok(None) };
    let t = std::fs::read_to_string(p).with_context(|| format!("cannot read {flag} {}", p.display()))?;
    Ok(Some(
        serde_json::from_str(&t).with_context(|| {
            format!("{flag} {} is not the JSON of `dcgan-train ping-pong --json FILE`", p.display())
        })?,
    ))
}

pub fn check_times(values: &[(&str, f64)]) -> Result<()> {
    for (name, v) in values {
        if !(v.is_finite() && *v >= 0.0) {
            bail!("{name} {v} is not a time: give a non-negative number");
        }
    }
    Ok(())
}

/// The most ranks a replay models (nodes times ranks per node).
pub const MAX_RANKS: u64 = 1 << 20;

/// alpha, beta, gamma between nodes: flags over --links over the defaults (15 us, 1 Gbit/s,
/// gamma timed on this machine); inside a node: flags over --intra-links over 1 us and 10 GB/s (a copy
/// through shared memory), with the same gamma.
pub fn links_of(args: &LinkOptions, ranks_per_node: u64) -> Result<Links> {
    let report = link_report(&args.links, "--links")?;
    let alpha = args.alpha.or(report.as_ref().map(|r| r.alpha_us)).unwrap_or(15.0);
    let beta = args.beta.or(report.as_ref().map(|r| r.beta_ns_per_byte)).unwrap_or(8.0);
    let gamma = match args.gamma.or(report.as_ref().map(|r| r.gamma_ns_per_byte)) {
        Some(g) => g,
        None => measure_gamma() * 1e9,
    };
    let intra_given = args.intra_links.is_some() || args.intra_alpha.is_some() || args.intra_beta.is_some();
    if intra_given && ranks_per_node == 1 {
        bail!(
            "--intra-links, --intra-alpha and --intra-beta describe the link between ranks of one node: \
             add --ranks-per-node L (2 or more), or leave them out"
        );
    }
    let intra = link_report(&args.intra_links, "--intra-links")?;
    let intra_alpha = args.intra_alpha.or(intra.as_ref().map(|r| r.alpha_us)).unwrap_or(1.0);
    let intra_beta = args.intra_beta.or(intra.as_ref().map(|r| r.beta_ns_per_byte)).unwrap_or(0.1);
    check_times(&[
        ("--alpha", alpha),
        ("--beta", beta),
        ("--gamma", gamma),
        ("--intra-alpha", intra_alpha),
        ("--intra-beta", intra_beta),
    ])?;
    let link = |alpha: f64, beta: f64| Link { alpha: alpha * 1e-6, beta: beta * 1e-9, gamma: gamma * 1e-9 };
    Ok(Links { between: link(alpha, beta), within: link(intra_alpha, intra_beta) })
}
