//! Compiles every kernel family with NVRTC (no GPU needed) and checks it against the Rust
//! launchers: no compiler error or warning, every kernel a launcher can name is an `.entry`
//! in the PTX, with exactly the parameter types the launcher passes.
//!
//! NVRTC is found through LD_LIBRARY_PATH (scripts/lib/install-nvrtc.sh prints the directory).
//! Without it the tests print why and pass, unless DCGAN_REQUIRE_NVRTC=1 (set by CI), which
//! turns the missing library into a failure.
#![cfg(feature = "cuda")]

use dcgan_train::backend::cuda::kernel_table::ParamKind;
use dcgan_train::backend::cuda::nvrtc::{self, Output, Target};
use dcgan_train::backend::cuda::{Family, params_header};

/// The architecture CI compiles for: sm_90 (H100), the GPU the benchmarks use.
const CI_ARCH: u32 = 90;

fn nvrtc_or_skip(test: &str) -> bool {
    if nvrtc::is_available() {
        return true;
    }
    if std::env::var("DCGAN_REQUIRE_NVRTC").is_ok_and(|v| v == "1") {
        panic!(
            "{test}: DCGAN_REQUIRE_NVRTC=1 but libnvrtc.so cannot be loaded: run \
             scripts/lib/install-nvrtc.sh and put the directory it prints on LD_LIBRARY_PATH"
        );
    }
    eprintln!(
        "{test}: skipped: libnvrtc.so cannot be loaded (run scripts/lib/install-nvrtc.sh and put \
         the directory it prints on LD_LIBRARY_PATH)"
    );
    false
}

/// The PTX parameter type a kernel parameter compiles to, as `ptx_entry_params` normalizes it.
fn ptx_type(p: &ParamKind) -> String {
    match p {
        ParamKind::Ptr | ParamKind::I64 => ".u64".into(),
        ParamKind::I32 => ".u32".into(),
        ParamKind::F32 => ".f32".into(),
        ParamKind::F64 => ".f64".into(),
        ParamKind::Struct { size, align, .. } => format!(".align {align} .b8 [{size}]"),
    }
}

/// The parameter list of every `.entry` in a PTX module: name -> normalized types
/// (".u64", ".u32", ".f32", ".f64", ".align A .b8 [N]").
fn ptx_entry_params(ptx: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut rest = ptx;
    while let Some(at) = rest.find(".entry ") {
        rest = &rest[at + ".entry ".len()..];
        let Some(open) = rest.find('(') else { break };
        let name = rest[..open].trim().to_string();
        let Some(close) = rest.find(')') else { break };
        let params = rest[open + 1..close]
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| {
                // ".param .u64 name_param_0" or ".param .align 4 .b8 name_param_0[116]"
                let words: Vec<&str> = p.split_whitespace().skip(1).collect();
                if words.first() == Some(&".align") && words.len() >= 4 {
                    let size = words[3].rsplit_once('[').map(|(_, s)| s.trim_end_matches(']')).unwrap_or("?");
                    format!("{} {} {} [{size}]", words[0], words[1], words[2])
                } else {
                    words.first().map(|w| w.to_string()).unwrap_or_default()
                }
            })
            .collect();
        out.push((name, params));
        rest = &rest[close..];
    }
    out
}

#[test]
fn ptx_entry_parsing_normalizes_parameter_types() {
    let ptx = ".visible .entry k1(\n\t.param .align 4 .b8 k1_param_0[116],\n\t.param .u64 .ptr .align 1 k1_param_1,\n\t.param .f32 k1_param_2\n)\n{\n}\n.visible .entry k2(\n\t.param .u32 k2_param_0\n)\n{}";
    let e = ptx_entry_params(ptx);
    assert_eq!(e.len(), 2);
    assert_eq!(e[0].0, "k1");
    assert_eq!(e[0].1, vec![".align 4 .b8 [116]", ".u64", ".f32"]);
    assert_eq!(e[1], ("k2".to_string(), vec![".u32".to_string()]));
}

/// A log that is not empty after a successful compile holds warnings.
fn assert_clean_log(what: &str, log: &str) {
    let meaningful: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(meaningful.is_empty(), "NVRTC reported for {what}:\n{}", meaningful.join("\n"));
}

/// Every family's PTX: each kernel a launcher names is an `.entry` with the parameter types the
/// launcher passes, and no `.entry` is left that no launcher reaches. In the convolutions' PTX
/// the TF32 kernels are MMAs on rounded operands and the fp32 ones have neither.
#[test]
fn every_kernel_compiles_to_ptx_without_warnings_and_matches_its_launcher() {
    if !nvrtc_or_skip("every_kernel_compiles_to_ptx") {
        return;
    }
    let target = Target { arch: CI_ARCH, output: Output::Ptx };
    let mut checked = 0;
    for family in Family::ALL {
        let file = family.kernels();
        let compiled =
            nvrtc::compile_family(family, &target).unwrap_or_else(|e| panic!("kernels/{}: {e:#}", file.file));
        assert_clean_log(file.file, &compiled.log);
        let ptx = nvrtc::ptx_text(&compiled.image);
        let entries = ptx_entry_params(&ptx);
        for sig in file.kernels {
            let (_, params) = entries.iter().find(|(name, _)| name == sig.name).unwrap_or_else(|| {
                panic!(
                    "kernel {} (launched from Rust) is not an .entry of kernels/{}; entries: {:?}",
                    sig.name,
                    file.file,
                    entries.iter().map(|e| &e.0).collect::<Vec<_>>()
                )
            });
            let want: Vec<String> = sig.params.iter().map(ptx_type).collect();
            assert_eq!(
                params, &want,
                "parameters of {} in kernels/{}: PTX has {params:?}, the launcher passes {want:?}",
                sig.name, file.file
            );
            checked += 1;
        }
        // No kernel in the file that no launcher can reach (dead code or a missing launcher).
        for (name, _) in &entries {
            assert!(
                file.kernels.iter().any(|k| k.name == name),
                "kernels/{} defines {name}, which no launcher declares",
                file.file
            );
        }
        if family == Family::Conv {
            assert_eq!(tensor_core_entries(&ptx), 16);
        }
    }
    assert!(checked >= 20, "only {checked} kernels checked");
}

/// The number of TF32 entries (named `..._tf32`) in a PTX text, after checking that exactly
/// those use `mma.sync` on operands rounded by `cvt.rna`.
fn tensor_core_entries(ptx: &str) -> usize {
    let mut tensor_core_entries = 0;
    for body in ptx.split(".entry ").skip(1) {
        let name = body.split('(').next().unwrap().trim();
        let tensor_cores = name.ends_with("tf32");
        tensor_core_entries += tensor_cores as usize;
        assert_eq!(body.contains("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"), tensor_cores, "{name}");
        assert_eq!(body.contains("cvt.rna.tf32.f32"), tensor_cores, "{name}");
    }
    tensor_core_entries
}

/// Every family compiles to machine code for the CI architecture, with ptxas's report of
/// each kernel: no convolution spills registers to local memory (the small kernels of the
/// other families may, at no cost that matters).
#[test]
fn every_family_compiles_to_cubin_without_spills_for_the_ci_architecture() {
    if !nvrtc_or_skip("every_family_compiles_to_cubin") {
        return;
    }
    let mut options = nvrtc::options(&Target { arch: CI_ARCH, output: Output::Cubin });
    options.push("--ptxas-options=-v".into());
    let mut entries = 0;
    for family in Family::ALL {
        let file = family.kernels();
        let name = format!("kernels/{}", file.file);
        let c = nvrtc::compile(&name, file.source, &nvrtc::headers(), &options, Output::Cubin)
            .unwrap_or_else(|e| panic!("{name}: {e:#}"));
        // An ELF image.
        assert_eq!(&c.image[..4], b"\x7fELF", "{:?} did not produce a CUBIN", family);
        // ptxas reports every kernel on lines of its own; anything else is a warning.
        let (report, rest): (Vec<&str>, Vec<&str>) = c.log.lines().partition(|l| l.starts_with("ptxas"));
        assert_clean_log(file.file, &rest.join("\n"));
        let report = report.join("\n");
        let kernels = report.matches("Compiling entry function").count();
        assert_eq!(kernels, file.kernels.len(), "{name}:\n{report}");
        if family == Family::Conv {
            assert_eq!(report.matches(" 0 bytes spill stores").count(), kernels, "a kernel spills:\n{report}");
            assert!(kernels >= 30, "{kernels} convolutions");
        }
        entries += kernels;
    }
    assert!(entries >= 50, "{entries} entries");
    assert!(nvrtc::supported_archs().unwrap().contains(&CI_ARCH));
}

#[test]
fn a_compile_error_names_the_file_and_line() {
    if !nvrtc_or_skip("a_compile_error_names_the_file_and_line") {
        return;
    }
    let src =
        "#include \"common.cuh\"\n\nextern \"C\" __global__ void broken(float* x) {\n  x[0] = undefined_name;\n}\n";
    let err = nvrtc::compile(
        "kernels/broken.cu",
        src,
        &nvrtc::headers(),
        &nvrtc::options(&Target { arch: CI_ARCH, output: Output::Ptx }),
        Output::Ptx,
    )
    .unwrap_err();
    let msg = format!("{err:#}");
    assert!(msg.contains("kernels/broken.cu(4)"), "{msg}");
    assert!(msg.contains("undefined_name"), "{msg}");
}

#[test]
fn the_generated_header_declares_every_parameter_struct() {
    let h = params_header();
    assert!(h.contains("struct FastDiv {"), "{h}");
    assert!(h.contains("struct ConvParams {"), "{h}");
    // FastDiv comes first: ConvParams uses it.
    assert!(h.find("struct FastDiv").unwrap() < h.find("struct ConvParams").unwrap());
}

#[test]
fn the_kernel_cache_stores_reuses_and_refreshes_images() {
    use dcgan_train::backend::cuda::kernel_cache;
    if !nvrtc_or_skip("the_kernel_cache") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("dcgan-cache-test-{}", std::process::id()));
    // Only this test in this binary reads the cache location.
    unsafe { std::env::set_var("DCGAN_KERNEL_CACHE", &dir) };
    let target = Target { arch: CI_ARCH, output: Output::Cubin };
    let fresh = kernel_cache::load_or_compile(Family::Adam, &target, false).unwrap();
    let files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let name = files[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with("adam-sm_90-") && name.ends_with(".cubin"), "{name}");
    // A second load is the stored file: damage it and see the damage come back...
    std::fs::write(&files[0], b"not a cubin").unwrap();
    let cached = kernel_cache::load_or_compile(Family::Adam, &target, false).unwrap();
    assert_eq!(cached, b"not a cubin");
    // ... and a refresh (what the driver does when an image fails to load) compile it anew.
    let refreshed = kernel_cache::load_or_compile(Family::Adam, &target, true).unwrap();
    assert_eq!(refreshed, fresh);
    assert_eq!(std::fs::read(&files[0]).unwrap(), fresh);
    // Another target is another file.
    let ptx = Target { arch: CI_ARCH, output: Output::Ptx };
    kernel_cache::load_or_compile(Family::Adam, &ptx, false).unwrap();
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Before compute capability 8.0 the tensor-core kernels still compile (and trap if run; the
/// backend refuses them there first).
#[test]
fn the_convolutions_compile_for_turing() {
    if !nvrtc_or_skip("the_convolutions_compile_for_turing") {
        return;
    }
    let conv = Family::Conv.kernels();
    let options = nvrtc::options(&Target { arch: 75, output: Output::Ptx });
    let c = nvrtc::compile("kernels/conv.cu", conv.source, &nvrtc::headers(), &options, Output::Ptx)
        .unwrap_or_else(|e| panic!("compute_75: {e:#}"));
    assert_clean_log(conv.file, &c.log);
}
