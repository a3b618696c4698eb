//! Layer 4, the process's life: starting the recorder (`start.rs`), the
//! fatal signals it saves the profile on (`signals.rs`), `fork`
//! (`fork.rs`), the dump written at the end (`dump/`) and while the
//! process runs (`checkpoint.rs`), the timeline's readings (`timeline.rs`), the allocator
//! functions found defined elsewhere at start-up (`unhooked.rs`), and how
//! the process ended (`end.rs`).

pub mod checkpoint;
pub mod control;
pub mod dump;
pub mod end;
pub mod fork;
pub mod signals;
pub mod start;
pub mod timeline;
pub mod unhooked;
