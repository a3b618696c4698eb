//! Layer 5, the entry points: the exported functions that interpose the
//! program's calls, one file per family. Each is a thin layer over the
//! layers below: it forwards to the real function and, when recording is
//! on and the thread is not already inside a hook, records the event.
//! Recording never changes what the program sees: return values and `errno`
//! are the real function's (errno is saved around the bookkeeping), and a
//! hook that cannot record (re-entered, not initialized, thread ending)
//! just forwards.
//!
//! - `enter.rs`: entering and leaving a hook (the thread's state, the
//!   orphan state), events that cannot be recorded, stack capture;
//! - `trampoline.rs`: the naked entries that build the frame record stack
//!   capture starts from;
//! - `alloc.rs`: the malloc family's full hooks;
//! - `release.rs`: a block's release (free, realloc);
//! - `lean.rs`: `malloc`'s and `free`'s entries and their lean paths;
//! - `cxx.rs`: C++'s operator new and delete, routed where an allocator defines its own;
//! - `mmap.rs`: mmap, munmap, mremap;
//! - `dl.rs`: dlopen, dlclose;
//! - `pthread.rs`: pthread_getattr_np;
//! - `signal_exit.rs`: _exit, _Exit, sigaltstack, sigaction, signal;
//! - `main.rs`: __libc_start_main, for the exit status;
//! - `wait.rs`: lock waits, condition variables, joins, semaphores (time lost);
//! - `enter_exit.rs`: `--stack enter-exit`'s `__cyg_profile_func_enter`/`exit`;
//! - `api.rs`: the calls of `heapledger.h` (control while the program runs);
//! - `user.rs`: `heapledger.h`'s frames, tracebacks and time logs (timelog.md).

#[macro_use]
mod trampoline;

mod alloc;
mod api;
mod cxx;
mod dl;
mod enter;
mod enter_exit;
mod lean;
mod main;
mod mmap;
mod pthread;
mod release;
mod signal_exit;
mod user;
mod wait;
