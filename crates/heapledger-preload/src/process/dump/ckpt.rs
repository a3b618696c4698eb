//! A checkpoint's file: the dump of the process so far, written to
//! `P.ckpt.tmp` beside the final dump `P` and renamed over `P.ckpt`, so
//! that `P.ckpt` is always whole (the CLI reads it where the process left
//! no `P`: killed by SIGKILL). The final dump removes it.
//!
//! The counters are copied with the threads held out of their hooks
//! (`thread::freeze`, a few milliseconds for half a million stacks), and
//! encoded and written after they are let go.

use super::file::{describe, reserved_path, FileSink, SINK_BUF};
use super::series::Series;
use super::snapshot::{encode_snapshot, take_snapshot};
use crate::base::clock;
use crate::base::phase;
use crate::base::sync::SpinLock;
use crate::data::stacks;
use alloc::vec::Vec;
use heapledger_wire::{Checkpoint, Encoder};

/// Held while a checkpoint is taken, and by the final dump (which then
/// waits for the one being written and starts none after); holds the
/// number of the last checkpoint written and the series' view of the
/// stacks. Taken before the registry (fork takes it first:
/// `process::fork`).
pub static CKPT: SpinLock<Ckpt> = SpinLock::new(Ckpt {
    last: 0,
    series: Series::new(),
});

/// What [`CKPT`] guards.
pub struct Ckpt {
    /// The number of the last checkpoint or snapshot written.
    pub last: u64,
    /// Each stack's counts as the series last wrote them (`series`).
    pub series: Series,
}

/// Where the descriptor of a checkpoint being written goes: out of the way
/// of the numbers the program's files get (below the reserved dump file's).
const HIGH_FD: u64 = super::file::RESERVED_AT - 1;

fn c_path(p: &str) -> Vec<u8> {
    let mut v = Vec::with_capacity(p.len() + 1);
    v.extend_from_slice(p.as_bytes());
    v.push(0);
    v
}

/// Creates (truncates) `path` for writing, its descriptor moved high.
fn create_high(path: &[u8]) -> Result<i32, i32> {
    open_high(path, libc::O_WRONLY, 0o644)
}

/// Creates (truncates) `path` with `access`, its descriptor moved high.
fn open_high(path: &[u8], access: libc::c_int, mode: libc::mode_t) -> Result<i32, i32> {
    // SAFETY: a NUL-terminated path.
    let fd = unsafe {
        libc::open(
            path.as_ptr() as *const _,
            access | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
            mode,
        )
    };
    if fd < 0 {
        // SAFETY: errno's location is valid.
        return Err(unsafe { *libc::__errno_location() });
    }
    Ok(move_high(fd))
}

/// Opens `path` for reading, its descriptor moved high (the timeline's
/// files of /proc: `process::timeline`).
pub fn open_high_read(path: &core::ffi::CStr) -> Option<i32> {
    // SAFETY: a NUL-terminated path.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    (fd >= 0).then(|| move_high(fd))
}

/// `fd`, or a duplicate of it above the program's numbers (`fd` closed).
/// A file to write and read back, unlinked at once (nothing is left behind,
/// whatever ends the process), its descriptor moved high.
fn scratch_file(path: &[u8]) -> Result<i32, i32> {
    let fd = open_high(path, libc::O_RDWR, 0o600)?;
    // SAFETY: a NUL-terminated path.
    unsafe { libc::unlink(path.as_ptr() as *const _) };
    Ok(fd)
}

pub(super) fn move_high(fd: i32) -> i32 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: lim is writable.
    let soft = match unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } {
        0 => lim.rlim_cur,
        _ => 0,
    };
    let at = HIGH_FD.min(soft.saturating_sub(2));
    if (fd as u64) < at {
        // SAFETY: fd is ours; F_DUPFD_CLOEXEC takes the lowest free
        // descriptor at or above `at`.
        let high = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, at as libc::c_int) };
        if high >= 0 {
            // SAFETY: fd is ours, now duplicated.
            unsafe { libc::close(fd) };
            return high;
        }
    }
    fd
}

/// Takes and writes a checkpoint (numbered after the last one), unless the
/// process has ended (`Finished`) or has no dump file; false where none was
/// written: the threads could not be held within `limit_ns`, or the file
/// could not be written (said once on stderr).
pub fn write_checkpoint(limit_ns: u64) -> bool {
    write(limit_ns, None).is_some()
}

/// Takes and writes a snapshot labelled `label`: a checkpoint kept as
/// `P.snap.SEQ` (never replaced; `heapledger run` stores each beside the
/// final profile); its number, or None where it could not be written.
pub fn write_snapshot(limit_ns: u64, label: &str) -> Option<u64> {
    write(limit_ns, Some(label))
}

fn write(limit_ns: u64, label: Option<&str>) -> Option<u64> {
    let mut last = CKPT.try_lock_for(1000)?;
    if phase::get() != phase::State::Recording || !phase::owns_memory() {
        return None;
    }
    let path = reserved_path()?;
    let stats = match scratch_file(&c_path(&alloc::format!("{path}.stats.tmp"))) {
        Ok(fd) => fd,
        Err(err) => {
            say_once(&path, err);
            return None;
        }
    };
    let snap = take_snapshot(limit_ns, stats);
    let Some(snap) = snap else {
        // SAFETY: a descriptor of ours.
        unsafe { libc::close(stats) };
        return None;
    };
    let ckpt = Checkpoint {
        seq: last.last + 1,
        ticks: clock::ticks(),
    };
    let name = match label {
        None => alloc::format!("{path}.ckpt"),
        Some(_) => alloc::format!("{path}.snap.{}", ckpt.seq),
    };
    let tmp = c_path(&alloc::format!("{name}.tmp"));
    let fd = match create_high(&tmp) {
        Ok(fd) => fd,
        Err(err) => {
            say_once(&path, err);
            return None;
        }
    };
    let mut e = Encoder::new(FileSink {
        fd,
        buf: Vec::with_capacity(SINK_BUF),
        err: 0,
    });
    let mut record = last
        .series
        .record(ckpt.seq, ckpt.ticks, stacks::count() as usize);
    let read_back = encode_snapshot(&mut e, snap, ckpt, label, &mut |id, c| {
        if let Some(r) = record.as_mut() {
            r.see(id, c)
        }
    });
    // SAFETY: a descriptor of ours.
    unsafe { libc::close(stats) };
    if !read_back && e.sink.err == 0 {
        e.sink.err = libc::EIO;
    }
    e.sink.flush();
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    let done = c_path(&name);
    // SAFETY: NUL-terminated paths.
    let renamed = e.sink.err == 0
        && unsafe { libc::rename(tmp.as_ptr() as *const _, done.as_ptr() as *const _) } == 0;
    if !renamed {
        // SAFETY: errno's location is valid; a NUL-terminated path.
        let err = match e.sink.err {
            0 => unsafe { *libc::__errno_location() },
            err => err,
        };
        unsafe { libc::unlink(tmp.as_ptr() as *const _) };
        say_once(&path, err);
        return None;
    }
    // Once the checkpoint stands, the series says what changed up to it.
    if let Some(r) = record {
        r.append(&path);
    }
    last.last = ckpt.seq;
    Some(ckpt.seq)
}

/// One line on stderr for the first checkpoint that could not be written.
fn say_once(path: &str, err: i32) {
    use core::sync::atomic::{AtomicBool, Ordering};
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        super::stderr_line(&alloc::format!(
            "heapledger: cannot write a checkpoint beside {path}: {}\n",
            describe(err)
        ));
    }
}

/// Once the final dump at `path` is written: its checkpoints go.
pub(super) fn remove(path: &str) {
    if crate::base::config::get().checkpoint_ms == 0 {
        return;
    }
    for suffix in [".ckpt", ".ckpt.tmp"] {
        let p = c_path(&alloc::format!("{path}{suffix}"));
        // SAFETY: a NUL-terminated path (errno is restored by the caller's
        // guard).
        unsafe { libc::unlink(p.as_ptr() as *const _) };
    }
}

/// In a forked child: its checkpoints are numbered from 1.
pub fn forked() {
    // SAFETY: the child has one thread, and `CKPT` was taken by the fork
    // (`process::fork`) and released: no one holds it.
    let c = unsafe { CKPT.get_unchecked() };
    c.last = 0;
    c.series.forget();
}
