//! The timeline's readings (`data::timeline`): at the end of each bucket,
//! the recorder's thread (`checkpoint.rs`) reads the process's resident and
//! virtual memory, the machine's free, swapped and cached memory, the
//! recorder's own memory and the threads' allocations and frees so far;
//! the dump ends the last bucket the same way.
//!
//! `/proc/self/statm` and `/proc/meminfo` are opened once, their
//! descriptors moved above the program's numbers (as a checkpoint's file:
//! `dump::ckpt`), and read again with `pread` at each bucket's end: a file
//! opened every few milliseconds would, each time, take for a moment the
//! lowest free number, which a program that closes 0 and opens
//! `/dev/null` expects to get. Before each read the descriptor is checked
//! to be the file it was (a program may close every descriptor and open
//! others under the same numbers); if it is not, it is opened again.

use crate::base::clock::now_ns;
use crate::base::sync::SpinLock;
use crate::base::{arena, phase};
use crate::data::{level, timeline};
use crate::thread::state;
use core::sync::atomic::Ordering;

/// An open file of /proc: descriptor, device and inode.
#[derive(Clone, Copy)]
struct ProcFile {
    fd: i32,
    dev: u64,
    ino: u64,
}

pub(crate) struct Readers {
    statm: Option<ProcFile>,
    meminfo: Option<ProcFile>,
    /// When meminfo was last read (it changes slowly, and costs more).
    meminfo_ns: u64,
    sys: (u64, u64, u64),
    pid: i32,
}

pub(crate) static READERS: SpinLock<Readers> = SpinLock::new(Readers {
    statm: None,
    meminfo: None,
    meminfo_ns: 0,
    sys: (0, 0, 0),
    pid: 0,
});

/// How often the machine's memory is read.
const MEMINFO_EVERY_NS: u64 = 64_000_000;

fn stat_of(fd: i32) -> Option<(u64, u64)> {
    // SAFETY: st is plain data, written by fstat.
    unsafe {
        let mut st: libc::stat = core::mem::zeroed();
        (libc::fstat(fd, &mut st) == 0).then_some((st.st_dev, st.st_ino))
    }
}

fn open_high(path: &core::ffi::CStr) -> Option<ProcFile> {
    let fd = super::dump::open_high_read(path)?;
    match stat_of(fd) {
        Some((dev, ino)) => Some(ProcFile { fd, dev, ino }),
        None => {
            // SAFETY: our descriptor.
            unsafe { libc::close(fd) };
            None
        }
    }
}

/// Reads `f` (opened again where its descriptor is no longer it) into
/// `buf`; the bytes read.
fn read(f: &mut Option<ProcFile>, path: &core::ffi::CStr, buf: &mut [u8]) -> usize {
    if let Some(p) = *f {
        if stat_of(p.fd) != Some((p.dev, p.ino)) {
            // Not ours any more: the program closed it (and may have
            // another file under that number, which stays its own).
            *f = None;
        }
    }
    if f.is_none() {
        *f = open_high(path);
    }
    let Some(p) = *f else {
        return 0;
    };
    // SAFETY: buf is writable for its length.
    let n = unsafe { libc::pread(p.fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
    n.max(0) as usize
}

/// The `i`-th number of a line of numbers.
fn nth_number(text: &[u8], i: usize) -> u64 {
    text.split(|&c| c == b' ' || c == b'\n')
        .filter(|w| !w.is_empty())
        .nth(i)
        .map_or(0, parse)
}

fn parse(w: &[u8]) -> u64 {
    w.iter()
        .take_while(|c| c.is_ascii_digit())
        .fold(0u64, |n, &c| {
            n.saturating_mul(10).saturating_add((c - b'0') as u64)
        })
}

/// The value (kB) of `key:` in /proc/meminfo's text, in bytes.
fn meminfo_value(text: &[u8], key: &[u8]) -> u64 {
    for line in text.split(|&c| c == b'\n') {
        if line.starts_with(key) && line.get(key.len()) == Some(&b':') {
            let rest = &line[key.len() + 1..];
            let start = rest
                .iter()
                .position(|c| c.is_ascii_digit())
                .unwrap_or(rest.len());
            return parse(&rest[start..]).saturating_mul(1024);
        }
    }
    0
}

fn readings(now: u64) -> timeline::Readings {
    let mut r = timeline::Readings {
        internal: arena::INTERNAL_BYTES.load(Ordering::Relaxed),
        ..Default::default()
    };
    if let Some((m, high)) = state::moves() {
        r.moves = m;
        r.blocks = m[0].saturating_sub(m[2]).max(high);
    }
    // Held for microseconds by the other of the recorder's thread and the
    // dump; None only where a frame of this thread holds it (a signal
    // handler's dump).
    let Some(mut g) = READERS.lock_unless_held_here() else {
        return r;
    };
    let pid = crate::base::phase::pid();
    if g.pid != pid {
        // A forked child: its parent's descriptors describe the parent.
        for f in [g.statm.take(), g.meminfo.take()].into_iter().flatten() {
            // SAFETY: the inherited copy of our descriptor.
            unsafe { libc::close(f.fd) };
        }
        g.pid = pid;
        g.meminfo_ns = 0;
    }
    // SAFETY: no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(0) as u64;
    let mut buf = [0u8; 256];
    let n = read(&mut g.statm, c"/proc/self/statm", &mut buf);
    r.vsz = nth_number(&buf[..n], 0) * page;
    r.rss = nth_number(&buf[..n], 1) * page;
    if g.meminfo_ns == 0 || now.saturating_sub(g.meminfo_ns) >= MEMINFO_EVERY_NS {
        let mut big = [0u8; 4096];
        let n = read(&mut g.meminfo, c"/proc/meminfo", &mut big);
        let t = &big[..n];
        let swap = meminfo_value(t, b"SwapTotal").saturating_sub(meminfo_value(t, b"SwapFree"));
        g.sys = (
            meminfo_value(t, b"MemFree"),
            swap,
            meminfo_value(t, b"Cached"),
        );
        g.meminfo_ns = now;
    }
    (r.sys_free, r.sys_swap, r.sys_cached) = g.sys;
    r
}

/// Ends the current bucket now (the recorder's thread, at each bucket's
/// end; the dump, for the last one, once recording has finished).
pub fn tick() {
    if !matches!(
        phase::get(),
        phase::State::Recording | phase::State::Finished
    ) {
        return;
    }
    // The time of the bucket's end is when this was called (for the
    // recorder's thread, when it woke): on a busy machine the readings
    // can come milliseconds later, and what the program did by then
    // belongs to this bucket, not a later one.
    let now = now_ns();
    let r = readings(now);
    if let Some(mut s) = timeline::SERIES.lock_unless_held_here() {
        s.end_bucket(now, level::peek(), &r);
    }
}

/// When the current bucket ends (monotonic ns).
pub fn next_end() -> u64 {
    let now = now_ns();
    let Some(s) = timeline::SERIES.try_lock_for(1000) else {
        return now + timeline::FIRST_STEP_NS;
    };
    let k = now.saturating_sub(s.start_ns) / s.step_ns;
    s.start_ns + (k + 1) * s.step_ns
}

/// The timeline starts (the process's start, a forked child's).
pub fn start() {
    timeline::start(phase::START_NS.load(Ordering::Relaxed), level::peek());
}
