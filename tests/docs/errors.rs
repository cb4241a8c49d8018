//! docs/errors.md is what the program prints: every row of its tables whose input is a
//! training command line alone (`--sync-every 4 --wire 1bit`, maybe with a remark in
//! parentheses) is run, and its error line must read as the page says: `...` stands for
//! any text and a number for any number (some are the host's: its cores, its memory).

use super::markdown;
use std::path::Path;
use std::process::Command;

/// A row the test can run: the input's arguments and the error line the page shows.
struct Row {
    args: Vec<String>,
    message: String,
}

fn runnable_rows(page: &str) -> Vec<Row> {
    let mut rows = Vec::new();
    for line in page.lines().filter(|l| l.starts_with("| ") && !l.starts_with("| input")) {
        let cells = markdown::table_cells(line);
        let [input, output] = cells.as_slice() else { continue };
        let (inputs, around) = markdown::code_spans(input);
        // The input is one span, maybe with a remark in parentheses after it.
        let around = around.trim_end();
        let alone = around == "\0" || around.starts_with("\0 (") && around.ends_with(')');
        if inputs.len() != 1 || !alone || !inputs[0].starts_with("--") || inputs[0].contains("...") {
            continue;
        }
        let Some(message) = markdown::code_spans(output).0.into_iter().find(|s| s.starts_with("error:")) else {
            continue;
        };
        let args = shlex::split(&inputs[0]).expect("an input is a shell command line");
        rows.push(Row { args, message });
    }
    rows
}

/// Whether `line` reads as `pattern`: `...` any text, a number standing alone any number
/// (`1bit` and `f32` are words), backticks ignored on both sides.
fn reads_as(pattern: &str, line: &str) -> bool {
    fn tokens(s: &str) -> Vec<String> {
        let chars: Vec<char> = s.chars().filter(|&c| c != '`').collect();
        let (mut out, mut i) = (Vec::new(), 0);
        while i < chars.len() {
            if chars[i].is_ascii_digit() && (i == 0 || !chars[i - 1].is_alphanumeric()) {
                let end =
                    (i..chars.len()).find(|&j| !(chars[j].is_ascii_digit() || chars[j] == '.')).unwrap_or(chars.len());
                if chars.get(end).is_none_or(|c| !c.is_alphabetic()) {
                    out.push("#".to_string());
                    i = end;
                    continue;
                }
            }
            out.push(chars[i].to_string());
            i += 1;
        }
        out
    }
    let (line, parts) = (tokens(line), pattern.split("...").map(tokens).collect::<Vec<_>>());
    let Some((last, inner)) = parts[1..].split_last() else { return line == parts[0] };
    // The first part at the start, the last at the end, the others in order between.
    if !line.starts_with(&parts[0]) {
        return false;
    }
    let mut at = parts[0].len();
    for part in inner.iter().filter(|p| !p.is_empty()) {
        match line[at..].windows(part.len()).position(|w| w == part.as_slice()) {
            Some(p) => at += p + part.len(),
            None => return false,
        }
    }
    line.len() >= at + last.len() && line.ends_with(last)
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dcgan-train"))
}

/// The places the page's inputs name, in the directory every row runs in: `empty` and
/// `emptydir` (directories without data or checkpoints), `a-file` (a regular file), `out6`
/// (a run of 8 steps at batch 8) and `alone` (its last checkpoint copied out of it).
fn fixtures(dir: &Path) {
    for d in ["empty", "emptydir", "alone"] {
        std::fs::create_dir(dir.join(d)).unwrap();
    }
    std::fs::write(dir.join("a-file"), "").unwrap();
    let out = bin()
        .current_dir(dir)
        .args([
            "--data",
            "synthetic:64",
            "--batch-size",
            "8",
            "--max-steps",
            "8",
            "--out",
            "out6",
            "--progress",
            "none",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ck = dir.join("out6/checkpoints/step-00000008");
    for f in std::fs::read_dir(&ck).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), dir.join("alone").join(f.file_name())).unwrap();
    }
}

#[test]
fn the_errors_page_is_what_the_program_prints() {
    let page = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/errors.md")).unwrap();
    let rows = runnable_rows(&page);
    // The page has dozens of rows; a reader that found few would check little.
    assert!(rows.len() >= 15, "only {} runnable rows in docs/errors.md", rows.len());
    let dir = tempfile::tempdir().unwrap();
    fixtures(dir.path());
    let mut problems = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let given = |flag: &str| row.args.iter().any(|a| a == flag || a.starts_with(&format!("{flag}=")));
        let mut args = row.args.clone();
        // Small and short where the row leaves it open; a resume keeps its run's own.
        if !given("--resume") {
            if !given("--data") {
                args.extend(["--data".into(), "synthetic:256".into()]);
            }
            if !given("--out") {
                args.extend(["--out".into(), format!("run-{i}")]);
            }
            args.extend(["--max-steps".into(), "1".into()]);
        }
        let out = bin().current_dir(dir.path()).args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let line = stderr.lines().find(|l| l.starts_with("error:")).unwrap_or("(no error line)");
        if out.status.success() || !reads_as(&row.message, line) {
            problems.push(format!(
                "{}\n  page: {}\n  got:  {line} (exit {:?})",
                row.args.join(" "),
                row.message,
                out.status.code()
            ));
        }
    }
    assert!(problems.is_empty(), "rows of docs/errors.md the program does not print:\n{}", problems.join("\n"));
}

#[test]
fn the_reader_takes_rows_and_patterns_as_markdown_means_them() {
    let page = "| input | what |\n|---|---|\n\
                | `--a 1` (a remark) | clap's ``error: x `y` z``, exit 2 |\n\
                | `--b` of a run | `error: b` |\n\
                | `--c \\| d` | `error: c\\|d` |\n\
                | `--e` | no error |\n";
    let rows = runnable_rows(page);
    assert_eq!(rows.len(), 2);
    assert_eq!(
        (rows[0].args.as_slice(), rows[0].message.as_str()),
        (["--a", "1"].map(String::from).as_slice(), "error: x `y` z")
    );
    assert_eq!(rows[1].message, "error: c|d");
    assert!(reads_as("error: a 12 b ... c", "error: a 7.5 b anything c"));
    assert!(reads_as("error: at (x ... y ...): z", "error: at (x 1 y 2 3): z"));
    assert!(!reads_as("error: a b", "error: a b c"));
    assert!(!reads_as("error: a ... c", "error: a b d"));
    assert!(!reads_as("error: has 8", "error: has 8 and more"));
    assert!(!reads_as("error: word", "error: other"));
    assert!(!reads_as("error: --wire 1bit", "error: --wire 2bit"));
    assert!(reads_as("error: at most 16 (of 2)", "error: at most 8 (of 1)"));
}
