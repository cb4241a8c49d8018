//! Imports run downward only: every top-level module of src/ may name (`crate::x`) only the
//! modules below it in this table, so that the communication layer and the cost model never
//! learn about the command line or the training loop, and no cycle creeps in.

use std::collections::BTreeSet;
use std::path::Path;

/// Each module and the modules it may import. `commands` sits on top and may import anything.
const ALLOWED: &[(&str, &[&str])] = &[
    (
        "train",
        &[
            "backend",
            "checkpoint",
            "codec",
            "comm",
            "data",
            "device",
            "eval",
            "fault_hooks",
            "memory",
            "model",
            "nn",
            "ops",
            "record",
            "report",
            "units",
            "version",
        ],
    ),
    ("scaling", &["comm", "memory", "record", "report", "units"]),
    ("eval", &["backend", "checkpoint", "data", "model", "nn", "ops", "record", "report"]),
    ("record", &["comm", "device"]),
    ("comm", &["codec", "fault_hooks", "memory", "report", "units"]),
    ("model", &["backend", "nn", "ops"]),
    ("nn", &["backend", "ops"]),
    ("checkpoint", &["nn"]),
    ("ops", &["backend", "codec"]),
    ("backend", &["ops"]),
    ("device", &["backend"]),
    ("data", &[]),
    ("report", &[]),
    ("codec", &[]),
    ("fault_hooks", &[]),
    ("memory", &[]),
    ("units", &[]),
    ("version", &[]),
];

/// The modules a file names as `crate::x` (macros, `crate::x!`, are not imports).
fn named_modules(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices("crate::") {
        let rest = &text[i + "crate::".len()..];
        let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        let is_macro = rest[name.len()..].starts_with('!');
        let is_ident = i == 0 || !text[..i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == '$');
        if !name.is_empty() && !is_macro && is_ident {
            out.insert(name);
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The files of top-level module `m`: src/m.rs and everything under src/m/.
fn files_of(src: &Path, m: &str) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let file = src.join(format!("{m}.rs"));
    if file.is_file() {
        files.push(file);
    }
    if src.join(m).is_dir() {
        rust_files(&src.join(m), &mut files);
    }
    files
}

/// The top-level modules lib.rs declares (exported macros, `crate::name` too, are not).
fn top_level_modules(src: &Path) -> BTreeSet<String> {
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    lib.lines().filter_map(|l| l.strip_prefix("pub mod ")).map(|m| m.trim_end_matches(';').to_string()).collect()
}

#[test]
fn every_module_imports_only_the_layers_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = top_level_modules(&src);
    let mut wrong = Vec::new();
    for (m, allowed) in ALLOWED {
        let files = files_of(&src, m);
        assert!(!files.is_empty(), "src/{m} does not exist: update the table");
        for f in files {
            for named in named_modules(&std::fs::read_to_string(&f).unwrap()) {
                if modules.contains(&named) && named != *m && !allowed.contains(&named.as_str()) {
                    wrong.push(format!("{} imports crate::{named}", f.strip_prefix(&src).unwrap().display()));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "imports that run upward or sideways:\n{}", wrong.join("\n"));
}

#[test]
fn every_top_level_module_has_a_place_in_the_table() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let placed: BTreeSet<&str> = ALLOWED.iter().map(|(m, _)| *m).chain(["commands"]).collect();
    for m in top_level_modules(&src) {
        assert!(placed.contains(m.as_str()), "src/{m} has no row in ALLOWED: say which layers it may import");
    }
}

#[test]
fn the_scan_sees_imports_and_skips_macros() {
    let text =
        "use crate::comm::Wire;\nlet x = crate::train::job::Job::new();\n$crate::per_activation!(a);\nmy_crate::x";
    let names: Vec<String> = named_modules(text).into_iter().collect();
    assert_eq!(names, ["comm", "train"]);
}
