//! Layer 2, the data structures, shared by all threads or owned by one:
//! the table of live blocks, interned stacks, per-stack counters, the
//! unwinder, the modules it reads unwind tables from, `/proc/self/maps`
//! scanning, and the byte sampler. They use the leaves only.

pub mod counters;
pub mod histogram;
pub mod level;
pub mod live;
pub mod maps;
pub mod modules;
pub mod only;
pub mod runs;
pub mod sampler;
pub mod stackmap;
pub mod stacks;
pub mod timeline;
pub mod timelog;
pub mod traceback;
pub mod unwind;
