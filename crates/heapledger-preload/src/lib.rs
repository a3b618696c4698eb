//! The recorder: a shared library loaded into the profiled program with
//! `LD_PRELOAD`. It interposes the allocator, captures a stack per
//! allocation, keeps per-stack counters and the live blocks, and writes a raw
//! dump when the process ends. Everything slow (symbols, JSON) happens later
//! in the `heapledger` CLI.
//!
//! Rules that hold throughout, because this code runs inside someone else's
//! `malloc`: nothing here allocates from the program's heap (the global
//! allocator is a private mmap arena, `arena.rs`), the per-event path takes
//! no lock shared by all threads and makes no system call, and every hook
//! forwards untouched when it cannot record.

#![deny(unsafe_op_in_unsafe_fn)]

extern crate alloc;

mod altstack;
mod arena;
mod config;
mod counters;
mod dump;
mod fork;
mod hooks;
mod live;
mod maps;
mod modules;
mod real;
mod sampler;
mod side;
mod signals;
mod stacks;
mod state;
mod sync;
mod thread;
mod unwind;

use core::sync::atomic::AtomicU64;

#[global_allocator]
static GLOBAL: arena::Arena = arena::Arena;

/// Events forwarded without being recorded (re-entered hooks).
pub(crate) static UNRECORDED: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_load() {
    let _ = state::ready();
}

extern "C" fn on_unload() {
    dump::write("exit");
}

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = on_load;

#[used]
#[link_section = ".fini_array"]
static FINI: extern "C" fn() = on_unload;
