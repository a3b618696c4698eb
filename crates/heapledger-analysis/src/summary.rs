//! The text summary printed by `heapledger run` and `heapledger report`.
//!
//! [`Summary::from_profile`] computes every number once into plain data (so
//! the CLI, tests and other front ends can use the figures), and `Display`
//! renders them as a short, aligned report: what ran and how it ended, calls
//! per allocation function, bytes allocated, the peak of requested memory,
//! what was still alive at exit (the C/C++ runtime's own blocks apart), the
//! top allocation sites by bytes and by calls, and the top leaking stacks.
//!
//! An allocation site is the leaf frame of a stack: the code that called the
//! allocator (the converter has already removed the recorder's frames and
//! `operator new`). Stacks are grouped by the leaf's function, file, line and
//! binary, so one line of code called from many paths is one site.

use std::cmp::Reverse;
use std::collections::HashMap;
use std::fmt;

use heapledger_profile::{
    basename, ticks_to_seconds, Addr, ExitInfo, Profile, JIT_BINARY, UNKNOWN,
};

/// What the summary shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummaryOptions {
    /// How many sites and leaking stacks each list shows.
    pub top: usize,
}

impl Default for SummaryOptions {
    fn default() -> Self {
        SummaryOptions { top: 5 }
    }
}

/// How many frames of a leaking stack are printed.
const LEAK_FRAMES: usize = 6;

/// Calls to one allocation function, summed over threads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionCalls {
    /// C name: `malloc`, `calloc`, ..., `free`.
    pub name: &'static str,
    /// Calls.
    pub count: u64,
    /// Bytes requested (0 for `free`).
    pub bytes: u64,
}

/// A number of blocks and their bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Blocks {
    /// Blocks.
    pub count: u64,
    /// Bytes.
    pub bytes: u64,
}

impl Blocks {
    fn add(&mut self, count: u64, bytes: u64) {
        self.count = self.count.saturating_add(count);
        self.bytes = self.bytes.saturating_add(bytes);
    }
}

/// A source location as printed: `function  file:line  (library)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Site {
    /// Function name, or the address when unknown.
    pub function: String,
    /// `file:line`, `file`, or `??`.
    pub location: String,
    /// Base name of the binary, or `??`.
    pub library: String,
}

impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}  {}  ({})",
            self.function, self.location, self.library
        )
    }
}

/// Allocations made at one site.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteTotal {
    /// Where.
    pub site: Site,
    /// Allocation calls.
    pub calls: u64,
    /// Bytes allocated.
    pub bytes: u64,
    /// Bytes of this site alive when the whole process reached its peak.
    pub at_peak: u64,
    /// Bytes of its blocks alive at exit (where `SiteSums::add_leak` was
    /// given them).
    pub leaked: u64,
    /// Lifetimes of its freed blocks, in clock ticks (count, min, max,
    /// sum; see `globals.ticksPerSecond`).
    pub lifetime: heapledger_profile::MinMaxSum,
    /// Its temporary blocks (see `crate::temporary`).
    pub temporary: u64,
}

impl SiteTotal {
    /// `site`, with nothing counted yet.
    fn new(site: Site) -> SiteTotal {
        SiteTotal {
            site,
            calls: 0,
            bytes: 0,
            at_peak: 0,
            leaked: 0,
            lifetime: Default::default(),
            temporary: 0,
        }
    }

    /// Counts a stack's allocations, bytes, share at the peak, lifetimes
    /// and temporary blocks.
    fn credit(&mut self, infos: &heapledger_profile::StackInfos) {
        self.calls = self.calls.saturating_add(infos.alloc.count);
        self.bytes = self.bytes.saturating_add(infos.alloc.sum);
        self.at_peak = self.at_peak.saturating_add(infos.global_peak.max(0) as u64);
        self.lifetime.merge(&infos.lifetime);
        self.temporary = self.temporary.saturating_add(infos.temporary);
    }
}

/// Blocks alive at exit that share a stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeakReport {
    /// Blocks and bytes.
    pub blocks: Blocks,
    /// The first frames, innermost first.
    pub frames: Vec<Site>,
    /// Frames not shown.
    pub more_frames: usize,
}

/// How the recording was made (heapledger profiles only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recording {
    /// `dwarf`, `fp` or `none`.
    pub stack_mode: String,
    /// Deepest stack kept.
    pub max_depth: u32,
    /// Stacks cut at `max_depth`.
    pub truncated_stacks: u64,
    /// Whether frees were unwound (else charged to the allocating stack).
    pub frees_unwound: bool,
    /// One allocation in `n` recorded, if sampling.
    pub sample_every: Option<u64>,
    /// Lifetimes timed one by one for each stack's first `n` blocks in a
    /// thread, then sampled; `None`: all timed.
    pub lifetimes_sampled_after: Option<u64>,
    /// The recorder's own memory in the process, at its end and at most.
    pub internal_memory: u64,
    pub internal_memory_peak: u64,
    /// Allocator functions the program's executable defines itself, whose
    /// calls the recorder could not see, and the file that defines them.
    pub unhooked: Option<(Vec<String>, String)>,
    /// Allocator calls passed through unrecorded: made while the recorder
    /// was busy on the same thread (a signal handler's, or every call after
    /// a handler jumped out of the recorder).
    pub unrecorded: u64,
    /// Frees of blocks the recorder never saw allocated.
    pub unknown_frees: u64,
    /// How recording degraded when memory ran out, in one line (None: it
    /// did not).
    pub degraded: Option<String>,
}

/// Every figure of the summary.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// The command line.
    pub command: String,
    /// The executable's name.
    pub exe: String,
    /// The tool that wrote the profile.
    pub tool: String,
    /// When it ran.
    pub date: String,
    /// Process id, when recorded.
    pub pid: Option<u32>,
    /// The process it was forked from (its numbers count from the fork),
    /// and the blocks it inherited from it.
    pub forked_from: Option<u32>,
    pub inherited: Option<heapledger_profile::Inherited>,
    /// Killed before its end: the checkpoint its profile stops at (number,
    /// seconds after the start).
    pub checkpoint: Option<(u64, f64)>,
    /// A snapshot taken while it ran: its label (`checkpoint` says when).
    pub snapshot: Option<String>,
    /// The counters were reset while it ran: how many times, seconds
    /// after the start of the last, and the older blocks.
    pub reset: Option<(heapledger_profile::ResetInfo, f64)>,
    /// How it ended, when recorded.
    pub exit: Option<ExitInfo>,
    /// Run time in seconds, when the clock rate is known.
    pub run_seconds: Option<f64>,
    /// Threads that called the allocator (each row of `threads`, or as many
    /// as a merged row stands for), the most alive at once (0: unknown),
    /// and how many of them are in a merged row.
    pub threads: Threads,
    /// Calls per allocation function that was called, in a fixed order.
    pub calls: Vec<FunctionCalls>,
    /// Allocation calls (every function but `free`).
    pub alloc_calls: u64,
    /// Bytes allocated.
    pub alloc_bytes: u64,
    /// Peak of live requested bytes, when known.
    pub peak_requested: Option<u64>,
    /// When the peak was reached, in seconds from the start (heapledger only).
    pub peak_seconds: Option<f64>,
    /// The process's peaks of resident and virtual memory, as the kernel
    /// counted them (the recorder's own memory included), where known.
    pub peak_rss: Option<u64>,
    pub peak_virtual: Option<u64>,
    /// Requested and resident memory over the run, where the profile has a
    /// timeline.
    pub over_time: Option<crate::over_time::OverTime>,
    /// The deepest stack of any thread at an allocation: bytes, the row of
    /// `threads` (from 0), and the allocation's site.
    pub deepest_stack: Option<(u64, usize, Option<Site>)>,
    /// Allocations by size, in ranges of powers of four (from 0..16 B):
    /// (the range's lowest size, count); ranges with none left out.
    pub size_ranges: Vec<(u64, u64)>,
    /// The clock's rate, for the lifetimes (0: unknown).
    pub ticks_per_second: u64,
    /// Everything still allocated at exit.
    pub alive: Blocks,
    /// The part allocated by the C/C++ runtime itself.
    pub alive_runtime: Blocks,
    /// Top sites by bytes allocated.
    pub top_by_bytes: Vec<SiteTotal>,
    /// Top sites by allocation calls.
    pub top_by_calls: Vec<SiteTotal>,
    /// Top JIT functions by bytes (Python's, JavaScript's): each stack's
    /// innermost frame in JIT code, where the profile has such frames.
    pub top_jit_by_bytes: Vec<SiteTotal>,
    /// The sites that held the most memory when the process reached its
    /// peak (heaptrack's "peak consumers").
    pub top_at_peak: Vec<SiteTotal>,
    /// Temporary allocations and short-lived sites.
    pub temporary: crate::temporary::Temporary,
    /// Top leaking stacks of the program (runtime leaks excluded; stacks
    /// that symbolize alike merged).
    pub top_leaks: Vec<LeakReport>,
    /// Time lost waiting (locks, conditions, joins, semaphores).
    pub waits: crate::waits::Waits,
    /// Rows per table.
    pub top: usize,
    /// Leaking stacks of the program, after merging.
    pub leaking_stacks: usize,
    /// How it was recorded (heapledger profiles only).
    pub recording: Option<Recording>,
}

/// The profile's threads: see [`Summary::threads`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Threads {
    pub count: u64,
    pub most_at_once: u64,
    pub merged: u64,
}

/// The functions listed, in the order shown.
const FUNCTIONS: [&str; 9] = [
    "malloc",
    "calloc",
    "realloc",
    "posix_memalign",
    "aligned_alloc",
    "memalign",
    "valloc",
    "pvalloc",
    "free",
];

/// Most bytes first, then most calls, then by name.
fn most_bytes(a: &SiteTotal, b: &SiteTotal) -> std::cmp::Ordering {
    (Reverse(a.bytes), Reverse(a.calls), &a.site.function).cmp(&(
        Reverse(b.bytes),
        Reverse(b.calls),
        &b.site.function,
    ))
}

impl Summary {
    /// Computes the summary of `profile`.
    pub fn from_profile(profile: &Profile, options: &SummaryOptions) -> Summary {
        Summary::with_sites(profile, site_totals(profile), options)
    }

    /// The summary of `profile` whose stacks were summed by site in
    /// `sites` (its own `stacks` are not read: they may be left out).
    pub fn with_sites(profile: &Profile, sites: SiteSums, options: &SummaryOptions) -> Summary {
        let totals = profile.call_totals();
        let by_name = totals.iter();
        let calls: Vec<FunctionCalls> = FUNCTIONS
            .iter()
            .filter_map(|&name| {
                let (_, stat) = by_name.iter().find(|(n, _)| *n == name)?;
                (stat.count > 0).then(|| FunctionCalls {
                    name,
                    count: stat.count,
                    bytes: if name == "free" { 0 } else { stat.sum },
                })
            })
            .collect();
        let allocs = calls.iter().filter(|c| c.name != "free");
        let alloc_calls = allocs.clone().fold(0u64, |a, c| a.saturating_add(c.count));
        let alloc_bytes = allocs.fold(0u64, |a, c| a.saturating_add(c.bytes));

        let ext = profile.heapledger.as_ref();
        let tps = profile.globals.ticks_per_second;

        let mut runtime_leaks = profile.runtime_leaks();
        runtime_leaks.sort_unstable();
        let mut alive = Blocks::default();
        let mut alive_runtime = Blocks::default();
        let mut program_leaks = Vec::new();
        for (i, leak) in profile.leaks.iter().enumerate() {
            alive.add(leak.count, leak.memory);
            if runtime_leaks.binary_search(&i).is_ok() {
                alive_runtime.add(leak.count, leak.memory);
            } else {
                program_leaks.push(leak);
            }
        }
        let (top_leaks, leaking_stacks) = leak_reports(profile, &program_leaks, options.top);

        let mut top_jit_by_bytes = sites.jit_totals;
        top_jit_by_bytes.sort_by(most_bytes);
        top_jit_by_bytes.truncate(options.top);
        let sites = sites.totals;
        let temporary = crate::temporary::Temporary::of(
            &sites,
            alloc_calls,
            ext.is_some_and(|e| e.sample_every.is_none()),
            tps,
            options.top,
        );
        let mut top_at_peak: Vec<SiteTotal> =
            sites.iter().filter(|s| s.at_peak > 0).cloned().collect();
        let mut top_by_bytes = sites.clone();
        top_by_bytes.sort_by(most_bytes);
        top_by_bytes.truncate(options.top);
        let mut top_by_calls = sites;
        top_by_calls.sort_by(|a, b| {
            (Reverse(a.calls), Reverse(a.bytes), &a.site.function).cmp(&(
                Reverse(b.calls),
                Reverse(b.bytes),
                &b.site.function,
            ))
        });
        top_by_calls.truncate(options.top);
        top_at_peak.sort_by(|a, b| {
            (Reverse(a.at_peak), &a.site.function).cmp(&(Reverse(b.at_peak), &b.site.function))
        });
        top_at_peak.truncate(options.top);

        Summary {
            command: profile.run.command.clone(),
            exe: profile.run.exe.clone(),
            tool: profile.run.tool.clone(),
            date: profile.run.date.clone(),
            pid: ext.map(|e| e.pid),
            forked_from: ext.and_then(|e| e.forked_from),
            inherited: ext.and_then(|e| e.inherited),
            checkpoint: ext.and_then(|e| e.checkpoint).map(|c| {
                let tps = profile.globals.ticks_per_second.max(1) as f64;
                (c.seq, c.time as f64 / tps)
            }),
            snapshot: ext.and_then(|e| e.snapshot.clone()),
            reset: ext.and_then(|e| e.reset).map(|r| {
                let tps = profile.globals.ticks_per_second.max(1) as f64;
                (r, r.time as f64 / tps)
            }),
            exit: ext.map(|e| e.exit),
            run_seconds: profile.runtime_seconds(),
            threads: Threads {
                count: profile
                    .threads
                    .iter()
                    .map(|t| t.merged_threads.max(1))
                    .sum(),
                most_at_once: profile.globals.max_thread_count,
                merged: profile.threads.iter().map(|t| t.merged_threads).sum(),
            },
            calls,
            alloc_calls,
            alloc_bytes,
            peak_requested: profile.peak_requested(),
            peak_seconds: ext.and_then(|e| ticks_to_seconds(e.peak_time, tps)),
            peak_rss: ext.map(|e| e.peak_rss).filter(|&b| b != 0),
            peak_virtual: ext.map(|e| e.peak_virtual).filter(|&b| b != 0),
            over_time: crate::over_time::OverTime::of(profile),
            size_ranges: size_ranges(profile),
            ticks_per_second: tps,
            deepest_stack: profile
                .threads
                .iter()
                .enumerate()
                .filter(|(_, t)| t.stack_mem.size > 0)
                .max_by_key(|(i, t)| (t.stack_mem.size, std::cmp::Reverse(*i)))
                .map(|(i, t)| {
                    let site = site_of_stack(profile, &t.stack_mem.stack).map(|s| s.0);
                    (t.stack_mem.size, i, site)
                }),
            alive,
            alive_runtime,
            top_by_bytes,
            top_by_calls,
            top_jit_by_bytes,
            top_at_peak,
            temporary,
            top_leaks,
            waits: crate::waits::Waits::of(profile),
            top: options.top,
            leaking_stacks,
            recording: ext.map(|e| Recording {
                stack_mode: e.stack_mode.clone(),
                max_depth: e.max_depth,
                truncated_stacks: e.truncated_stacks,
                frees_unwound: e.frees_unwound,
                sample_every: e.sample_every,
                lifetimes_sampled_after: e.lifetimes_sampled_after,
                internal_memory: e.internal_memory,
                internal_memory_peak: e.internal_memory_peak,
                unhooked: e
                    .unhooked
                    .as_ref()
                    .map(|u| (u.functions.clone(), u.by.clone())),
                unrecorded: e.unrecorded_events,
                unknown_frees: e.unknown_frees,
                degraded: e.degraded.as_ref().map(|d| degraded_line(d, tps)),
            }),
        }
    }
}

/// "Recording degraded: ..." (see `HeapledgerExt::degraded`).
fn degraded_line(d: &heapledger_profile::Degraded, tps: u64) -> String {
    let at = |t: u64| {
        ticks_to_seconds(t, tps).map_or_else(String::new, |s| format!(" at {}", format_seconds(s)))
    };
    let why = |cause: &str| {
        match cause {
        heapledger_profile::degrade_cause::PROGRAM_MEMORY => format!(
            "an allocation of the program failed; the recorder gave back {} of its tables and the call was made again",
            format_bytes(d.released_bytes)
        ),
        _ => "the recorder could not get memory".to_owned(),
    }
    };
    let mut parts = Vec::new();
    if let Some(s) = &d.stacks_stopped {
        parts.push(format!(
            "stacks stopped{} ({}); {} after that charged to no stack",
            at(s.time),
            why(&s.cause),
            plural(d.allocations_without_stack, "allocation", "allocations")
        ));
    }
    if let Some(s) = &d.recording_stopped {
        parts.push(format!(
            "recording stopped{} ({}); {} after that not recorded",
            at(s.time),
            why(&s.cause),
            plural(d.calls_not_recorded, "allocator call", "allocator calls")
        ));
    }
    format!("Recording degraded: {}", parts.join("; "))
}

/// The printed form of one address. A frame without a function name is
/// named by its address, with its module (`0x65072c  ??  (python3.11)`),
/// never a bare `??`.
pub fn site_of(profile: &Profile, addr: Addr) -> Site {
    let site = profile.resolve_addr(addr);
    let library = profile.module_name(addr, site).to_owned();
    match site {
        Some(s) if s.function != UNKNOWN => Site {
            function: s.function.to_owned(),
            location: s.location(),
            library,
        },
        Some(s) => Site {
            function: addr.to_string(),
            location: s.location(),
            library,
        },
        None => Site {
            function: addr.to_string(),
            location: UNKNOWN.to_owned(),
            library,
        },
    }
}

/// Rust's allocation plumbing (the global allocator's wrappers, RawVec,
/// the standard library's own code): a site inside it is reported at the
/// first frame outside it, as `operator new` is for C++.
fn is_alloc_plumbing(function: &str, file: &str) -> bool {
    const PREFIXES: [&str; 8] = [
        "alloc::alloc::",
        "alloc::raw_vec::",
        "<alloc::alloc::Global",
        "<alloc::raw_vec::",
        "__rust_alloc",
        "__rust_realloc",
        "__rdl_",
        "std::alloc::",
    ];
    PREFIXES.iter().any(|p| function.starts_with(p)) || file.starts_with("/rustc/")
}

/// The lowest size of each range of `Summary::size_ranges`: 0, 16, 64,
/// 256 B, 1, 4, 16, 64, 256 KiB, 1, 4, 16, 64 MiB, and up.
const SIZE_RANGES: [u64; 13] = [
    0,
    16,
    64,
    256,
    1 << 10,
    4 << 10,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
    4 << 20,
    16 << 20,
    64 << 20,
];

fn size_ranges(profile: &Profile) -> Vec<(u64, u64)> {
    let mut counts = [0u64; SIZE_RANGES.len()];
    for (&size, &n) in &profile.mem_stats.size_map {
        let i = SIZE_RANGES.partition_point(|&lo| lo <= size) - 1;
        counts[i] = counts[i].saturating_add(n);
    }
    SIZE_RANGES
        .iter()
        .zip(counts)
        .filter(|(_, n)| *n > 0)
        .map(|(&lo, n)| (lo, n))
        .collect()
}

/// A duration in seconds, in the unit that suits it.
pub fn format_duration(s: f64) -> String {
    if s < 1e-6 {
        format!("{:.0} ns", s * 1e9)
    } else if s < 1e-3 {
        format!("{:.0} µs", s * 1e6)
    } else if s < 1.0 {
        format!("{:.0} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}

/// The allocation site of a stack (see `site_of_stack`).
pub fn allocation_site(profile: &Profile, stack: &[Addr]) -> Option<Site> {
    site_of_stack(profile, stack).map(|s| s.0)
}

/// The allocation site of a stack: its leaf frame, inline frames included,
/// past any allocation plumbing (see [`is_alloc_plumbing`]). With it,
/// whether the leaf address alone decided it (the same leaf then always
/// gives the same site).
fn site_of_stack(profile: &Profile, stack: &[Addr]) -> Option<(Site, bool)> {
    let leaf = *stack.first()?;
    for (depth, &addr) in stack.iter().enumerate() {
        let Some(inner) = profile.resolve_addr(addr) else {
            return Some((site_of(profile, leaf), depth == 0));
        };
        let chain = std::iter::once(inner).chain(profile.inline_chain(addr));
        for f in chain {
            if f.function == UNKNOWN {
                return Some((site_of(profile, addr), depth == 0));
            }
            if !is_alloc_plumbing(f.function, f.file) {
                let site = Site {
                    function: f.function.to_owned(),
                    location: f.location(),
                    library: f.binary_name().to_owned(),
                };
                return Some((site, depth == 0));
            }
        }
    }
    Some((site_of(profile, leaf), false))
}

/// Stacks grouped by how they read: stacks whose frames are the same
/// functions and lines (a call the compiler copied, at two addresses) are
/// one group, as MALT keeps them on one line. Groups are numbered in the
/// order first seen.
///
/// Each distinct address is symbolized once and each distinct site kept
/// once; a stack is compared as its list of site numbers. A Python
/// program's tens of thousands of leaking stacks, 50 to 100 frames deep,
/// made a `Site` (three strings) per frame per leak before: `report --all`
/// took 1.4 s and 376 MB, and `leaks --all` 401 MB, on a 3 MB profile.
#[derive(Default)]
pub struct StackGroups {
    site_of_addr: HashMap<Addr, u32>,
    sites: Vec<Site>,
    site_number: HashMap<Site, u32>,
    index: HashMap<Vec<u32>, usize>,
    groups: Vec<Vec<u32>>,
}

impl StackGroups {
    pub fn new() -> StackGroups {
        StackGroups::default()
    }

    /// The group of `stack` (frames innermost first), a new one if no
    /// stack before read the same.
    pub fn group_of(&mut self, profile: &Profile, stack: &[Addr]) -> usize {
        let frames: Vec<u32> = stack
            .iter()
            .map(|&a| {
                *self.site_of_addr.entry(a).or_insert_with(|| {
                    let site = site_of(profile, a);
                    *self.site_number.entry(site.clone()).or_insert_with(|| {
                        self.sites.push(site);
                        (self.sites.len() - 1) as u32
                    })
                })
            })
            .collect();
        if let Some(&g) = self.index.get(&frames) {
            return g;
        }
        self.index.insert(frames.clone(), self.groups.len());
        self.groups.push(frames);
        self.groups.len() - 1
    }

    /// How many groups there are.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// The frames of group `g`, innermost first.
    pub fn frames(&self, g: usize) -> impl ExactSizeIterator<Item = &Site> + '_ {
        self.groups[g].iter().map(|&n| &self.sites[n as usize])
    }
}

/// The program's leaks grouped by symbolized stack ([`StackGroups`]), the
/// `top` largest first, with the number of groups.
fn leak_reports(
    profile: &Profile,
    leaks: &[&heapledger_profile::Leak],
    top: usize,
) -> (Vec<LeakReport>, usize) {
    let mut groups = StackGroups::new();
    let mut blocks: Vec<Blocks> = Vec::new();
    for leak in leaks {
        let g = groups.group_of(profile, &leak.stack);
        if g == blocks.len() {
            blocks.push(Blocks::default());
        }
        blocks[g].add(leak.count, leak.memory);
    }
    let mut order: Vec<usize> = (0..groups.len()).collect();
    // Stable: equal leaks keep file order.
    order.sort_by_key(|&g| (Reverse(blocks[g].bytes), Reverse(blocks[g].count)));
    order.truncate(top);
    let reports = order
        .into_iter()
        .map(|g| LeakReport {
            blocks: blocks[g],
            more_frames: groups.frames(g).len().saturating_sub(LEAK_FRAMES),
            frames: groups.frames(g).take(LEAK_FRAMES).cloned().collect(),
        })
        .collect();
    (reports, groups.len())
}

/// Allocations grouped by leaf site, in first-seen order, summed as the
/// stacks come: a reader of a profile store gives them one by one, without
/// holding them all (see [`Summary::with_sites`]).
#[derive(Default)]
pub struct SiteSums {
    totals: Vec<SiteTotal>,
    index: HashMap<Site, usize>,
    /// The innermost JIT function of each stack (Python's, JavaScript's:
    /// [`JIT_BINARY`]), summed as sites are; asked of a profile with such
    /// frames only (`jit`, decided at the first stack).
    jit: Option<bool>,
    jit_totals: Vec<SiteTotal>,
    jit_index: HashMap<Site, usize>,
    /// Sites decided by the leaf alone, by leaf address: stacks outnumber
    /// their leaves (a million stacks, a handful of allocating lines), and
    /// a site costs three strings and a symbol lookup.
    by_leaf: HashMap<Addr, usize>,
}

impl SiteSums {
    pub fn new() -> SiteSums {
        SiteSums::default()
    }

    /// Adds one stack of `profile` (frames innermost first).
    pub fn add(
        &mut self,
        profile: &Profile,
        stack: &[Addr],
        infos: &heapledger_profile::StackInfos,
    ) {
        if infos.alloc.count == 0 {
            return;
        }
        if let Some(i) = self.site_index(profile, stack) {
            self.credit(i, infos);
        }
        self.add_jit(profile, stack, infos);
    }

    /// Credits the innermost JIT function of `stack`, where the profile
    /// has any.
    fn add_jit(
        &mut self,
        profile: &Profile,
        stack: &[Addr],
        infos: &heapledger_profile::StackInfos,
    ) {
        let jit = *self
            .jit
            .get_or_insert_with(|| profile.sites.strings.iter().any(|s| s == JIT_BINARY));
        if !jit {
            return;
        }
        let Some(f) = stack
            .iter()
            .filter_map(|&a| profile.resolve_addr(a))
            .find(|f| f.binary == JIT_BINARY && f.function != UNKNOWN)
        else {
            return;
        };
        let site = Site {
            function: f.function.to_owned(),
            location: f.location(),
            library: JIT_BINARY.to_owned(),
        };
        let totals = &mut self.jit_totals;
        let i = *self.jit_index.entry(site).or_insert_with_key(|site| {
            totals.push(SiteTotal::new(site.clone()));
            totals.len() - 1
        });
        self.jit_totals[i].credit(infos);
    }

    /// [`add`](Self::add) for a stack whose leaf is `leaf`, its frames
    /// written by `frames` into the vector given (cleared) only where the
    /// leaf alone does not decide the site: most stacks share a leaf with
    /// one seen before (half a million stacks 21 frames deep, a handful of
    /// allocating lines), and fetching every stack's frames cost `run`
    /// about 250 ms of processor time after such a program.
    pub fn add_by_leaf(
        &mut self,
        profile: &Profile,
        leaf: Addr,
        infos: &heapledger_profile::StackInfos,
        frames: impl FnOnce(&mut Vec<Addr>),
    ) {
        if infos.alloc.count == 0 {
            return;
        }
        let jit = *self
            .jit
            .get_or_insert_with(|| profile.sites.strings.iter().any(|s| s == JIT_BINARY));
        let mut stack = Vec::new();
        let mut frames = Some(frames);
        if jit {
            if let Some(f) = frames.take() {
                f(&mut stack);
            }
            self.add_jit(profile, &stack, infos);
        }
        let i = match self.by_leaf.get(&leaf) {
            Some(&i) => i,
            None => {
                if let Some(f) = frames.take() {
                    f(&mut stack);
                }
                let Some(i) = self.site_index(profile, &stack) else {
                    return;
                };
                i
            }
        };
        self.credit(i, infos);
    }

    fn credit(&mut self, i: usize, infos: &heapledger_profile::StackInfos) {
        self.totals[i].credit(infos);
    }

    /// Adds the bytes a stack of `profile` left alive at exit.
    pub fn add_leak(&mut self, profile: &Profile, stack: &[Addr], bytes: u64) {
        if let Some(i) = self.site_index(profile, stack) {
            self.totals[i].leaked = self.totals[i].leaked.saturating_add(bytes);
        }
    }

    /// Every site, in first-seen order.
    pub fn into_totals(self) -> Vec<SiteTotal> {
        self.totals
    }

    /// The site of a stack, found or added.
    fn site_index(&mut self, profile: &Profile, stack: &[Addr]) -> Option<usize> {
        let &leaf = stack.first()?;
        let i = match self.by_leaf.get(&leaf) {
            Some(&i) => i,
            None => {
                let (site, leaf_only) = site_of_stack(profile, stack)?;
                let totals = &mut self.totals;
                let i = *self.index.entry(site.clone()).or_insert_with(|| {
                    totals.push(SiteTotal::new(site));
                    totals.len() - 1
                });
                if leaf_only {
                    self.by_leaf.insert(leaf, i);
                }
                i
            }
        };
        Some(i)
    }
}

fn site_totals(profile: &Profile) -> SiteSums {
    let mut sums = SiteSums::new();
    match &profile.compact {
        Some(c) => {
            for i in 0..c.len() {
                // The leaves lie in the tree's order, not the stacks':
                // fetched ahead (the summary of half a million stacks: 0.11 s
                // instead of 0.18).
                c.fetch_leaf(i + 8);
                let infos = c.infos(i);
                // The empty stack has no leaf, and no site.
                let Some(leaf) = c.leaf(i) else {
                    continue;
                };
                sums.add_by_leaf(profile, leaf, &infos, |v| c.stack(i, v));
            }
        }
        None => {
            for stat in profile.stacks.allocating() {
                sums.add(profile, &stat.stack, &stat.infos);
            }
        }
    }
    sums
}

/// `256 B`, or `1.5 MiB (1572864 B)`: readable, with the exact figure.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {} ({bytes} B)", UNITS[unit])
}

/// `0.429 s`, `12.5 s`, `3 min 20 s`.
pub fn format_seconds(seconds: f64) -> String {
    if seconds < 10.0 {
        format!("{seconds:.3} s")
    } else if seconds < 120.0 {
        format!("{seconds:.1} s")
    } else {
        let whole = seconds.round() as u64;
        format!("{} min {} s", whole / 60, whole % 60)
    }
}

/// The usual name of a signal number (the common ones), as `kill -l` gives it.
pub fn signal_name(signal: i32) -> Option<&'static str> {
    Some(match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        _ => return None,
    })
}

fn exit_text(exit: Option<&ExitInfo>) -> String {
    match exit {
        Some(ExitInfo {
            signal: Some(sig), ..
        }) => match signal_name(*sig) {
            Some(name) => format!("killed by signal {sig} ({name})"),
            None => format!("killed by signal {sig}"),
        },
        Some(ExitInfo {
            code: Some(code), ..
        }) => format!("exited with code {code}"),
        _ => "exit status unknown".to_owned(),
    }
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Prints `rows` of cells two spaces apart after `indent`: the first `right`
/// columns right-aligned, the others left-aligned.
pub(crate) fn table(
    f: &mut fmt::Formatter<'_>,
    indent: &str,
    rows: &[Vec<String>],
    right: usize,
) -> fmt::Result {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(c, cell)| {
                if c < right {
                    format!("{cell:>w$}", w = widths[c])
                } else {
                    format!("{cell:<w$}", w = widths[c])
                }
            })
            .collect();
        let line = format!("{indent}{}", cells.join("  "));
        writeln!(f, "{}", line.trim_end())?;
    }
    Ok(())
}

impl Summary {
    /// The allocations by size range, with a bar each.
    fn write_size_ranges(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.size_ranges.is_empty() {
            return Ok(());
        }
        let short = |b: u64| match b {
            0 => "0".to_owned(),
            b if b >= 1 << 20 => format!("{} MiB", b >> 20),
            b if b >= 1 << 10 => format!("{} KiB", b >> 10),
            b => format!("{b} B"),
        };
        let total: u64 = self.size_ranges.iter().map(|r| r.1).sum::<u64>().max(1);
        let most = self
            .size_ranges
            .iter()
            .map(|r| r.1)
            .max()
            .unwrap_or(1)
            .max(1);
        writeln!(f)?;
        writeln!(
            f,
            "Allocation sizes (each range up to, not including, its end)"
        )?;
        let rows: Vec<Vec<String>> = self
            .size_ranges
            .iter()
            .map(|&(lo, n)| {
                let i = SIZE_RANGES.iter().position(|&x| x == lo).unwrap_or(0);
                let range = match SIZE_RANGES.get(i + 1) {
                    Some(&hi) => format!("{} – {}", short(lo), short(hi)),
                    None => format!("{} and more", short(lo)),
                };
                let bar = "█".repeat(((n as u128 * 30).div_ceil(most as u128)) as usize);
                vec![
                    range,
                    n.to_string(),
                    match n as f64 * 100.0 / total as f64 {
                        pct if pct < 0.05 => "<0.1%".to_owned(),
                        pct => format!("{pct:.1}%"),
                    },
                    bar,
                ]
            })
            .collect();
        table(f, "  ", &rows, 3)
    }

    fn write_sites(
        &self,
        f: &mut fmt::Formatter<'_>,
        title: &str,
        sites: &[SiteTotal],
    ) -> fmt::Result {
        if sites.is_empty() {
            return Ok(());
        }
        writeln!(f)?;
        writeln!(f, "{title}")?;
        let tps = self.ticks_per_second;
        let timed = tps > 0 && sites.iter().any(|s| s.lifetime.count > 0);
        let mut head = vec!["bytes".to_owned(), "calls".to_owned()];
        if timed {
            head.push("lifetime: mean (min..max)".to_owned());
        }
        head.push("site".to_owned());
        let mut rows = vec![head];
        rows.extend(sites.iter().map(|s| {
            let mut row = vec![format_bytes(s.bytes), s.calls.to_string()];
            if timed {
                let l = &s.lifetime;
                let secs = |t: u64| format_duration(t as f64 / tps as f64);
                row.push(match l.sum.checked_div(l.count) {
                    None => "-".to_owned(),
                    Some(mean) => format!("{} ({}..{})", secs(mean), secs(l.min), secs(l.max)),
                });
            }
            row.push(s.site.to_string());
            row
        }));
        table(f, "  ", &rows, if timed { 3 } else { 2 })
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let command = if self.command.is_empty() {
            &self.exe
        } else {
            &self.command
        };
        let mut head = vec![vec!["Program".to_owned(), command.clone()]];
        let mut process = match self.pid {
            Some(pid) => format!("pid {pid}, "),
            None => String::new(),
        };
        if let Some(parent) = self.forked_from {
            process += &format!("forked from pid {parent}, ");
        }
        process += &exit_text(self.exit.as_ref());
        head.push(vec!["Process".to_owned(), process]);
        if let (Some((seq, secs)), Some(label)) = (self.checkpoint, &self.snapshot) {
            head.push(vec![
                "Snapshot".to_owned(),
                format!(
                    "\"{label}\" (number {seq}), taken {} after the process started: the counters as they stood then",
                    format_seconds(secs)
                ),
            ]);
        } else if let Some((seq, secs)) = self.checkpoint {
            head.push(vec![
                "Checkpoint".to_owned(),
                format!(
                    "the process could not write its profile at its end: this is its checkpoint {seq}, taken {} after it started",
                    format_seconds(secs)
                ),
            ]);
        }
        head.push(vec![
            "Run time".to_owned(),
            self.run_seconds
                .map_or_else(|| "unknown".to_owned(), format_seconds),
        ]);
        let mut by = self.tool.clone();
        if !self.date.is_empty() {
            by.push_str(&format!(", {}", self.date));
        }
        head.push(vec!["Recorded by".to_owned(), by]);
        let t = self.threads;
        if t.count > 0 {
            let mut text = format!("{} that called the allocator", t.count);
            if t.most_at_once > 0 {
                text.push_str(&format!(", at most {} at once", t.most_at_once));
            }
            if t.merged > 0 {
                text.push_str(&format!(
                    "; the {} that ended first are merged in one row of `threads`",
                    t.merged
                ));
            }
            head.push(vec!["Threads".to_owned(), text]);
        }
        if let (Some(parent), Some(i)) = (self.forked_from, self.inherited) {
            head.push(vec![
                "Inherited".to_owned(),
                format!(
                    "from pid {parent}: {}, {}, freed here (counted in `free`, in no site); {}, {}, still alive (not this process's leaks)",
                    plural(i.freed, "block", "blocks"),
                    format_bytes(i.freed_bytes),
                    plural(i.alive, "block", "blocks"),
                    format_bytes(i.alive_bytes),
                ),
            ]);
        }
        if let Some((r, secs)) = &self.reset {
            head.push(vec![
                "Reset".to_owned(),
                format!(
                    "the counters were reset {} by the program, the last {} after the start: they hold what came after; older blocks: {}, {}, freed since (counted in no site); {}, {}, still alive (not in the leaks)",
                    plural(r.count, "time", "times"),
                    format_seconds(*secs),
                    plural(r.older_freed, "block", "blocks"),
                    format_bytes(r.older_freed_bytes),
                    plural(r.older_alive, "block", "blocks"),
                    format_bytes(r.older_alive_bytes),
                ),
            ]);
        }
        if let Some(r) = &self.recording {
            let mut text = if r.stack_mode == "none" {
                "no stacks".to_owned()
            } else {
                format!("{} stacks, at most {} frames", r.stack_mode, r.max_depth)
            };
            if r.truncated_stacks > 0 {
                text.push_str(&format!(
                    " ({} cut)",
                    plural(r.truncated_stacks, "stack", "stacks")
                ));
            }
            text.push_str(if r.frees_unwound {
                "; frees unwound"
            } else {
                "; frees charged to the allocating stack"
            });
            if let Some(n) = r.sample_every {
                text.push_str(&format!("; sampled 1 in {n}"));
            }
            if let Some(n) = r.lifetimes_sampled_after {
                text.push_str(&format!(
                    "; lifetimes of 1 block in 16 after a stack's first {n}"
                ));
            }
            head.push(vec!["Recording".to_owned(), text]);
            head.push(vec![
                "Recorder memory".to_owned(),
                match r.internal_memory_peak > r.internal_memory {
                    true => format!(
                        "{} at the end, {} at most",
                        format_bytes(r.internal_memory),
                        format_bytes(r.internal_memory_peak)
                    ),
                    false => format_bytes(r.internal_memory),
                },
            ]);
            if let Some((functions, by)) = &r.unhooked {
                head.push(vec![
                    "Not seen".to_owned(),
                    format!(
                        "calls of {} ({} defines them itself, before heapledger's: they are missing from this profile)",
                        functions.join(", "),
                        basename(by)
                    ),
                ]);
            }
            if r.unknown_frees > 0 {
                head.push(vec![
                    "Frees not seen".to_owned(),
                    format!(
                        "{} of blocks the recorder never saw allocated (made before it started, by a thread with recording off, or not by the malloc family): counted as calls, in no site",
                        plural(r.unknown_frees, "free", "frees")
                    ),
                ]);
            }
            if r.unrecorded > 0 {
                head.push(vec![
                    "Not recorded".to_owned(),
                    format!(
                        "{} made while the recorder was busy on the same thread (in a signal handler, or after a handler jumped out of the recorder with longjmp): counted, missing from every figure below",
                        plural(r.unrecorded, "allocator call", "allocator calls")
                    ),
                ]);
            }
        }
        table(f, "", &head, 0)?;
        if let Some(line) = self.recording.as_ref().and_then(|r| r.degraded.as_ref()) {
            writeln!(f, "{line}")?;
        }

        writeln!(f)?;
        if self.calls.is_empty() {
            writeln!(f, "No allocation calls recorded.")?;
        } else {
            writeln!(f, "Allocation calls")?;
            let mut rows: Vec<Vec<String>> = self
                .calls
                .iter()
                .map(|c| {
                    let mut row = vec![c.name.to_owned(), c.count.to_string()];
                    if c.name != "free" {
                        row.push(format_bytes(c.bytes));
                    }
                    row
                })
                .collect();
            rows.push(vec![
                "allocations".to_owned(),
                self.alloc_calls.to_string(),
                format_bytes(self.alloc_bytes),
            ]);
            // Name left, count right, bytes left.
            let name_width = rows.iter().map(|r| r[0].len()).max().unwrap_or(0);
            let count_width = rows.iter().map(|r| r[1].len()).max().unwrap_or(0);
            for row in &rows {
                let line = format!(
                    "  {:<nw$}  {:>cw$}  {}",
                    row[0],
                    row[1],
                    row.get(2).map_or("", String::as_str),
                    nw = name_width,
                    cw = count_width
                );
                writeln!(f, "{}", line.trim_end())?;
            }
        }

        writeln!(f)?;
        let peak = match (self.peak_requested, self.peak_seconds) {
            (Some(p), Some(t)) => format!("{} at {}", format_bytes(p), format_seconds(t)),
            (Some(p), None) => format_bytes(p),
            (None, _) => "unknown".to_owned(),
        };
        let blocks = |b: Blocks| {
            format!(
                "{}, {}",
                plural(b.count, "block", "blocks"),
                format_bytes(b.bytes)
            )
        };
        let program = Blocks {
            count: self.alive.count.saturating_sub(self.alive_runtime.count),
            bytes: self.alive.bytes.saturating_sub(self.alive_runtime.bytes),
        };
        let mut rows = vec![vec!["Peak requested memory".to_owned(), peak]];
        if let Some(rss) = self.peak_rss {
            rows.push(vec![
                "Peak resident memory".to_owned(),
                format!(
                    "{} (the kernel's count; the recorder's own included)",
                    format_bytes(rss)
                ),
            ]);
        }
        if let Some(v) = self.peak_virtual {
            rows.push(vec!["Peak virtual memory".to_owned(), format_bytes(v)]);
        }
        if let Some((bytes, thread, site)) = &self.deepest_stack {
            let at = site
                .as_ref()
                .map_or(String::new(), |s| format!(", allocating in {s}"));
            rows.push(vec![
                "Deepest stack".to_owned(),
                format!("{} (thread {}{at})", format_bytes(*bytes), thread + 1),
            ]);
        }
        if self.recording.is_some() {
            rows.push(vec!["Temporary".to_owned(), self.temporary.line()]);
        }
        rows.extend([
            vec![
                if self.snapshot.is_some() {
                    "Alive then"
                } else {
                    "Alive at exit"
                }
                .to_owned(),
                blocks(self.alive),
            ],
            vec!["  by the program".to_owned(), blocks(program)],
            vec![
                "  by the C/C++ runtime".to_owned(),
                format!("{} (not the program's leaks)", blocks(self.alive_runtime)),
            ],
        ]);
        table(f, "", &rows, 0)?;
        if let Some(t) = &self.over_time {
            writeln!(f)?;
            write!(f, "{t}")?;
        }
        self.write_size_ranges(f)?;

        self.write_sites(f, "Top allocation sites by bytes", &self.top_by_bytes)?;
        self.write_sites(f, "Top allocation sites by calls", &self.top_by_calls)?;
        self.write_sites(
            f,
            "Top Python and JIT functions by bytes (each stack's innermost)",
            &self.top_jit_by_bytes,
        )?;
        if !self.top_at_peak.is_empty() {
            writeln!(f)?;
            writeln!(
                f,
                "Top sites at the peak (memory they held when the whole process peaked)"
            )?;
            let mut rows = vec![vec!["alive at peak".to_owned(), "site".to_owned()]];
            rows.extend(
                self.top_at_peak
                    .iter()
                    .map(|s| vec![format_bytes(s.at_peak), s.site.to_string()]),
            );
            table(f, "  ", &rows, 1)?;
        }
        write!(f, "{}", self.temporary)?;

        if !self.top_leaks.is_empty() {
            writeln!(f)?;
            writeln!(
                f,
                "Top leaking stacks ({} of {})",
                self.top_leaks.len(),
                self.leaking_stacks
            )?;
            for leak in &self.top_leaks {
                writeln!(
                    f,
                    "  {} in {}",
                    format_bytes(leak.blocks.bytes),
                    plural(leak.blocks.count, "block", "blocks")
                )?;
                if leak.frames.is_empty() {
                    writeln!(
                        f,
                        "      (no stack: allocated while stack capture was off, or with --stack none)"
                    )?;
                }
                for frame in &leak.frames {
                    writeln!(f, "      {frame}")?;
                }
                if leak.more_frames > 0 {
                    writeln!(
                        f,
                        "      ... {}",
                        plural(leak.more_frames as u64, "more frame", "more frames")
                    )?;
                }
            }
        }
        self.waits.write(f, self.top)?;
        Ok(())
    }
}

/// The version of [`Summary::to_json`]'s layout; bumped when a key changes
/// meaning or goes (keys may be added without a bump).
pub const REPORT_JSON_VERSION: u32 = 1;

impl Summary {
    /// The summary as JSON for scripts and CI (`heapledger report --json`):
    /// the same figures as the text, with stable keys, byte counts in
    /// bytes and times in seconds; a value not known is `null` (the key
    /// is always there). docs/running.md lists the keys.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::{json, Value};
        let site = |s: &Site| json!({"function": s.function, "location": s.location, "library": s.library});
        let sites = |v: &[SiteTotal]| -> Value {
            v.iter()
                .map(|t| {
                    let mut o = site(&t.site);
                    o["calls"] = json!(t.calls);
                    o["bytes"] = json!(t.bytes);
                    o["bytes_at_peak"] = json!(t.at_peak);
                    o["lifetime"] = if t.lifetime.count > 0 && self.ticks_per_second > 0 {
                        let secs = |v: u64| v as f64 / self.ticks_per_second as f64;
                        json!({
                            "freed": t.lifetime.count,
                            "mean_seconds": secs(t.lifetime.sum / t.lifetime.count),
                            "min_seconds": secs(t.lifetime.min),
                            "max_seconds": secs(t.lifetime.max),
                        })
                    } else {
                        Value::Null
                    };
                    o
                })
                .collect()
        };
        let blocks = |b: Blocks| json!({"count": b.count, "bytes": b.bytes});
        let program = Blocks {
            count: self.alive.count.saturating_sub(self.alive_runtime.count),
            bytes: self.alive.bytes.saturating_sub(self.alive_runtime.bytes),
        };
        let calls: serde_json::Map<String, Value> = FUNCTIONS
            .iter()
            .map(|&name| {
                let c = self.calls.iter().find(|c| c.name == name);
                let (count, bytes) = c.map_or((0, 0), |c| (c.count, c.bytes));
                (name.to_owned(), json!({"count": count, "bytes": bytes}))
            })
            .collect();
        let recording = self.recording.as_ref().map(|r| {
            json!({
                "stack_mode": r.stack_mode,
                "max_depth": r.max_depth,
                "truncated_stacks": r.truncated_stacks,
                "frees_unwound": r.frees_unwound,
                "sample_every": r.sample_every,
                "lifetimes_sampled_after": r.lifetimes_sampled_after,
                "recorder_memory": r.internal_memory,
                "recorder_memory_peak": r.internal_memory_peak,
                "unrecorded_calls": r.unrecorded,
                "unknown_frees": r.unknown_frees,
                "degraded": r.degraded,
            })
        });
        json!({
            "format": "heapledger-report",
            "version": REPORT_JSON_VERSION,
            "program": {
                "command": self.command,
                "exe": self.exe,
                "pid": self.pid,
                "forked_from": self.forked_from,
                "exit_code": self.exit.as_ref().and_then(|e| e.code),
                "exit_signal": self.exit.as_ref().and_then(|e| e.signal),
                "run_seconds": self.run_seconds,
                "checkpoint": self.checkpoint.map(|(seq, secs)| json!({"seq": seq, "seconds": secs})),
                "snapshot": self.snapshot,
                "reset": self.reset.map(|(r, secs)| json!({
                    "count": r.count,
                    "seconds": secs,
                    "older_freed": r.older_freed,
                    "older_freed_bytes": r.older_freed_bytes,
                    "older_alive": r.older_alive,
                    "older_alive_bytes": r.older_alive_bytes,
                })),
                "recorded_by": self.tool,
                "date": self.date,
            },
            "threads": {
                "count": self.threads.count,
                "most_at_once": self.threads.most_at_once,
                "merged": self.threads.merged,
            },
            "calls": calls,
            "allocations": {"count": self.alloc_calls, "bytes": self.alloc_bytes},
            "peak": {
                "requested_bytes": self.peak_requested,
                "seconds": self.peak_seconds,
                "resident_bytes": self.peak_rss,
                "virtual_bytes": self.peak_virtual,
            },
            "allocation_sizes": self.size_ranges.iter().map(|&(lo, n)| {
                let i = SIZE_RANGES.iter().position(|&x| x == lo).unwrap_or(0);
                json!({"from_bytes": lo, "below_bytes": SIZE_RANGES.get(i + 1), "count": n})
            }).collect::<Vec<_>>(),
            "deepest_stack": self.deepest_stack.as_ref().map(|(bytes, thread, s)| json!({
                "bytes": bytes,
                "thread": thread + 1,
                "site": s.as_ref().map(site),
            })),
            "over_time": self.over_time.as_ref().map(|t| json!({
                "seconds": t.seconds,
                "requested_bytes": t.requested,
                "resident_bytes": t.resident,
            })),
            "alive_at_exit": {
                "count": self.alive.count,
                "bytes": self.alive.bytes,
                "by_the_program": blocks(program),
                "by_the_runtime": blocks(self.alive_runtime),
            },
            "top_sites_by_bytes": sites(&self.top_by_bytes),
            "top_sites_by_calls": sites(&self.top_by_calls),
            "top_jit_functions_by_bytes": sites(&self.top_jit_by_bytes),
            "top_sites_at_peak": sites(&self.top_at_peak),
            "temporary": self.temporary.to_json(|t| {
                let mut o = site(&t.site);
                o["calls"] = json!(t.calls);
                o
            }),
            "top_leaks": self.top_leaks.iter().map(|l| json!({
                "count": l.blocks.count,
                "bytes": l.blocks.bytes,
                "frames": l.frames.iter().map(site).collect::<Vec<_>>(),
                "more_frames": l.more_frames,
            })).collect::<Vec<_>>(),
            "leaking_stacks": self.leaking_stacks,
            "time_lost": self.waits.to_json(self.top),
            "recording": recording,
        })
    }
}
