//! dcgan-train: parse the command line, run the command, map errors to one line and exit code.

use clap::Parser;
use dcgan_train::commands::{self, Cli};

fn main() {
    if let Err(e) = commands::run(Cli::parse()) {
        // A rank that stops because another failed stays quiet: the job shows one error.
        if e.downcast_ref::<dcgan_train::comm::PeerFailed>().is_none() {
            eprintln!("error: {e:#}");
        }
        std::process::exit(1);
    }
}
