//! Writing the raw dump when the process ends (exit, `_exit`, a fatal
//! signal). It holds addresses and counters only; the `heapledger` CLI
//! symbolizes them and writes the profile, outside the profiled process.
//!
//! - `mod.rs`: when and how the dump is written, once per process;
//! - `encode.rs`: what it holds;
//! - `file.rs`: the file it goes to, reserved when recording starts;
//! - `ckpt.rs`: the same dump written while the process runs, as a
//!   checkpoint beside it (when: `process::checkpoint`), and `series.rs`
//!   the record of each checkpoint's changes it appends to a series;
//! - `per_thread.rs`: what each thread allocated at each stack.

mod about;
mod ckpt;
mod encode;
use crate::base::sync;
use encode::encode;
mod file;
mod per_thread;
mod series;
mod snapshot;

pub use ckpt::{open_high_read, write_checkpoint, write_snapshot, CKPT};
pub use file::{forget, reserve};

use crate::base::phase;
use crate::data::modules;
use crate::thread::{side, tls};
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering};
use file::{describe, open_dump, reserved, FileSink, Reserved, SINK_BUF};
use heapledger_wire::Encoder;

static DUMPED: AtomicBool = AtomicBool::new(false);

/// In a forked child: it writes its own dump.
pub fn forked() {
    DUMPED.store(false, Ordering::Relaxed);
    ckpt::forked();
}

pub(super) fn stderr_line(s: &str) {
    // SAFETY: writing a byte buffer to fd 2.
    unsafe { libc::write(2, s.as_ptr() as *const _, s.len()) };
}

/// Writes this process's dump once; `why` names the way out ("signal"
/// avoids work that is unsafe in a signal handler). On the side stack where
/// the thread's stack is short (see `side.rs`).
pub fn write(why: &str) {
    side::deep(|| write_here(why))
}

fn write_here(why: &str) {
    // A vfork child leaving through _exit runs on its parent's memory: it
    // must neither write the parent's data as its own nor stop the parent.
    if phase::get() != phase::State::Recording
        || !phase::owns_memory()
        || DUMPED.swap(true, Ordering::AcqRel)
    {
        return;
    }
    let _e = sync::ErrnoGuard::new();
    let was = tls::tls().in_hook.replace(true);
    // The timeline's last bucket ends with the program, before the dump's
    // own work (the modules' refresh alone takes milliseconds).
    crate::process::timeline::tick();
    // A checkpoint being written ends first (none starts after this).
    let ckpt = CKPT.lock_unless_held_here();
    phase::set(phase::State::Finished);
    let in_signal = why == "signal";
    if !in_signal {
        modules::refresh(false);
        // This thread's deepest enter/exit stack, if not charged yet.
        let s = crate::thread::state::existing(tls::tls());
        if crate::thread::state::is_live(s) {
            // SAFETY: this thread's live state, in the recorder.
            crate::thread::shadow::charge_deepest(unsafe { &mut *s });
        }
    }
    let file = match reserved() {
        Reserved::Ready(fd, path) => Some((fd, path)),
        // Said already; the directory holds this process's file, empty.
        Reserved::Lost => None,
        Reserved::None => open_dump(),
    };
    if let Some((fd, path)) = file {
        // Past `ulimit -f`, the write fails (and is reported) rather than
        // ending the program.
        let _xfsz = sync::HoldXfsz::new();
        let mut e = Encoder::new(FileSink {
            fd,
            buf: Vec::with_capacity(SINK_BUF),
            err: 0,
        });
        encode(&mut e);
        e.sink.flush();
        // SAFETY: fd is ours.
        unsafe { libc::close(fd) };
        if e.sink.err != 0 {
            stderr_line(&alloc::format!(
                "heapledger: cannot write profile data to {path}: {}\n",
                describe(e.sink.err)
            ));
        } else {
            ckpt::remove(&path);
        }
    }
    drop(ckpt);
    // `heapledger ctl` has nothing left to talk to.
    crate::process::control::close_page();
    tls::leave_recorder(tls::tls(), was);
}
