//! `--distributed-after`: the first steps are a 1-rank run's, computed by every rank; then
//! data parallelism starts from rank 0's state, and a resume on either side continues exactly.

use crate::common::{final_weights, mpirun, step_records, train_narrow as train};
use std::path::Path;

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Before the switch, 2 ranks train exactly what 1 rank trains (weights and every step's
/// losses); after it they go their own ways: the exchange has started.
#[test]
fn the_first_steps_are_a_one_rank_run_then_the_ranks_go_parallel() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = |name: &str| tmp.path().join(name);
    let after = ["--distributed-after", "3", "--check-consistency", "1"];
    train(1, &dir("one-3"), "3", &[]);
    train(2, &dir("two-3"), "3", &after);
    assert_eq!(final_weights(&dir("one-3")), final_weights(&dir("two-3")));
    assert_eq!(step_records(&dir("one-3")), step_records(&dir("two-3")));
    train(1, &dir("one-5"), "5", &[]);
    train(2, &dir("two-5"), "5", &after);
    train(2, &dir("plain-5"), "5", &["--check-consistency", "1"]);
    let (one, two, plain) =
        (final_weights(&dir("one-5")), final_weights(&dir("two-5")), final_weights(&dir("plain-5")));
    assert_ne!(two, one, "the steps after the switch must be data-parallel");
    assert_ne!(two, plain, "the steps before the switch must be one worker's");
    assert_eq!(step_records(&dir("two-5"))[..3], step_records(&dir("one-5"))[..3]);
}

/// A run stopped before its switch and resumed ends where the uninterrupted run does.
#[test]
fn a_resume_before_the_switch_continues_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let (whole, part) = (tmp.path().join("whole"), tmp.path().join("part"));
    let after = ["--distributed-after", "3"];
    train(2, &whole, "5", &after);
    train(2, &part, "2", &after);
    let o = mpirun(2, &["--resume", path(&part), "--max-steps", "5", "--no-progress"], 300);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(final_weights(&part), final_weights(&whole));
    assert_eq!(step_records(&part), step_records(&whole));
}
