//! Every relative link in the project's markdown leads somewhere: the file or image exists,
//! and an anchor names a heading of its page as GitHub spells it.

use super::markdown;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every .md file git tracks here (runs and build outputs are not the project's pages), or,
/// without git, every one outside build outputs and hidden directories.
fn markdown_files() -> Vec<PathBuf> {
    let tracked = std::process::Command::new("git").current_dir(root()).args(["ls-files", "-z", "*.md"]).output();
    if let Some(o) = tracked.ok().filter(|o| o.status.success() && !o.stdout.is_empty()) {
        let names = String::from_utf8_lossy(&o.stdout).to_string();
        return names.split('\0').filter(|n| !n.is_empty()).map(|n| root().join(n)).filter(|p| p.exists()).collect();
    }
    let (mut files, mut dirs) = (Vec::new(), vec![root().to_path_buf()]);
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if path.is_dir() {
                if !name.starts_with('.') && name != "target" {
                    dirs.push(path);
                }
            } else if name.ends_with(".md") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// A markdown text without its fenced code blocks (a `](` or `#` there is code).
fn without_code_blocks(text: &str) -> String {
    markdown::split_blocks(text).1
}

/// GitHub's anchor for a heading: lower case, everything but letters, digits, `-`, `_` and
/// spaces dropped, each space a `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a page's headings; a repeated heading's later ones get `-1`, `-2`, ...
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for line in without_code_blocks(text).lines() {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if hashes == 0 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let s = slug(&line[hashes..]);
        let n = seen.entry(s.clone()).or_default();
        out.insert(if *n == 0 { s.clone() } else { format!("{s}-{n}") });
        *n += 1;
    }
    out
}

/// The targets of a text's links and images (`[text](target)`), web addresses left out.
fn relative_links(text: &str) -> Vec<String> {
    // Code spans are code too.
    let prose = without_code_blocks(text);
    let text: Vec<String> = markdown::paragraphs(&prose).iter().map(|p| markdown::code_spans(p).1).collect();
    text.join("\n")
        .split("](")
        .skip(1)
        .filter_map(|rest| rest.split([')', ' ']).next())
        .filter(|t| !t.contains("://") && !t.starts_with("mailto:"))
        .map(str::to_string)
        .collect()
}

#[test]
fn every_relative_link_leads_to_a_file_and_heading() {
    let files = markdown_files();
    let pages: BTreeMap<PathBuf, BTreeSet<String>> =
        files.iter().map(|f| (f.canonicalize().unwrap(), anchors(&std::fs::read_to_string(f).unwrap()))).collect();
    let (mut problems, mut links) = (Vec::new(), 0);
    for file in &files {
        let name = file.strip_prefix(root()).unwrap().display();
        for target in relative_links(&std::fs::read_to_string(file).unwrap()) {
            links += 1;
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let dest = if path.is_empty() { file.clone() } else { file.parent().unwrap().join(path) };
            let Ok(dest) = dest.canonicalize() else {
                problems.push(format!("{name}: ({target}): no such file"));
                continue;
            };
            if anchor.is_empty() || !path.is_empty() && !path.ends_with(".md") {
                continue;
            }
            match pages.get(&dest) {
                Some(headings) if headings.contains(anchor) => {}
                _ => problems.push(format!("{name}: ({target}): no heading with that anchor")),
            }
        }
    }
    assert!(problems.is_empty(), "links that lead nowhere:\n{}", problems.join("\n"));
    // The docs hold hundreds; a reader that found none would check nothing.
    assert!(links > 200, "only {links} links found");
}

#[test]
fn anchors_are_spelled_as_github_spells_them() {
    let page = "# Top\n## Precision: `--precision fp32|tf32`\n## Data parallelism (`train/ddp/`)\n\
                ```sh\n# not a heading\n```\n## Top\n#nohead\n## Fréchet distance\n";
    let expected = ["top", "precision---precision-fp32tf32", "data-parallelism-trainddp", "top-1", "fréchet-distance"];
    assert_eq!(anchors(page), expected.iter().map(|s| s.to_string()).collect());
    let text = "See [a](b.md#c), ![img](img/x.png \"t\") and [web](https://x.y/z).\n```\n[code](no.md)\n```\n";
    assert_eq!(relative_links(text), ["b.md#c", "img/x.png"]);
}

#[test]
fn markdown_reads_as_github_renders_it() {
    let (blocks, prose) = markdown::split_blocks("a `x`\n```sh\nrun \\\n  on\n```\nb\n```\nplain\n```\n");
    assert_eq!(blocks, [("sh".to_string(), "run \\\n  on\n".to_string()), (String::new(), "plain\n".to_string())]);
    assert_eq!(prose, "a `x`\nb\n");
    let (spans, rest) = markdown::code_spans("see ``a `b` c`` and `d`, not ` alone");
    assert_eq!(spans, ["a `b` c", "d"]);
    assert_eq!(rest, "see \0 and \0, not ` alone");
    assert_eq!(markdown::table_cells("| `a \\| b` | c | d |"), ["`a | b`", "c", "d"]);
    assert_eq!(markdown::table_cells("| `a|b` |"), ["`a", "b`"]);
}
