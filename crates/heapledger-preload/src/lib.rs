//! The recorder: a shared library loaded into the profiled program with
//! `LD_PRELOAD`. It interposes the allocator, captures a stack per
//! allocation, keeps per-stack counters and the live blocks, and writes a raw
//! dump when the process ends. Everything slow (symbols, JSON) happens later
//! in the `heapledger` CLI.
//!
//! Rules that hold throughout, because this code runs inside someone else's
//! `malloc`: nothing here allocates from the program's heap (the global
//! allocator is a private mmap arena, `base/arena.rs`), the per-event path
//! takes no lock shared by all threads and makes no system call, and every
//! hook forwards untouched when it cannot record.
//!
//! The code stands in five layers, one folder each; a file uses its own
//! layer and the layers below it, never one above (`tests/layers.rs`
//! checks it, and that no file passes 600 lines):
//!
//! ```text
//!  5 hooks/    entry points, one file per family: alloc, lean (malloc's and
//!              free's fast paths), mmap, dl, pthread, signal_exit, main
//!  4 process/  the process's life: start, signals, fork, dump, unhooked
//!  3 thread/   per-thread state: tls, state, life, bounds, altstack, side
//!  2 data/     live blocks, stacks, counters, unwind, modules, maps, sampler
//!  1 base/     clock, phase, config, sync, arena, real functions
//! ```
//!
//! Two references go up, each with a comment that says why (`// cycle
//! kept:` in `thread/tls.rs`, `// import kept:` in `base/config.rs`). A new
//! family of hooks is a new file in `hooks/`; what happens once per process
//! goes to `process/`. See also docs/architecture.md.

#![deny(unsafe_op_in_unsafe_fn)]

extern crate alloc;

mod base;
mod data;
mod hooks;
mod process;
mod thread;

use base::arena;
use process::{dump, start};

#[global_allocator]
static GLOBAL: arena::Arena = arena::Arena;

extern "C" fn on_load() {
    if start::ready() {
        // Outside any hook, before `main`: the checkpoints' thread.
        process::checkpoint::start();
    }
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
