//! `dcgan-train trace-report`: from a multi-rank run's trace, where the waits for gradient
//! buckets went (the slowest rank or the exchange) and how much of the allreduce time compute
//! hid.

use anyhow::Context;
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug, Clone)]
pub struct TraceReportArgs {
    /// A trace of a run of 2 or more ranks (`train --trace FILE`).
    pub trace: PathBuf,
    /// Steps at the start left out as warm-up.
    #[arg(long, value_name = "STEPS", default_value_t = 2)]
    pub skip: u64,
    /// Also write the report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

pub fn run(a: TraceReportArgs) -> anyhow::Result<()> {
    if let Some(path) = &a.json {
        crate::report::check_writable(path, "--json")?;
    }
    let r = crate::report::trace_report::report(&a.trace, a.skip)?;
    print!("{r}");
    if let Some(path) = &a.json {
        crate::report::write_atomically(path, |f| Ok(serde_json::to_writer_pretty(f, &r)?))
            .with_context(|| format!("cannot write --json {}", path.display()))?;
    }
    Ok(())
}
