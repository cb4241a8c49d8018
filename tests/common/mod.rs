//! Helpers shared by the integration tests.

#![allow(dead_code)]

pub mod reference;
pub mod scaling_bench;

use dcgan_train::record::{StepRecord, Summary};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// `n` values uniform in [-scale, scale] from `seed`.
pub fn random(n: usize, scale: f32, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(-scale..scale)).collect()
}

pub fn to_f64(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

/// max |a - b| / max(max |b|, floor): the error of `a` relative to the reference's scale.
pub fn rel_err(a: &[f32], b: &[f64], floor: f64) -> f64 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(floor);
    a.iter().zip(b).fold(0.0f64, |m, (x, y)| m.max((*x as f64 - y).abs())) / scale
}

/// <a, b> in f64.
pub fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Every F32 tensor of a safetensors file, parsed by hand (independently of the crate).
pub fn read_safetensors(path: &std::path::Path) -> std::collections::BTreeMap<String, Vec<f32>> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let data = &bytes[8 + n..];
    let mut out = std::collections::BTreeMap::new();
    for (name, t) in header.as_object().unwrap() {
        if name == "__metadata__" || t["dtype"] != "F32" {
            continue;
        }
        let (s, e) = (t["data_offsets"][0].as_u64().unwrap() as usize, t["data_offsets"][1].as_u64().unwrap() as usize);
        out.insert(
            name.clone(),
            data[s..e].chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect(),
        );
    }
    out
}

/// (pixels [height, width], height, width) of an 8-bit grayscale PNG (a sample grid).
pub fn read_png_gray(path: &std::path::Path) -> (Vec<u8>, usize, usize) {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut reader = png::Decoder::new(std::io::BufReader::new(file)).read_info().unwrap();
    assert_eq!((reader.info().color_type, reader.info().bit_depth), (png::ColorType::Grayscale, png::BitDepth::Eight));
    let mut pixels = vec![0u8; reader.output_buffer_size().unwrap()];
    let frame = reader.next_frame(&mut pixels).unwrap();
    pixels.truncate(frame.buffer_size());
    (pixels, frame.height as usize, frame.width as usize)
}

/// G's and D's tensors of the latest checkpoint of a run, keyed "G main.0.weight".
pub fn final_weights(run: &std::path::Path) -> std::collections::BTreeMap<String, Vec<f32>> {
    let root = run.join("checkpoints");
    let latest = std::fs::read_to_string(root.join("latest")).expect("the run wrote a checkpoint");
    let dir = root.join(latest.trim());
    let mut all = std::collections::BTreeMap::new();
    for net in ["G", "D"] {
        for (k, v) in read_safetensors(&dir.join(format!("{net}.safetensors"))) {
            all.insert(format!("{net} {k}"), v);
        }
    }
    all
}

/// `mpiexec` with the options every run in the tests needs: more ranks than cores, and each
/// rank's threads free to use any core (`run_limited` adds the root permissions).
pub fn mpiexec() -> std::process::Command {
    let mut cmd = std::process::Command::new("mpiexec");
    cmd.args(["--oversubscribe", "--bind-to", "none"]);
    own_session(&mut cmd);
    cmd
}

/// Gives an mpiexec job a session directory of its own. Open MPI keeps every job's under one
/// directory per host and user (/tmp/ompi.HOST.UID), which a job that ends removes while one
/// that starts creates it: jobs of tests running side by side then fail in orte_init
/// ("mkdir ... File exists"). Each job's is left empty when it ends; those of test processes
/// no longer running are removed here.
pub fn own_session(cmd: &mut std::process::Command) {
    static JOBS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let root = std::env::temp_dir().join("dcgan-test-ompi");
    for entry in std::fs::read_dir(&root).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        let pid = name.split('-').next().unwrap_or_default();
        if !std::path::Path::new("/proc").join(pid).exists() {
            std::fs::remove_dir_all(entry.path()).ok();
        }
    }
    let n = JOBS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = root.join(format!("{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a session directory for mpiexec");
    cmd.env("OMPI_MCA_orte_tmpdir_base", dir);
}

/// `mpiexec -n ranks dcgan-train` with those options; its arguments follow.
pub fn mpiexec_ranks(ranks: usize) -> std::process::Command {
    let mut cmd = mpiexec();
    cmd.args(["-n", &ranks.to_string(), env!("CARGO_BIN_EXE_dcgan-train")]);
    cmd
}

/// The dcgan-train binary under `mpiexec -n ranks` (as root, oversubscribed: what the test
/// machines need), killed and failed if it runs longer than `limit_s`.
pub fn mpirun(ranks: usize, args: &[&str], limit_s: u64) -> std::process::Output {
    let mut cmd = mpiexec_ranks(ranks);
    cmd.args(args);
    run_limited(cmd, limit_s)
}

/// The program with `args`, one process, within 10 minutes (a hang is a failure).
pub fn program(args: &[&str]) -> std::process::Output {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_dcgan-train"));
    cmd.args(args);
    run_limited(cmd, 600)
}

/// Run `cmd` with Open MPI's root/oversubscription permissions,
/// failing the test if it does not finish within `limit_s` (a hang is a failure).
pub fn run_limited(mut cmd: std::process::Command, limit_s: u64) -> std::process::Output {
    use std::io::Read;
    cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1").env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("mpiexec runs (Open MPI is installed by scripts/test.sh)");
    // Drain the pipes on threads so a chatty child cannot block on a full pipe.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        out.read_to_end(&mut v).ok();
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        err.read_to_end(&mut v).ok();
        v
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(limit_s);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > deadline {
            child.kill().ok();
            child.wait().ok();
            panic!("{cmd:?} did not finish within {limit_s} s (a hang)");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    std::process::Output { status, stdout: t_out.join().unwrap(), stderr: t_err.join().unwrap() }
}

/// Synthetic data whose classes (its shapes) a feature network learns in a second: 32 steps
/// an epoch at batch 64, where a test follows how the FID moves as a run trains.
pub const SYNTHETIC_EVAL_DATA: &str = "synthetic:2048";

/// A quarter of it, 8 steps an epoch at batch 64 (and 512 test images), where a test counts
/// epochs, checkpoints and records rather than following the FID.
pub const SMALL_EVAL_DATA: &str = "synthetic:512";

/// G and D at a quarter of the DCGAN paper's widths (`--ngf 16 --ndf 16`): a step is a tenth
/// of the work at the same batch, for tests of what a run does and keeps rather than of the
/// paper's networks.
pub const NARROW: [&str; 4] = ["--ngf", "16", "--ndf", "16"];

/// The feature network of `SYNTHETIC_EVAL_DATA` (see `feature_net`).
pub fn synthetic_feature_net(bin: &str) -> &'static std::path::Path {
    feature_net(bin, SYNTHETIC_EVAL_DATA, 5)
}

/// The feature network of `SMALL_EVAL_DATA` (see `feature_net`).
pub fn small_feature_net(bin: &str) -> &'static std::path::Path {
    // A quarter of the images takes more passes to tell the shapes apart.
    feature_net(bin, SMALL_EVAL_DATA, 16)
}

/// The feature network of the synthetic `data`, trained by the program `bin` once for every
/// build of it: test processes (nextest runs each test in its own) find it under the target
/// directory, keyed by the binary's size and modification time, one training it while the
/// others wait on a lock. `epochs`: the classifier's passes over the data.
fn feature_net(bin: &str, data: &'static str, epochs: u32) -> &'static std::path::Path {
    static NETS: std::sync::Mutex<Vec<(&str, &std::path::Path)>> = std::sync::Mutex::new(Vec::new());
    let mut nets = NETS.lock().unwrap();
    if let Some(&(_, p)) = nets.iter().find(|(d, _)| *d == data) {
        return p;
    }
    let meta = std::fs::metadata(bin).expect("the program under test");
    let built = meta.modified().unwrap().duration_since(std::time::UNIX_EPOCH).unwrap();
    let build = format!("build-{}-{}-", meta.len(), built.as_nanos());
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("feature-nets");
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(format!("{build}{}.safetensors", data.replace(':', "-")));
    let lock = std::fs::File::create(dir.join("lock")).unwrap();
    lock.lock().unwrap();
    if !p.exists() {
        let tmp = dir.join(format!("training-{}.safetensors", std::process::id()));
        let mut cmd = std::process::Command::new(bin);
        cmd.args(["classifier", "--data", data, "--epochs", &epochs.to_string(), "--out", tmp.to_str().unwrap()]);
        let o = run_limited(cmd, 600);
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(o.status.success(), "{err}");
        let accuracy: f64 = err.split("test accuracy ").nth(1).unwrap()[..6].parse().unwrap();
        assert!(accuracy > 0.9, "a feature network that cannot tell the shapes of {data} apart: {err}");
        // Those of earlier builds are of no more use.
        for old in std::fs::read_dir(&dir).unwrap().flatten() {
            let name = old.file_name().to_string_lossy().to_string();
            if name.starts_with("build-") && !name.starts_with(&build) {
                std::fs::remove_file(old.path()).ok();
            }
        }
        std::fs::rename(&tmp, &p).unwrap();
    }
    let p: &'static std::path::Path = Box::leak(p.into_boxed_path());
    nets.push((data, p));
    p
}

/// The checkpoint directories (`step-...`) of the run in `run`, sorted by name.
pub fn checkpoint_names(run: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(run.join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with("step-"))
        .collect();
    v.sort();
    v
}

/// The step records of a run's metrics.jsonl, as written.
pub fn timed_step_records(run: &std::path::Path) -> Vec<StepRecord> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["type"] == "step")
        .map(|v| serde_json::from_value(v).unwrap())
        .collect()
}

/// The step records of a run's metrics.jsonl, with the clock fields (wall and CPU) zeroed:
/// what a run computed, which the same run repeated must repeat.
pub fn step_records(run: &std::path::Path) -> Vec<StepRecord> {
    timed_step_records(run)
        .into_iter()
        .map(|r| StepRecord { ms: 0.0, wait_ms: 0.0, cpu_ms: 0.0, descheduled_ms: None, ..r })
        .collect()
}

/// A run's summary.json, read as the program's own type.
pub fn read_summary(run: &std::path::Path) -> Summary {
    Summary::read(&run.join("summary.json"), "the run's").unwrap()
}

/// A safetensors file's header (the JSON) and where its data starts.
fn safetensors_header(bytes: &[u8]) -> (serde_json::Map<String, serde_json::Value>, usize) {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    (header.as_object().unwrap().clone(), 8 + n)
}

/// Flip one byte in the middle of tensor `name`'s data in the safetensors file `path` (the
/// header stays as it was): what a bad sector or a bit flip in memory does.
pub fn flip_tensor_byte(path: &std::path::Path, name: &str) {
    let mut bytes = std::fs::read(path).unwrap();
    let (header, data) = safetensors_header(&bytes);
    let offsets = &header[name]["data_offsets"];
    let (s, e) = (offsets[0].as_u64().unwrap() as usize, offsets[1].as_u64().unwrap() as usize);
    // The high byte of a float: its sign and exponent, so the value changes a lot.
    let at = data + s + ((e - s) / 8) * 4 + 3;
    bytes[at] ^= 0x40;
    std::fs::write(path, bytes).unwrap();
}

/// The `__metadata__` of a safetensors file.
pub fn safetensors_metadata(path: &std::path::Path) -> serde_json::Map<String, serde_json::Value> {
    let (header, _) = safetensors_header(&std::fs::read(path).unwrap());
    header["__metadata__"].as_object().unwrap().clone()
}

/// The tensors of a safetensors file as PyTorch reads its header: (name, dtype, shape),
/// sorted by name.
pub fn safetensors_tensors(path: &std::path::Path) -> Vec<(String, String, Vec<usize>)> {
    let (header, _) = safetensors_header(&std::fs::read(path).unwrap());
    let mut out: Vec<_> = header
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

/// The tensor names of a safetensors file.
pub fn safetensors_names(path: &std::path::Path) -> Vec<String> {
    let (header, _) = safetensors_header(&std::fs::read(path).unwrap());
    header.keys().filter(|k| *k != "__metadata__").cloned().collect()
}

/// Rewrite the `__metadata__` of a safetensors file with `change` (the tensors stay as they
/// are): e.g. a checkpoint as written before it carried digests.
pub fn rewrite_metadata(path: &std::path::Path, change: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>)) {
    let bytes = std::fs::read(path).unwrap();
    let (mut header, data) = safetensors_header(&bytes);
    let mut meta = header["__metadata__"].as_object().unwrap().clone();
    change(&mut meta);
    header.insert("__metadata__".into(), meta.into());
    let mut text = serde_json::to_vec(&header).unwrap();
    // Padded with spaces to 8 bytes, as safetensors writes it.
    text.resize(text.len().next_multiple_of(8), b' ');
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend(text);
    out.extend(&bytes[data..]);
    std::fs::write(path, out).unwrap();
}

/// `dcgan-train` on `ranks` ranks with `base` options, then `--no-progress --out out` and
/// `extra`; the run must succeed.
pub fn train_ranks(ranks: usize, out: &std::path::Path, base: &[&str], extra: &[&str]) {
    let out = out.to_str().unwrap();
    let mut args = base.to_vec();
    args.extend_from_slice(&["--no-progress", "--out", out]);
    args.extend_from_slice(extra);
    let o = mpirun(ranks, &args, 300);
    assert!(o.status.success(), "{ranks} ranks {extra:?}:\n{}", String::from_utf8_lossy(&o.stderr));
}

/// A short run of `steps` steps on 512 small synthetic images, 8 a rank, 1 thread a rank.
pub fn train_small(ranks: usize, out: &std::path::Path, steps: &str, extra: &[&str]) {
    let base = ["--data", "synthetic:512", "--batch-size", "8", "--threads", "1", "--max-steps", steps];
    train_ranks(ranks, out, &base, extra);
}

/// `train_small` with G and D at `NARROW`'s width: for what does not depend on the width (the
/// order of steps, what moves between ranks, resumes), at a fifth of a step's time.
pub fn train_narrow(ranks: usize, out: &std::path::Path, steps: &str, extra: &[&str]) {
    train_small(ranks, out, steps, &[&NARROW[..], extra].concat());
}
