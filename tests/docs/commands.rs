//! The command lines README.md and docs/ show still work: every `dcgan-train` line parses
//! with the program's own parser, every option the docs name belongs to the program, a
//! script or a tool they launch, every script they run exists and knows the options given
//! it, every option the program's own messages advise exists, and every script has its row
//! in scripts/README.md. Records of past runs (docs/measurements) keep the commands of their
//! day and are not read.

use super::markdown;
use clap::CommandFactory;
use clap::error::ErrorKind;
use dcgan_train::commands::Cli;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Options of the other programs the docs show or the program calls (Open MPI's mpiexec,
/// Slurm's srun, cargo, libtest, NVRTC), which neither the program nor a script defines.
const OTHER_TOOLS: &[&str] = &[
    "bind-to",
    "oversubscribe",
    // TensorBoard's.
    "logdir",
    "hostfile",
    "mca",
    "mpi",
    "ntasks-per-node",
    "cpus-per-task",
    "release",
    "features",
    "no-default-features",
    "lib",
    "bench",
    "no-run",
    "report-time",
    "timings",
    // git's.
    "no-optional-locks",
    // NVRTC's, in the kernels' compile options.
    "gpu-architecture",
    "std",
];

/// Programs that run the command that follows their own options.
const LAUNCHERS: &[&str] =
    &["mpiexec", "mpirun", "srun", "taskset", "time", "bash", "env", "sudo", "python3", "python"];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// README.md, scripts/README.md, docs/*.md and docs/performance/*.md.
fn doc_files() -> Vec<PathBuf> {
    let mut files = vec![root().join("README.md"), root().join("scripts/README.md")];
    for dir in ["docs", "docs/performance"] {
        let mut md: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "md"))
            .collect();
        md.sort();
        files.extend(md);
    }
    files
}

/// The code of a markdown text: each line of its shell blocks (lines continued with `\`
/// joined) and each inline code span outside them.
fn code_pieces(text: &str) -> Vec<String> {
    let (blocks, prose) = markdown::split_blocks(text);
    let mut pieces = Vec::new();
    for (_, body) in blocks.iter().filter(|(info, _)| matches!(info.as_str(), "" | "sh" | "bash" | "console")) {
        pieces.extend(body.replace("\\\n", " ").lines().map(str::to_string));
    }
    for paragraph in markdown::paragraphs(&prose) {
        pieces.extend(markdown::code_spans(&paragraph).0);
    }
    pieces
}

/// A piece's commands: a trailing comment cut, split at `|`, `&&`, `||` and `;`.
fn segments(piece: &str) -> Vec<String> {
    let code = match piece.find(" #") {
        Some(i) => &piece[..i],
        None => piece,
    };
    code.replace("&&", ";").replace("||", ";").replace(" | ", ";").split(';').map(str::to_string).collect()
}

fn is_program(token: &str) -> bool {
    token == "dcgan-train" || token.ends_with("/dcgan-train")
}

fn is_script(token: &str) -> bool {
    // A Python package run as a program (`python3 scripts/reports scaling OUT`) is one too.
    let package = token == "scripts/reports";
    token.starts_with("scripts/") && (token.ends_with(".sh") || token.ends_with(".py") || package)
}

/// A script's text, for the options and words it knows: a package's is every file in it.
fn script_text(program: &str) -> Option<String> {
    let path = root().join(program);
    if !path.is_dir() {
        return std::fs::read_to_string(path).ok();
    }
    let files = std::fs::read_dir(path).ok()?.flatten().map(|e| e.path());
    Some(files.filter_map(|f| std::fs::read_to_string(f).ok()).collect())
}

/// One command the docs show: the program (or a script) and its arguments.
#[derive(Debug)]
struct Invocation {
    program: String,
    args: Vec<String>,
}

/// The invocations of `dcgan-train` and of scripts in one shell command, where the command
/// starts with one of them or with a launcher (`mpiexec ... dcgan-train ...`); `--` ends a
/// script's arguments (`cluster-emulate.sh run -n 4 -- dcgan-train ...`). Prose quoted in
/// backticks starts otherwise and yields nothing.
fn invocations(tokens: &[String]) -> Vec<Invocation> {
    // Past the environment's assignments (`PYTHON=... scripts/...`).
    let is_assignment = |t: &String| t.contains('=') && !t.starts_with('-');
    let start = tokens.iter().position(|t| !is_assignment(t)).unwrap_or(tokens.len());
    let Some(first) = tokens.get(start) else { return Vec::new() };
    if !(is_program(first) || is_script(first) || LAUNCHERS.contains(&first.as_str())) {
        return Vec::new();
    }
    let mut found = Vec::new();
    let mut i = start;
    while i < tokens.len() {
        let t = &tokens[i];
        if is_program(t) {
            found.push(Invocation { program: t.clone(), args: tokens[i + 1..].to_vec() });
            break;
        }
        if is_script(t) {
            let end = tokens[i + 1..].iter().position(|a| a == "--").map_or(tokens.len(), |p| i + 1 + p);
            found.push(Invocation { program: t.clone(), args: tokens[i + 1..end].to_vec() });
            i = end;
        }
        i += 1;
    }
    found
}

/// `(file, command)` for every command the docs show.
fn documented_commands() -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for file in doc_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file.strip_prefix(root()).unwrap().display().to_string();
        for piece in code_pieces(&text) {
            for seg in segments(&piece) {
                let Some(tokens) = shlex::split(&seg) else {
                    // Unbalanced quotes: fine in prose, not in a command.
                    if seg.contains("dcgan-train") || seg.contains("scripts/") {
                        panic!("{name}: cannot split `{seg}` as a shell command");
                    }
                    continue;
                };
                if !tokens.is_empty() {
                    out.push((name.clone(), tokens));
                }
            }
        }
    }
    out
}

/// Every invocation of the program or a script the docs show, with its file.
fn documented_invocations() -> Vec<(String, Invocation)> {
    let commands = documented_commands().into_iter();
    commands.flat_map(|(file, tokens)| invocations(&tokens).into_iter().map(move |inv| (file.clone(), inv))).collect()
}

/// The names of every subcommand.
fn subcommands() -> Vec<String> {
    Cli::command().get_subcommands().map(|c| c.get_name().to_string()).collect()
}

/// Every long option of the program, in any subcommand.
fn program_options() -> BTreeSet<String> {
    let cli = Cli::command();
    let mut names = BTreeSet::from(["help".to_string(), "version".to_string()]);
    for cmd in std::iter::once(&cli).chain(cli.get_subcommands()) {
        names.extend(cmd.get_arguments().filter_map(|a| a.get_long()).map(str::to_string));
    }
    names
}

/// Every script's text, for the options and words it knows.
fn scripts_text() -> String {
    let mut text = String::new();
    let mut dirs = vec![root().join("scripts")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if let Ok(t) = std::fs::read_to_string(&path) {
                text.push_str(&t);
            }
        }
    }
    text
}

fn is_placeholder(token: &str) -> bool {
    token.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && token.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// The argument lists a documented line stands for: `a|b` is either, `[OPTIONAL...]` and
/// `...` drop out, an upper-case placeholder stands for any subcommand where one is named
/// and for `1` elsewhere.
fn expansions(args: &[String]) -> Vec<Vec<String>> {
    let mut lists = vec![Vec::new()];
    for (i, arg) in args.iter().enumerate() {
        if arg.starts_with('[') || arg == "..." {
            continue;
        }
        let choices: Vec<String> = if i == 0 && arg == "SUBCOMMAND" {
            subcommands()
        } else if is_placeholder(arg) {
            vec!["1".to_string()]
        } else if arg.contains('|') {
            arg.split('|').map(str::to_string).collect()
        } else {
            vec![arg.clone()]
        };
        lists = lists.iter().flat_map(|l| choices.iter().map(move |c| [l.clone(), vec![c.clone()]].concat())).collect();
    }
    lists
}

/// Why `args` do not parse as `dcgan-train args`, or None where they do (`--help` included).
fn parse_error(args: &[String]) -> Option<String> {
    let line = std::iter::once("dcgan-train".to_string()).chain(args.iter().cloned());
    match Cli::command().try_get_matches_from(line) {
        Ok(_) => None,
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => None,
        // A subcommand named in prose (`dcgan-train trace-report`): its name is checked.
        Err(e)
            if e.kind() == ErrorKind::MissingRequiredArgument
                && args.len() == 1
                && subcommands().contains(&args[0]) =>
        {
            None
        }
        Err(e) => Some(e.to_string().lines().next().unwrap_or_default().to_string()),
    }
}

/// The long option a word names (`--wire=bf16` and `--wire,` name `wire`).
fn option_name(word: &str) -> Option<&str> {
    let rest = word.strip_prefix("--")?;
    let end = rest.find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')).unwrap_or(rest.len());
    let name = rest[..end].trim_end_matches('-');
    name.chars().next().is_some_and(|c| c.is_ascii_lowercase()).then_some(name)
}

#[test]
fn every_documented_dcgan_train_line_parses() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for (file, inv) in documented_invocations().into_iter().filter(|(_, inv)| is_program(&inv.program)) {
        for args in expansions(&inv.args) {
            checked += 1;
            if let Some(e) = parse_error(&args) {
                problems.push(format!("{file}: `dcgan-train {}`: {e}", args.join(" ")));
            }
        }
    }
    assert!(problems.is_empty(), "documented command lines that do not parse:\n{}", problems.join("\n"));
    // The docs show dozens; a reader that found none would check nothing.
    assert!(checked >= 30, "only {checked} dcgan-train lines found in the docs");
}

#[test]
fn every_documented_script_exists_and_knows_its_options() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for (file, inv) in documented_invocations().into_iter().filter(|(_, inv)| is_script(&inv.program)) {
        checked += 1;
        let Some(text) = script_text(&inv.program) else {
            problems.push(format!("{file}: {} does not exist", inv.program));
            continue;
        };
        for (i, arg) in inv.args.iter().enumerate() {
            // An option, or a word naming a stage or an action (`gpu-check.sh bench`,
            // `cluster-emulate.sh up`): the script must mention it. A quoted value with
            // spaces (`--train-args "--wire bf16"`) is neither.
            let word = arg.chars().all(|c| c.is_ascii_lowercase() || c == '-') && !arg.starts_with('-');
            let follows_option = i > 0 && inv.args[i - 1].starts_with("--");
            let known = match option_name(arg).filter(|_| !arg.contains(' ')) {
                Some(name) => text.contains(&format!("--{name}")),
                None if word && !follows_option => text.contains(arg.as_str()),
                None => true,
            };
            if !known {
                problems.push(format!("{file}: {} does not know `{arg}`", inv.program));
            }
            // Arguments passed on to dcgan-train parse as its own.
            if i > 0 && inv.args[i - 1] == "--train-args" {
                let args: Vec<String> = shlex::split(arg).unwrap_or_default();
                if let Some(e) = parse_error(&args) {
                    problems.push(format!("{file}: --train-args \"{arg}\": {e}"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "documented script lines that do not work:\n{}", problems.join("\n"));
    assert!(checked >= 30, "only {checked} script lines found in the docs");
}

#[test]
fn every_option_the_docs_name_exists() {
    let (program, scripts) = (program_options(), scripts_text());
    let mut problems = BTreeSet::new();
    for (file, tokens) in documented_commands() {
        for name in tokens.iter().filter_map(|t| option_name(t)) {
            let known = program.contains(name) || OTHER_TOOLS.contains(&name) || scripts.contains(&format!("--{name}"));
            if !known {
                problems.insert(format!("{file}: --{name}"));
            }
        }
    }
    let problems: Vec<String> = problems.into_iter().collect();
    assert!(problems.is_empty(), "options the docs name that nothing defines:\n{}", problems.join("\n"));
}

/// The string literals of a Rust source, escapes left as written.
fn string_literals(src: &str) -> Vec<&str> {
    let (mut out, bytes) = (Vec::new(), src.as_bytes());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            // A comment runs to the end of its line (a `"` in it opens nothing).
            b'/' if bytes.get(i + 1) == Some(&b'/') => i = src[i..].find('\n').map_or(bytes.len(), |n| i + n),
            // A char literal such as '"'.
            b'\'' if bytes.get(i + 2) == Some(&b'\'') => i += 3,
            b'\'' if bytes.get(i + 1) == Some(&b'\\') && bytes.get(i + 3) == Some(&b'\'') => i += 4,
            b'"' => {
                let start = i + 1;
                i = start;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                out.push(&src[start..i.min(bytes.len())]);
                i += 1;
            }
            _ => i += 1,
        }
    }
    out
}

#[test]
fn every_option_the_programs_messages_advise_exists() {
    let program = program_options();
    let mut problems = BTreeSet::new();
    let mut dirs = vec![root().join("src")];
    let mut literals = 0;
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let src = std::fs::read_to_string(&path).unwrap();
            for lit in string_literals(&src) {
                literals += 1;
                for word in lit.split(|c: char| c.is_whitespace() || "`'\"(),".contains(c)) {
                    if let Some(name) = option_name(word).map(|n| n.trim_end_matches(['.', ':']))
                        && !program.contains(name)
                        && !OTHER_TOOLS.contains(&name)
                    {
                        problems.insert(format!("{}: --{name}", path.strip_prefix(root()).unwrap().display()));
                    }
                }
            }
        }
    }
    let problems: Vec<String> = problems.into_iter().collect();
    assert!(problems.is_empty(), "options the program's strings name that it does not have:\n{}", problems.join("\n"));
    assert!(literals > 1000, "only {literals} string literals read");
}

#[test]
fn the_readers_find_commands_and_catch_a_wrong_one() {
    // The pieces of a markdown text: a block's continued line, a span, a comment cut.
    let md =
        "Run `dcgan-train --epochs 1` or:\n\n```sh\nmpiexec -n 2 dcgan-train \\\n    --wire bf16   # two ranks\n```\n";
    let pieces = code_pieces(md);
    assert_eq!(pieces, ["mpiexec -n 2 dcgan-train      --wire bf16   # two ranks", "dcgan-train --epochs 1"]);
    let tokens = shlex::split(&segments(&pieces[0])[0]).unwrap();
    let inv = invocations(&tokens);
    assert_eq!(inv.len(), 1);
    assert_eq!(inv[0].args, ["--wire", "bf16"]);
    assert_eq!(parse_error(&inv[0].args), None);
    // A wrong option or value is caught; prose quoting the program is not a command.
    assert!(parse_error(&["--wire".into(), "2bit".into()]).is_some());
    assert!(parse_error(&["--no-such-option".into()]).is_some());
    assert!(invocations(&shlex::split("error: run it as dcgan-train --x").unwrap()).is_empty());
    // Launched through a script: the script's arguments end at `--`.
    let tokens = shlex::split("scripts/cluster-emulate.sh run -n 4 -- target/release/dcgan-train info").unwrap();
    let inv = invocations(&tokens);
    assert_eq!((inv[0].args.len(), inv[1].args.as_slice()), (3, ["info".to_string()].as_slice()));
    assert_eq!(expansions(&["--seed".into(), "1|2".into(), "--batch-size".into(), "B".into()]).len(), 2);
    assert_eq!(string_literals("let a = '\"'; // \"no\"\nf(\"--x y\", \"\\\"q\\\"\")"), ["--x y", "\\\"q\\\""]);
}

#[test]
fn every_script_has_a_row_in_the_scripts_readme() {
    let readme = std::fs::read_to_string(root().join("scripts/README.md")).unwrap();
    // The rows' first cells, as `name`.
    let rows: BTreeSet<String> = readme
        .lines()
        .filter_map(|l| markdown::table_cells(l).into_iter().next())
        .filter_map(|cell| markdown::code_spans(&cell).0.into_iter().next())
        .collect();
    let mut missing = Vec::new();
    for dir in ["", "gpu/", "lib/"] {
        for entry in std::fs::read_dir(root().join("scripts").join(dir)).unwrap() {
            let path = entry.unwrap().path();
            let name = format!("{dir}{}", path.file_name().unwrap().to_string_lossy());
            // gpu/ and lib/ are walked file by file; reports/ is one package with one row.
            let walked = dir.is_empty() && (name == "gpu" || name == "lib");
            let row = if path.is_dir() { format!("{name}/") } else { name.clone() };
            if name != "README.md" && !walked && !rows.contains(&row) {
                missing.push(row);
            }
        }
    }
    assert!(missing.is_empty(), "scripts without a row in scripts/README.md: {missing:?}");
    let gone: Vec<&String> = rows.iter().filter(|r| !root().join("scripts").join(r).exists()).collect();
    assert!(gone.is_empty(), "rows of scripts/README.md naming no script: {gone:?}");
    assert!(rows.len() > 20, "only {} rows read", rows.len());
}
