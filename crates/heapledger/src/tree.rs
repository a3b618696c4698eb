//! `heapledger tree`: a profile's stacks as a call tree with recursion
//! collapsing (see `heapledger_analysis::calltree`).

use crate::profiles::Opened;
use anyhow::Result;
use heapledger_analysis::calltree::{
    self, CallTree, CollapseMode, Direction, RenderOptions, RoutineId, Samples,
};
use heapledger_profile::{Addr, Profile, StackInfos};
use std::io::Write;

type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// Which per-stack number weighs a stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Metric {
    /// Allocation calls.
    Count,
    /// Bytes allocated.
    Bytes,
    /// Bytes alive when the whole process reached its peak.
    Peak,
    /// Bytes still allocated at exit (the C/C++ runtime's own blocks apart).
    Leaked,
    /// Temporary allocations: blocks freed by the thread that allocated
    /// them before it allocated anything else.
    Temporary,
    /// The lifetimes of the freed blocks, summed (nanoseconds).
    Lifetime,
    /// Time lost waiting (locks, conditions, joins, semaphores), at the
    /// waiters' stacks (nanoseconds).
    Waited,
}

impl Metric {
    pub fn name(self) -> &'static str {
        match self {
            Metric::Count => "allocations",
            Metric::Bytes => "bytes allocated",
            Metric::Peak => "bytes at peak",
            Metric::Leaked => "bytes leaked",
            Metric::Temporary => "temporary allocations",
            Metric::Lifetime => "ns of block lifetimes",
            Metric::Waited => "ns waited",
        }
    }

    /// What one unit of the weight is: "allocations", "bytes" or "ns".
    pub fn unit(self) -> &'static str {
        match self {
            Metric::Count | Metric::Temporary => "allocations",
            Metric::Bytes | Metric::Peak | Metric::Leaked => "bytes",
            Metric::Lifetime | Metric::Waited => "ns",
        }
    }
}

/// Plain options of `heapledger tree`.
#[derive(Clone, Debug)]
pub struct TreeOptions {
    pub collapse: CollapseMode,
    /// Only what the run did between these times (seconds after the
    /// process started), at the resolution of its checkpoints.
    pub range: Option<(f64, f64)>,
    /// Only what this thread allocated (1 for the first).
    pub thread: Option<u32>,
    pub metric: Metric,
    pub limit_percent: f64,
    pub max_level: u32,
    pub bottom_up: bool,
    pub json: bool,
    pub naming: Naming,
}

/// How stacks become paths of routines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Naming {
    /// One routine per source line instead of per function.
    pub by_line: bool,
    /// Only each stack's frames in JIT code (Python's functions under
    /// CPython 3.12 and later, JavaScript's), and its innermost frame (the
    /// function that allocated) where that is not one: the interpreter's
    /// own frames between them left out, as memray shows Python stacks.
    pub jit_only: bool,
}

/// Names of the routines of one address, outermost first: the inlined
/// callers (from heapledger's key), then the innermost function.
fn routines_of(p: &Profile, addr: Addr, by_line: bool, out: &mut Vec<String>) {
    let name = |function: &str, file: &str, line: Option<u32>| {
        if by_line {
            match line {
                Some(l) => format!("{function} {}:{l}", heapledger_profile::basename(file)),
                None => format!("{function} {}", heapledger_profile::basename(file)),
            }
        } else {
            function.to_owned()
        }
    };
    let Some(site) = p.resolve_addr(addr) else {
        out.push(p.frame_name(addr).into_owned());
        return;
    };
    for f in p.inline_chain(addr).iter().rev() {
        out.push(name(f.function, f.file, f.line));
    }
    if site.function == heapledger_profile::UNKNOWN {
        out.push(p.frame_name(addr).into_owned());
    } else {
        out.push(name(site.function, site.file, site.line));
    }
}

/// A stack's weight by `metric` from its counters (0 for the metrics
/// that are not kept per stack: `Leaked`, `Waited`).
pub fn stack_weight(metric: Metric, infos: &StackInfos, ns_per_tick: f64) -> u64 {
    match metric {
        Metric::Count => infos.alloc.count,
        Metric::Bytes => infos.alloc.sum,
        Metric::Peak => infos.global_peak.max(0) as u64,
        Metric::Temporary => infos.temporary,
        Metric::Lifetime => (infos.lifetime.sum as f64 * ns_per_tick) as u64,
        Metric::Leaked | Metric::Waited => 0,
    }
}

/// Names stacks as paths of routines, root first: each address's inline
/// chain (outermost first), then its function; named and interned once
/// per address (a million stacks hold a few thousand addresses).
pub struct Namer<'p> {
    p: &'p Profile,
    by_line: bool,
    jit_only: bool,
    /// A stack's frames kept with `jit_only`.
    kept: Vec<Addr>,
    /// Each address's routines: a slice of `flat`.
    routines: HashMap<Addr, (u32, u32)>,
    flat: Vec<RoutineId>,
    names: Vec<String>,
    no_stack: Option<RoutineId>,
    /// The last stack named (innermost first, as given), its routines,
    /// and how many of them its outermost frames gave, frame by frame
    /// (`ends[k]`: the routines of its `k` outermost frames): the store
    /// gives its stacks in its tree's order, each sharing most of its
    /// outer frames with the one before.
    last: Vec<Addr>,
    last_out: Vec<RoutineId>,
    ends: Vec<u32>,
}

impl<'p> Namer<'p> {
    pub fn new(p: &'p Profile, naming: Naming) -> Namer<'p> {
        Namer {
            p,
            by_line: naming.by_line,
            jit_only: naming.jit_only,
            kept: Vec::new(),
            routines: HashMap::default(),
            flat: Vec::new(),
            names: Vec::new(),
            no_stack: None,
            last: Vec::new(),
            last_out: Vec::new(),
            ends: vec![0],
        }
    }

    /// The routines of `stack` (innermost first), root first, in `out`,
    /// interned with `intern` (always the same table); `[no stack]` for an
    /// empty stack.
    pub fn path(
        &mut self,
        stack: &[Addr],
        intern: &mut dyn FnMut(&str) -> RoutineId,
        out: &mut Vec<RoutineId>,
    ) {
        if self.jit_only {
            let mut kept = std::mem::take(&mut self.kept);
            kept.clear();
            kept.extend(stack.iter().enumerate().filter_map(|(i, &a)| {
                let jit = self
                    .p
                    .resolve_addr(a)
                    .is_some_and(|s| s.binary == heapledger_profile::JIT_BINARY);
                (jit || i == 0).then_some(a)
            }));
            self.path_of(&kept, intern, out);
            self.kept = kept;
        } else {
            self.path_of(stack, intern, out);
        }
    }

    fn path_of(
        &mut self,
        stack: &[Addr],
        intern: &mut dyn FnMut(&str) -> RoutineId,
        out: &mut Vec<RoutineId>,
    ) {
        // The outer frames this stack shares with the last one keep their
        // routines.
        let shared = heapledger_profile::shared_outer_frames(stack, &self.last);
        self.last_out.truncate(self.ends[shared] as usize);
        self.ends.truncate(shared + 1);
        for &a in stack[..stack.len() - shared].iter().rev() {
            let (at, len) = *self.routines.entry(a).or_insert_with(|| {
                self.names.clear();
                routines_of(self.p, a, self.by_line, &mut self.names);
                let at = self.flat.len() as u32;
                for n in &self.names {
                    self.flat.push(intern(n));
                }
                (at, self.names.len() as u32)
            });
            self.last_out
                .extend_from_slice(&self.flat[at as usize..(at + len) as usize]);
            self.ends.push(self.last_out.len() as u32);
        }
        self.last.clear();
        self.last.extend_from_slice(stack);
        out.clear();
        out.extend_from_slice(&self.last_out);
        if out.is_empty() {
            out.push(*self.no_stack.get_or_insert_with(|| intern("[no stack]")));
        }
    }
}

/// The profile's stacks as samples, root first, weighted by `metric`.
pub fn samples(o: &Opened, metric: Metric, naming: Naming) -> Result<Samples> {
    samples_in(o, metric, naming, None)
}

/// What a time range of the run did at each stack, from the checkpoint
/// series (`Opened::range`): (stack row, counters at its start, at its
/// end), by row.
pub type RangeRows = [(
    u32,
    heapledger_profile::SeriesCounts,
    heapledger_profile::SeriesCounts,
)];

/// A time range of the run, at the resolution of its checkpoints: the
/// points of the checkpoint series it runs between, and what each stack
/// did in it.
pub struct Range {
    /// What it is, as a cache key: `range:FROM:TO` or `thread:N`.
    pub key: String,
    /// The point it starts at (None: the process's start) and ends at.
    pub from: Option<usize>,
    pub to: usize,
    /// Their times, seconds after the process started.
    pub from_s: f64,
    pub to_s: f64,
    pub rows: Vec<(
        u32,
        heapledger_profile::SeriesCounts,
        heapledger_profile::SeriesCounts,
    )>,
}

/// The time range from `a` to `b` seconds after the process started,
/// widened to the checkpoints around it.
pub fn range(o: &Opened, a: f64, b: f64) -> Result<Range> {
    if !a.is_finite() || !b.is_finite() {
        anyhow::bail!("a time range runs between two numbers of seconds");
    }
    let (a, b) = (a.min(b), a.max(b));
    let times = o.series_times()?;
    let Some(last) = times.len().checked_sub(1) else {
        anyhow::bail!("this profile has no checkpoints to select a time range by: `heapledger run` writes one every 2 s (--checkpoint-every) and one at the end");
    };
    let from = times.iter().rposition(|&t| t <= a);
    let to = times.iter().position(|&t| t >= b).unwrap_or(last);
    let to = to.max(from.map_or(0, |f| (f + 1).min(last)));
    Ok(Range {
        key: format!("range:{from:?}:{to}"),
        from,
        to,
        from_s: from.map_or(0.0, |f| times[f]),
        to_s: times[to],
        rows: o.series_between(from, to)?,
    })
}

/// What thread `thread` (1 for the first, as the profile lists them)
/// allocated at each stack, as a [`Range`] from nothing (the whole run).
pub fn thread(o: &Opened, thread: u32) -> Result<Range> {
    let (threads, unkept) = o.thread_stack_threads()?;
    let index = thread.checked_sub(1).filter(|i| threads.contains(i));
    let Some(index) = index else {
        let listed: Vec<String> = threads.iter().map(|t| (t + 1).to_string()).collect();
        anyhow::bail!(
            "{}",
            match (listed.is_empty(), unkept) {
                (true, 0) =>
                    "the profile holds no thread's own stacks (one thread allocated)".to_owned(),
                (true, n) => format!(
                    "the profile holds no thread's own stacks (the recorder's budget for them left {n} thread{} out)",
                    if n == 1 { "" } else { "s" }
                ),
                (false, 0) => format!(
                    "no stacks of thread {thread} in the profile (threads {})",
                    listed.join(", ")
                ),
                (false, n) => format!(
                    "no stacks of thread {thread} in the profile (threads {}; the recorder's budget for each thread's own stacks left {n} thread{} out)",
                    listed.join(", "),
                    if n == 1 { "" } else { "s" }
                ),
            }
        );
    };
    let rows = o
        .thread_stacks(index)?
        .into_iter()
        .map(|(row, count, bytes)| (row, [0; 4], [count, bytes, 0, 0]))
        .collect();
    Ok(Range {
        key: format!("thread:{thread}"),
        from: None,
        to: 0,
        from_s: 0.0,
        to_s: 0.0,
        rows,
    })
}

/// As [`samples`], or, with `range`, weighted by what each stack did in
/// that time range: its allocations (`Count`) or bytes allocated
/// (`Bytes`); no other metric has a range.
pub fn samples_in(
    o: &Opened,
    metric: Metric,
    naming: Naming,
    range: Option<&RangeRows>,
) -> Result<Samples> {
    let mut samples = Samples::new();
    feed(o, metric, naming, range, &mut samples)?;
    Ok(samples)
}

/// Where [`feed`] puts each stack: a [`Samples`] set (which keeps them),
/// or a tree being built ([`TreeSink`], which keeps only the tree).
pub trait Sink {
    /// The routine of this name.
    fn intern(&mut self, name: &str) -> RoutineId;
    /// One stack, routines root first.
    fn push(&mut self, frames: &[RoutineId], weight: u64) -> Result<()>;
}

impl Sink for Samples {
    fn intern(&mut self, name: &str) -> RoutineId {
        Samples::intern(self, name)
    }
    fn push(&mut self, frames: &[RoutineId], weight: u64) -> Result<()> {
        Ok(Samples::push(self, frames, weight)?)
    }
}

/// A call tree built as the stacks are read, without keeping them (the
/// frames of compileall's stacks, routine by routine, take 130 MB): a
/// prefix tree without collapsing or with direct collapsing (`PrefixTree`,
/// 24 or 40 bytes a node), the collapsed tree itself otherwise (a node of
/// the conservative or full modes gathers samples from many paths, so the
/// whole tree is replayed). Only the part a render shows is made into the
/// tree.
pub struct TreeSink {
    routines: calltree::RoutineTable,
    tree: Building,
}

/// (Each boxed: they differ in size by far.)
enum Building {
    Prefix(Box<calltree::PrefixTree>),
    Collapsed(Box<calltree::CallTreeBuilder>),
}

impl TreeSink {
    pub fn new(collapse: CollapseMode, direction: Direction) -> TreeSink {
        let routines = calltree::RoutineTable::new();
        let tree = match (collapse, direction) {
            (CollapseMode::None, _) => {
                Building::Prefix(Box::new(calltree::PrefixTree::new(direction)))
            }
            (CollapseMode::Direct, _) => {
                Building::Prefix(Box::new(calltree::PrefixTree::direct_collapse(direction)))
            }
            _ => Building::Collapsed(Box::new(calltree::CallTreeBuilder::in_passes(
                collapse,
                direction,
                &routines,
                pass_budget(),
                calltree::PASS_LEVELS,
            ))),
        };
        TreeSink { routines, tree }
    }

    /// After the stacks were fed: whether they must be fed again, the same
    /// way, for the tree a render with `limit_percent` shows (a collapsed
    /// tree larger than `calltree::PASS_BUDGET` nodes is built in passes:
    /// see `CallTreeBuilder::in_passes`).
    pub fn another_pass(&mut self, limit_percent: f64) -> bool {
        match &mut self.tree {
            Building::Prefix(_) => false,
            Building::Collapsed(b) => b.end_pass(shown_min(b.total_weight(), limit_percent)),
        }
    }

    /// The tree as a render with `limit_percent` shows it (the nodes under
    /// half the limit left out), and its routines.
    pub fn finish(self, limit_percent: f64) -> (CallTree, calltree::RoutineTable) {
        let total = match &self.tree {
            Building::Prefix(p) => p.total_weight(),
            Building::Collapsed(b) => b.total_weight(),
        };
        let min = shown_min(total, limit_percent);
        let tree = match self.tree {
            Building::Prefix(p) => p.into_tree(min),
            Building::Collapsed(b) => b.finish_pruned(min),
        };
        (tree, self.routines)
    }
}

impl Sink for TreeSink {
    fn intern(&mut self, name: &str) -> RoutineId {
        self.routines.intern(name)
    }
    fn push(&mut self, frames: &[RoutineId], weight: u64) -> Result<()> {
        match &mut self.tree {
            Building::Prefix(p) => {
                p.routines_grew(&self.routines);
                p.push(frames, weight)?;
            }
            Building::Collapsed(b) => {
                b.routines_grew(&self.routines);
                b.push(frames, weight)?;
            }
        }
        Ok(())
    }
}

/// The nodes a collapsed tree is built with, about: `calltree::PASS_BUDGET`,
/// or `HEAPLEDGER_TREE_NODES` (for tests: a small budget takes passes).
fn pass_budget() -> usize {
    std::env::var("HEAPLEDGER_TREE_NODES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(calltree::PASS_BUDGET)
}

/// The least weight of a node a render with `limit_percent` shows (those
/// under half the limit are left out).
fn shown_min(total: u64, limit_percent: f64) -> u64 {
    (total as f64 * limit_percent.max(0.0) / 100.0 / 2.0).floor() as u64
}

/// Reads the stacks of `o` weighed by `metric` (or, with `range`, by what
/// each did in that time range: `Count` or `Bytes` only) into `sink`,
/// routine by routine (function, or function and line with `by_line`).
pub fn feed<S: Sink>(
    o: &Opened,
    metric: Metric,
    naming: Naming,
    range: Option<&RangeRows>,
    sink: &mut S,
) -> Result<()> {
    if range.is_some() && !matches!(metric, Metric::Count | Metric::Bytes) {
        anyhow::bail!("a time range or a thread weighs stacks by allocations or bytes only");
    }
    let p = &o.profile;
    let mut namer = Namer::new(p, naming);
    let mut frames = Vec::new();
    let mut push = |stack: &[Addr], weight: u64, sink: &mut S| -> Result<()> {
        if weight == 0 {
            return Ok(());
        }
        namer.path(stack, &mut |n| sink.intern(n), &mut frames);
        sink.push(&frames, weight)
    };
    match metric {
        Metric::Waited => {
            for t in p.heapledger.iter().flat_map(|e| &e.time_lost) {
                push(&t.stack, t.total_ns, &mut *sink)?;
            }
        }
        Metric::Leaked => {
            // The program's leaks: the C/C++ runtime's own blocks (stdout's
            // buffer, the loader's...) are set apart, as in the summary.
            let mut runtime = p.runtime_leaks();
            runtime.sort_unstable();
            for (i, l) in p.leaks.iter().enumerate() {
                if runtime.binary_search(&i).is_err() {
                    push(&l.stack, l.memory, &mut *sink)?;
                }
            }
        }
        _ => {
            let ns_per_tick = 1e9 / p.globals.ticks_per_second.max(1) as f64;
            // Stacks as they are read (from the store, without holding
            // them all); the first error stops the rest.
            let mut failed = None;
            let (mut row, mut next) = (0u32, 0usize);
            o.each_stack(|stack, infos| {
                let at = row;
                row += 1;
                if failed.is_some() {
                    return;
                }
                if let Some(range) = range {
                    while next < range.len() && range[next].0 < at {
                        next += 1;
                    }
                    let Some((_, a, b)) = range.get(next).filter(|r| r.0 == at) else {
                        return;
                    };
                    let k = usize::from(metric == Metric::Bytes);
                    if let Err(e) = push(stack, b[k].saturating_sub(a[k]), &mut *sink) {
                        failed = Some(e);
                    }
                    return;
                }
                let w = stack_weight(metric, infos, ns_per_tick);
                if let Err(e) = push(stack, w, &mut *sink) {
                    failed = Some(e);
                }
            })?;
            if let Some(e) = failed {
                return Err(e);
            }
        }
    }
    Ok(())
}

/// The call tree of `samples` as far as a render with `limit_percent`
/// shows it: without collapsing or with direct collapsing, the nodes under
/// half the limit are never made (`PrefixTree`: the rest has the same
/// numbers), so that a deep profile's tree costs what it shows
/// (compileall's 405 000 stacks 46 deep: 406 MB for the whole tree). In
/// the conservative and full modes, the whole tree is replayed (a
/// collapsed node gathers samples from many paths) and only the part
/// shown kept (`CallTree::build_shown`).
pub fn shown_tree(
    samples: &Samples,
    collapse: CollapseMode,
    direction: Direction,
    limit_percent: f64,
) -> CallTree {
    let min = shown_min(samples.total_weight(), limit_percent);
    match collapse {
        CollapseMode::None => CallTree::build_pruned(samples, direction, min),
        CollapseMode::Direct => calltree::PrefixTree::direct_collapse(direction)
            .fed(samples)
            .into_tree(min),
        _ => CallTree::build_shown(samples, collapse, direction, min),
    }
}

pub fn print(p: &Opened, o: &TreeOptions, out: &mut impl Write) -> Result<()> {
    if o.range.is_some() && o.thread.is_some() {
        anyhow::bail!("a thread's own stacks are known for the whole run only: --thread takes no --from and --to");
    }
    if (o.range.is_some() || o.thread.is_some())
        && !matches!(o.metric, Metric::Count | Metric::Bytes)
    {
        anyhow::bail!("a time range or a thread weighs stacks by allocations or bytes only");
    }
    let range = match o.thread {
        Some(t) => Some(thread(p, t)?),
        None => o.range.map(|(a, b)| range(p, a, b)).transpose()?,
    };
    if let Some(r) = range.as_ref().filter(|_| o.range.is_some()) {
        say!(
            "heapledger: from {:.3} s to {:.3} s (the checkpoints around the times asked for)",
            r.from_s,
            r.to_s
        );
    }
    let direction = if o.bottom_up {
        Direction::BottomUp
    } else {
        Direction::TopDown
    };
    let rows = range.as_ref().map(|r| r.rows.as_slice());
    let mut sink = TreeSink::new(o.collapse, direction);
    // A collapsed tree larger than its budget takes more than one pass.
    loop {
        feed(p, o.metric, o.naming, rows, &mut sink)?;
        if !sink.another_pass(o.limit_percent) {
            break;
        }
    }
    let (tree, routines) = sink.finish(o.limit_percent);
    let opts = RenderOptions {
        limit_percent: o.limit_percent,
        max_level: o.max_level,
    };
    if o.json {
        calltree::write_json(out, &tree, &routines, o.metric.name(), &opts)?;
        writeln!(out)?;
    } else {
        calltree::write_text(out, &tree, &routines, o.metric.name(), &opts)?;
    }
    Ok(())
}
