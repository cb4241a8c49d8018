//! Checkpoints: round trip, the safetensors header PyTorch will see, and the errors for
//! foreign, broken and mismatched files.

mod common;

use dcgan_train::checkpoint::{self, Checkpoint, Keep, Moments, NetTensors, Progress};
use dcgan_train::model::dcgan::{DISCRIMINATOR_28, DISCRIMINATOR_64, GENERATOR_28};
use dcgan_train::model::net::param_layout;
use dcgan_train::nn::params::ParamLayout;

fn sample_checkpoint(g: &ParamLayout, d: &ParamLayout) -> Checkpoint {
    let net = |l: &ParamLayout, seed| NetTensors {
        values: common::random(l.param_len(), 1.0, seed),
        state: common::random(l.state_len(), 1.0, seed + 1),
        batches_tracked: 42 + seed,
    };
    let moments = |l: &ParamLayout, seed| Moments {
        exp_avg: common::random(l.param_len(), 1.0, seed),
        exp_avg_sq: common::random(l.param_len(), 1.0, seed + 1),
        steps: 7,
    };
    Checkpoint {
        g: net(g, 1),
        d: net(d, 3),
        g_adam: moments(g, 5),
        d_adam: moments(d, 7),
        progress: Progress {
            step: 123,
            epoch: 2,
            batch_in_epoch: 17,
            seed: 9,
            ranks: 3,
            batch_per_rank: 64,
            image_size: 28,
            rng: "counter".into(),
            config: serde_json::json!({"lr": 0.0002}),
        },
        rank_states: (1..3)
            .map(|r| [common::random(g.state_len(), 1.0, 10 + r), common::random(d.state_len(), 1.0, 20 + r)])
            .collect(),
    }
}

fn layouts() -> (ParamLayout, ParamLayout) {
    (param_layout(&GENERATOR_28).0, param_layout(&DISCRIMINATOR_28).0)
}

#[test]
fn round_trip_restores_everything_and_keeps_only_the_latest() {
    let dir = tempfile::tempdir().unwrap();
    let (g, d) = layouts();
    let mut ck = sample_checkpoint(&g, &d);
    let first = checkpoint::save(dir.path(), (&g, &d), &ck, Keep::Latest(1)).unwrap();
    ck.progress.step = 200;
    ck.g.values[0] = 0.5;
    let second = checkpoint::save(dir.path(), (&g, &d), &ck, Keep::Latest(1)).unwrap();
    assert!(!first.exists(), "the previous checkpoint is removed once the new one is complete");
    assert_eq!(checkpoint::resolve(dir.path()).unwrap(), second);
    assert_eq!(checkpoint::resolve(&second.join("G.safetensors")).unwrap(), second, "a checkpoint's file names it");
    let back = checkpoint::load(&second, (&g, &d)).unwrap();
    assert_eq!(back, ck);
    assert_eq!(checkpoint::image_size_of(&second).unwrap(), 28);
}

/// A second save of the same step (a periodic checkpoint, then the epoch's end with the new
/// position) goes to a new directory: the one `latest` names is never removed before
/// `latest` moves, so a crash between the two leaves a whole checkpoint.
#[test]
fn saving_the_same_step_again_never_replaces_the_latest_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let (g, d) = layouts();
    let mut ck = sample_checkpoint(&g, &d);
    let first = checkpoint::save(dir.path(), (&g, &d), &ck, Keep::Latest(1)).unwrap();
    ck.progress.epoch += 1;
    ck.progress.batch_in_epoch = 0;
    let second = checkpoint::save(dir.path(), (&g, &d), &ck, Keep::Latest(1)).unwrap();
    assert_ne!(first, second, "the second save of step {} wrote over the first", ck.progress.step);
    assert!(!first.exists(), "the first is removed once the second is the latest");
    assert_eq!(checkpoint::resolve(dir.path()).unwrap(), second);
    assert_eq!(checkpoint::load(&second, (&g, &d)).unwrap(), ck);
    // A third save of that step takes the base name again.
    let third = checkpoint::save(dir.path(), (&g, &d), &ck, Keep::Latest(1)).unwrap();
    assert_eq!(third, first);
    assert!(!second.exists());
}

/// `--keep-checkpoints`: the newest N stay (by step, whatever order they were written in
/// with a repeated step among them), all of them with 0; `latest` names the one just written.
#[test]
fn saves_keep_the_newest_n_or_all() {
    let (g, d) = layouts();
    let names = common::checkpoint_names;
    let dir = tempfile::tempdir().unwrap();
    let mut ck = sample_checkpoint(&g, &d);
    for step in [10, 20, 30, 30, 40] {
        ck.progress.step = step;
        let saved = checkpoint::save(dir.path(), (&g, &d), &ck, Keep::Latest(3)).unwrap();
        assert_eq!(checkpoint::resolve(dir.path()).unwrap(), saved);
    }
    assert_eq!(names(dir.path()), ["step-00000030", "step-00000030.2", "step-00000040"]);

    let dir = tempfile::tempdir().unwrap();
    for step in [10, 20, 30] {
        ck.progress.step = step;
        checkpoint::save(dir.path(), (&g, &d), &ck, Keep::from_option(0)).unwrap();
    }
    assert_eq!(names(dir.path()), ["step-00000010", "step-00000020", "step-00000030"]);
    assert_eq!(Keep::from_option(1), Keep::Latest(1));

    // Oldest first by (step, K) as numbers, not as text: .10 is after .2, and a step past
    // eight digits after every eight-digit one.
    for (present, step, kept) in [
        (["step-00000030.2", "step-00000030.10"], 30, ["step-00000030", "step-00000030.10"]),
        (["step-99999999", "step-100000000"], 100000001, ["step-100000000", "step-100000001"]),
    ] {
        let dir = tempfile::tempdir().unwrap();
        for n in present {
            std::fs::create_dir_all(dir.path().join("checkpoints").join(n)).unwrap();
        }
        ck.progress.step = step;
        checkpoint::save(dir.path(), (&g, &d), &ck, Keep::Latest(2)).unwrap();
        assert_eq!(names(dir.path()), kept, "{present:?}");
    }
}

/// The header as PyTorch reads it: (name, dtype, shape), parsed by hand from the file.
fn header(path: &std::path::Path) -> Vec<(String, String, Vec<usize>)> {
    let bytes = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let json: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let mut out: Vec<_> = json
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| k.as_str() != "__metadata__")
        .map(|(k, v)| {
            let shape = v["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect();
            (k.clone(), v["dtype"].as_str().unwrap().to_string(), shape)
        })
        .collect();
    out.sort();
    out
}

fn expected(list: &[(&str, &str, &[usize])]) -> Vec<(String, String, Vec<usize>)> {
    let mut v: Vec<_> = list.iter().map(|(n, d, s)| (n.to_string(), d.to_string(), s.to_vec())).collect();
    v.sort();
    v
}

#[test]
fn safetensors_headers_match_the_pytorch_dcgan_state_dicts() {
    let dir = tempfile::tempdir().unwrap();
    let (g, d) = layouts();
    let saved = checkpoint::save(dir.path(), (&g, &d), &sample_checkpoint(&g, &d), Keep::Latest(1)).unwrap();
    // nn.Sequential(ConvT(100,256,7,1,0), BN(256), ReLU, ConvT(256,128,4,2,1), BN(128), ReLU,
    //               ConvT(128,1,4,2,1), Tanh), bias=False everywhere, as in the DCGAN example.
    let want_g = expected(&[
        ("main.0.weight", "F32", &[100, 256, 7, 7]),
        ("main.1.weight", "F32", &[256]),
        ("main.1.bias", "F32", &[256]),
        ("main.1.running_mean", "F32", &[256]),
        ("main.1.running_var", "F32", &[256]),
        ("main.1.num_batches_tracked", "I64", &[]),
        ("main.3.weight", "F32", &[256, 128, 4, 4]),
        ("main.4.weight", "F32", &[128]),
        ("main.4.bias", "F32", &[128]),
        ("main.4.running_mean", "F32", &[128]),
        ("main.4.running_var", "F32", &[128]),
        ("main.4.num_batches_tracked", "I64", &[]),
        ("main.6.weight", "F32", &[128, 1, 4, 4]),
    ]);
    assert_eq!(header(&saved.join("G.safetensors")), want_g);
    // nn.Sequential(Conv(1,64,4,2,1), LeakyReLU, Conv(64,128,4,2,1), BN(128), LeakyReLU,
    //               Conv(128,1,7,1,0)) — logits; the loss applies the sigmoid.
    let want_d = expected(&[
        ("main.0.weight", "F32", &[64, 1, 4, 4]),
        ("main.2.weight", "F32", &[128, 64, 4, 4]),
        ("main.3.weight", "F32", &[128]),
        ("main.3.bias", "F32", &[128]),
        ("main.3.running_mean", "F32", &[128]),
        ("main.3.running_var", "F32", &[128]),
        ("main.3.num_batches_tracked", "I64", &[]),
        ("main.5.weight", "F32", &[1, 128, 7, 7]),
    ]);
    assert_eq!(header(&saved.join("D.safetensors")), want_d);
}

#[test]
fn foreign_truncated_and_mismatched_checkpoints_are_refused_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let (g, d) = layouts();
    let saved = checkpoint::save(dir.path(), (&g, &d), &sample_checkpoint(&g, &d), Keep::Latest(1)).unwrap();

    // Another architecture: the 64x64 discriminator cannot load a 28x28 one.
    let d64 = param_layout(&DISCRIMINATOR_64).0;
    let err = checkpoint::load(&saved, (&g, &d64)).unwrap_err().to_string();
    assert!(err.contains("another architecture") && err.contains("--image-size"), "{err}");

    // A truncated file.
    let gpath = saved.join("G.safetensors");
    let bytes = std::fs::read(&gpath).unwrap();
    std::fs::write(&gpath, &bytes[..bytes.len() / 2]).unwrap();
    let err = format!("{:#}", checkpoint::load(&saved, (&g, &d)).unwrap_err());
    assert!(err.contains("not a readable safetensors file"), "{err}");

    // A safetensors file of someone else's (no format marker).
    let foreign = safetensors::serialize(
        [("x", safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![1], &[0, 0, 0, 0]).unwrap())],
        None,
    )
    .unwrap();
    std::fs::write(&gpath, foreign).unwrap();
    let err = checkpoint::load(&saved, (&g, &d)).unwrap_err().to_string();
    assert!(err.contains("not written by dcgan-train"), "{err}");

    // Not a checkpoint at all.
    let err = checkpoint::resolve(&dir.path().join("nowhere")).unwrap_err().to_string();
    assert!(err.contains("does not exist"), "{err}");
}
