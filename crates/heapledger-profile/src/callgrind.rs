//! Export to Valgrind's callgrind format, for `callgrind_annotate` and
//! KCachegrind (valgrind.org/docs/manual/cl-format.html).
//!
//! Costs come from the per-stack counters, all of them sums over stacks:
//! allocation and free calls and bytes, bytes leaked, and the bytes alive
//! when the whole process reached its peak (a stack's largest alive amount
//! is no sum over stacks and is not written). Each stack puts its cost as
//! *exclusive* cost on its leaf function, at the leaf's line, and as the
//! cost of a *call* from each caller frame to its callee, at the caller's
//! line: a `cfl=`/`cfn=`/`calls=` triple followed by the cost line.
//!
//! Inclusive cost is derived from the calls: `callgrind_annotate` gives a
//! function that is called anywhere the sum of its incoming calls. So that
//! every function on a stack gets the stack's cost exactly once, recursion
//! included (`ma` -> `mb` -> `ma`), only the call into a function's
//! outermost occurrence on the stack carries the cost; the calls into its
//! inner occurrences are written with zero cost (KCachegrind still shows
//! them as calls). A stack whose outermost function is called on other
//! stacks (its outer frames were cut, or never unwound) is hung under a
//! function of its own, `[outer frames not recorded]`, which calls it.
//!
//! A function is identified by object, file and name; a frame without a
//! function name is named by its address and module (`0x65072c
//! (python3.11)`), so that unresolved frames never merge into one `??`.
//!
//! `calls=` is a number of calls, which an allocation profile does not
//! know: each call arc is written as called once (KCachegrind's "Called"
//! then counts the places a function is called from).
//!
//! Unlike MALT's writer this emits `calls=` lines and uses `fl=` for files,
//! so inclusive costs work.

use std::io::{self, BufWriter, Write};

/// foldhash, not SipHash: every frame of every stack is looked up (SipHash
/// was a quarter of the export of half a million stacks). The maps' order
/// is their insertion order whatever the hash.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
type IndexMap<K, V> = indexmap::IndexMap<K, V, foldhash::fast::RandomState>;

use crate::addr::Addr;
use crate::model::Profile;
use crate::stacks::StackInfos;
use crate::strings::UNKNOWN;

/// The events written, in order.
pub const EVENTS: [&str; 7] = [
    "AllocCnt", "FreeCnt", "MemOps", "AllocSum", "FreeSum", "Leaks", "AtPeak",
];

/// Long names of [`EVENTS`], written as `event:` lines.
const EVENT_NAMES: [&str; 7] = [
    "allocation calls",
    "free calls",
    "allocation and free calls",
    "bytes allocated",
    "bytes freed",
    "bytes still allocated at exit",
    "bytes alive at the process's peak",
];

type Cost = [u64; 7];

fn cost_of(infos: &StackInfos) -> Cost {
    let positive = |v: i64| u64::try_from(v).unwrap_or(0);
    [
        infos.alloc.count,
        infos.free.count,
        infos.alloc.count.saturating_add(infos.free.count),
        infos.alloc.sum,
        infos.free.sum,
        positive(infos.alive_req),
        positive(infos.global_peak),
    ]
}

fn add(into: &mut Cost, cost: &Cost) {
    for (a, b) in into.iter_mut().zip(cost) {
        *a = a.saturating_add(*b);
    }
}

/// A function as callgrind identifies it: object, file and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct FnKey {
    object: String,
    file: String,
    name: String,
}

#[derive(Default)]
struct FnData {
    /// Exclusive cost per line.
    exclusive: IndexMap<u32, Cost>,
    /// Calls out, keyed by (line in this function, callee, line in callee).
    calls: IndexMap<(u32, usize, u32), (u64, Cost)>,
}

/// Collects the call graph, then writes it.
struct Graph<'p> {
    profile: &'p Profile,
    functions: IndexMap<FnKey, FnData>,
    /// Cache of address -> (function index, line).
    frames: HashMap<Addr, (usize, u32)>,
    /// The last stack's calls (see `add_stack`): where each is in its
    /// caller's `calls`, and whether it carries the cost.
    arcs: Vec<(usize, bool)>,
}

impl<'p> Graph<'p> {
    fn frame(&mut self, addr: Addr) -> (usize, u32) {
        if let Some(&f) = self.frames.get(&addr) {
            return f;
        }
        let site = self.profile.resolve_addr(addr);
        let object = match site {
            Some(s) if s.binary != UNKNOWN && !s.binary.is_empty() => s.binary,
            _ => self.object_of(addr),
        };
        let key = FnKey {
            object: object.to_owned(),
            file: site.map_or(UNKNOWN, |s| s.file).to_owned(),
            name: self.profile.frame_name(addr).into_owned(),
        };
        let line = site.and_then(|s| s.line).unwrap_or(0);
        let entry = self.functions.entry(key);
        let index = entry.index();
        entry.or_default();
        self.frames.insert(addr, (index, line));
        (index, line)
    }

    /// The mapped file holding `addr`, for frames without a symbol.
    fn object_of(&self, addr: Addr) -> &'p str {
        self.profile
            .sites
            .mapping_of(addr)
            .map_or(UNKNOWN, |m| m.file.as_str())
    }

    /// The function that calls the stacks whose outer frames are missing.
    fn root(&mut self) -> usize {
        let entry = self.functions.entry(FnKey {
            object: UNKNOWN.to_owned(),
            file: UNKNOWN.to_owned(),
            name: ROOT.to_owned(),
        });
        let index = entry.index();
        entry.or_default();
        index
    }

    /// Adds a stack's cost, its frames outermost first; its first `shared`
    /// frames are those of the stack added before it (whose calls are
    /// found again in `arcs`, not looked up).
    fn add_stack(&mut self, path: &[(usize, u32)], shared: usize, cost: &Cost) {
        let Some(&(leaf, leaf_line)) = path.last() else {
            return;
        };
        add(
            self.functions[leaf]
                .exclusive
                .entry(leaf_line)
                .or_insert([0; 7]),
            cost,
        );
        // The call from frame i to frame i + 1, found or added; and
        // whether it is the callee's outermost occurrence, the only one
        // that carries the cost (recursion). Both depend on the frames up
        // to i + 1 alone: those of the shared frames are the last stack's.
        self.arcs.truncate(shared.saturating_sub(1));
        for i in self.arcs.len()..path.len() - 1 {
            let [(caller, line), (callee, callee_line)] = [path[i], path[i + 1]];
            let first = !path[..=i].iter().any(|&(f, _)| f == callee);
            let entry = self.functions[caller]
                .calls
                .entry((line, callee, callee_line));
            let at = entry.index();
            entry.or_insert((1, [0; 7]));
            self.arcs.push((at, first));
        }
        for (i, &(at, first)) in self.arcs.iter().enumerate() {
            if first {
                if let Some((_, call)) = self.functions[path[i].0].calls.get_index_mut(at) {
                    add(&mut call.1, cost);
                }
            }
        }
    }
}

/// The function that calls a stack whose outermost frame is a function
/// called elsewhere.
pub const ROOT: &str = "[outer frames not recorded]";

/// Compresses names: `(id) name` the first time, `(id)` after.
#[derive(Default)]
struct Names {
    ids: HashMap<String, usize>,
}

impl Names {
    fn write(&mut self, out: &mut impl Write, tag: &str, name: &str) -> io::Result<()> {
        if let Some(id) = self.ids.get(name) {
            return writeln!(out, "{tag}=({id})");
        }
        let id = self.ids.len() + 1;
        self.ids.insert(name.to_owned(), id);
        writeln!(out, "{tag}=({id}) {}", one_line(name))
    }
}

/// Names cannot hold line breaks in this line-based format, and an empty
/// name reads as "no name" (`callgrind_annotate` then takes the caller's file).
fn one_line(s: &str) -> std::borrow::Cow<'_, str> {
    if s.is_empty() {
        UNKNOWN.into()
    } else if s.contains(['\n', '\r']) {
        s.replace(['\n', '\r'], " ").into()
    } else {
        s.into()
    }
}

fn write_cost(out: &mut impl Write, line: u32, cost: &Cost) -> io::Result<()> {
    write!(out, "{line}")?;
    for c in cost {
        write!(out, " {c}")?;
    }
    writeln!(out)
}

/// Writes `profile` in callgrind format to `writer` (buffered here).
pub fn write(profile: &Profile, writer: impl Write) -> io::Result<()> {
    write_stacks(
        profile,
        |f| {
            for stat in profile.stacks() {
                f(&stat.stack, &stat.infos);
            }
            Ok(())
        },
        writer,
    )
}

/// [`write`], the stacks given one by one by `stacks` (which calls its
/// argument with each stack and its counters), in the order `write` would
/// read them from `profile.stacks`; `profile`'s own are not read. Memory
/// goes with the functions and call arcs written, not with the stacks.
pub fn write_stacks<E: From<io::Error>>(
    profile: &Profile,
    stacks: impl FnOnce(&mut dyn FnMut(&[Addr], &StackInfos)) -> Result<(), E>,
    writer: impl Write,
) -> Result<(), E> {
    let mut graph = Graph {
        profile,
        functions: IndexMap::default(),
        frames: HashMap::default(),
        arcs: Vec::new(),
    };
    let mut total = [0u64; 7];
    // Which functions some stack calls (any frame but the outermost), and
    // the cost of each outermost frame: those of a function that is called
    // somewhere are hung under `ROOT` at the end, as if each such stack
    // had started there (the call from `ROOT` is the only arc that adds).
    let mut called: Vec<bool> = Vec::new();
    let mut outer_costs: IndexMap<(usize, u32), Cost> = IndexMap::default();
    // The last stack added: its frames, outermost first, and theirs. The
    // stacks of a store come in the order of their tree, each sharing
    // most of its outer frames with the one before (compileall's: 46 a
    // stack), which are not looked up again.
    let mut path: Vec<(usize, u32)> = Vec::new();
    let mut last: Vec<Addr> = Vec::new();
    stacks(&mut |stack, infos| {
        let cost = cost_of(infos);
        if cost.iter().all(|&c| c == 0) {
            return;
        }
        add(&mut total, &cost);
        let shared = stack
            .iter()
            .rev()
            .zip(&last)
            .take_while(|(a, b)| a == b)
            .count();
        path.truncate(shared);
        last.truncate(shared);
        for &a in stack.iter().rev().skip(shared) {
            path.push(graph.frame(a));
            last.push(a);
        }
        called.resize(graph.functions.len(), false);
        for &(f, _) in path.iter().skip(1) {
            called[f] = true;
        }
        if let Some(&outer) = path.first() {
            add(outer_costs.entry(outer).or_insert([0; 7]), &cost);
        }
        graph.add_stack(&path, shared, &cost);
    })?;
    called.resize(graph.functions.len(), false);
    for (&(outer, line), cost) in &outer_costs {
        if called[outer] {
            let root = graph.root();
            let call = graph.functions[root]
                .calls
                .entry((0, outer, line))
                .or_insert((1, [0; 7]));
            add(&mut call.1, cost);
        }
    }
    write_graph(profile, &graph, &total, writer)?;
    Ok(())
}

fn write_graph(
    profile: &Profile,
    graph: &Graph<'_>,
    total: &Cost,
    writer: impl Write,
) -> io::Result<()> {
    let mut out = BufWriter::with_capacity(1 << 20, writer);
    writeln!(out, "# callgrind format")?;
    writeln!(out, "version: 1")?;
    writeln!(
        out,
        "creator: heapledger-profile {} (profile by {})",
        env!("CARGO_PKG_VERSION"),
        one_line(&profile.run.tool)
    )?;
    if let Some(ext) = &profile.heapledger {
        writeln!(out, "pid: {}", ext.pid)?;
    }
    writeln!(out, "cmd: {}", one_line(&profile.run.command))?;
    writeln!(out, "positions: line")?;
    for (event, name) in EVENTS.iter().zip(EVENT_NAMES) {
        writeln!(out, "event: {event} : {name}")?;
    }
    writeln!(out, "events: {}", EVENTS.join(" "))?;
    write!(out, "summary:")?;
    for c in total {
        write!(out, " {c}")?;
    }
    writeln!(out)?;

    let mut objects = Names::default();
    let mut files = Names::default();
    let mut functions = Names::default();
    for (key, data) in &graph.functions {
        writeln!(out)?;
        objects.write(&mut out, "ob", &key.object)?;
        files.write(&mut out, "fl", &key.file)?;
        functions.write(&mut out, "fn", &key.name)?;
        for (line, cost) in &data.exclusive {
            write_cost(&mut out, *line, cost)?;
        }
        for (&(line, callee, callee_line), (count, cost)) in &data.calls {
            // Zero-cost calls (into inner occurrences of recursion) are
            // written too: they are part of the call graph.
            let Some((callee_key, _)) = graph.functions.get_index(callee) else {
                continue;
            };
            objects.write(&mut out, "cob", &callee_key.object)?;
            files.write(&mut out, "cfl", &callee_key.file)?;
            functions.write(&mut out, "cfn", &callee_key.name)?;
            writeln!(out, "calls={count} {callee_line}")?;
            write_cost(&mut out, line, cost)?;
        }
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Run;
    use proptest::prelude::*;

    /// `write_stacks` as it was before the calls of the stacks' shared
    /// frames were kept (the oracle): every frame looked up, every call
    /// found again.
    fn whole_stacks(profile: &Profile, stacks: &[(Vec<Addr>, StackInfos)]) -> Vec<u8> {
        let mut graph = Graph {
            profile,
            functions: IndexMap::default(),
            frames: HashMap::default(),
            arcs: Vec::new(),
        };
        let mut total = [0u64; 7];
        let mut called: Vec<bool> = Vec::new();
        let mut outer_costs: IndexMap<(usize, u32), Cost> = IndexMap::default();
        for (stack, infos) in stacks {
            let cost = cost_of(infos);
            if cost.iter().all(|&c| c == 0) {
                continue;
            }
            add(&mut total, &cost);
            let path: Vec<(usize, u32)> = stack.iter().rev().map(|&a| graph.frame(a)).collect();
            called.resize(graph.functions.len(), false);
            for &(f, _) in path.iter().skip(1) {
                called[f] = true;
            }
            if let Some(&outer) = path.first() {
                add(outer_costs.entry(outer).or_insert([0; 7]), &cost);
            }
            let Some(&(leaf, leaf_line)) = path.last() else {
                continue;
            };
            add(
                graph.functions[leaf]
                    .exclusive
                    .entry(leaf_line)
                    .or_insert([0; 7]),
                &cost,
            );
            let mut seen: Vec<usize> = vec![path[0].0];
            for pair in path.windows(2) {
                let [(caller, line), (callee, callee_line)] = [pair[0], pair[1]];
                let first = !seen.contains(&callee);
                if first {
                    seen.push(callee);
                }
                let call = graph.functions[caller]
                    .calls
                    .entry((line, callee, callee_line))
                    .or_insert((1, [0; 7]));
                if first {
                    add(&mut call.1, &cost);
                }
            }
        }
        called.resize(graph.functions.len(), false);
        for (&(outer, line), cost) in &outer_costs {
            if called[outer] {
                let root = graph.root();
                let call = graph.functions[root]
                    .calls
                    .entry((0, outer, line))
                    .or_insert((1, [0; 7]));
                add(&mut call.1, cost);
            }
        }
        let mut out = Vec::new();
        write_graph(profile, &graph, &total, &mut out).unwrap();
        out
    }

    proptest! {
        /// Stacks of a few frames (recursion), each sharing some of its
        /// outer frames with the one before, some without cost: the file
        /// is the one whole stacks give.
        #[test]
        fn calls_kept_from_the_last_stack_are_whole_stacks_calls(
            raw in prop::collection::vec(
                (0usize..6, prop::collection::vec(1u64..6, 0..7), 0u64..3),
                0..40,
            ),
        ) {
            let profile = Profile::new(Run::new("t", "t", "./t"));
            let mut stacks: Vec<(Vec<Addr>, StackInfos)> = Vec::new();
            let mut outer: Vec<Addr> = Vec::new();
            for (keep, inner, count) in raw {
                // Outermost first: some of the last stack's outer frames,
                // then frames of its own.
                outer.truncate(keep);
                outer.extend(inner.iter().map(|&a| Addr::native(a * 16)));
                let mut infos = StackInfos::default();
                for _ in 0..count {
                    infos.alloc.add(8);
                }
                stacks.push((outer.iter().rev().copied().collect(), infos));
            }
            let mut out = Vec::new();
            write_stacks::<io::Error>(
                &profile,
                |f| {
                    for (s, i) in &stacks {
                        f(s, i);
                    }
                    Ok(())
                },
                &mut out,
            )
            .unwrap();
            let want = whole_stacks(&profile, &stacks);
            prop_assert_eq!(String::from_utf8(out).unwrap(), String::from_utf8(want).unwrap());
        }
    }
}
