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
use crate::stacks::{Leak, Stacks};
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
}

impl Profile {
    /// A profile with `run` and every other section empty but well formed
    /// (`sites.strings` holds `"??"`, timelines carry MALT's field labels).
    /// The recorder fills what it measured and leaves the rest as is.
    pub fn new(run: Run) -> Profile {
        Profile {
            run,
            config: Config::default(),
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
