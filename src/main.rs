//! dcgan-train: parse the command line, run the command, map errors to one line and exit code.

use dcgan_train::commands;

fn main() {
    if let Err(e) = commands::run_command_line() {
        // A rank that stops because another failed stays quiet: the job shows one error.
        if e.downcast_ref::<dcgan_train::comm::PeerFailed>().is_none() {
            eprintln!("error: {e:#}");
        }
        std::process::exit(1);
    }
}
