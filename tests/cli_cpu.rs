//! The command line around training, on one rank: what `sample --out` may replace and its
//! walks between noise vectors, where runs without `--out` go, how long `--max-steps` runs, the
//! `--progress` modes, `info`, `--precision` and `--cuda-graphs` on the CPU, the networks'
//! widths, the version the program gives, and outputs refused before the work.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dcgan-train"))
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("the binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

/// A short CPU run into `out`: `steps` steps of batch 16 over 64 synthetic images (4 steps
/// per epoch), with `extra` flags.
fn train(out: &Path, steps: &str, extra: &[&str]) -> Output {
    let mut args = vec!["--data", "synthetic:64", "--batch-size", "16", "--device", "cpu", "--threads", "1"];
    args.extend(["--max-steps", steps, "--out", out.to_str().unwrap()]);
    args.extend_from_slice(extra);
    run(&args)
}

/// Whether `path` is a PNG with the `Software: dcgan-train` text chunk, read independently of
/// the program's own check.
fn marked(path: &Path) -> bool {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let reader = png::Decoder::new(std::io::BufReader::new(file)).read_info().unwrap();
    reader.info().uncompressed_latin1_text.iter().any(|t| t.keyword == "Software" && t.text == "dcgan-train")
}

/// `sample --out` replaces a missing file or a grid this program wrote, and refuses anything
/// else (a text file stays as it was) unless `--force`. The run's own grids carry the mark.
#[test]
fn sample_replaces_only_its_own_pngs_without_force() {
    let tmp = tempfile::tempdir().unwrap();
    let run_dir = tmp.path().join("r");
    let o = train(&run_dir, "4", &["--no-progress"]);
    assert!(o.status.success(), "{}", stderr(&o));
    for grid in ["epoch-001.png", "final.png"] {
        assert!(marked(&run_dir.join("samples").join(grid)), "{grid} carries the mark");
    }
    let ck = run_dir.to_str().unwrap();
    let sample = |out: &Path, force: bool| {
        let mut args = vec!["sample", "--checkpoint", ck, "--n", "4", "--out", out.to_str().unwrap()];
        if force {
            args.push("--force");
        }
        run(&args)
    };

    let notes = tmp.path().join("notes.txt");
    std::fs::write(&notes, "not an image\n").unwrap();
    let o = sample(&notes, false);
    assert!(!o.status.success(), "{}", stderr(&o));
    let want = format!(
        "error: sample --out {}: the file exists and is not a PNG that dcgan-train wrote: choose another --out, or \
         pass --force to overwrite it\n",
        notes.display()
    );
    assert_eq!(stderr(&o), want);
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "not an image\n", "the file is kept");

    // Another program's PNG is someone's work too.
    let foreign = tmp.path().join("photo.png");
    let mut bytes = Vec::new();
    let mut encoder = png::Encoder::new(&mut bytes, 1, 1);
    encoder.set_color(png::ColorType::Grayscale);
    let mut writer = encoder.write_header().unwrap();
    writer.write_image_data(&[7]).unwrap();
    writer.finish().unwrap();
    std::fs::write(&foreign, &bytes).unwrap();
    let o = sample(&foreign, false);
    assert!(!o.status.success() && stderr(&o).contains("--force"), "{}", stderr(&o));
    assert_eq!(std::fs::read(&foreign).unwrap(), bytes);

    // A missing file is written; the grid it became is replaced without --force.
    let fresh = tmp.path().join("grid.png");
    for _ in 0..2 {
        let o = sample(&fresh, false);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(marked(&fresh));
    }
    // --force replaces the text file.
    let o = sample(&notes, true);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(common::read_png_gray(&notes).1, 2 * 28 + 3 * 2, "a 2x2 grid of 28x28");
}

/// `sample --interpolate K`: rows of K that start and end at the noise vectors a plain sample
/// draws (each row where the one before ended), with the great circle's point between them
/// in the middle, computed here in f64; a straight line's middle is another image.
#[test]
fn sample_walks_between_the_noise_vectors_along_the_circle() {
    use dcgan_train::backend::cpu::Cpu;
    use dcgan_train::eval::generate::{Generator, WhichGenerator};
    use dcgan_train::model::dcgan::NZ;
    let tmp = tempfile::tempdir().unwrap();
    let ck = tmp.path().join("run");
    assert!(train(&ck, "3", &["--no-progress"]).status.success());
    let idx = |name: &str, extra: &[&str]| -> Vec<Vec<u8>> {
        let out = tmp.path().join(name);
        let mut args = vec!["sample", "--checkpoint", ck.to_str().unwrap(), "--out", out.to_str().unwrap()];
        args.extend_from_slice(extra);
        let o = run(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        let (pixels, count, h, w) = dcgan_train::data::idx::read_idx_images(&out).unwrap();
        assert_eq!(pixels.len(), count * h * w);
        pixels.chunks_exact(h * w).map(|c| c.to_vec()).collect()
    };
    let ends = idx("ends.idx", &["--n", "3"]);
    // 5 images asked: two whole rows of 3, between 3 vectors.
    let walk = idx("walk.idx", &["--n", "5", "--interpolate", "3"]);
    assert_eq!(walk.len(), 6);
    assert_eq!([&walk[0], &walk[2], &walk[3], &walk[5]], [&ends[0], &ends[1], &ends[1], &ends[2]]);
    // The middle of row 0: cos and sin weights of half the angle between the ends, over sin.
    let seed = dcgan_train::checkpoint::load_progress(&ck.join("checkpoints").join("step-00000003")).unwrap().seed;
    let z = dcgan_train::model::noise::fixed_noise(seed, 2, NZ);
    let (a, b) = (&z[..NZ], &z[NZ..]);
    let norm = |v: &[f32]| v.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
    let dot: f64 = a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum();
    let omega = (dot / (norm(a) * norm(b))).acos();
    let w = (omega / 2.0).sin() / omega.sin();
    let on_circle: Vec<f32> = a.iter().zip(b).map(|(&x, &y)| (w * (x as f64 + y as f64)) as f32).collect();
    let on_line: Vec<f32> = a.iter().zip(b).map(|(&x, &y)| (0.5 * (x as f64 + y as f64)) as f32).collect();
    let mut g = Generator::load(&Cpu, &ck.join("checkpoints/step-00000003"), 1, WhichGenerator::Auto).unwrap();
    let byte = |v: f32| ((v.clamp(-1.0, 1.0) + 1.0) * 127.5).round() as i32;
    let mut gap =
        |z: &[f32]| g.draw(&Cpu, z).iter().zip(&walk[1]).map(|(&v, &p)| (byte(v) - p as i32).abs()).max().unwrap();
    // One grey level of rounding: the same weights, but the walk sums wa x + wb y where this
    // takes w (x + y), which may round to an f32 one unit apart.
    assert!(gap(&on_circle) <= 1, "the middle is not the circle's point");
    assert!(gap(&on_line) > 1, "the straight line's middle draws the same image: the test cannot tell them apart");
}

/// Runs without `--out` never share a directory: with runs/<this second> (and the next
/// minute's) already taken by a run that has not reached its first checkpoint, two runs
/// started together each make one of their own, and the taken ones stay as they were (the
/// runs were told, before, that the other had "ended before its first checkpoint").
#[test]
fn runs_without_out_in_the_same_second_get_their_own_directories() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let now = chrono::Local::now();
    for s in 0..60 {
        let taken = runs.join((now + chrono::Duration::seconds(s)).format("%Y%m%d-%H%M%S").to_string());
        std::fs::create_dir_all(&taken).unwrap();
        std::fs::write(taken.join("metrics.jsonl"), "running\n").unwrap();
    }
    let args = ["--data", "synthetic:64", "--batch-size", "16", "--device", "cpu", "--threads", "1"];
    let children: Vec<_> = (0..2)
        .map(|_| {
            bin()
                .args(args)
                .args(["--max-steps", "1", "--no-progress"])
                .current_dir(tmp.path())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let mut finished = Vec::new();
    for entry in std::fs::read_dir(&runs).unwrap() {
        let dir = entry.unwrap().path();
        if dir.join("summary.json").exists() {
            finished.push(dir);
        } else {
            assert_eq!(std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap(), "running\n", "{}", dir.display());
        }
    }
    assert_eq!(finished.len(), 2, "two runs, two directories: {finished:?}");
    for dir in &finished {
        let name = dir.file_name().unwrap().to_string_lossy();
        assert!(name.ends_with("-2") || name.ends_with("-3"), "{name}: the next free name");
        assert_eq!(common::step_records(dir).len(), 1, "{name} holds one run's steps");
    }
}

/// `--max-steps` alone sets the run's length, past the 5 epochs that are the default without
/// it, and the progress lines count to that end; with `--epochs` too, the first limit
/// reached ends the run.
#[test]
fn max_steps_alone_runs_past_the_default_epochs() {
    let tmp = tempfile::tempdir().unwrap();
    // 4 steps per epoch: 22 steps are 5 whole epochs and 2 steps of a sixth.
    let alone = tmp.path().join("alone");
    let o = train(&alone, "22", &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(common::step_records(&alone).len(), 22);
    assert_eq!(common::read_summary(&alone).steps, 22);
    let err = stderr(&o);
    assert!(err.contains("epoch 1/6 step 1/4 |") && err.contains("epoch 6/6 step 1/2 |"), "{err}");
    let both = tmp.path().join("both");
    let o = train(&both, "22", &["--epochs", "2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(common::step_records(&both).len(), 8, "two epochs of 4 steps come first");
    assert!(stderr(&o).contains("epoch 2/2 done: 4 steps"), "{}", stderr(&o));
}

/// The tensor shapes of a safetensors file, by name.
fn shapes(path: &Path) -> std::collections::BTreeMap<String, Vec<usize>> {
    common::safetensors_tensors(path).into_iter().map(|(name, _, shape)| (name, shape)).collect()
}

/// `--ngf` and `--ndf` give the networks' widths: G's hidden layers hold 4 ngf and 2 ngf
/// feature maps, D's ndf and 2 ndf, and `sample` builds the generator at the width its
/// checkpoint records. A width of 0 or past 4096 is one line, and nothing is written.
#[test]
fn the_widths_shape_the_networks_and_go_with_the_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("narrow");
    let o = train(&out, "2", &["--ngf", "8", "--ndf", "12"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let ck = out.join("checkpoints").join("step-00000002");
    let (g, d) = (shapes(&ck.join("G.safetensors")), shapes(&ck.join("D.safetensors")));
    assert_eq!(
        (&g["main.0.weight"], &g["main.3.weight"], &g["main.6.weight"]),
        (&vec![100, 32, 7, 7], &vec![32, 16, 4, 4], &vec![16, 1, 4, 4])
    );
    assert_eq!(
        (&d["main.0.weight"], &d["main.2.weight"], &d["main.5.weight"]),
        (&vec![12, 1, 4, 4], &vec![24, 12, 4, 4], &vec![1, 24, 7, 7])
    );
    let png = tmp.path().join("narrow.png");
    let o = run(&["sample", "--checkpoint", out.to_str().unwrap(), "--out", png.to_str().unwrap()]);
    assert!(o.status.success() && marked(&png), "{}", stderr(&o));
    for (flag, value) in [("--ngf", "0"), ("--ndf", "4097")] {
        let never = tmp.path().join(format!("never{flag}"));
        let o = train(&never, "2", &[flag, value]);
        let err = stderr(&o);
        let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
        assert!(!o.status.success() && errors.len() == 1, "{flag} {value}: {err}");
        assert!(errors[0].contains(flag) && errors[0].contains("give 1 to 4096"), "{err}");
        assert!(!never.exists(), "{flag} {value} made the run directory");
    }
}

/// `--progress lines` writes the progress lines, `none` nothing, and `bar` draws the bar also
/// where stderr is a pipe (as it is under mpiexec, where `auto` gives lines); `--no-progress`
/// is `none` and is not taken together with `--progress`.
#[test]
fn progress_modes_write_what_they_say() {
    let tmp = tempfile::tempdir().unwrap();
    let o = train(&tmp.path().join("lines"), "4", &["--progress", "lines"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("epoch 1/1 step 1/4 |") && err.contains("epoch 1/1 done: 4 steps |"), "{err}");
    assert!(!err.contains('\x1b'), "no escape sequences in lines: {err:?}");

    let o = train(&tmp.path().join("none"), "4", &["--progress", "none"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("epoch 1/1"), "{}", stderr(&o));

    let o = train(&tmp.path().join("bar"), "4", &["--progress", "bar"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("\r\x1b[2Kepoch 1/1 [") && err.contains("] 4/4 ["), "a bar into the pipe: {err:?}");
    assert!(!err.contains("step 1/4 |"), "{err:?}");

    let o = run(&["--no-progress", "--progress", "bar"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("'--no-progress' cannot be used with '--progress <PROGRESS>'"), "{}", stderr(&o));
}

/// `info` on the CPU prints the host's memory, in all and available (as a GPU's line prints
/// the GPU's), beside why no GPU is used.
#[test]
fn info_prints_the_hosts_memory_on_the_cpu() {
    let o = bin().arg("info").env("CUDA_VISIBLE_DEVICES", "").output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let line = out.lines().find(|l| l.starts_with("rank   0")).unwrap_or_else(|| panic!("{out}"));
    let shown = line.split("cpu (").nth(1).unwrap_or_else(|| panic!("a CPU line: {line}"));
    assert!(shown.contains(" GiB available; "), "{line}");
    let gib: Vec<f64> = shown.split(" GiB").take(2).map(|s| s.rsplit(' ').next().unwrap().parse().unwrap()).collect();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kib = |field: &str| -> f64 {
        let l = meminfo.lines().find(|l| l.starts_with(field)).unwrap();
        l.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    let total = kib("MemTotal:") / (1u64 << 20) as f64;
    assert!((gib[0] - total).abs() <= 0.051, "{line}: MemTotal is {total:.2} GiB");
    assert!(gib[1] > 0.0 && gib[1] <= gib[0], "{line}");
}

#[test]
fn tensor_core_precisions_and_cuda_graphs_are_refused_on_the_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    for precision in ["tf32", "3xtf32"] {
        let o = train(&out, "1", &["--precision", precision]);
        let err = stderr(&o);
        assert!(!o.status.success(), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(
            err.contains(&format!("--precision {precision} is for a GPU")) && err.contains("--precision fp32"),
            "{err}"
        );
        assert!(!out.exists(), "a refused run wrote {}", out.display());
    }
    let o = train(&out, "1", &["--cuda-graphs"]);
    let err = stderr(&o);
    assert!(!o.status.success() && err.trim().lines().count() == 1, "{err}");
    assert!(err.contains("--cuda-graphs replays CUDA kernels") && err.contains("drop --cuda-graphs"), "{err}");
    assert!(!out.exists(), "a refused run wrote {}", out.display());
    let o = train(&out, "1", &["--precision", "fp32"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// `--version`, `info` and the summary a run writes name the commit the binary was built
/// from, as git sees this checkout now, with ", modified" where its sources differ from it.
#[test]
fn the_version_names_the_commit_the_binary_was_built_from() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let git = |args: &[&str]| {
        let o = Command::new("git").current_dir(root).args(args).output().ok()?;
        o.status.success().then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let own_checkout = git(&["rev-parse", "--show-toplevel"])
        .is_some_and(|top| Path::new(&top).canonicalize().ok() == root.canonicalize().ok());
    let build = match git(&["rev-parse", "--short=12", "HEAD"]).filter(|_| own_checkout) {
        Some(commit) => {
            // Without optional locks: a `git status` that refreshes the index reruns the build
            // script, and cargo then builds the library again.
            let sources = ["src", "kernels", "build.rs", "Cargo.toml", "Cargo.lock"];
            let sources = [&["--no-optional-locks", "status", "--porcelain", "--"][..], &sources].concat();
            let modified = git(&sources).is_some_and(|s| !s.is_empty());
            format!(" (commit {commit}{})", if modified { ", modified" } else { "" })
        }
        None => String::new(),
    };
    let program = format!("dcgan-train {}{build}", env!("CARGO_PKG_VERSION"));
    let o = run(&["--version"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), program);
    let o = bin().arg("info").env("CUDA_VISIBLE_DEVICES", "").output().unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).starts_with(&format!("{program}: 1 rank(s)")), "{}", stderr(&o));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let o = train(&out, "1", &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let summary: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["program"], program);
}

/// The single-process commands refuse an output they could not write before their work (the
/// trace is not read, no feature network is trained), and the feature network's trainer
/// names the fix for too few images.
#[test]
fn outputs_that_cannot_be_written_are_refused_before_the_work() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, file) = (tmp.path().join("dir"), tmp.path().join("a-file"));
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(&file, "").unwrap();
    let (d, under_file) = (dir.to_str().unwrap(), file.join("net.safetensors"));
    let missing = tmp.path().join("no-trace.json");
    let cases: [(Vec<&str>, String); 3] = [
        (
            vec!["trace-report", missing.to_str().unwrap(), "--json", d],
            format!("error: --json {d} is a directory: name a file"),
        ),
        (
            vec!["evaluate", "--images", missing.to_str().unwrap(), "--json", d],
            format!("error: --json {d} is a directory: name a file"),
        ),
        (
            vec!["classifier", "--data", "synthetic:300", "--out", under_file.to_str().unwrap()],
            format!("error: --out {}", under_file.display()),
        ),
    ];
    for (args, want) in &cases {
        let o = run(args);
        let err = stderr(&o);
        assert!(!o.status.success() && err.lines().any(|l| l.starts_with(want.as_str())), "{args:?}: {err}");
        assert!(!err.contains("training the feature network"), "{args:?}: trained first: {err}");
    }
    let o = run(&["classifier", "--data", "synthetic:10", "--out", tmp.path().join("c").to_str().unwrap()]);
    let err = stderr(&o);
    assert!(!o.status.success() && err.contains("give --data a set of at least 64 training images"), "{err}");
}
