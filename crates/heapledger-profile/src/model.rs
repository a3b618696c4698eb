//! The profile as a whole: MALT 1.6's top-level layout plus heapledger's key.
//!
//! Every struct here derives serde with MALT's exact key names and in MALT's
//! key order, so that a profile written by heapledger opens in MALT's reader and
//! web GUI, and a file written by MALT reads back into the same types. The
//! field order of each struct *is* the key order on disk: do not reorder.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use crate::domains::Domains;
use crate::ext::HeapledgerExt;
use crate::memstats::MemStats;
use crate::scatter::Scatter;
use crate::sites::Sites;
use crate::stacks::{Leak, LeakBlocks, Stacks};
use crate::threads::ThreadStats;
use crate::timeline::Timeline;

/// The `run.formatVersion` that heapledger writes and reads.
pub const FORMAT_VERSION: &str = "1.6";

/// The `run.formatVersion` values this crate can read.
pub const SUPPORTED_FORMAT_VERSIONS: &[&str] = &[FORMAT_VERSION];

/// A whole profile file: MALT 1.6's sections in MALT's order, then `heapledger`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// What was run, when, by which tool.
    pub run: Run,
    /// The options in force, `{section: {key: value}}`.
    #[serde(default)]
    pub config: Config,
    /// Per-stack counters: the heart of the profile.
    pub stacks: Stacks,
    /// Mappings and the symbols of every address used in the file.
    pub sites: Sites,
    /// Memory over time (the recorder may leave it empty).
    #[serde(default)]
    pub timeline: Timeline,
    /// Size/time scatter plots (the recorder may leave them empty).
    #[serde(default)]
    pub scatter: Scatter,
    /// Per-thread call counters.
    pub threads: Vec<ThreadStats>,
    /// Size histogram, realloc jumps and global variables.
    #[serde(rename = "memStats")]
    pub mem_stats: MemStats,
    /// Machine and clock facts.
    pub globals: Globals,
    /// Blocks still allocated at exit, grouped by stack.
    pub leaks: Vec<Leak>,
    /// Per-domain (C, Python, mmap) totals.
    #[serde(default)]
    pub domains: Domains,
    /// heapledger's own data; absent in files written by MALT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heapledger: Option<HeapledgerExt>,
    /// The blocks alive at exit one by one, with their pointers, where the
    /// recorder wrote them: kept in the profile store (`heapledger leaks`
    /// reads them), never in the JSON.
    #[serde(skip)]
    pub leak_blocks: LeakBlocks,
    /// The run's checkpoints as a series (each stack's counters at each),
    /// kept in the profile store (the viewer's time ranges), never in the
    /// JSON.
    #[serde(skip)]
    pub series: crate::Series,
    /// The stacks held compactly, where `stacks` was left empty (`heapledger
    /// run` writing the profile store): see [`Profile::expand_stacks`].
    #[serde(skip)]
    pub compact: Option<crate::CompactStacks>,
    /// What each thread allocated at each stack, kept in the profile
    /// store (the views of one thread), never in the JSON.
    #[serde(skip)]
    pub thread_stacks: crate::ThreadStacks,
}

impl Profile {
    /// A profile with `run` and every other section empty but well formed
    /// (`sites.strings` holds `"??"`, timelines carry MALT's field labels).
    /// The recorder fills what it measured and leaves the rest as is.
    pub fn new(run: Run) -> Profile {
        Profile {
            run,
            config: Config::malt_defaults(),
            stacks: Stacks::default(),
            sites: Sites::empty(),
            timeline: Timeline::empty(),
            scatter: Scatter::empty(),
            threads: Vec::new(),
            mem_stats: MemStats::default(),
            globals: Globals::default(),
            leaks: Vec::new(),
            domains: Domains::default(),
            heapledger: None,
            leak_blocks: LeakBlocks::default(),
            series: crate::Series::default(),
            thread_stacks: crate::ThreadStacks::default(),
            compact: None,
        }
    }
}

impl Profile {
    /// Moves compactly held stacks (see [`Profile::compact`]) into `stacks`.
    pub fn expand_stacks(&mut self) {
        if let Some(c) = self.compact.take() {
            self.stacks = c.into_stacks();
        }
    }

    /// Fills the MALT sections that MALT's tools read their totals from and
    /// that heapledger's own data implies, so that MALT's reader and viewer
    /// show heapledger's numbers:
    ///
    /// - `timeline.memoryTimeline.peak`: MALT's reader and viewer take the
    ///   peaks of requested and internal memory from there (and nowhere
    ///   else), even when the timeline has no points;
    /// - `domains`: allocations, bytes and peaks; everything heapledger
    ///   records is the C allocator's, or `mmap`'s;
    /// - `config.sampling`: whether one allocation in `n` was recorded.
    ///
    /// The physical and virtual peaks are the kernel's (VmHWM, VmPeak); the
    /// live-block peak, which heapledger does not measure, stays as it is. A file without heapledger data (MALT's
    /// own) is left alone.
    pub fn fill_malt_totals(&mut self) {
        let Some(ext) = &self.heapledger else {
            return;
        };
        let mut d = crate::domains::Domains::default();
        let mut t = crate::compact::CompactTotals::default();
        match &self.compact {
            Some(c) => t = c.totals,
            None => self.stacks.stats.iter().for_each(|s| t.add(&s.infos)),
        }
        d.counters.c = t.alloc_count;
        d.mem.c = t.alloc_sum;
        d.counters.mmap = t.mmap_count;
        d.mem.mmap = t.mmap_sum;
        d.at_global_peak.c = t.global_peak;
        d.local_peak.c = ext.peak_requested;
        self.domains = d;
        let peak = &mut self.timeline.memory_timeline.peak;
        if peak.len() < crate::timeline::memory::FIELDS.len() {
            peak.resize(crate::timeline::memory::FIELDS.len(), 0);
        }
        let requested = &mut peak[crate::timeline::memory::REQUESTED];
        *requested = (*requested).max(ext.peak_requested);
        let internal = &mut peak[crate::timeline::memory::INTERNAL];
        *internal = (*internal).max(ext.internal_memory_peak);
        let physical = &mut peak[crate::timeline::memory::PHYSICAL];
        *physical = (*physical).max(ext.peak_rss);
        let virt = &mut peak[crate::timeline::memory::VIRTUAL];
        *virt = (*virt).max(ext.peak_virtual);
        self.config
            .set("sampling", "enabled", ext.sample_every.is_some());
        if let Some(n) = ext.sample_every {
            self.config.set("sampling", "count", n);
        }
    }
}

/// `run`: what was profiled, and by what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Run {
    /// The profile format, `"1.6"`.
    pub format_version: String,
    /// The tool that wrote the file, `name-version` (`"malt-1.6.2"`).
    pub tool: String,
    /// Local date and time of the run, `"YYYY-MM-DD HH:MM"`.
    pub date: String,
    /// Run time in ticks (see [`Globals::ticks_per_second`]).
    pub runtime: u64,
    /// Path of the library that provided `malloc`.
    pub allocator: String,
    /// Functions known to wrap the allocator (MALT writes `[]`).
    pub allocator_wrappers: Vec<String>,
    /// The executable's name.
    pub exe: String,
    /// The command line.
    pub command: String,
    /// The machine's host name.
    pub hostname: String,
}

impl Run {
    /// A `run` section for the current format, with everything not given empty.
    pub fn new(tool: impl Into<String>, exe: impl Into<String>, command: impl Into<String>) -> Run {
        Run {
            format_version: FORMAT_VERSION.to_owned(),
            tool: tool.into(),
            date: String::new(),
            runtime: 0,
            allocator: String::new(),
            allocator_wrappers: Vec::new(),
            exe: exe.into(),
            command: command.into(),
            hostname: String::new(),
        }
    }
}

/// `config`: `{section: {key: value}}`, values of any JSON type, in file order.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Config(pub IndexMap<String, IndexMap<String, serde_json::Value>>);

impl Config {
    /// Every section and key that MALT 1.6.2's reader reads unconditionally
    /// (`src/reader/libreader/format/Config.cpp`, `from_json`: a missing one
    /// aborts it), with the type it reads and the value MALT writes by
    /// default. heapledger overrides what it knows (`stack`, `sampling`,
    /// `output.name`); the rest says "MALT's default", which for options
    /// heapledger has no counterpart of is as good as any.
    pub fn malt_defaults() -> Config {
        use serde_json::json;
        let sections = json!({
            "time": {"enabled": true, "points": 512, "linear": false},
            "stack": {"enabled": true, "mode": "backtrace", "resolve": true,
                      "libunwind": false, "skip": 4},
            "addr2line": {"bucket": 350, "threads": 8, "huge": 52428800},
            "sampling": {"enabled": false, "volume": 4093, "count": 571},
            "python": {"instru": false, "mix": false, "stack": "none", "obj": false,
                       "mem": false, "raw": false, "hide-imports": true, "mode": "profile"},
            "c": {"malloc": true, "mmap": true},
            "output": {"callgrind": false, "config": false, "indent": false, "json": true,
                       "lua": false, "name": "heapledger", "verbosity": "default",
                       "stack-tree": false, "loop-suppress": false},
            "max-stack": {"enabled": false},
            "trace": {"enabled": false},
            "distr": {"alloc-size": true, "realloc-jump": true},
            "info": {"hidden": false},
            "filter": {"exe": "", "childs": true, "enabled": false, "ranks": ""},
            "dump": {"on-signal": "", "after-seconds": 0, "on-sys-full-at": "",
                     "on-app-using-rss": "", "on-app-using-virt": "", "on-app-using-req": "",
                     "on-thread-stack-using": "", "on-alloc-count": "", "watch-dog": false},
            "tools": {"nm": false, "nm-max-size": "50M"},
        });
        serde_json::from_value(sections).expect("a well-formed literal")
    }

    /// The value of `section:key`, if set.
    pub fn get(&self, section: &str, key: &str) -> Option<&serde_json::Value> {
        self.0.get(section)?.get(key)
    }

    /// Sets `section:key`, keeping the position of an existing key.
    pub fn set(&mut self, section: &str, key: &str, value: impl Into<serde_json::Value>) {
        self.0
            .entry(section.to_owned())
            .or_default()
            .insert(key.to_owned(), value.into());
    }
}

/// `globals`: clock rate and the machine's memory at start.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Globals {
    /// Ticks per second of the clock used for every time in the file.
    pub ticks_per_second: u64,
    /// Physical memory of the machine, bytes.
    pub total_memory: u64,
    /// Free memory when the run started, bytes.
    pub free_memory_at_start: u64,
    /// Page-cache memory when the run started, bytes.
    pub cached_memory_at_start: u64,
    /// Most threads alive at once.
    pub max_thread_count: u64,
}
