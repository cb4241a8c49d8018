//! Build script: the commit the program is built from, so that `--version`, `info`,
//! summary.json and the benchmarks' JSON lines say which code produced them.

use std::path::{Path, PathBuf};
use std::process::Command;

/// What the binary is made of: a change here reruns this script (and re-reads "modified").
const SOURCES: &[&str] = &["src", "kernels", "build.rs", "Cargo.toml", "Cargo.lock"];

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn rerun_if_changed(path: &Path) {
    // Only existing paths: Cargo reruns the script on every build for a missing one.
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

/// Where git keeps `name` (`HEAD`, `packed-refs`, `refs/heads/main`), worktrees included.
fn git_path(name: &str) -> Option<PathBuf> {
    git(&["rev-parse", "--path-format=absolute", "--git-path", name]).map(PathBuf::from)
}

/// " (commit <12 hex digits>[, modified])" where this package is a git checkout of its own,
/// "modified" when its sources differ from the commit; empty otherwise (a source tarball, or
/// a copy inside another repository).
fn build_suffix() -> String {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let own_checkout = git(&["rev-parse", "--show-toplevel"])
        .and_then(|top| Path::new(&top).canonicalize().ok())
        .is_some_and(|top| manifest.canonicalize().is_ok_and(|m| m == top));
    let Some(commit) = own_checkout.then(|| git(&["rev-parse", "--short=12", "HEAD"])).flatten() else {
        return String::new();
    };
    // A commit, a checkout or a reset moves HEAD or its branch; `git add` rewrites the index.
    for name in ["HEAD", "index", "packed-refs"] {
        if let Some(path) = git_path(name) {
            rerun_if_changed(&path);
        }
    }
    // The branch's own file, or its directory where the ref is only in packed-refs.
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]).and_then(|b| git_path(&b)) {
        let dir = branch.parent().filter(|_| !branch.exists());
        rerun_if_changed(dir.unwrap_or(&branch));
    }
    // Without optional locks `git status` leaves the index as it is (a rewrite would rerun
    // this script once more).
    let status = [&["--no-optional-locks", "status", "--porcelain", "--"][..], SOURCES].concat();
    let modified = git(&status).is_some_and(|s| !s.is_empty());
    format!(" (commit {commit}{})", if modified { ", modified" } else { "" })
}

fn main() {
    for path in SOURCES {
        rerun_if_changed(Path::new(path));
    }
    println!("cargo:rustc-env=DCGAN_BUILD={}", build_suffix());
}
