//! `threads`: per-thread counters of each allocation function.

use serde::{Deserialize, Serialize};

use crate::addr::Addr;

/// `threads[]`: one thread.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadStats {
    /// Stack-size tracking (MALT's `-o stack:...`; empty unless enabled).
    pub stack_mem: StackMem,
    /// Memory operations made by the thread.
    pub cnt_mem_ops: u64,
    /// Calls per allocation function.
    pub stats: AllocFuncStats,
    /// heapledger's: 0 for one thread; for the entry that sums the threads
    /// which ended before the last ones (a program that starts threads
    /// without end keeps a bounded list), how many it sums. MALT writes no
    /// such key and its readers skip it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub merged_threads: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// `stackMem`: the thread's own stack usage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackMem {
    /// Stack size at its deepest.
    pub size: u64,
    /// The call stack at the deepest point.
    pub stack: Vec<Addr>,
    /// Stack memory per frame of `stack`.
    pub mem: Vec<u64>,
    /// Total stack size.
    pub total: u64,
    /// Stack size over time.
    pub timeprofiler: TimeProfiler,
}

impl Default for StackMem {
    /// What MALT writes when stack tracking is off.
    fn default() -> Self {
        StackMem {
            size: 0,
            stack: Vec::new(),
            mem: vec![0],
            total: 0,
            timeprofiler: TimeProfiler::default(),
        }
    }
}

/// `timeprofiler`: MALT's older min/max-per-interval series.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TimeProfiler {
    /// Minimum per interval.
    pub min: Vec<u64>,
    /// Maximum per interval.
    pub max: Vec<u64>,
    /// Last linear index of each interval.
    pub index: Vec<u64>,
    /// Last timestamp of each interval.
    pub timestamp: Vec<u64>,
    /// Time of the peak. MALT's own misspelling, kept for its reader.
    #[serde(rename = "peakTimesteamp")]
    pub peak_timestamp: u64,
    /// Value at the peak.
    pub peak_memory: u64,
    /// Index of the peak.
    pub peak_index: u64,
    /// Whether intervals are indexed linearly.
    pub linear_index: bool,
}

impl Default for TimeProfiler {
    /// What MALT writes when nothing was tracked.
    fn default() -> Self {
        TimeProfiler {
            min: Vec::new(),
            max: Vec::new(),
            index: Vec::new(),
            timestamp: Vec::new(),
            peak_timestamp: 0,
            peak_memory: 0,
            peak_index: 0,
            linear_index: true,
        }
    }
}

/// `stats`: one counter per allocation function, in MALT's order.
/// The keys are the C names (`posix_memalign`), not camelCase.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct AllocFuncStats {
    /// `malloc`
    pub malloc: CallStat,
    /// `posix_memalign`
    pub posix_memalign: CallStat,
    /// `aligned_alloc`
    pub aligned_alloc: CallStat,
    /// `memalign`
    pub memalign: CallStat,
    /// `valloc`
    pub valloc: CallStat,
    /// `pvalloc`
    pub pvalloc: CallStat,
    /// `free` (`sum` is 0: MALT does not add freed sizes here)
    pub free: CallStat,
    /// `calloc`
    pub calloc: CallStat,
    /// `realloc`
    pub realloc: CallStat,
}

impl AllocFuncStats {
    /// `(name, counter)` for each function, in MALT's order.
    pub fn iter(&self) -> [(&'static str, &CallStat); 9] {
        [
            ("malloc", &self.malloc),
            ("posix_memalign", &self.posix_memalign),
            ("aligned_alloc", &self.aligned_alloc),
            ("memalign", &self.memalign),
            ("valloc", &self.valloc),
            ("pvalloc", &self.pvalloc),
            ("free", &self.free),
            ("calloc", &self.calloc),
            ("realloc", &self.realloc),
        ]
    }

    /// The counter of `name` (a C function name), for updating.
    pub fn get_mut(&mut self, name: &str) -> Option<&mut CallStat> {
        Some(match name {
            "malloc" => &mut self.malloc,
            "posix_memalign" => &mut self.posix_memalign,
            "aligned_alloc" => &mut self.aligned_alloc,
            "memalign" => &mut self.memalign,
            "valloc" => &mut self.valloc,
            "pvalloc" => &mut self.pvalloc,
            "free" => &mut self.free,
            "calloc" => &mut self.calloc,
            "realloc" => &mut self.realloc,
            _ => return None,
        })
    }

    /// Adds another thread's counters to these.
    pub fn merge(&mut self, other: &AllocFuncStats) {
        for (name, stat) in other.iter() {
            if let Some(mine) = self.get_mut(name) {
                mine.merge(stat);
            }
        }
    }
}

/// `{count, sum, time}` of calls to one function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CallStat {
    /// Calls.
    pub count: u64,
    /// Bytes requested.
    pub sum: u64,
    /// Ticks spent in the function.
    pub time: u64,
}

impl CallStat {
    /// Adds another counter to this one (saturating).
    pub fn merge(&mut self, other: &CallStat) {
        self.count = self.count.saturating_add(other.count);
        self.sum = self.sum.saturating_add(other.sum);
        self.time = self.time.saturating_add(other.time);
    }
}
