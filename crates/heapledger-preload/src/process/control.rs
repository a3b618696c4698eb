//! Control while the program runs (seed 002): stack capture switched on
//! and off for all threads, the counters so far, the leak report as text,
//! labelled snapshots; asked for by the program (`hooks::api`, the calls
//! of `heapledger.h`) or from outside by `heapledger ctl PID`, through a
//! page of shared memory.
//!
//! The switch: while stacks are off, every allocation is the empty stack's
//! (`hooks::enter::stack` reads one flag), and everything else is recorded
//! as before (counts, sizes, live blocks, leaks): the cost of `--stack
//! none`'s events plus that one load.
//!
//! `heapledger ctl`'s page: the recorder's thread (`process::checkpoint`)
//! creates `DIR/PID.ctl` (the run's private directory, mode 0600), one page
//! mapped shared, and looks at it on each of its wake-ups (at least every
//! 50 ms): `ctl` writes a command and raises `asked`; the thread does it,
//! writes the answer and sets `answered` to `asked`. No signal is used, so
//! a program's own SIGUSR1 and SIGUSR2 stay its own, and nothing in the
//! program's threads changes. `ctl` takes a lock on the file (`flock`)
//! so that two of them take turns.

use crate::base::{config, degrade, phase, real};
use crate::data::{level, live, stacks};
use crate::process::dump;
use crate::thread::{state, tls};
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

/// Set while stack capture is switched off.
static STACKS_OFF: AtomicBool = AtomicBool::new(false);

/// Whether stack capture is switched off (read at each stack's capture).
#[inline(always)]
pub fn stacks_off() -> bool {
    STACKS_OFF.load(Ordering::Relaxed)
}

/// At start-up: `--backtrace off`.
pub fn init() {
    STACKS_OFF.store(config::get().backtrace_off, Ordering::Relaxed);
}

/// Whether this process records at all.
pub fn recording() -> bool {
    phase::get() == phase::State::Recording && phase::owns_memory()
}

/// Whether allocations get their stacks now.
pub fn stacks_on() -> bool {
    recording()
        && config::get().stack_mode != heapledger_wire::StackMode::None
        && !degrade::no_stacks()
        && !stacks_off()
}

/// Switches stack capture; false where stacks cannot be taken in this
/// process (not recording, `--stack none`, or stopped for want of memory).
pub fn set_stacks(on: bool) -> bool {
    STACKS_OFF.store(!on, Ordering::Relaxed);
    !on || stacks_on()
}

/// What `heapledger_get_stats` fills (the C layout of `struct
/// heapledger_stats`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    pub blocks_alive: u64,
    pub bytes_alive: u64,
    pub peak_bytes: u64,
    pub allocations: u64,
    pub allocated_bytes: u64,
    pub frees: u64,
    pub freed_bytes: u64,
    /// Frees of blocks allocated before the last reset, and their bytes.
    pub older_frees: u64,
    pub older_freed_bytes: u64,
}

/// The counters now (each thread's as of its last event).
pub fn stats() -> Option<Stats> {
    if !recording() {
        return None;
    }
    let mut m = None;
    for _ in 0..1000 {
        m = state::moves();
        if m.is_some() {
            break;
        }
        // SAFETY: no preconditions.
        unsafe { libc::sched_yield() };
    }
    let (moves, _) = m?;
    let (level, peak) = level::peek_both();
    let (_, _, older_frees, older_freed_bytes) = if resets().is_some() {
        live::inherited::counts()
    } else {
        (0, 0, 0, 0)
    };
    Some(Stats {
        blocks_alive: moves[0].saturating_sub(moves[2]),
        bytes_alive: level.max(0) as u64,
        peak_bytes: peak,
        allocations: moves[0],
        allocated_bytes: moves[1],
        frees: moves[2],
        freed_bytes: moves[3],
        older_frees,
        older_freed_bytes,
    })
}

/// Waits 10 ms (for a checkpoint being written to end).
fn pause_10ms() {
    // SAFETY: a valid timespec.
    unsafe {
        libc::nanosleep(
            &libc::timespec {
                tv_sec: 0,
                tv_nsec: 10_000_000,
            },
            core::ptr::null_mut(),
        )
    };
}

/// Resets so far, and the clock ticks of the last.
static RESETS: AtomicU64 = AtomicU64::new(0);
static RESET_TICKS: AtomicU64 = AtomicU64::new(0);

/// (resets, ticks of the last) where the counters were reset.
pub fn resets() -> Option<(u64, u64)> {
    match RESETS.load(Ordering::Acquire) {
        0 => None,
        n => Some((n, RESET_TICKS.load(Ordering::Relaxed))),
    }
}

/// Resets the counters: from here on they hold what is allocated after
/// it. Every block alive now is counted apart from then on, as a forked
/// child counts the blocks it inherited (`data::live::inherited`): its
/// free is no error and moves no counter but those of older blocks. Done
/// with every thread held out of its hooks (`thread::freeze`), and no
/// checkpoint being written; false where the threads could not be held.
pub fn reset() -> bool {
    if !recording() {
        return false;
    }
    for _ in 0..200 {
        if let Some(mut ckpt) = dump::CKPT.try_lock_for(1000) {
            let done = crate::thread::freeze::forget_all_counts(1_000_000_000, || {
                live::inherited::inherit();
                crate::data::counters::forked();
            });
            if done {
                ckpt.series.forget();
                RESET_TICKS.store(crate::base::clock::ticks(), Ordering::Relaxed);
                RESETS.fetch_add(1, Ordering::AcqRel);
            }
            drop(ckpt);
            return done;
        }
        pause_10ms();
    }
    false
}

/// Blocks listed at most in a leak report (the totals count them all).
const REPORT_MAX: usize = 10_000;

/// Libraries a block's `so=` looks past: the allocator's and the C and
/// C++ runtimes', whose functions (strdup, operator new, std::string)
/// allocate for their caller.
const RUNTIME: [&[u8]; 6] = [
    b"libc.so",
    b"libstdc++.so",
    b"libgcc_s.so",
    b"ld-linux",
    b"libheapledger_preload",
    b"libc++.so",
];

/// Where `addr` (a return address) lies: its object's file name, the
/// offset in it, and the nearest dynamic symbol before it, if any.
/// An address's object (file name), offset in it, and nearest symbol.
type Place = (&'static [u8], u64, Option<&'static [u8]>);

fn place(addr: u64) -> Option<Place> {
    // SAFETY: Dl_info is plain data; dladdr fills it, with strings that
    // live as long as their object (the report is built before returning).
    unsafe {
        let mut info: libc::Dl_info = core::mem::zeroed();
        if libc::dladdr(addr.saturating_sub(1) as *const _, &mut info) == 0
            || info.dli_fname.is_null()
        {
            return None;
        }
        let file = core::ffi::CStr::from_ptr(info.dli_fname).to_bytes();
        let base = file.rsplit(|&c| c == b'/').next().unwrap_or(file);
        let sym = (!info.dli_sname.is_null())
            .then(|| core::ffi::CStr::from_ptr(info.dli_sname).to_bytes());
        Some((base, addr - info.dli_fbase as u64, sym))
    }
}

fn is_runtime(lib: &[u8]) -> bool {
    RUNTIME
        .iter()
        .any(|r| lib.windows(r.len()).any(|w| w == *r))
}

/// The leak report as text, in SoHook's layout: the totals, then each
/// block alive (by address, at most `REPORT_MAX`) with its library and,
/// where it was allocated with stacks on, its frames.
pub fn leak_report() -> String {
    let mut out = String::new();
    let Some(s) = stats() else {
        out.push_str("=== Memory Leak Report ===\nnot running under heapledger\n");
        return out;
    };
    let mut blocks: Vec<(u64, u64, u32)> = Vec::new();
    let (mut n, mut bytes) = (0u64, 0u64);
    live::for_each_block(|b| {
        n += 1;
        bytes += b.size;
        if blocks.len() < REPORT_MAX * 4 && blocks.try_reserve(1).is_ok() {
            blocks.push((b.addr, b.size, b.stack));
        }
    });
    blocks.sort_unstable();
    let _ = write!(
        out,
        "=== Memory Leak Report ===\nTotal Allocations: {} ({} bytes)\nTotal Frees: {} ({} bytes)\nCurrent Leaks: {} ({} bytes)\n",
        s.allocations, s.allocated_bytes, s.frees, s.freed_bytes, n, bytes
    );
    for (i, &(addr, size, stack)) in blocks.iter().take(REPORT_MAX).enumerate() {
        let mut frames = Vec::new();
        if stack != 0 && stack < stacks::count() {
            stacks::frames(stacks::entry(stack)).copy_to(&mut frames);
        }
        let places: Vec<_> = frames.iter().map(|&f| (f, place(f))).collect();
        let so = places
            .iter()
            .filter_map(|(_, p)| p.map(|p| p.0))
            .find(|lib| !is_runtime(lib))
            .map_or(String::from("?"), |l| {
                String::from_utf8_lossy(l).into_owned()
            });
        let _ = write!(
            out,
            "\nLeak #{}: ptr={addr:#x}, size={size}, so={so}\n",
            i + 1
        );
        if places.is_empty() {
            continue;
        }
        let _ = writeln!(out, "  Backtrace ({} frames):", places.len());
        for (j, (f, p)) in places.iter().enumerate() {
            let _ = write!(out, "    #{j}: {f:#x}");
            if let Some((lib, off, sym)) = p {
                let _ = write!(out, " {}+{off:#x}", String::from_utf8_lossy(lib));
                if let Some(sym) = sym {
                    let _ = write!(out, " ({})", String::from_utf8_lossy(sym));
                }
            }
            out.push('\n');
        }
    }
    if n as usize > REPORT_MAX {
        let _ = write!(out, "\n... and {} more\n", n as usize - REPORT_MAX);
    }
    out
}

/// Takes a snapshot labelled `label` (printable ASCII kept, at most 100
/// bytes; "snapshot" when empty); its number, or None where it could not
/// be written.
pub fn snapshot(label: &[u8]) -> Option<u64> {
    if !recording() {
        return None;
    }
    let clean = crate::base::printable(label, 100, "snapshot");
    // Waits for a checkpoint being written (at most a few seconds).
    for _ in 0..200 {
        if let Some(seq) = dump::write_snapshot(1_000_000_000, &clean) {
            return Some(seq);
        }
        pause_10ms();
    }
    None
}

/// Runs `f` as the recorder's own work on the calling thread (a program's
/// call of the API): its allocations forwarded unrecorded, `errno` kept.
pub fn as_recorder<R>(f: impl FnOnce() -> R) -> R {
    let t = tls::tls();
    let was = t.in_hook.replace(true);
    let own = t.own_calls.replace(true);
    // SAFETY: errno's location is valid.
    let errno = unsafe { *libc::__errno_location() };
    let r = f();
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
    t.own_calls.set(own);
    tls::leave_recorder(t, was);
    r
}

/// `text` in a block of the C library's malloc (NUL-terminated), which the
/// program releases with `free` or `heapledger_free_leak_report`.
pub fn c_string(text: &str) -> *mut libc::c_char {
    let Some(malloc) = real::malloc() else {
        return core::ptr::null_mut();
    };
    // SAFETY: the real malloc; the copy stays within the block.
    unsafe {
        let p = malloc(text.len() + 1) as *mut u8;
        if !p.is_null() {
            core::ptr::copy_nonoverlapping(text.as_ptr(), p, text.len());
            *p.add(text.len()) = 0;
        }
        p as *mut libc::c_char
    }
}

// ---- Snapshots the recorder takes by itself ----

/// When the next `--snapshot-every` snapshot is due (ns), and how many
/// were taken; whether the level was above `--snapshot-when-above` at the
/// last look, and how many such snapshots were taken. The recorder's
/// thread alone uses them.
struct Auto {
    next_ns: u64,
    every_n: u64,
    above: bool,
    above_n: u64,
}

// fork: not taken across it: only ever tried (`try_lock_for`), never waited for.
static AUTO: crate::base::sync::SpinLock<Auto> = crate::base::sync::SpinLock::new(Auto {
    next_ns: 0,
    every_n: 0,
    above: false,
    above_n: 0,
});

/// When the recorder's thread should look next for its own snapshots
/// (u64::MAX: never).
pub fn auto_wake(now: u64) -> u64 {
    let cfg = config::get();
    let mut wake = u64::MAX;
    if cfg.snapshot_every_ms > 0 {
        if let Some(mut a) = AUTO.try_lock_for(1000) {
            if a.next_ns == 0 {
                a.next_ns = now.saturating_add(cfg.snapshot_every_ms.saturating_mul(1_000_000));
            }
            wake = a.next_ns;
        }
    }
    if cfg.snapshot_above > 0 {
        // The level is looked at on every wake-up (at least every 50 ms).
        wake = wake.min(now.saturating_add(50_000_000));
    }
    wake
}

/// Takes the snapshots that are due: every `--snapshot-every`
/// (`every-N`), and when the level first rises above
/// `--snapshot-when-above` after being below it (`above-N`).
pub fn auto_snapshots(now: u64) {
    let cfg = config::get();
    if cfg.snapshot_every_ms == 0 && cfg.snapshot_above == 0 {
        return;
    }
    let Some(mut a) = AUTO.try_lock_for(1000) else {
        return;
    };
    if cfg.snapshot_every_ms > 0 && a.next_ns != 0 && now >= a.next_ns {
        a.every_n += 1;
        let label = alloc::format!("every-{}", a.every_n);
        snapshot(label.as_bytes());
        a.next_ns = crate::base::clock::now_ns()
            .saturating_add(cfg.snapshot_every_ms.saturating_mul(1_000_000));
    }
    if cfg.snapshot_above > 0 {
        let above = level::peek() > cfg.snapshot_above as i64;
        if above && !a.above {
            a.above_n += 1;
            let label = alloc::format!("above-{}", a.above_n);
            snapshot(label.as_bytes());
        }
        a.above = above;
    }
}

// ---- heapledger ctl's page ----

const PAGE: usize = 4096;
const MAGIC: u64 = 0x4c54_4348_4c50_4148; // "HAPLHCTL"
const COMMAND_AT: usize = 64;
const COMMAND_MAX: usize = 256;
const REPLY_AT: usize = 512;

/// The page: magic, then `asked` and `answered` (sequence numbers), the
/// command at `COMMAND_AT` and the answer at `REPLY_AT` (NUL-terminated).
static PAGE_AT: AtomicPtr<u8> = AtomicPtr::new(core::ptr::null_mut());

fn word(p: *mut u8, i: usize) -> &'static AtomicU64 {
    // SAFETY: an aligned word of the mapped page, which is never unmapped
    // while this process image uses it (but in a forked child, before its
    // own is made, by the only thread).
    unsafe { &*(p.add(8 * i) as *const AtomicU64) }
}

/// How long a process runs before it makes its page: the many processes
/// that live a few milliseconds (a shell's children, a child forked to
/// `exec`) never make one, nor pay its file's creation.
pub const PAGE_AFTER_NS: u64 = 100_000_000;

/// In a forked child (one thread, at the fork): the parent's page is the
/// parent's; the child makes its own once it has lived `PAGE_AFTER_NS`.
pub fn forked() {
    let old = PAGE_AT.swap(core::ptr::null_mut(), Ordering::AcqRel);
    if !old.is_null() {
        // SAFETY: the parent's mapping, inherited; nothing of the child's
        // uses it.
        unsafe { libc::munmap(old as *mut _, PAGE) };
    }
}

/// Makes this process's page (the recorder's thread, once the process has
/// lived `PAGE_AFTER_NS`).
pub fn open_page() {
    let old = PAGE_AT.swap(core::ptr::null_mut(), Ordering::AcqRel);
    if !old.is_null() {
        // SAFETY: our mapping, no longer used.
        unsafe { libc::munmap(old as *mut _, PAGE) };
    }
    let Some(path) = page_path() else { return };
    // SAFETY: a NUL-terminated path; the descriptor is closed once mapped.
    unsafe {
        let fd = libc::open(
            path.as_ptr() as *const _,
            libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            0o600,
        );
        if fd < 0 {
            return;
        }
        let ok = libc::ftruncate(fd, PAGE as libc::off_t) == 0;
        let p = if ok {
            libc::mmap(
                core::ptr::null_mut(),
                PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        } else {
            libc::MAP_FAILED
        };
        libc::close(fd);
        if p == libc::MAP_FAILED {
            return;
        }
        let p = p as *mut u8;
        word(p, 0).store(MAGIC, Ordering::Release);
        PAGE_AT.store(p, Ordering::Release);
    }
}

/// `DIR/PID.ctl`, NUL-terminated.
fn page_path() -> Option<String> {
    let dir = config::get().dir?;
    let pid = crate::base::phase::pid();
    let mut path = alloc::format!("{}/{pid}.ctl", String::from_utf8_lossy(dir.to_bytes()));
    path.push('\0');
    Some(path)
}

/// At the process's end (its final dump): the page's file goes, the
/// mapping stays (the recorder's thread may still look at it).
pub fn close_page() {
    if PAGE_AT.load(Ordering::Acquire).is_null() {
        return;
    }
    if let Some(path) = page_path() {
        // SAFETY: a NUL-terminated path.
        unsafe { libc::unlink(path.as_ptr() as *const _) };
    }
}

/// Whether the page is there (the recorder's thread then wakes often
/// enough to answer).
pub fn has_page() -> bool {
    !PAGE_AT.load(Ordering::Relaxed).is_null()
}

/// Answers a command waiting on the page, if any (the recorder's thread).
pub fn poll() {
    let p = PAGE_AT.load(Ordering::Acquire);
    if p.is_null() {
        return;
    }
    let asked = word(p, 1).load(Ordering::Acquire);
    if asked == word(p, 2).load(Ordering::Relaxed) {
        return;
    }
    // SAFETY: within the page; `ctl` wrote the command before `asked`.
    let command = unsafe { core::slice::from_raw_parts(p.add(COMMAND_AT), COMMAND_MAX) };
    let end = command.iter().position(|&c| c == 0).unwrap_or(COMMAND_MAX);
    let reply = answer(&command[..end]);
    let bytes = reply.as_bytes();
    let n = bytes.len().min(PAGE - REPLY_AT - 1);
    // SAFETY: within the page.
    unsafe {
        core::ptr::copy_nonoverlapping(bytes.as_ptr(), p.add(REPLY_AT), n);
        *p.add(REPLY_AT + n) = 0;
    }
    word(p, 2).store(asked, Ordering::Release);
}

/// What a command does, and its answer (first word "ok" or "error").
fn answer(command: &[u8]) -> String {
    let mut words = command.splitn(2, |&c| c == b' ');
    let verb = words.next().unwrap_or(&[]);
    let arg = words.next().unwrap_or(&[]);
    match (verb, arg) {
        (b"backtrace", b"on" | b"off") => {
            if set_stacks(arg == b"on") {
                alloc::format!("ok backtrace {}", if arg == b"on" { "on" } else { "off" })
            } else {
                String::from("error this process cannot take stacks (recorded with --stack none, or stopped for want of memory)")
            }
        }
        (b"snapshot", label) => match snapshot(label) {
            Some(seq) => alloc::format!("ok snapshot {seq}"),
            None => String::from("error the snapshot could not be written"),
        },
        (b"reset", _) => match reset() {
            true => String::from("ok reset"),
            false => String::from("error the threads could not be held for the reset"),
        },
        (b"stats", _) => match stats() {
            Some(s) => alloc::format!(
                "ok\nblocks_alive {}\nbytes_alive {}\npeak_bytes {}\nallocations {}\nallocated_bytes {}\nfrees {}\nfreed_bytes {}\nolder_frees {}\nolder_freed_bytes {}\nbacktrace {}",
                s.blocks_alive,
                s.bytes_alive,
                s.peak_bytes,
                s.allocations,
                s.allocated_bytes,
                s.frees,
                s.freed_bytes,
                s.older_frees,
                s.older_freed_bytes,
                if stacks_on() { "on" } else { "off" }
            ),
            None => String::from("error not recording"),
        },
        _ => String::from("error unknown command"),
    }
}
