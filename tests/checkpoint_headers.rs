//! The safetensors headers PyTorch will see: each network's checkpoint file names and shapes
//! its tensors as the PyTorch model's `state_dict()` does.

use crate::checkpoint::{layouts, sample_checkpoint};
use crate::common;
use dcgan_train::checkpoint::{self, Keep};
use dcgan_train::model::dcgan::{Discriminator, GENERATOR_28, Widths, architecture};
use dcgan_train::model::net::param_layout;

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
    assert_eq!(common::safetensors_tensors(&saved.join("G.safetensors")), want_g);
    // `--g-ema`'s averaged generator loads into the same Sequential.
    assert_eq!(common::safetensors_tensors(&saved.join("G_ema.safetensors")), want_g);
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
    assert_eq!(common::safetensors_tensors(&saved.join("D.safetensors")), want_d);
}

/// The header of the critic's checkpoint file (`--loss wgan-gp`), with or without layer norm.
fn critic_header(layer_norm: bool) -> Vec<(String, String, Vec<usize>)> {
    let dir = tempfile::tempdir().unwrap();
    let (_, critic) = architecture(28, Widths::DCGAN, Discriminator::Critic { layer_norm }).unwrap();
    let (g, d) = (param_layout(&GENERATOR_28).0, param_layout(&critic).0);
    let saved = checkpoint::save(dir.path(), (&g, &d), &sample_checkpoint(&g, &d), Keep::Latest(1)).unwrap();
    common::safetensors_tensors(&saved.join("D.safetensors"))
}

/// WGAN-GP's critic: D without its batch norm, named as PyTorch numbers
/// nn.Sequential(Conv(1,64,4,2,1), LeakyReLU, Conv(64,128,4,2,1), LeakyReLU, Conv(128,1,7,1,0)).
#[test]
fn the_critic_header_matches_a_pytorch_sequential_without_batch_norm() {
    let want = expected(&[
        ("main.0.weight", "F32", &[64, 1, 4, 4]),
        ("main.2.weight", "F32", &[128, 64, 4, 4]),
        ("main.4.weight", "F32", &[1, 128, 7, 7]),
    ]);
    assert_eq!(critic_header(false), want);
}

/// `--critic-norm layer`: layer norm where D has batch norm, named and shaped as PyTorch's
/// nn.GroupNorm(1, 128) at the batch norm's index (a weight and a bias, no running statistics).
#[test]
fn the_layer_norm_critic_header_matches_a_pytorch_sequential_with_group_norm() {
    let want = expected(&[
        ("main.0.weight", "F32", &[64, 1, 4, 4]),
        ("main.2.weight", "F32", &[128, 64, 4, 4]),
        ("main.3.weight", "F32", &[128]),
        ("main.3.bias", "F32", &[128]),
        ("main.5.weight", "F32", &[1, 128, 7, 7]),
    ]);
    assert_eq!(critic_header(true), want);
}
