//! `heapledger export`: a profile written in another tool's format, one
//! writer per format.

use crate::profiles::Opened;
use crate::tree::Metric;
use anyhow::{anyhow, Result};
use heapledger_analysis::calltree::CollapseMode;
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// MALT 1.6's JSON, which MALT's reader and web viewer open.
    Malt,
    /// callgrind's format, for KCachegrind and callgrind_annotate.
    Callgrind,
    /// Folded stacks (`main;f;g 1234`), for flamegraph.pl and inferno.
    Folded,
    /// An SVG flame graph (inferno's): search, click to zoom.
    Flamegraph,
    /// speedscope's JSON file format (https://www.speedscope.app).
    Speedscope,
    /// pprof's gzipped profile.proto (go tool pprof, Pyroscope, Grafana),
    /// with Go's heap sample types.
    Pprof,
}

impl Format {
    /// The file written where `-o` is not given, from the profile's stem.
    pub fn default_output(self, profile: &Path) -> PathBuf {
        let stem = profile
            .file_stem()
            .map_or_else(|| "profile".into(), |s| s.to_string_lossy().into_owned());
        match self {
            // Never the profile's own name (an exported JSON profile
            // read again).
            Format::Malt => PathBuf::from(format!("{stem}.malt.json")),
            Format::Callgrind => PathBuf::from(format!("callgrind.out.{stem}")),
            Format::Folded => PathBuf::from(format!("{stem}.folded")),
            Format::Flamegraph => PathBuf::from(format!("{stem}.svg")),
            Format::Speedscope => PathBuf::from(format!("{stem}.speedscope.json")),
            Format::Pprof => PathBuf::from(format!("{stem}.pb.gz")),
        }
    }

    /// Whether the format needs every stack of the profile in memory at
    /// once (the others take them as they are read).
    pub fn needs_whole_profile(self) -> bool {
        matches!(self, Format::Malt | Format::Callgrind)
    }

    pub fn name(self) -> &'static str {
        match self {
            Format::Malt => "MALT profile",
            Format::Callgrind => "callgrind file",
            Format::Folded => "folded stacks",
            Format::Flamegraph => "flame graph",
            Format::Speedscope => "speedscope profile",
            Format::Pprof => "pprof profile",
        }
    }
}

/// What weighs the stacks of a format with one weight, and how.
#[derive(Clone, Copy, Debug)]
pub struct Weights {
    pub metric: Metric,
    /// The callers' view: leaf functions at the base of the flame graph.
    pub inverted: bool,
    /// Recursion collapsed as `tree --collapse` does (seed 003).
    pub collapse: heapledger_analysis::calltree::CollapseMode,
}

/// The profile's stacks as folded lines, root first (`main;f;g 1234`),
/// one per distinct stack of routines with a weight; `;` inside a name
/// becomes `:`, as flamegraph.pl's own collapsers do.
fn folded_lines(
    o: &Opened,
    metric: Metric,
    collapse: heapledger_analysis::calltree::CollapseMode,
) -> Result<Vec<String>> {
    use heapledger_analysis::calltree::CallTree;
    let samples = crate::tree::samples(o, metric, false)?;
    let routines = samples.routines();
    let names: Vec<String> = routines
        .iter()
        .map(|(_, n)| n.replace(';', ":").replace('\n', " "))
        .collect();
    if collapse != CollapseMode::None {
        // The call tree with recursion collapsed: each node's own weight
        // under the path of routines from the root to it (a recursive call
        // folded into its ancestor adds to that ancestor's node).
        let tree = CallTree::top_down(&samples, collapse);
        let mut lines = Vec::new();
        for id in tree.node_ids() {
            let node = &tree[id];
            if node.is_stub() || node.excl() == 0 {
                continue;
            }
            let path: Vec<&str> = tree
                .path_routines(id)
                .iter()
                .map(|r| names[r.index()].as_str())
                .collect();
            lines.push(format!("{} {}", path.join(";"), node.excl()));
        }
        return Ok(lines);
    }
    let mut lines = Vec::with_capacity(samples.len());
    for s in samples.iter() {
        if s.weight == 0 {
            continue;
        }
        let mut line = String::new();
        for (i, f) in s.frames.iter().enumerate() {
            if i > 0 {
                line.push(';');
            }
            line.push_str(&names[f.index()]);
        }
        line.push(' ');
        line.push_str(&s.weight.to_string());
        lines.push(line);
    }
    Ok(lines)
}

/// The profile's stacks in speedscope's file format
/// (https://www.speedscope.app/file-format-schema.json): one "sampled"
/// profile whose samples are the distinct stacks (frame indexes, root
/// first) and whose weights are `metric`'s.
fn speedscope(o: &Opened, metric: Metric) -> Result<serde_json::Value> {
    let samples = crate::tree::samples(o, metric, false)?;
    let frames: Vec<serde_json::Value> = samples
        .routines()
        .iter()
        .map(|(_, n)| serde_json::json!({ "name": n }))
        .collect();
    let mut stacks = Vec::new();
    let mut weights = Vec::new();
    for s in samples.iter().filter(|s| s.weight > 0) {
        stacks.push(s.frames.iter().map(|f| f.index()).collect::<Vec<_>>());
        weights.push(s.weight);
    }
    let total: u64 = weights.iter().sum();
    let unit = match metric.unit() {
        "bytes" => "bytes",
        "ns" => "nanoseconds",
        _ => "none",
    };
    Ok(serde_json::json!({
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "shared": { "frames": frames },
        "profiles": [{
            "type": "sampled",
            "name": format!("{}: {}", o.profile.run.command, metric.name()),
            "unit": unit,
            "startValue": 0,
            "endValue": total,
            "samples": stacks,
            "weights": weights,
        }],
        "name": o.profile.run.command,
        "exporter": concat!("heapledger ", env!("CARGO_PKG_VERSION")),
    }))
}

/// Writes the profile to `out` in `format`, whole or not at all.
pub fn write(o: &Opened, format: Format, weights: Weights, out: &Path) -> Result<()> {
    if format == Format::Pprof {
        return crate::pprof::write(o, out);
    }
    let profile = &o.profile;
    let lines = match format {
        Format::Folded | Format::Flamegraph => folded_lines(o, weights.metric, weights.collapse)?,
        _ => Vec::new(),
    };
    let speedscope = match format {
        Format::Speedscope => Some(speedscope(o, weights.metric)?),
        _ => None,
    };
    crate::output::write_whole(out, |f| {
        match format {
            Format::Speedscope => {
                let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
                serde_json::to_writer(&mut w, &speedscope)?;
                std::io::Write::flush(&mut w)?;
            }
            Format::Folded => {
                let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
                for l in &lines {
                    std::io::Write::write_all(&mut w, l.as_bytes())?;
                    std::io::Write::write_all(&mut w, b"\n")?;
                }
                std::io::Write::flush(&mut w)?;
            }
            Format::Flamegraph => {
                let mut opts = flame_options(
                    format!(
                        "{}: {}{}",
                        profile.run.command,
                        weights.metric.name(),
                        if weights.inverted { ", callers" } else { "" }
                    ),
                    weights.metric,
                );
                opts.reverse_stack_order = weights.inverted;
                if weights.inverted {
                    opts.direction = inferno::flamegraph::Direction::Inverted;
                }
                let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
                if lines.is_empty() {
                    anyhow::bail!(
                        "the profile has no stack with {} to draw",
                        weights.metric.name()
                    );
                }
                inferno::flamegraph::from_lines(
                    &mut opts,
                    lines.iter().map(String::as_str),
                    &mut w,
                )
                .map_err(|e| anyhow!("{e}"))?;
                std::io::Write::flush(&mut w)?;
            }
            // `write_to` buffers (1 MiB) itself.
            Format::Malt => profile.write_to(f).map_err(|e| anyhow!("{e}"))?,
            Format::Callgrind => {
                let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
                heapledger_profile::callgrind::write(profile, &mut w)?;
                std::io::Write::flush(&mut w)?;
            }
            Format::Pprof => unreachable!("written above"),
        }
        Ok(())
    })
}

/// inferno's options with a title, the metric's unit and no randomness
/// (the same profile gives the same file).
fn flame_options(title: String, metric: Metric) -> inferno::flamegraph::Options<'static> {
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = title;
    opts.count_name = metric.unit().into();
    opts.deterministic = true;
    opts
}

/// A differential flame graph (inferno's: the new profile's shape, red
/// where a stack grew, blue where it shrank) of two profiles' stacks,
/// matched by their routines' names.
pub fn differential(base: &Opened, new: &Opened, metric: Metric, out: &Path) -> Result<()> {
    let split = |l: &str| -> (String, u64) {
        let (s, w) = l.rsplit_once(' ').unwrap_or((l, "0"));
        (s.to_owned(), w.parse().unwrap_or(0))
    };
    let mut both: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
    for l in folded_lines(base, metric, CollapseMode::None)? {
        let (s, w) = split(&l);
        both.entry(s).or_default().0 += w;
    }
    for l in folded_lines(new, metric, CollapseMode::None)? {
        let (s, w) = split(&l);
        both.entry(s).or_default().1 += w;
    }
    let lines: Vec<String> = both
        .iter()
        .map(|(s, (a, b))| format!("{s} {a} {b}"))
        .collect();
    if lines.is_empty() {
        anyhow::bail!("neither profile has a stack with {} to draw", metric.name());
    }
    crate::output::write_whole(out, |f| {
        let mut opts = flame_options(
            format!(
                "{} (new) against {} (base): {}",
                new.profile.run.command,
                base.profile.run.command,
                metric.name()
            ),
            metric,
        );
        let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
        inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), &mut w)
            .map_err(|e| anyhow!("{e}"))?;
        std::io::Write::flush(&mut w)?;
        Ok(())
    })
}
