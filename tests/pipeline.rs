//! `--pipeline` under mpiexec: G on rank 0 and D on rank 1 train what one rank with the same
//! micro-batches trains, to the bit (the same kernels on the same micro-batches in the same
//! order on each network); and what it cannot run is refused.

use crate::common::{final_weights, mpirun, read_safetensors, read_summary, step_records, train_narrow as train};
use std::path::Path;

/// Adam's state in a run's checkpoint (without what it keeps of ranks 1..: a pipeline's D
/// stage's running statistics, the same as rank 0's once the stages have shared them).
fn optimizer(run: &Path) -> std::collections::BTreeMap<String, Vec<f32>> {
    let all = read_safetensors(&dcgan_train::checkpoint::resolve(run).unwrap().join("optimizer.safetensors"));
    all.into_iter().filter(|(k, _)| !k.starts_with("rank")).collect()
}

/// M = 1, 2, 4 (4 recomputed, 2 with deferred batch norm): weights, running statistics, Adam's state and the losses
/// of the 2-rank pipeline equal those of one rank with `--micro-batches M`.
#[test]
fn a_two_rank_pipeline_trains_what_one_rank_with_its_micro_batches_trains() {
    let tmp = tempfile::tempdir().unwrap();
    for (m, extra) in [("1", None), ("2", None), ("4", None), ("4", Some("--recompute")), ("2", Some("--deferred-bn"))]
    {
        let (one, two) = (tmp.path().join(format!("one{m}{extra:?}")), tmp.path().join(format!("two{m}{extra:?}")));
        let mut args = vec!["--micro-batches", m];
        args.extend(extra);
        train(1, &one, "3", &args);
        args.push("--pipeline");
        train(2, &two, "3", &args);
        assert_eq!(final_weights(&two), final_weights(&one), "M = {m} {extra:?}: weights");
        assert_eq!(optimizer(&two), optimizer(&one), "M = {m} {extra:?}: Adam's state");
        assert_eq!(step_records(&two).len(), 3);
        for (a, b) in step_records(&two).iter().zip(step_records(&one)) {
            assert_eq!(a.metrics, b.metrics, "M = {m} {extra:?}: step {}", a.step);
        }
    }
}

/// The summary reports each stage's idle time against GPipe's formula.
#[test]
fn the_summary_reports_the_bubble() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    train(2, &run, "4", &["--pipeline", "--micro-batches", "4"]);
    let p = read_summary(&run).pipeline.expect("a pipeline section");
    assert_eq!((p.stages, p.pipelines, p.micro_batches), (2, 1, 4));
    assert!((p.bubble_formula - 0.2).abs() < 1e-12, "{}", p.bubble_formula);
    assert_eq!(p.idle_fraction.len(), 2);
    assert!(p.idle_fraction.iter().all(|f| (0.0..1.0).contains(f)), "{:?}", p.idle_fraction);
}

/// --pipeline on a rank count other than 2, or with what it is not built for: one line each,
/// before anything is written.
#[test]
fn what_a_pipeline_cannot_run_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let base =
        ["--data", "synthetic:64", "--batch-size", "8", "--no-progress", "--pipeline", "--out", out.to_str().unwrap()];
    // Rules for 4 ranks that pick MPI_Allreduce from 64 KiB up, as tune-allreduce writes them.
    let tuning = tmp.path().join("tuning.csv");
    std::fs::write(&tuning, "4,0,65535,ring\n4,65536,inf,mpi\n").unwrap();
    let picks_mpi = "which MPI_Allreduce cannot (it runs over the whole job), but";
    let (by_flag, by_file) =
        (format!("{picks_mpi} --allreduce mpi picks mpi"), format!("{picks_mpi} --allreduce-tuning"));
    for (ranks, extra, says) in [
        (
            3,
            vec![],
            "run it on an even number of ranks, mpiexec -n 2 for one pipeline or 2P for P side by side (it has 3)",
        ),
        (1, vec![], "(it has 1)"),
        (2, vec!["--sync-bn"], "drop --sync-bn or --pipeline"),
        (2, vec!["--micro-batches", "3"], "--micro-batches 3 does not divide the 8 images"),
        (4, vec!["--allreduce", "mpi"], by_flag.as_str()),
        (4, vec!["--allreduce-tuning", tuning.to_str().unwrap()], by_file.as_str()),
    ] {
        let o = mpirun(ranks, &[&base[..], &extra].concat(), 60);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{ranks} ranks {extra:?}");
        assert!(err.contains(says), "{ranks} ranks {extra:?}: {err}");
        assert!(!out.exists(), "a refused run left {out:?}");
    }
}

/// A pipeline run stopped and resumed ends where the uninterrupted run does, bit for bit
/// (rank 0's checkpoint holds both stages' networks; the resume gives each its own back).
#[test]
fn a_resumed_pipeline_continues_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let (whole, part) = (tmp.path().join("whole"), tmp.path().join("part"));
    let pipeline = ["--pipeline", "--micro-batches", "2"];
    train(2, &whole, "7", &pipeline);
    train(2, &part, "4", &pipeline);
    let o = mpirun(2, &["--resume", part.to_str().unwrap(), "--max-steps", "7", "--no-progress"], 300);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(final_weights(&part), final_weights(&whole));
    assert_eq!(optimizer(&part), optimizer(&whole));
    assert_eq!(step_records(&part), step_records(&whole));
}

/// Two pipelines side by side (4 ranks: G's replicas on 0 and 2 average G's gradients, D's on
/// 1 and 3 D's) train what 2 data-parallel ranks with the same micro-batches train: the same
/// sums of the same two gradients, to the bit.
#[test]
fn two_pipelines_side_by_side_train_what_two_ranks_train() {
    let tmp = tempfile::tempdir().unwrap();
    let (ranks, pipelines) = (tmp.path().join("ranks"), tmp.path().join("pipelines"));
    train(2, &ranks, "3", &["--micro-batches", "2"]);
    train(4, &pipelines, "3", &["--micro-batches", "2", "--pipeline"]);
    assert_eq!(final_weights(&pipelines), final_weights(&ranks));
    assert_eq!(optimizer(&pipelines), optimizer(&ranks));
    for (a, b) in step_records(&pipelines).iter().zip(step_records(&ranks)) {
        assert_eq!(a.metrics, b.metrics, "step {}", a.step);
    }
}
