//! Which algorithm runs for a message of a given size: a fixed choice, `auto` with a size
//! threshold (rd below, the large-message algorithm above), or the rules of a tuning file
//! written by `tune-allreduce` (CSV: `ranks,min_bytes,max_bytes,algorithm`).

use super::Algorithm;
use super::hierarchical::HostLayout;
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};

/// `max_bytes` of the last rule: no upper bound.
pub const NO_LIMIT: usize = usize::MAX;

/// How the algorithm is chosen, before the rank count is known.
#[derive(Clone, Debug)]
pub enum Policy {
    /// Always this algorithm.
    Fixed(Algorithm),
    /// `rd` below this many bytes, the large-message algorithm at and above it.
    Threshold(usize),
    /// The rules of a tuning file.
    Rules(RulesFile),
}

/// The large-message algorithm of `auto` at p ranks: `vhd` needs a power of two (otherwise it
/// first folds the extra ranks, sending the whole vector twice more), `ring` does not.
pub fn large_message_algorithm(p: usize) -> Algorithm {
    if p.is_power_of_two() { Algorithm::Vhd } else { Algorithm::Ring }
}

/// `large_message_algorithm` for a job whose rank r runs on host `hosts[r]`
/// (`Transport::hosts`): `hier` where at least two hosts each run the same number (two or
/// more) of ranks, so that each host's link carries its share once instead of once per rank.
pub fn large_message_algorithm_on(p: usize, hosts: &[usize]) -> Algorithm {
    let layout = HostLayout::new(hosts, p);
    match layout.ranks_per_host() {
        Some(l) if l > 1 && layout.host_count() > 1 => Algorithm::Hier,
        _ => large_message_algorithm(p),
    }
}

impl Policy {
    /// The selection for `ranks` ranks, one host each or all on one (the rules of a tuning
    /// file and the cost model's nodes).
    pub fn table(&self, ranks: usize) -> anyhow::Result<SelectionTable> {
        self.table_on(ranks, &[])
    }

    /// The selection for a job whose rank r runs on host `hosts[r]` (`Transport::hosts`).
    pub fn table_on(&self, ranks: usize, hosts: &[usize]) -> anyhow::Result<SelectionTable> {
        let large = large_message_algorithm_on(ranks, hosts);
        let ranges = match self {
            Policy::Fixed(a) => vec![(0, NO_LIMIT, *a)],
            Policy::Threshold(0) => vec![(0, NO_LIMIT, large)],
            Policy::Threshold(t) => vec![(0, t - 1, Algorithm::Rd), (*t, NO_LIMIT, large)],
            Policy::Rules(file) => file.ranges_for(ranks)?,
        };
        Ok(SelectionTable { ranges })
    }

    /// One line for run summaries and benchmark headers.
    pub fn describe(&self) -> String {
        match self {
            Policy::Fixed(a) => format!("--allreduce {a}"),
            Policy::Threshold(t) => format!(
                "auto: rd below {}, above vhd (ring when the rank count is not a power of two; hier \
                 when several ranks share each host)",
                crate::units::format_bytes(*t)
            ),
            Policy::Rules(f) => format!("auto: rules from {}", f.path.display()),
        }
    }
}

/// The algorithm for every message size at the running rank count: sorted, contiguous
/// ranges (min_bytes, max_bytes inclusive, algorithm) covering 0..=NO_LIMIT.
#[derive(Clone, Debug, PartialEq)]
pub struct SelectionTable {
    ranges: Vec<(usize, usize, Algorithm)>,
}

impl SelectionTable {
    pub fn pick(&self, bytes: usize) -> Algorithm {
        self.ranges
            .iter()
            .find(|(lo, hi, _)| *lo <= bytes && bytes <= *hi)
            .map(|r| r.2)
            .expect("a selection table covers every size")
    }

    pub fn ranges(&self) -> &[(usize, usize, Algorithm)] {
        &self.ranges
    }

    /// e.g. `0B-8191B: rd, 8KiB-: vhd`
    pub fn describe(&self) -> String {
        use crate::units::format_bytes;
        self.ranges
            .iter()
            .map(|&(lo, hi, a)| {
                let hi = if hi == NO_LIMIT { String::new() } else { format_bytes(hi) };
                format!("{}-{hi}: {a}", format_bytes(lo))
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// One line of a tuning file.
#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    pub ranks: usize,
    pub min_bytes: usize,
    /// Inclusive; NO_LIMIT is written `inf`.
    pub max_bytes: usize,
    pub algorithm: Algorithm,
    /// 1-based line number in the file.
    pub line: usize,
}

/// A parsed tuning file.
#[derive(Clone, Debug)]
pub struct RulesFile {
    pub path: PathBuf,
    pub rules: Vec<Rule>,
}

pub const RULES_HEADER: &str = "ranks,min_bytes,max_bytes,algorithm";

impl RulesFile {
    pub fn load(path: &Path) -> anyhow::Result<RulesFile> {
        let text = std::fs::read_to_string(path).with_context(|| {
            format!(
                "cannot read the tuning file {} (write one with `dcgan-train tune-allreduce --out FILE`)",
                path.display()
            )
        })?;
        RulesFile::parse(path, &text)
    }

    /// Parse and check the file: every rank count's rules must cover all sizes without
    /// overlaps. Errors name the file and line.
    pub fn parse(path: &Path, text: &str) -> anyhow::Result<RulesFile> {
        let at = |line: usize| format!("{}:{line}", path.display());
        let mut rules = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let content = raw.split('#').next().unwrap_or("").trim();
            if content.is_empty() || content.replace(' ', "") == RULES_HEADER {
                continue;
            }
            let fields: Vec<&str> = content.split(',').map(str::trim).collect();
            if fields.len() != 4 {
                bail!("{}: expected 4 comma-separated fields ({RULES_HEADER}), found {}", at(line), fields.len());
            }
            let number = |name: &str, s: &str| -> anyhow::Result<usize> {
                s.parse::<usize>().map_err(|_| anyhow::anyhow!("{}: {name} '{s}' is not a whole number", at(line)))
            };
            let ranks = number("ranks", fields[0])?;
            if ranks == 0 {
                bail!("{}: ranks must be at least 1", at(line));
            }
            let min_bytes = number("min_bytes", fields[1])?;
            let max_bytes = if fields[2] == "inf" { NO_LIMIT } else { number("max_bytes", fields[2])? };
            if max_bytes < min_bytes {
                bail!("{}: max_bytes {max_bytes} is below min_bytes {min_bytes}", at(line));
            }
            let algorithm = Algorithm::from_name(fields[3]).ok_or_else(|| {
                anyhow::anyhow!("{}: unknown algorithm '{}': use tree, rd, vhd, ring, hier or mpi", at(line), fields[3])
            })?;
            rules.push(Rule { ranks, min_bytes, max_bytes, algorithm, line });
        }
        if rules.is_empty() {
            bail!("{}: no rules (expected lines `{RULES_HEADER}`, e.g. `2,0,8191,rd`)", path.display());
        }
        let file = RulesFile { path: path.to_path_buf(), rules };
        let mut counts: Vec<usize> = file.rules.iter().map(|r| r.ranks).collect();
        counts.sort();
        counts.dedup();
        for p in counts {
            file.ranges_for(p)?;
        }
        Ok(file)
    }

    /// The rules for `ranks` ranks as a contiguous table, or an error naming the problem.
    pub fn ranges_for(&self, ranks: usize) -> anyhow::Result<Vec<(usize, usize, Algorithm)>> {
        let mut mine: Vec<&Rule> = self.rules.iter().filter(|r| r.ranks == ranks).collect();
        if mine.is_empty() {
            let mut counts: Vec<usize> = self.rules.iter().map(|r| r.ranks).collect();
            counts.sort();
            counts.dedup();
            let have: Vec<String> = counts.iter().map(|c| c.to_string()).collect();
            bail!(
                "{}: no rule for {ranks} ranks (the file has rules for {} ranks): run \
                 `tune-allreduce` with {ranks} ranks and add its lines",
                self.path.display(),
                have.join(", ")
            );
        }
        mine.sort_by_key(|r| r.min_bytes);
        // The first size not yet covered; None once a rule has reached `inf`.
        let mut next = Some(0usize);
        for r in &mine {
            let at = format!("{}:{}", self.path.display(), r.line);
            let Some(n) = next else {
                bail!("{at}: overlaps a rule for {ranks} ranks that already covers all larger sizes (`inf`)");
            };
            if r.min_bytes > n {
                bail!("{at}: sizes {n}..{} bytes have no rule for {ranks} ranks", r.min_bytes - 1);
            }
            if r.min_bytes < n {
                bail!("{at}: overlaps the previous rule for {ranks} ranks (it already covers up to {} bytes)", n - 1);
            }
            next = (r.max_bytes != NO_LIMIT).then(|| r.max_bytes + 1);
        }
        if let Some(n) = next {
            let last = mine.last().expect("not empty");
            bail!(
                "{}:{}: the rules for {ranks} ranks end at {} bytes: end the last one with `inf`",
                self.path.display(),
                last.line,
                n - 1
            );
        }
        Ok(mine.iter().map(|r| (r.min_bytes, r.max_bytes, r.algorithm)).collect())
    }
}

/// Write rules as the tuning-file CSV (with `#` comment lines first).
pub fn format_rules(comments: &[String], rules: &[(usize, usize, usize, Algorithm)]) -> String {
    let mut out = String::new();
    for c in comments {
        out.push_str("# ");
        out.push_str(c);
        out.push('\n');
    }
    out.push_str(RULES_HEADER);
    out.push('\n');
    for &(ranks, lo, hi, a) in rules {
        let hi = if hi == NO_LIMIT { "inf".to_string() } else { hi.to_string() };
        out.push_str(&format!("{ranks},{lo},{hi},{a}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> anyhow::Result<RulesFile> {
        RulesFile::parse(Path::new("rules.csv"), text)
    }

    #[test]
    fn threshold_picks_rd_then_large() {
        let t = Policy::Threshold(8192).table(4).unwrap();
        assert_eq!(t.pick(0), Algorithm::Rd);
        assert_eq!(t.pick(8191), Algorithm::Rd);
        assert_eq!(t.pick(8192), Algorithm::Vhd);
        assert_eq!(t.pick(usize::MAX), Algorithm::Vhd);
        let t = Policy::Threshold(8192).table(3).unwrap();
        assert_eq!(t.pick(1 << 20), Algorithm::Ring);
        let t = Policy::Threshold(0).table(2).unwrap();
        assert_eq!(t.pick(0), Algorithm::Vhd);
    }

    #[test]
    fn threshold_picks_hier_where_several_ranks_share_each_host() {
        let on = |hosts: &[usize]| Policy::Threshold(8192).table_on(hosts.len(), hosts).unwrap();
        assert_eq!(on(&[0, 0, 1, 1]).pick(8192), Algorithm::Hier);
        assert_eq!(on(&[0, 0, 1, 1]).pick(8191), Algorithm::Rd);
        assert_eq!(on(&[0, 1, 0, 1, 0, 1]).pick(1 << 20), Algorithm::Hier);
        // One rank per host, one host, or uneven hosts: the flat choice.
        assert_eq!(on(&[0, 1, 2, 3]).pick(1 << 20), Algorithm::Vhd);
        assert_eq!(on(&[0, 0, 0, 0]).pick(1 << 20), Algorithm::Vhd);
        assert_eq!(on(&[0, 0, 0, 1, 1]).pick(1 << 20), Algorithm::Ring);
        // A fixed choice stays fixed.
        assert_eq!(Policy::Fixed(Algorithm::Vhd).table_on(4, &[0, 0, 1, 1]).unwrap().pick(1 << 20), Algorithm::Vhd);
    }

    #[test]
    fn rules_round_trip_and_select() {
        let text = format_rules(
            &["made by a test".into()],
            &[(2, 0, 4095, Algorithm::Rd), (2, 4096, NO_LIMIT, Algorithm::Ring), (4, 0, NO_LIMIT, Algorithm::Tree)],
        );
        let f = parse(&text).unwrap();
        let t = Policy::Rules(f.clone()).table(2).unwrap();
        assert_eq!(t.pick(4095), Algorithm::Rd);
        assert_eq!(t.pick(4096), Algorithm::Ring);
        assert_eq!(Policy::Rules(f.clone()).table(4).unwrap().pick(7), Algorithm::Tree);
        let e = Policy::Rules(f).table(3).unwrap_err().to_string();
        assert!(e.contains("no rule for 3 ranks"), "{e}");
        assert!(e.contains("2, 4"), "{e}");
    }

    #[test]
    fn bad_files_name_the_line() {
        let cases = [
            ("2,0,inf\n", "rules.csv:1: expected 4"),
            ("# c\n2,0,inf,fast\n", "rules.csv:2: unknown algorithm 'fast'"),
            ("2,x,inf,rd\n", "rules.csv:1: min_bytes 'x'"),
            ("2,10,5,rd\n", "rules.csv:1: max_bytes 5 is below"),
            ("2,0,99,rd\n2,200,inf,vhd\n", "rules.csv:2: sizes 100..199"),
            ("2,0,99,rd\n2,50,inf,vhd\n", "rules.csv:2: overlaps"),
            ("2,0,99,rd\n", "rules.csv:1: the rules for 2 ranks end at 99"),
            ("2,0,inf,rd\n2,0,inf,vhd\n", "overlaps"),
            ("\n# only comments\n", "no rules"),
            ("0,0,inf,rd\n", "rules.csv:1: ranks must be at least 1"),
        ];
        for (text, want) in cases {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: got {e:?}, want {want:?}");
        }
    }
}
