//! dcgan-train: parse the command line, run the command, map errors to one line and exit code.

use clap::Parser;
use dcgan_train::cli::{Cli, Command};

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        None => dcgan_train::run_train(cli.train),
        Some(Command::Train(args)) => dcgan_train::run_train(args),
        Some(Command::BenchStep(args)) => dcgan_train::run_bench_step(args),
        Some(Command::BenchAllreduce(args)) => dcgan_train::comm::bench::run(args),
        Some(Command::TuneAllreduce(args)) => dcgan_train::comm::tune::run(args),
        Some(Command::Sample(args)) => dcgan_train::sample::run(args),
        Some(Command::Info(args)) => dcgan_train::info::run(args),
        Some(Command::SimulateScaling(args)) => dcgan_train::scaling::simulate::run(args),
        Some(Command::PingPong(args)) => dcgan_train::scaling::pingpong::run(args),
        Some(Command::TraceReport(a)) => dcgan_train::report::trace_report::run(&a.trace, a.skip, a.json.as_deref()),
    };
    if let Err(e) = result {
        // A rank that stops because another failed stays quiet: the job shows one error.
        if e.downcast_ref::<dcgan_train::train::job::PeerFailed>().is_none() {
            eprintln!("error: {e:#}");
        }
        std::process::exit(1);
    }
}
