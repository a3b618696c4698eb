//! `heapledger export`: a profile written in another tool's format, one
//! writer per format.

use crate::profiles::Opened;
use crate::tree::Metric;
use anyhow::{anyhow, Result};
use heapledger_analysis::calltree::{
    self, CallTree, CallTreeBuilder, CollapseMode, Direction, NodeId, PrefixTree, RoutineId,
    Samples,
};
use std::path::{Path, PathBuf};

type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

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
    /// The viewer's pages in one self-contained HTML file.
    Html,
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
            Format::Html => PathBuf::from(format!("{stem}.html")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Format::Malt => "MALT profile",
            Format::Callgrind => "callgrind file",
            Format::Folded => "folded stacks",
            Format::Flamegraph => "flame graph",
            Format::Speedscope => "speedscope profile",
            Format::Pprof => "pprof profile",
            Format::Html => "HTML report",
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
    /// How stacks are named (`--jit-only`).
    pub naming: crate::tree::Naming,
}

/// Routine names as folded lines spell them: `;` inside a name becomes
/// `:`, as flamegraph.pl's own collapsers do, and a line break a space.
fn folded_names(samples: &Samples) -> Vec<String> {
    samples
        .routines()
        .iter()
        .map(|(_, n)| n.replace(';', ":").replace('\n', " "))
        .collect()
}

/// Writes one folded line: the routines of `path` root first, `;` between
/// them, then the weight.
fn folded_line(
    w: &mut impl std::io::Write,
    names: &[String],
    path: impl Iterator<Item = RoutineId>,
    weight: u64,
) -> std::io::Result<()> {
    for (i, r) in path.enumerate() {
        if i > 0 {
            w.write_all(b";")?;
        }
        w.write_all(names[r.index()].as_bytes())?;
    }
    writeln!(w, " {weight}")
}

/// The profile's stacks as folded lines (`main;f;g 1234`), one per
/// distinct stack of routines with a weight, written as they are made.
/// With recursion collapsed, one line per node of the collapsed call tree
/// (its own weight under the path of routines from the root to it: a
/// recursive call folded into its ancestor adds to that ancestor's node).
fn write_folded(
    w: &mut impl std::io::Write,
    samples: &Samples,
    collapse: CollapseMode,
) -> Result<()> {
    let names = folded_names(samples);
    if collapse != CollapseMode::None {
        let tree = CallTree::top_down(samples, collapse);
        for id in tree.node_ids() {
            let node = &tree[id];
            if !node.is_stub() && node.excl() != 0 {
                folded_line(w, &names, tree.path_routines(id).into_iter(), node.excl())?;
            }
        }
        return Ok(());
    }
    let mut written = Ok(());
    samples.each(|_, frames, weight| {
        if weight != 0 && written.is_ok() {
            written = folded_line(w, &names, frames.iter().copied(), weight);
        }
    });
    Ok(written?)
}

/// The folded lines of a flame graph without recursion collapsing, with
/// its frames lighter than `min_weight` left out (narrower than the
/// narrowest frame drawn: the frames drawn keep their exact widths; a
/// frame left out adds its weight to its parent's own). The samples go
/// into `prefix` (its direction and collapsing: `PrefixTree::into_lines`),
/// empty: a profile of 400 000 stacks
/// 46 frames deep (512 MB of folded stacks) makes a few thousand lines in
/// about a second.
fn pruned_lines(samples: &Samples, prefix: PrefixTree, min_weight: u64) -> Vec<String> {
    let names = folded_names(samples);
    let mut lines = Vec::new();
    prefix.fed(samples).into_lines(min_weight, |path, weight| {
        let mut line = Vec::new();
        folded_line(&mut line, &names, path.iter().copied(), weight).expect("to memory");
        line.pop();
        lines.push(String::from_utf8(line).expect("names are UTF-8"));
    });
    lines
}

/// The folded lines a flame graph is drawn from: one per node of the call
/// The folded lines a flame graph is drawn from: one per node of the call
/// tree (top-down, or bottom-up for the callers' view), with its own
/// weight, leaving out the subtrees lighter than `min_weight`, whose weight
/// goes to the nearest node kept (they are narrower than the narrowest
/// frame drawn: the frames drawn keep their exact widths). A profile of
/// 400 000 stacks 46 frames deep makes 512 MB of folded stacks and a few
/// thousand lines here.
fn flame_lines(
    samples: &Samples,
    collapse: CollapseMode,
    direction: Direction,
    min_weight: u64,
) -> Vec<String> {
    flame_lines_within(
        samples,
        collapse,
        direction,
        min_weight,
        calltree::PASS_BUDGET,
    )
}

/// [`flame_lines`] with a tree built within about `budget` nodes.
fn flame_lines_within(
    samples: &Samples,
    collapse: CollapseMode,
    direction: Direction,
    min_weight: u64,
    budget: usize,
) -> Vec<String> {
    let names = folded_names(samples);
    // The tree in passes, each within a budget of nodes, with only the
    // nodes that weigh `min_weight` or more (a subtree's own weights never
    // weigh more than its root) and every root; the own weights of the
    // subtrees left out come back as `hidden`.
    let (tree, hidden) = CallTreeBuilder::in_passes(
        collapse,
        direction,
        samples.routines(),
        budget,
        calltree::PASS_LEVELS,
    )
    .keeping_roots()
    .passes_over(samples, min_weight)
    .finish_with_hidden(min_weight);
    let ids: Vec<NodeId> = tree.node_ids().collect();
    // A node comes after its parent: each subtree's own weights, summed
    // from the last node up.
    let mut at: HashMap<NodeId, usize> = HashMap::default();
    at.reserve(ids.len());
    for (i, &id) in ids.iter().enumerate() {
        at.insert(id, i);
    }
    let parent = |i: usize| tree[ids[i]].parent().map(|p| at[&p]);
    let mut subtree: Vec<u64> = ids
        .iter()
        .map(|&id| {
            if tree[id].is_stub() {
                0
            } else {
                tree[id].excl() + hidden[id.index()]
            }
        })
        .collect();
    for i in (0..ids.len()).rev() {
        if let Some(p) = parent(i) {
            subtree[p] += subtree[i];
        }
    }
    let mut kept = vec![false; ids.len()];
    // A root lighter than a frame, whose children are in its weight.
    let mut whole = vec![false; ids.len()];
    let mut own: Vec<u64> = vec![0; ids.len()];
    for i in 0..ids.len() {
        let node = &tree[ids[i]];
        if node.is_stub() {
            continue;
        }
        let parent_kept = parent(i).is_none_or(|p| kept[p] && !whole[p]);
        if !parent_kept {
            continue;
        }
        if subtree[i] >= min_weight {
            kept[i] = true;
            own[i] += node.excl() + hidden[ids[i].index()];
        } else if let Some(p) = parent(i) {
            own[p] += subtree[i];
        } else {
            // A root lighter than a frame: drawn by no one, kept whole
            // (its children were counted in again, once).
            kept[i] = true;
            whole[i] = true;
            own[i] += subtree[i];
        }
    }
    let mut lines = Vec::new();
    for i in (0..ids.len()).filter(|&i| kept[i] && own[i] > 0) {
        let mut line = Vec::new();
        let path = tree.path_routines(ids[i]);
        folded_line(&mut line, &names, path.into_iter(), own[i]).expect("to memory");
        line.pop();
        lines.push(String::from_utf8(line).expect("names are UTF-8"));
    }
    lines
}

/// The profile's stacks in speedscope's file format
/// (https://www.speedscope.app/file-format-schema.json): one "sampled"
/// profile whose samples are the distinct stacks (frame indexes, root
/// first) and whose weights are `metric`'s, written as they come (a
/// profile of 400 000 stacks 46 frames deep gives 120 MB).
fn write_speedscope(
    w: &mut impl std::io::Write,
    o: &Opened,
    samples: &Samples,
    metric: Metric,
) -> Result<()> {
    let unit = match metric.unit() {
        "bytes" => "bytes",
        "ns" => "nanoseconds",
        _ => "none",
    };
    let js = |v: &str| serde_json::to_string(v).expect("a string");
    let total: u64 = samples.iter().map(|s| s.weight).sum();
    write!(
        w,
        r#"{{"$schema":"https://www.speedscope.app/file-format-schema.json","shared":{{"frames":["#
    )?;
    for (i, (_, n)) in samples.routines().iter().enumerate() {
        let sep = if i > 0 { "," } else { "" };
        write!(w, r#"{sep}{{"name":{}}}"#, js(n))?;
    }
    write!(
        w,
        r#"]}},"profiles":[{{"type":"sampled","name":{},"unit":"{unit}","startValue":0,"endValue":{total},"samples":["#,
        js(&format!("{}: {}", o.profile.run.command, metric.name()))
    )?;
    let mut first = true;
    let mut written = Ok(());
    // Numbers by itoa: through `write!`, formatting them was a third of
    // the export (20 million frames for compileall's store).
    let mut num = itoa::Buffer::new();
    samples.each(|_, frames, weight| {
        if weight == 0 || written.is_err() {
            return;
        }
        written = (|| {
            w.write_all(if first { b"[" } else { b",[" })?;
            first = false;
            for (i, f) in frames.iter().enumerate() {
                if i > 0 {
                    w.write_all(b",")?;
                }
                w.write_all(num.format(f.index()).as_bytes())?;
            }
            w.write_all(b"]")
        })();
    });
    written?;
    w.write_all(br#"],"weights":["#)?;
    let mut first = true;
    for s in samples.iter().filter(|s| s.weight > 0) {
        let sep = if first { "" } else { "," };
        first = false;
        w.write_all(sep.as_bytes())?;
        w.write_all(num.format(s.weight).as_bytes())?;
    }
    write!(
        w,
        r#"]}}],"name":{},"exporter":"heapledger {}"}}"#,
        js(&o.profile.run.command),
        env!("CARGO_PKG_VERSION")
    )?;
    Ok(())
}

/// Writes the profile to `out` in `format`, whole or not at all.
pub fn write(o: &Opened, format: Format, weights: Weights, out: &Path) -> Result<()> {
    if format == Format::Pprof {
        return crate::pprof::write(o, out);
    }
    if format == Format::Html {
        return crate::view::write_html(o, out);
    }
    let profile = &o.profile;
    let samples = match format {
        Format::Folded | Format::Flamegraph | Format::Speedscope => {
            Some(crate::tree::samples(o, weights.metric, weights.naming)?)
        }
        _ => None,
    };
    let flame = match format {
        Format::Flamegraph => Some(flamegraph_svg(
            o,
            samples.as_ref().expect("made above"),
            weights,
        )?),
        _ => None,
    };
    // The store keeps the variables apart from the profile: read before
    // the file is made, so that a damaged store is named as such.
    let with_globals = match format {
        Format::Malt if o.streams_stacks() => {
            let mut with = profile.clone();
            with.mem_stats.global_variables = o.globals()?;
            Some(with)
        }
        _ => None,
    };
    crate::output::write_whole(out, |f| {
        let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
        match format {
            Format::Speedscope => {
                write_speedscope(
                    &mut w,
                    o,
                    samples.as_ref().expect("made above"),
                    weights.metric,
                )?;
            }
            Format::Folded => {
                write_folded(
                    &mut w,
                    samples.as_ref().expect("made above"),
                    weights.collapse,
                )?;
            }
            Format::Flamegraph => {
                std::io::Write::write_all(&mut w, flame.as_ref().expect("made above"))?
            }
            // A store's stacks are written as they are read; a JSON
            // profile, or processes merged, hold theirs.
            Format::Malt if o.streams_stacks() => {
                let mut failed = None;
                let with = with_globals.as_ref().expect("made above");
                with.write_streamed_to(&mut w, |write| {
                    let read = o.each_stack(|stack, infos| {
                        if failed.is_none() {
                            if let Err(e) = write(stack, infos) {
                                failed = Some(anyhow!("{e}"));
                            }
                        }
                    });
                    if let Err(e) = read {
                        failed.get_or_insert(e);
                    }
                    Ok(())
                })
                .map_err(|e| anyhow!("{e}"))?;
                if let Some(e) = failed {
                    return Err(e);
                }
            }
            Format::Malt => profile.write_to(&mut w).map_err(|e| anyhow!("{e}"))?,
            Format::Callgrind => heapledger_profile::callgrind::write_stacks(
                profile,
                |f| o.each_stack(|stack, infos| f(stack, infos)),
                &mut w,
            )?,
            Format::Pprof | Format::Html => unreachable!("written above"),
        }
        std::io::Write::flush(&mut w)?;
        Ok(())
    })
}

/// The flame graph of `samples` (the profile's, weighed by
/// `weights.metric`) as inferno's SVG.
pub fn flamegraph_svg(o: &Opened, samples: &Samples, weights: Weights) -> Result<Vec<u8>> {
    flamegraph_svg_of(o, &flame_lines_of(samples, &weights), weights)
}

/// The folded lines of the flame graph of `samples` by `weights`, as
/// [`flamegraph_svg_of`] and [`flame_frames`] take them: making them is
/// most of a flame graph's cost (recursion collapsed on a large profile,
/// seconds), so the viewer keeps them for the graph's tooltips.
pub fn flame_lines_of(samples: &Samples, weights: &Weights) -> Vec<String> {
    flame_input(
        samples,
        weights,
        &flame_options(String::new(), weights.metric),
    )
}

/// [`flamegraph_svg`] of the lines [`flame_lines_of`] gave.
pub fn flamegraph_svg_of(o: &Opened, lines: &[String], weights: Weights) -> Result<Vec<u8>> {
    let mut opts = flame_options(
        format!(
            "{}: {}{}",
            o.profile.run.command,
            weights.metric.name(),
            if weights.inverted { ", callers" } else { "" }
        ),
        weights.metric,
    );
    // The callers' view is the bottom-up tree, drawn downwards.
    if weights.inverted {
        opts.direction = inferno::flamegraph::Direction::Inverted;
    }
    // inferno takes them in this order (`flame_frames` lays them out so).
    opts.no_sort = true;
    if lines.is_empty() {
        anyhow::bail!(
            "the profile has no stack with {} to draw",
            weights.metric.name()
        );
    }
    let mut svg = Vec::new();
    inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), &mut svg)
        .map_err(|e| anyhow!("{e}"))?;
    Ok(svg)
}

/// The folded lines the flame graph of `samples` draws (frames narrower
/// than a quarter of inferno's narrowest drawn frame left out), sorted as
/// inferno would sort them.
fn flame_input(
    samples: &Samples,
    weights: &Weights,
    opts: &inferno::flamegraph::Options<'_>,
) -> Vec<String> {
    let direction = match weights.inverted {
        true => Direction::BottomUp,
        false => Direction::TopDown,
    };
    // inferno leaves out frames under `min_width` percent of the whole
    // (0.01 %): those under half of that are left out here, before it
    // reads them (a frame left out gives its weight to its parent's own).
    let min_weight = (samples.total_weight() as f64 * opts.min_width / 100.0 / 2.0).floor() as u64;
    let min_weight = min_weight.max(1);
    let mut lines = match weights.collapse {
        CollapseMode::None => pruned_lines(samples, PrefixTree::new(direction), min_weight),
        // Paths only go down here too: each subtree's own weights sum to
        // its inclusive weight, as the prefix tree's lines take them.
        CollapseMode::Direct => {
            pruned_lines(samples, PrefixTree::direct_collapse(direction), min_weight)
        }
        collapse => flame_lines(samples, collapse, direction, min_weight),
    };
    lines.sort_unstable();
    lines
}

/// A frame of a flame graph (see [`flame_frames`]).
pub struct FlameFrame {
    /// `depth:x`: inferno's `fg:x`, in weight; depth 0 is its `all`.
    pub key: String,
    /// The frame it stands on (an index into the list; None for `all`,
    /// which comes first, and each frame after its parent).
    pub parent: Option<usize>,
    /// Its routine's name, as folded lines write it ("" for `all`).
    pub name: String,
}

/// The frames of a flame graph that inferno draws (none under
/// `min_width` percent of the whole), as it lays them out, from its lines
/// ([`flame_lines_of`]).
pub fn flame_frames(lines: &[String]) -> Vec<FlameFrame> {
    let mut out = vec![FlameFrame {
        key: "0:0".to_owned(),
        parent: None,
        name: String::new(),
    }];
    // Each frame's width (in weight), known once the lines leave it.
    let mut widths: Vec<u64> = vec![0];
    // The frames of the line before, by depth: index into `out`, name,
    // where it starts.
    let mut prev: Vec<(usize, &str, u64)> = Vec::new();
    let mut x: u64 = 0;
    for line in lines {
        let Some((stack, w)) = line.rsplit_once(' ') else {
            continue;
        };
        let names: Vec<&str> = stack.split(';').collect();
        let same = prev
            .iter()
            .zip(&names)
            .take_while(|((_, a, _), b)| a == *b)
            .count();
        for &(i, _, start) in &prev[same..] {
            widths[i] = x - start;
        }
        prev.truncate(same);
        for (d, name) in names.iter().enumerate().skip(same) {
            let parent = d.checked_sub(1).map_or(0, |p| prev[p].0);
            out.push(FlameFrame {
                key: format!("{}:{x}", d + 1),
                parent: Some(parent),
                name: (*name).to_owned(),
            });
            widths.push(0);
            prev.push((out.len() - 1, name, x));
        }
        x += w.parse::<u64>().unwrap_or(0);
    }
    for &(i, _, start) in &prev {
        widths[i] = x - start;
    }
    widths[0] = x;
    // inferno's own pruning: a frame narrower than this is not drawn (nor
    // then its children, narrower still).
    let min = x as f64 * FLAME_MIN_WIDTH / 100.0;
    let mut index = vec![usize::MAX; out.len()];
    let mut kept = Vec::with_capacity(out.len());
    for (i, mut f) in out.into_iter().enumerate() {
        let parent = f.parent.map(|p| index[p]);
        if parent == Some(usize::MAX) || (i > 0 && (widths[i] as f64) < min) {
            continue;
        }
        f.parent = parent;
        index[i] = kept.len();
        kept.push(f);
    }
    kept
}

/// inferno's narrowest frame drawn, in percent of the whole: frames of at
/// least half a pixel of its 1 200 (inferno's default, 0.01 %, draws
/// frames of a tenth of a pixel: a profile of 432 000 stacks 46 deep gave
/// 16 700 of them, 3.5 MB that took Chromium 4 s).
const FLAME_MIN_WIDTH: f64 = 0.05;

/// inferno's options with a title, the metric's unit and no randomness
/// (the same profile gives the same file).
fn flame_options(title: String, metric: Metric) -> inferno::flamegraph::Options<'static> {
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = title;
    opts.count_name = metric.unit().into();
    opts.deterministic = true;
    opts.min_width = FLAME_MIN_WIDTH;
    opts
}

/// A differential flame graph (inferno's: the new profile's shape, red
/// where a stack grew, blue where it shrank) of two profiles' stacks,
/// matched by their routines' names.
pub fn differential(
    base: &Opened,
    base_range: Option<&crate::tree::RangeRows>,
    new: &Opened,
    new_range: Option<&crate::tree::RangeRows>,
    metric: Metric,
    out: &Path,
) -> Result<()> {
    let svg = differential_svg_in(base, base_range, new, new_range, metric)?;
    crate::output::write_whole(out, |mut f| {
        std::io::Write::write_all(&mut f, &svg)?;
        Ok(())
    })
}

/// The differential flame graph of [`differential`] as SVG, each side
/// limited to a time range of its run where given (allocations or bytes).
pub fn differential_svg_in(
    base: &Opened,
    base_range: Option<&crate::tree::RangeRows>,
    new: &Opened,
    new_range: Option<&crate::tree::RangeRows>,
    metric: Metric,
) -> Result<Vec<u8>> {
    let split = |l: &str| -> (String, u64) {
        let (s, w) = l.rsplit_once(' ').unwrap_or((l, "0"));
        (s.to_owned(), w.parse().unwrap_or(0))
    };
    let folded = |o: &Opened, range: Option<&crate::tree::RangeRows>| -> Result<String> {
        let mut text = Vec::new();
        write_folded(
            &mut text,
            &crate::tree::samples_in(o, metric, Default::default(), range)?,
            CollapseMode::None,
        )?;
        Ok(String::from_utf8(text)?)
    };
    let mut both: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
    for l in folded(base, base_range)?.lines() {
        let (s, w) = split(l);
        both.entry(s).or_default().0 += w;
    }
    for l in folded(new, new_range)?.lines() {
        let (s, w) = split(l);
        both.entry(s).or_default().1 += w;
    }
    let lines: Vec<String> = both
        .iter()
        .map(|(s, (a, b))| format!("{s} {a} {b}"))
        .collect();
    if lines.is_empty() {
        anyhow::bail!("neither profile has a stack with {} to draw", metric.name());
    }
    let mut opts = flame_options(
        format!(
            "{} (new) against {} (base): {}",
            new.profile.run.command,
            base.profile.run.command,
            metric.name()
        ),
        metric,
    );
    let mut svg = Vec::new();
    inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), &mut svg)
        .map_err(|e| anyhow!("{e}"))?;
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted(mut v: Vec<String>) -> Vec<String> {
        v.sort();
        v
    }

    /// Frames lighter than the least weight drawn go, their weight to
    /// their parent's own; a light root stays as one frame; the others
    /// keep their exact weights, in both directions.
    #[test]
    fn light_frames_go_to_their_parent() {
        let s = Samples::from_text(
            "1000: main a b\n3: main a c\n1: main a c d\n2: main e\n900: main f\n4: other\n",
        )
        .unwrap();
        assert_eq!(
            sorted(pruned_lines(&s, PrefixTree::new(Direction::TopDown), 5)),
            [
                "main 2",
                "main;a 4",
                "main;a;b 1000",
                "main;f 900",
                "other 4"
            ]
        );
        // Nothing under the least weight: every stack as it is.
        assert_eq!(
            pruned_lines(&s, PrefixTree::new(Direction::TopDown), 1).len(),
            6
        );
        // The callers' view: leaf first.
        assert_eq!(
            sorted(pruned_lines(&s, PrefixTree::new(Direction::BottomUp), 5)),
            [
                "b;a;main 1000",
                "c 3",
                "d 1",
                "e 2",
                "f;main 900",
                "other 4"
            ]
        );
    }

    /// `flame_lines` as it was, from the whole collapsed tree: the oracle
    /// of the tree built in passes.
    fn whole_flame_lines(
        samples: &Samples,
        collapse: CollapseMode,
        direction: Direction,
        min_weight: u64,
    ) -> Vec<String> {
        let names = folded_names(samples);
        let tree = CallTree::build(samples, collapse, direction);
        let ids: Vec<NodeId> = tree.node_ids().collect();
        let at: HashMap<NodeId, usize> = ids.iter().enumerate().map(|(i, &id)| (id, i)).collect();
        let parent = |i: usize| tree[ids[i]].parent().map(|p| at[&p]);
        let mut subtree: Vec<u64> = ids
            .iter()
            .map(|&id| {
                if tree[id].is_stub() {
                    0
                } else {
                    tree[id].excl()
                }
            })
            .collect();
        for i in (0..ids.len()).rev() {
            if let Some(p) = parent(i) {
                subtree[p] += subtree[i];
            }
        }
        let (mut kept, mut whole, mut own) = (
            vec![false; ids.len()],
            vec![false; ids.len()],
            vec![0u64; ids.len()],
        );
        for i in 0..ids.len() {
            let node = &tree[ids[i]];
            if node.is_stub() || !parent(i).is_none_or(|p| kept[p] && !whole[p]) {
                continue;
            }
            if subtree[i] >= min_weight {
                kept[i] = true;
                own[i] += node.excl();
            } else if let Some(p) = parent(i) {
                own[p] += subtree[i];
            } else {
                kept[i] = true;
                whole[i] = true;
                own[i] += subtree[i];
            }
        }
        (0..ids.len())
            .filter(|&i| kept[i] && own[i] > 0)
            .map(|i| {
                let mut line = Vec::new();
                folded_line(
                    &mut line,
                    &names,
                    tree.path_routines(ids[i]).into_iter(),
                    own[i],
                )
                .unwrap();
                line.pop();
                String::from_utf8(line).unwrap()
            })
            .collect()
    }

    /// The collapsed flame graph's lines from the tree built in passes
    /// (budgets of 2 to 9 nodes, so that most take several) are the whole
    /// tree's, on 300 pseudo-random sample sets with recursion, in the
    /// conservative and full modes, both ways, for several limits.
    #[test]
    fn collapsed_flame_lines_in_passes_are_the_whole_trees() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for case in 0..300 {
            let mut text = String::new();
            let routines = 1 + next(6);
            for _ in 0..1 + next(12) {
                let frames: Vec<String> = (0..1 + next(10))
                    .map(|_| format!("f{}", next(routines)))
                    .collect();
                text.push_str(&format!("{}: {}\n", next(30), frames.join(" ")));
            }
            let s = Samples::from_text(&text).unwrap();
            let total = s.total_weight();
            for collapse in [CollapseMode::Conservative, CollapseMode::Full] {
                for direction in Direction::ALL {
                    for min in [0, 1, total / 20, total / 5, total / 2, total + 1] {
                        let budget = 2 + case % 8;
                        assert_eq!(
                            sorted(flame_lines_within(&s, collapse, direction, min, budget)),
                            sorted(whole_flame_lines(&s, collapse, direction, min)),
                            "{collapse:?} {direction:?} min {min} budget {budget}:\n{text}"
                        );
                    }
                }
            }
        }
    }

    /// A collapsed tree's light root is one frame of its whole weight,
    /// its children not counted in twice; the lines add up to the total,
    /// in every mode, both ways.
    #[test]
    fn a_light_roots_children_are_counted_once() {
        let s = Samples::from_text(
            "1000: main a
2: other x y
1: other x
2: other x x
",
        )
        .unwrap();
        for collapse in CollapseMode::ALL {
            for direction in Direction::ALL {
                let lines = match collapse {
                    CollapseMode::None => pruned_lines(&s, PrefixTree::new(direction), 100),
                    CollapseMode::Direct => {
                        pruned_lines(&s, PrefixTree::direct_collapse(direction), 100)
                    }
                    _ => flame_lines(&s, collapse, direction, 100),
                };
                let sum: u64 = lines
                    .iter()
                    .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
                    .sum();
                assert_eq!(sum, 1005, "{collapse:?} {direction:?}: {lines:?}");
            }
        }
    }
}
