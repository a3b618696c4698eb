//! The heapledger profile: MALT 1.6's JSON layout, plus heapledger's own data.
//!
//! heapledger writes its profile in the layout MALT 1.6 writes, so that a
//! profile made by heapledger opens in MALT's reader and web GUI, and heapledger's
//! analyses read MALT's files too. What MALT has no place for (build ids,
//! unwinding mode, inline chains, the runtime's own leaks...) goes under one
//! extra, versioned top-level key, `heapledger` ([`HeapledgerExt`]).
//!
//! - [`Profile`] and the section types model the file key for key, in MALT's
//!   key order; reading and writing a MALT file gives the same JSON back.
//! - [`Profile::from_path`] reads with errors that say what is wrong in one
//!   line ([`ProfileError`]); [`Profile::write_to`] writes.
//! - [`Addr`] is an address as MALT writes it (`"0x..."`), [`StringTable`]
//!   interns names for `sites.strings`.
//! - [`callgrind::write`] exports to Valgrind's callgrind format.
//!
//! This crate does no symbolization and touches no process: it is data.

// One audited exception: `prefetch`.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod addr;
pub mod callgrind;
mod compact;
mod domains;
mod error;
mod ext;
mod memstats;
mod model;
mod prefetch;
mod query;
mod read;
pub mod runtime;
mod scatter;
mod sites;
mod stacks;
mod strings;
mod threads;
pub mod timeline;
mod write;

/// The ordered map used for `sites.instr`, `heapledger.inlined` and friends.
pub use indexmap::IndexMap;

pub use addr::{Addr, AddrSpace, ParseAddrError};
pub use compact::{CompactStacks, CompactTotals};
pub use domains::{DomainValues, Domains};
pub use error::ProfileError;
pub use ext::{
    degrade_cause, stack_mode, CheckpointInfo, DegradeStep, Degraded, ExitInfo, HeapledgerExt,
    Inherited, InlineFrame, ModuleInfo, ResetInfo, TimeLost, Unhooked, WaitKind, EXT_VERSION,
};
pub use memstats::{GlobalVariable, GlobalVariables, MemStats, ReallocJump};
pub use model::{Config, Globals, Profile, Run, FORMAT_VERSION, SUPPORTED_FORMAT_VERSIONS};
pub use prefetch::prefetch;
pub use query::{ticks_to_seconds, Frame};
pub use read::check_values;
pub use scatter::{Scatter, ScatterAxis, ScatterChart, ScatterInfos, ScatterPoint};
pub use sites::{basename, InstrEntry, MapEntry, SiteRef, Sites, JIT_BINARY};
pub use stacks::{
    shared_outer_frames, Changed, Leak, LeakBlock, LeakBlocks, MinMaxSum, Series, SeriesCounts,
    SeriesPoint, StackInfos, StackStat, Stacks, ThreadStacks,
};
pub use strings::{StringId, StringTable, UNKNOWN};
pub use threads::{AllocFuncStats, CallStat, StackMem, ThreadStats, TimeProfiler};
pub use timeline::{Timeline, TimelineSeries};
