//! Writing the raw dump when the process ends (exit, `_exit`, a fatal
//! signal). It holds addresses and counters only; the `heapledger` CLI
//! symbolizes them and writes the profile, outside the profiled process.

use crate::counters::{PerStack, PEAK, PEAK_TICKS};
use crate::thread;
use crate::{arena, config, live, modules, stacks, state, UNRECORDED};
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU64, Ordering};
use heapledger_wire::{Encoder, Globals, Sink, Tag, VERSION};

static DUMPED: AtomicBool = AtomicBool::new(false);

/// In a forked child: it writes its own dump.
pub fn forked() {
    DUMPED.store(false, Ordering::Relaxed);
}

pub fn now_ns() -> u64 {
    clock(libc::CLOCK_MONOTONIC)
}

fn clock(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is writable.
    unsafe { libc::clock_gettime(id, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The dump file, written through a 64 KiB buffer as it is encoded (a
/// Python start-up alone makes a 9 MB dump; building it whole first cost
/// copies as the buffer grew). The first write error is kept and reported
/// once; a dump cut short is refused by the reader as truncated.
struct FileSink {
    fd: i32,
    buf: Vec<u8>,
    err: i32,
}

const SINK_BUF: usize = 1 << 16;

impl FileSink {
    fn flush(&mut self) {
        let mut off = 0;
        while off < self.buf.len() && self.err == 0 {
            // SAFETY: writing our own buffer to our own fd.
            let n = unsafe {
                libc::write(
                    self.fd,
                    self.buf[off..].as_ptr() as *const _,
                    self.buf.len() - off,
                )
            };
            if n <= 0 {
                // SAFETY: errno location is valid.
                let err = unsafe { *libc::__errno_location() };
                if n < 0 && err == libc::EINTR {
                    continue;
                }
                self.err = if n == 0 { libc::EIO } else { err };
                break;
            }
            off += n as usize;
        }
        self.buf.clear();
    }
}

impl Sink for FileSink {
    #[inline]
    fn put_small(&mut self, b: &[u8; 16], n: usize) {
        let len = self.buf.len();
        if self.buf.capacity() - len < b.len() {
            return self.put(&b[..n]);
        }
        // SAFETY: 16 bytes of spare capacity, checked above; n <= 16 of
        // them are kept.
        unsafe {
            self.buf
                .as_mut_ptr()
                .add(len)
                .cast::<[u8; 16]>()
                .write_unaligned(*b);
            self.buf.set_len(len + n.min(16));
        }
    }

    fn put(&mut self, b: &[u8]) {
        if self.buf.len() + b.len() > SINK_BUF {
            self.flush();
        }
        if b.len() > SINK_BUF {
            self.buf.extend_from_slice(b);
            self.flush();
        } else {
            self.buf.extend_from_slice(b);
        }
    }
}

fn read_file(path: &core::ffi::CStr) -> Vec<u8> {
    let mut out = Vec::new();
    // SAFETY: a NUL-terminated path; the buffer is writable for its length.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return out;
        }
        let mut buf = [0u8; 8192];
        loop {
            let n = libc::read(fd, buf.as_mut_ptr() as *mut _, buf.len());
            if n <= 0 {
                break;
            }
            out.extend_from_slice(&buf[..n as usize]);
        }
        libc::close(fd);
    }
    out
}

/// A file of this process in /proc, read through the calling thread's
/// directory first: where the main thread has ended (`pthread_exit` in
/// `main`, the process living on in other threads), `/proc/self/` shows an
/// empty command line, no executable and no mappings.
fn read_proc(thread: &core::ffi::CStr, process: &core::ffi::CStr) -> Vec<u8> {
    let v = read_file(thread);
    if v.is_empty() {
        read_file(process)
    } else {
        v
    }
}

fn exe() -> Vec<u8> {
    let mut buf = vec![0u8; 4096];
    for path in [c"/proc/thread-self/exe", c"/proc/self/exe"] {
        // SAFETY: buf is writable for its length.
        let n = unsafe { libc::readlink(path.as_ptr(), buf.as_mut_ptr() as *mut _, buf.len()) };
        if n > 0 {
            buf.truncate(n as usize);
            return buf;
        }
    }
    Vec::new()
}

fn stderr_line(s: &str) {
    // SAFETY: writing a byte buffer to fd 2.
    unsafe { libc::write(2, s.as_ptr() as *const _, s.len()) };
}

/// Writes this process's dump once; `why` names the way out ("signal"
/// avoids work that is unsafe in a signal handler). On the side stack where
/// the thread's stack is short (see `side.rs`).
pub fn write(why: &str) {
    crate::side::deep(|| write_here(why))
}

fn write_here(why: &str) {
    // A vfork child leaving through _exit runs on its parent's memory: it
    // must neither write the parent's data as its own nor stop the parent.
    if state::get() != state::State::Recording
        || !state::owns_memory()
        || DUMPED.swap(true, Ordering::AcqRel)
    {
        return;
    }
    let _e = crate::sync::ErrnoGuard::new();
    let was = thread::tls().in_hook.replace(true);
    state::set(state::State::Finished);
    let in_signal = why == "signal";
    if !in_signal {
        modules::refresh(false);
    }
    let file = match reserved() {
        Reserved::Ready(fd, path) => Some((fd, path)),
        // Said already; the directory holds this process's file, empty.
        Reserved::Lost => None,
        Reserved::None => open_dump(),
    };
    if let Some((fd, path)) = file {
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
        }
    }
    thread::leave_recorder(thread::tls(), was);
}

fn encode(e: &mut Encoder<FileSink>) {
    let cfg = config::get();
    let end_ticks = crate::hooks::ticks();
    let end_ns = now_ns();
    let start_ticks = state::START_TICKS.load(Ordering::Relaxed);
    let start_ns = state::START_NS.load(Ordering::Relaxed);
    let elapsed_ns = end_ns.saturating_sub(start_ns).max(1);
    let tps = ((end_ticks.saturating_sub(start_ticks)) as u128 * 1_000_000_000 / elapsed_ns as u128)
        as u64;
    let wall_start = clock(libc::CLOCK_REALTIME).saturating_sub(elapsed_ns);

    e.tag(Tag::Header);
    // SAFETY: no preconditions.
    let (pid, ppid) = unsafe { (libc::getpid(), libc::getppid()) };
    for v in [
        VERSION,
        pid as u64,
        ppid as u64,
        cfg.stack_mode as u64,
        cfg.max_depth as u64,
        cfg.sample_every,
        cfg.lifetime_head,
        tps,
        start_ticks,
        end_ticks,
        wall_start,
    ] {
        e.u(v);
    }
    e.bytes(&exe());
    e.bytes(&read_proc(
        c"/proc/thread-self/cmdline",
        c"/proc/self/cmdline",
    ));

    if let Some(seen) = modules::SEEN.try_lock_for(1000) {
        for m in seen.iter() {
            e.tag(Tag::Module);
            e.u(m.start);
            e.u(m.end);
            e.u(m.file_offset);
            e.bytes(m.path.as_bytes());
            e.bytes(&m.build_id);
        }
    }
    e.tag(Tag::Maps);
    e.bytes(&read_proc(c"/proc/thread-self/maps", c"/proc/self/maps"));
    if let Some((names, by)) = crate::hooks::unhooked() {
        let mut list = Vec::new();
        for n in names {
            list.extend_from_slice(n);
            list.push(0);
        }
        e.tag(Tag::Unhooked);
        e.bytes(&list);
        e.bytes(by);
    }

    // Merge every thread's counters.
    let epoch = crate::counters::epoch();
    let n = stacks::count() as usize;
    let mut merged = vec![
        PerStack {
            epoch,
            ..Default::default()
        };
        n
    ];
    let mut sizes = crate::counters::SizeHistogram::new();
    let mut jumps = crate::counters::Histogram::new();
    let mut unknown_frees = 0;
    let mut truncated = 0;
    // (thread number, memory operations, per-function (count, sum, ticks))
    type ThreadRow = (u64, u64, [(u64, u64, u64); 9]);
    let mut threads: Vec<ThreadRow> = Vec::new();
    // (threads merged, memory operations, per function) of thread::FOLDED
    let mut folded: Option<ThreadRow> = None;
    thread::for_each_state(|s| {
        for (id, ps) in s.stacks.iter() {
            if let Some(m) = merged.get_mut(id as usize) {
                m.absorb(ps, epoch);
            }
        }
        sizes.absorb(&s.sizes);
        jumps.absorb(&s.jumps);
        unknown_frees += s.unknown_frees;
        truncated += s.truncated;
        if s.number < thread::SPARE {
            let (ops, stats) = s.totals();
            threads.push((s.number, ops, stats));
        } else if s.number == thread::FOLDED {
            folded = Some((s.merged, s.mem_ops, s.stats));
        }
    });
    if cfg.stack_mode == heapledger_wire::StackMode::None {
        // Every block was the empty stack's (the hooks skip its maxima, see
        // `hooks::stackless`): its bytes at the peak and its highest are the
        // process's peak.
        if let Some(m) = merged.get_mut(0) {
            let peak = crate::counters::PEAK.load(Ordering::Relaxed);
            m.at_peak = peak as i64;
            m.epoch = epoch;
            stacks::entry(0).max_alive.store(peak, Ordering::Relaxed);
        }
    }
    // Each stack is written against the one before (they share outer frames).
    let mut prev: &[u64] = &[];
    for (id, m) in merged.iter().enumerate() {
        if m.t.is_empty() {
            continue;
        }
        let entry = stacks::entry(id as u32);
        let frames = stacks::frames(entry);
        e.stack(id as u64, frames, prev);
        prev = frames;
        e.stack_counters(id as u64, &m.wire_counters(id as u32, epoch));
    }
    threads.sort_by_key(|t| t.0);
    let rows = threads.iter().map(|r| (Tag::Thread, r));
    for (tag, (first, ops, stats)) in rows.chain(folded.iter().map(|r| (Tag::EndedThreads, r))) {
        e.tag(tag);
        e.u(*first);
        e.u(*ops);
        for (c, s, t) in stats {
            e.u(*c);
            e.u(*s);
            e.u(*t);
        }
    }
    for (size, c) in sizes.iter() {
        e.tag(Tag::Size);
        e.u(size);
        e.u(c);
    }
    for ((old, new), c) in jumps.iter() {
        e.tag(Tag::ReallocJump);
        e.u(old);
        e.u(new);
        e.u(c);
    }
    // Leaks: blocks still alive, grouped by stack.
    let mut leaks: Vec<(u64, u64)> = vec![(0, 0); n];
    let mut alive_total = 0u64;
    live::for_each_block(|b| {
        if let Some(l) = leaks.get_mut(b.stack as usize) {
            l.0 += 1;
            l.1 += b.size;
        }
        alive_total += b.size;
    });
    for (id, &(c, b)) in leaks.iter().enumerate() {
        if c > 0 {
            e.tag(Tag::Leak);
            e.u(id as u64);
            e.u(c);
            e.u(b);
        }
    }
    let max_threads = thread::REGISTRY
        .try_lock_for(1000)
        .map_or(0, |r| r.max_alive);
    e.globals(&Globals {
        peak_requested: PEAK.load(Ordering::Relaxed),
        peak_ticks: PEAK_TICKS
            .load(Ordering::Relaxed)
            .saturating_sub(start_ticks),
        alive_requested: alive_total,
        internal_memory: arena::INTERNAL_BYTES.load(Ordering::Relaxed),
        internal_peak: arena::INTERNAL_PEAK.load(Ordering::Relaxed),
        max_threads,
        truncated_stacks: truncated,
        unrecorded_events: UNRECORDED.load(Ordering::Relaxed),
        unknown_frees,
        dropped_histogram_entries: sizes.large.dropped + jumps.dropped,
    });
    e.tag(Tag::End);
}

/// The dump file of this process, created when it starts recording and
/// kept open until it ends: by then the program may have changed to a user
/// that cannot write the directory (a daemon started as root), entered a
/// `chroot`, or used up its descriptors. -1 when there is none.
static RESERVED_FD: AtomicI32 = AtomicI32::new(-1);
/// Its device and inode, to tell it from a file the program put at that
/// descriptor after closing ours (a daemon's "close every fd").
static RESERVED_DEV: AtomicU64 = AtomicU64::new(0);
static RESERVED_INO: AtomicU64 = AtomicU64::new(0);
/// Its path (a leaked `String`), to open it again where the descriptor was
/// taken from us.
static RESERVED_PATH: AtomicPtr<String> = AtomicPtr::new(core::ptr::null_mut());

/// Where the reserved descriptor goes: above the ones a program uses, so it
/// does not shift the numbers the program's own files get, and not so high
/// that the kernel grows the process's descriptor table for it.
const RESERVED_AT: u64 = 1023;

/// Creates this process's dump file and keeps it open (see `RESERVED_FD`):
/// when recording starts, and in a forked child, whose inherited copy of
/// its parent's descriptor is closed first. Silent: where it fails, the
/// dump is created at the end as before, which reports why.
pub fn reserve() {
    forget();
    let _e = crate::sync::ErrnoGuard::new();
    let Some((fd, path)) = open_dump_quietly() else {
        return;
    };
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: lim is writable.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur
    } else {
        0
    };
    let at = RESERVED_AT.min(soft.saturating_sub(1));
    let fd = if (fd as u64) < at {
        // SAFETY: fd is ours; F_DUPFD_CLOEXEC takes the lowest free
        // descriptor at or above `at`.
        let high = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, at as libc::c_int) };
        if high >= 0 {
            // SAFETY: fd is ours, now duplicated.
            unsafe { libc::close(fd) };
            high
        } else {
            fd
        }
    } else {
        fd
    };
    // SAFETY: an all-zero stat is valid; fd is ours.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        // SAFETY: fd is ours.
        unsafe { libc::close(fd) };
        return;
    }
    RESERVED_DEV.store(st.st_dev, Ordering::Relaxed);
    RESERVED_INO.store(st.st_ino, Ordering::Relaxed);
    let old = RESERVED_PATH.swap(
        alloc::boxed::Box::into_raw(alloc::boxed::Box::new(path)),
        Ordering::AcqRel,
    );
    if !old.is_null() {
        // SAFETY: the parent's path, leaked by `Box::into_raw` above.
        drop(unsafe { alloc::boxed::Box::from_raw(old) });
    }
    RESERVED_FD.store(fd, Ordering::Release);
}

/// In a forked child that is not followed: the parent's dump file is not
/// its own.
pub fn forget() {
    let old = RESERVED_FD.swap(-1, Ordering::AcqRel);
    if old >= 0 {
        // SAFETY: the parent's dump file, inherited by this forked child.
        unsafe { libc::close(old) };
    }
}

enum Reserved {
    /// Open and ready to be written.
    Ready(i32, String),
    /// Reserved, but it can no longer be opened (said on stderr).
    Lost,
    /// Never reserved.
    None,
}

/// The reserved dump file, ready to be written: its descriptor if it still
/// is ours, else the same file opened again by its path.
fn reserved() -> Reserved {
    let fd = RESERVED_FD.swap(-1, Ordering::AcqRel);
    let path = RESERVED_PATH.load(Ordering::Acquire);
    if path.is_null() {
        return Reserved::None;
    }
    // SAFETY: leaked in `reserve`, freed only there, before a new one is
    // stored, which the process that writes its dump does not do again.
    let path = unsafe { &*path }.clone();
    if fd >= 0 {
        // SAFETY: an all-zero stat is valid.
        let mut st: libc::stat = unsafe { core::mem::zeroed() };
        // SAFETY: fstat on any descriptor number is safe.
        if unsafe { libc::fstat(fd, &mut st) } == 0
            && st.st_dev == RESERVED_DEV.load(Ordering::Relaxed)
            && st.st_ino == RESERVED_INO.load(Ordering::Relaxed)
        {
            return Reserved::Ready(fd, path);
        }
    }
    // The program closed our descriptor (and maybe reused its number): open
    // the file again.
    let mut c = path.clone();
    c.push('\0');
    // SAFETY: c is NUL-terminated.
    let fd = unsafe {
        libc::open(
            c.as_ptr() as *const _,
            libc::O_WRONLY | libc::O_TRUNC | libc::O_CLOEXEC,
        )
    };
    if fd >= 0 {
        return Reserved::Ready(fd, path);
    }
    // SAFETY: errno location is valid.
    let err = unsafe { *libc::__errno_location() };
    stderr_line(&alloc::format!(
        "heapledger: cannot write profile data to {path}: {}\n",
        describe(err)
    ));
    Reserved::Lost
}

/// Creates `$HEAPLEDGER_DIR/PID.hlraw` (or PID.N.hlraw if taken); None when
/// there is no directory or the file cannot be created (said on stderr).
fn open_dump() -> Option<(i32, String)> {
    create_dump(true)
}

/// `open_dump` that says nothing on failure.
fn open_dump_quietly() -> Option<(i32, String)> {
    create_dump(false)
}

fn create_dump(say: bool) -> Option<(i32, String)> {
    let dir = String::from_utf8_lossy(config::get().dir?.to_bytes()).into_owned();
    // SAFETY: no preconditions.
    let pid = unsafe { libc::getpid() };
    for attempt in 0..100 {
        let mut path = if attempt == 0 {
            alloc::format!("{dir}/{pid}.hlraw")
        } else {
            alloc::format!("{dir}/{pid}.{attempt}.hlraw")
        };
        path.push('\0');
        let created = create(&path);
        path.pop();
        match created {
            Ok(fd) => return Some((fd, path)),
            Err(libc::EEXIST) => {}
            Err(_) if !say => return None,
            Err(err) => {
                stderr_line(&alloc::format!(
                    "heapledger: cannot write profile data to {path}: {}\n",
                    describe(err)
                ));
                return None;
            }
        }
    }
    None
}

/// Creates the NUL-terminated `path` for writing: its fd, or errno.
///
/// A program that ends with all the files its limit allows open (one that
/// leaks descriptors) would leave no profile: then the soft limit is raised
/// by one, within the hard limit, for the time of the `open`.
fn create(path: &str) -> Result<i32, i32> {
    let open = || {
        // SAFETY: path is NUL-terminated.
        let fd = unsafe {
            libc::open(
                path.as_ptr() as *const _,
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
                0o644,
            )
        };
        // SAFETY: errno location is valid.
        (fd >= 0)
            .then_some(fd)
            .ok_or(unsafe { *libc::__errno_location() })
    };
    match open() {
        Err(libc::EMFILE) => {
            let mut lim = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: lim is writable.
            if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0
                || lim.rlim_cur >= lim.rlim_max
            {
                return Err(libc::EMFILE);
            }
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_cur + 1,
                rlim_max: lim.rlim_max,
            };
            // SAFETY: valid limits, within the hard one.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
                return Err(libc::EMFILE);
            }
            let r = open();
            // The program's limit again; the open fd outlives it, as any
            // fd opened under a higher limit does.
            // SAFETY: the limits read above.
            unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
            r
        }
        r => r,
    }
}

/// What `errno` means, for the one line on stderr: the usual reasons a file
/// cannot be written, by name (`strerror` is neither thread- nor
/// signal-safe, and may allocate to translate), and the number otherwise.
fn describe(err: i32) -> String {
    let what = match err {
        libc::ENOENT => "no such directory",
        libc::EACCES | libc::EPERM => "permission denied",
        libc::EMFILE => "the program has as many files open as its limit allows",
        libc::ENFILE => "too many files open in the system",
        libc::ENOSPC => "no space left on the device",
        libc::EDQUOT => "disk quota exceeded",
        libc::EROFS => "read-only file system",
        libc::EFBIG => "file too large",
        libc::EIO => "input/output error",
        libc::ENOTDIR => "a part of the path is not a directory",
        _ => "",
    };
    if what.is_empty() {
        alloc::format!("os error {err}")
    } else {
        alloc::format!("{what} (os error {err})")
    }
}
