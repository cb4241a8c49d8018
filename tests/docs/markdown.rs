//! Reading the project's markdown as GitHub renders it, for the tests that hold the docs to
//! the code: fenced blocks, code spans and table cells.

/// A text's fenced code blocks apart from its prose: (the info string, the body) of each
/// block, and the prose with the blocks left out.
pub fn split_blocks(text: &str) -> (Vec<(String, String)>, String) {
    let (mut blocks, mut prose) = (Vec::new(), String::new());
    let mut open: Option<(String, String)> = None;
    for line in text.lines() {
        let fence = line.trim_start().strip_prefix("```");
        match (&mut open, fence) {
            (None, Some(info)) => open = Some((info.trim().to_string(), String::new())),
            (Some(_), Some(_)) => blocks.extend(open.take()),
            (Some((_, body)), None) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, None) => {
                prose.push_str(line);
                prose.push('\n');
            }
        }
    }
    (blocks, prose)
}

/// The code spans of one line of prose, and the text around them with each span a NUL: a
/// span opened by N backticks ends at the next run of exactly N, and one opened by more than
/// one backtick has its padding trimmed.
pub fn code_spans(line: &str) -> (Vec<String>, String) {
    let (mut found, mut rest) = (Vec::new(), String::new());
    let mut i = 0;
    while i < line.len() {
        let tail = &line[i..];
        if !tail.starts_with('`') {
            let c = tail.chars().next().unwrap();
            rest.push(c);
            i += c.len_utf8();
            continue;
        }
        let run = |s: &str| s.len() - s.trim_start_matches('`').len();
        let n = run(tail);
        let mut end = None;
        let mut from = n;
        while let Some(j) = tail[from..].find('`') {
            let at = from + j;
            if run(&tail[at..]) == n {
                end = Some(at);
                break;
            }
            from = at + run(&tail[at..]);
        }
        let Some(end) = end else {
            // An unclosed run of backticks is text.
            rest.push_str(&tail[..n]);
            i += n;
            continue;
        };
        let body = &tail[n..end];
        found.push(if n > 1 { body.trim().to_string() } else { body.to_string() });
        rest.push('\0');
        i += end + n;
    }
    (found, rest)
}

/// The prose's paragraphs (text between blank lines), each one line as markdown reads it: a
/// code span may wrap from one line to the next.
pub fn paragraphs(prose: &str) -> Vec<String> {
    prose.split("\n\n").map(|p| p.lines().map(str::trim).collect::<Vec<_>>().join(" ")).collect()
}

/// The cells of a table row, split as GitHub splits them: at every `|` not escaped as `\|`
/// (inside code spans too), the escapes then read as `|`.
pub fn table_cells(row: &str) -> Vec<String> {
    let (mut out, mut cur, mut escaped) = (Vec::new(), String::new(), false);
    for c in row.chars() {
        match c {
            '|' if !escaped => out.push(std::mem::take(&mut cur).trim().to_string()),
            '|' => {
                cur.pop();
                cur.push('|');
            }
            _ => cur.push(c),
        }
        escaped = c == '\\';
    }
    // The text before the first `|` and after the last is not a cell.
    out.into_iter().skip(1).collect()
}
