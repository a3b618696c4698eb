// The recorder's per-stack counters (`src/data/stackmap`) and what they
// use, with the rest of the recorder stood in for: included by the tests
// of `stackmap.rs` and `packed.rs`, which define `STACKS`, the stacks the
// stand-in table holds.

#[path = "../../src/data/counters.rs"]
pub mod counters;
#[path = "../../src/data/histogram.rs"]
pub mod histogram;
#[path = "../../src/data/level.rs"]
pub mod level;
#[path = "../../src/data/stackmap/mod.rs"]
pub mod stackmap;
#[path = "../../src/base/sync.rs"]
pub mod sync;

mod base {
    pub use super::sync;
    pub mod clock {
        pub fn ticks() -> u64 {
            1
        }
    }
    pub mod degrade {
        pub enum Cause {
            RecorderMemory,
        }
        pub fn stop(_: Cause) {
            panic!("no memory");
        }
    }
    pub mod config {
        pub struct Config {
            pub spill_slack: u64,
            pub spill_min: usize,
        }
        pub fn get() -> &'static Config {
            &Config {
                spill_slack: 1 << 16,
                spill_min: 1 << 12,
            }
        }
    }
}

mod data {
    pub use super::{counters, histogram, level, stackmap};
    /// Shared entries for `STACKS` stacks (a constant of the test that
    /// includes this file).
    pub mod stacks {
        use std::sync::atomic::{AtomicI64, AtomicU64};
        pub type StackId = u32;
        pub struct StackEntry {
            pub alive: AtomicI64,
            pub max_alive: AtomicU64,
        }
        static ENTRIES: [StackEntry; super::super::STACKS] = [const {
            StackEntry {
                alive: AtomicI64::new(0),
                max_alive: AtomicU64::new(0),
            }
        }; super::super::STACKS];
        pub fn entry(id: StackId) -> &'static StackEntry {
            &ENTRIES[id as usize]
        }
        pub fn count() -> u32 {
            super::super::STACKS as u32
        }
    }
}


use data::counters::{Full, StackMap};
use heapledger_wire::{MinMaxSum, Totals};

/// A small generator (xorshift), so that the counters differ without a
/// crate for it.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}
