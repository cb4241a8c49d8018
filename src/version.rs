//! The program's version and the commit it was built from (`build.rs`), as `--version`,
//! `info`, summary.json and the benchmarks' JSON lines give it.

/// "0.1.0 (commit 0123456789ab)", with ", modified" where the build's sources differed from
/// the commit, or the bare version where the build had no git checkout of its own.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), env!("DCGAN_BUILD"));

/// "dcgan-train " and `VERSION`.
pub const PROGRAM: &str = concat!("dcgan-train ", env!("CARGO_PKG_VERSION"), env!("DCGAN_BUILD"));
