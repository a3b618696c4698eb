//! Export to Valgrind's callgrind format, for `callgrind_annotate` and
//! KCachegrind (valgrind.org/docs/manual/cl-format.html).
//!
//! Costs come from the per-stack counters. Each stack puts its cost as
//! *exclusive* cost on its leaf function, at the leaf's line, and as the cost
//! of a *call* from each caller frame to its callee, at the caller's line: a
//! `cfl=`/`cfn=`/`calls=` triple followed by the cost line. Tools derive
//! inclusive cost from those calls, so every function on a stack gets the
//! stack's cost exactly once, provided a function appears once per stack.
//! Recursive stacks therefore have their cycles cut first: walking from the
//! outermost frame in, a function met again drops the frames since its first
//! occurrence, keeping the inner occurrence's line (the functions only inside
//! the cycle lose that stack's inclusive cost; KCachegrind's cycle handling
//! has the same limit).
//!
//! Unlike MALT's writer this emits `calls=` lines and uses `fl=` for files,
//! so inclusive costs work.

use std::collections::HashMap;
use std::io::{self, BufWriter, Write};

use indexmap::IndexMap;

use crate::addr::Addr;
use crate::model::Profile;
use crate::stacks::StackInfos;
use crate::strings::UNKNOWN;

/// The events written, in order.
pub const EVENTS: [&str; 7] = [
    "AllocCnt",
    "FreeCnt",
    "MemOps",
    "AllocSum",
    "FreeSum",
    "Leaks",
    "AliveReqMax",
];

/// Long names of [`EVENTS`], written as `event:` lines.
const EVENT_NAMES: [&str; 7] = [
    "allocation calls",
    "free calls",
    "allocation and free calls",
    "bytes allocated",
    "bytes freed",
    "bytes still allocated at exit",
    "most bytes alive at once",
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
        positive(infos.max_alive_req),
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
}

impl<'p> Graph<'p> {
    fn frame(&mut self, addr: Addr) -> (usize, u32) {
        if let Some(&f) = self.frames.get(&addr) {
            return f;
        }
        let (key, line) = match self.profile.resolve_addr(addr) {
            Some(site) => (
                FnKey {
                    object: site.binary.to_owned(),
                    file: site.file.to_owned(),
                    name: site.function.to_owned(),
                },
                site.line.unwrap_or(0),
            ),
            None => (
                FnKey {
                    object: self.object_of(addr).to_owned(),
                    file: UNKNOWN.to_owned(),
                    name: addr.to_string(),
                },
                0,
            ),
        };
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

    fn add_stack(&mut self, stack: &[Addr], cost: &Cost, ops: u64) {
        // Outermost first, cycles cut (see the module documentation).
        let mut path: Vec<(usize, u32)> = Vec::with_capacity(stack.len());
        let mut position: HashMap<usize, usize> = HashMap::new();
        for &addr in stack.iter().rev() {
            let (func, line) = self.frame(addr);
            if let Some(&at) = position.get(&func) {
                for (dropped, _) in path.drain(at + 1..) {
                    position.remove(&dropped);
                }
                path[at].1 = line;
            } else {
                position.insert(func, path.len());
                path.push((func, line));
            }
        }
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
        for pair in path.windows(2) {
            let [(caller, line), (callee, callee_line)] = [pair[0], pair[1]];
            let call = self.functions[caller]
                .calls
                .entry((line, callee, callee_line))
                .or_insert((0, [0; 7]));
            // callgrind_annotate ignores calls whose count is 0.
            call.0 = call.0.saturating_add(ops.max(1));
            add(&mut call.1, cost);
        }
    }
}

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
    let mut graph = Graph {
        profile,
        functions: IndexMap::new(),
        frames: HashMap::new(),
    };
    let mut total = [0u64; 7];
    for stat in profile.stacks() {
        let cost = cost_of(&stat.infos);
        if cost.iter().all(|&c| c == 0) {
            continue;
        }
        add(&mut total, &cost);
        graph.add_stack(&stat.stack, &cost, cost[2]);
    }

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
