//! The command line: one module per subcommand, each with its clap arguments and an entry
//! point that converts them into the options of the layer that does the work. Nothing below
//! this module knows the command line. `train` is the default action, so
//! `dcgan-train --epochs 1` and `dcgan-train train --epochs 1` are the same.

pub mod bench_allreduce;
pub mod bench_step;
pub mod classifier;
pub mod comm_args;
pub mod evaluate;
pub mod info;
mod parse;
pub mod ping_pong;
pub mod sample;
pub mod simulate_scaling;
pub mod trace_report;
pub mod train;
pub mod tune_allreduce;

use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "dcgan-train",
    version = crate::version::VERSION,
    about = "Data-parallel DCGAN training over MPI",
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub train: train::TrainArgs,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Train the DCGAN (the default when no subcommand is given).
    Train(train::TrainArgs),
    /// Time full GAN steps (D step + G step) and print ms/step and images/s.
    BenchStep(bench_step::BenchStepArgs),
    /// Time every allreduce algorithm over a range of message sizes (run under mpiexec).
    BenchAllreduce(bench_allreduce::BenchAllreduceArgs),
    /// Measure the algorithms on these ranks and write a rules file for --allreduce-tuning.
    TuneAllreduce(tune_allreduce::TuneAllreduceArgs),
    /// Render a grid of images from a saved generator (or write the images themselves).
    Sample(sample::SampleArgs),
    /// Train the feature network the sample-quality distances are taken with.
    Classifier(classifier::ClassifierArgs),
    /// Score a run's generator (or images from a file): Fréchet distance and KID to the test
    /// split, the classifier's confidence and class spread.
    Evaluate(evaluate::EvaluateArgs),
    /// Print, per rank, the host, local rank, device and the MPI library (run under mpiexec).
    Info(info::InfoArgs),
    /// Predict step time, eq. (1) speedup and hidden communication at other node counts by
    /// replaying a run's trace against the allreduce cost model.
    SimulateScaling(simulate_scaling::SimulateScalingArgs),
    /// Measure alpha (latency), beta (per byte) and gamma (reduction) between ranks 0 and 1,
    /// for the cost model (run under mpiexec, one rank per host).
    PingPong(ping_pong::PingPongArgs),
    /// From a multi-rank run's trace: where the waits for gradient buckets went (the slowest
    /// rank or the exchange) and how much of the allreduce time compute hid.
    TraceReport(trace_report::TraceReportArgs),
}

/// Parse this process's command line and run the command it names.
pub fn run_command_line() -> anyhow::Result<()> {
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    run(cli, &matches)
}

/// Run the command the line names; `matches` tell which options it gave explicitly.
pub fn run(cli: Cli, matches: &ArgMatches) -> anyhow::Result<()> {
    match cli.command {
        None => train::run(cli.train, &train::given_options(matches)),
        Some(Command::Train(args)) => {
            let given = matches.subcommand_matches("train").map(train::given_options).unwrap_or_default();
            train::run(args, &given)
        }
        Some(Command::BenchStep(args)) => bench_step::run(args),
        Some(Command::BenchAllreduce(args)) => bench_allreduce::run(args),
        Some(Command::TuneAllreduce(args)) => tune_allreduce::run(args),
        Some(Command::Sample(args)) => sample::run(args),
        Some(Command::Classifier(args)) => classifier::run(args),
        Some(Command::Evaluate(args)) => evaluate::run(args),
        Some(Command::Info(args)) => info::run(args),
        Some(Command::SimulateScaling(args)) => simulate_scaling::run(args),
        Some(Command::PingPong(args)) => ping_pong::run(args),
        Some(Command::TraceReport(args)) => trace_report::run(args),
    }
}
