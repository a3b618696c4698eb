//! `timeline`: memory over time, in a bounded number of buckets.
//!
//! MALT keeps a fixed number of buckets (512); when a run outgrows them,
//! neighbours merge and `perPoints` doubles, so the series stays bounded for
//! any run length. Each bucket keeps the maximum of each value and `callsite`
//! names the stack that produced it.
//!
//! MALT's labels do not always match the order of the values it writes (see
//! the constants below): heapledger reads values by position, never by label,
//! and writes MALT's labels unchanged so MALT's GUI keeps working.

use serde::{Deserialize, Serialize};

use crate::addr::Addr;

/// `memoryTimeline` value positions (labels match here).
pub mod memory {
    /// Requested (live) bytes.
    pub const REQUESTED: usize = 0;
    /// Resident bytes.
    pub const PHYSICAL: usize = 1;
    /// Virtual bytes.
    pub const VIRTUAL: usize = 2;
    /// The profiler's own memory.
    pub const INTERNAL: usize = 3;
    /// Live blocks.
    pub const SEGMENTS: usize = 4;
    /// The labels MALT writes.
    pub const FIELDS: [&str; 5] = [
        "requestedMem",
        "physicalMem",
        "virtualMem",
        "internalMem",
        "segments",
    ];
}

/// `systemTimeline` value positions: written `[free, swap, cached]` while the
/// labels say `[freeMemory, cachedMemory, swapMemory]`.
pub mod system {
    /// Free memory of the machine.
    pub const FREE: usize = 0;
    /// Swap in use.
    pub const SWAP: usize = 1;
    /// Page cache.
    pub const CACHED: usize = 2;
    /// The labels MALT writes (in MALT's order, not the values').
    pub const FIELDS: [&str; 3] = ["freeMemory", "cachedMemory", "swapMemory"];
}

/// `memoryBandwidth` value positions: written `[allocCount, allocMem,
/// freeCount, freeMem]` while the labels say `[allocMem, allocCount, freeMem,
/// freeCount]`.
pub mod bandwidth {
    /// Allocations in the bucket.
    pub const ALLOC_COUNT: usize = 0;
    /// Bytes allocated in the bucket.
    pub const ALLOC_MEM: usize = 1;
    /// Frees in the bucket.
    pub const FREE_COUNT: usize = 2;
    /// Bytes freed in the bucket.
    pub const FREE_MEM: usize = 3;
    /// The labels MALT writes (in MALT's order, not the values').
    pub const FIELDS: [&str; 4] = ["allocMem", "allocCount", "freeMem", "freeCount"];
}

/// `timeline`: three series.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Timeline {
    /// Requested, physical, virtual, internal memory and live blocks.
    pub memory_timeline: TimelineSeries,
    /// The machine's free, swap and cached memory.
    pub system_timeline: TimelineSeries,
    /// Allocation and free counts and bytes per bucket.
    pub memory_bandwidth: TimelineSeries,
}

impl Default for Timeline {
    fn default() -> Self {
        Timeline::empty()
    }
}

impl Timeline {
    /// Three series with MALT's labels and no points.
    pub fn empty() -> Timeline {
        Timeline {
            memory_timeline: TimelineSeries::empty(&memory::FIELDS),
            system_timeline: TimelineSeries::empty(&system::FIELDS),
            memory_bandwidth: TimelineSeries::empty(&bandwidth::FIELDS),
        }
    }

    /// The peak of requested memory, if the timeline recorded any point.
    pub fn peak_requested(&self) -> Option<u64> {
        let series = &self.memory_timeline;
        if series.values.is_empty() {
            return None;
        }
        series.peak.get(memory::REQUESTED).copied()
    }
}

/// One series: `values[i]` is bucket `i`, each a vector in field order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TimelineSeries {
    /// Tick of the first bucket.
    pub start: u64,
    /// MALT's labels (see the position constants for the real order).
    pub fields: Vec<String>,
    /// Ticks per bucket.
    pub per_points: u64,
    /// The maximum of each value over the run.
    pub peak: Vec<u64>,
    /// One vector per bucket.
    pub values: Vec<Vec<u64>>,
    /// The stack that produced each bucket's maximum (`0x0`: none).
    pub callsite: Vec<Addr>,
}

impl TimelineSeries {
    /// A series with these labels, zero peaks and no buckets.
    pub fn empty(fields: &[&str]) -> TimelineSeries {
        TimelineSeries {
            start: 0,
            fields: fields.iter().map(|f| (*f).to_owned()).collect(),
            per_points: 1,
            peak: vec![0; fields.len()],
            values: Vec::new(),
            callsite: Vec::new(),
        }
    }
}
