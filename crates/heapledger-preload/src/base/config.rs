//! Options from the environment, parsed once at start-up into an immutable
//! struct (`HEAPLEDGER_OPTS=stack=dwarf,depth=256,follow=1,parent=PID,sample=BYTES,
//! lifetimes=exact,checkpoint=MS,backtrace=0,snapshot_every=MS,snapshot_above=BYTES,
//! waits=0,waits_top=N`).

// import kept: the default of `lifetime_head` is the counters' head of
// timed blocks, whose meaning (and the sampling after it) data/counters.rs
// defines; the configuration only carries the option that lifts it.
use crate::data::counters;
use core::sync::atomic::{AtomicPtr, Ordering};
use heapledger_wire::StackMode;

#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub stack_mode: StackMode,
    pub max_depth: u32,
    pub follow: bool,
    /// pid of the `heapledger run` process: the profiled program is its child.
    pub parent: i32,
    pub sample_every: u64,
    /// How many blocks of each stack in each thread have their lifetime
    /// measured before the stack's lifetimes are sampled
    /// (`counters::LIFETIME_HEAD`; unbounded with `lifetimes=exact`).
    pub lifetime_head: u64,
    /// Where the dump goes (`HEAPLEDGER_DIR`), read at start-up: a program
    /// may clear its environment before it ends (`clearenv`, Python's
    /// `os.environ.clear()`), and its profile must not go with it.
    pub dir: Option<&'static core::ffi::CStr>,
    /// Milliseconds between checkpoints of the dump written while the
    /// process runs (`process::checkpoint`); 0: none. `heapledger run`
    /// passes its `--checkpoint-every`.
    pub checkpoint_ms: u64,
    /// Starts with stack capture switched off (`backtrace=0`, `heapledger
    /// run --backtrace off`): the program or `heapledger ctl` switches it
    /// on (`process::control`).
    pub backtrace_off: bool,
    /// Milliseconds between the snapshots the recorder takes by itself
    /// (`snapshot_every=MS`, `--snapshot-every`); 0: none.
    pub snapshot_every_ms: u64,
    /// Requested bytes alive above which the recorder takes a snapshot
    /// (`snapshot_above=BYTES`, `--snapshot-when-above`), each time the
    /// level rises past it again; 0: never.
    pub snapshot_above: u64,
    /// `HEAPLEDGER_ONLY_LIB` (`--only-lib`): patterns of the libraries
    /// whose allocations alone are recorded (`data::only`), read at
    /// start-up.
    pub only_lib: Option<&'static core::ffi::CStr>,
    /// Lock waits are recorded (`waits=0`, `--no-waits`: not), each
    /// thread keeping its `waits_top` longest (`data::timelog`).
    pub waits: bool,
    pub waits_top: u32,
    /// How many more per-thread stack entries than distinct stacks the
    /// live threads may hold before a thread's entries are handed to the
    /// process's (`thread::life::spill`), and how many a thread must hold
    /// to hand them over; `spill_slack=N` and `spill_min=N`, for tests.
    pub spill_slack: u64,
    pub spill_min: usize,
    /// The most bytes the threads' own rows take (`thread::kept`);
    /// `kept_budget=N`, for tests.
    pub kept_budget: u64,
}

pub const DEFAULT: Config = Config {
    stack_mode: StackMode::Dwarf,
    max_depth: 256,
    follow: true,
    parent: 0,
    sample_every: 0,
    lifetime_head: counters::LIFETIME_HEAD,
    dir: None,
    checkpoint_ms: 0,
    backtrace_off: false,
    snapshot_every_ms: 0,
    snapshot_above: 0,
    only_lib: None,
    waits: true,
    waits_top: 32,
    spill_slack: SPILL_SLACK,
    spill_min: SPILL_MIN,
    kept_budget: KEPT_BUDGET,
};

/// The defaults of `spill_slack` and `spill_min` (`data::stackmap::ENTRIES`):
/// a slack of 65 536 entries (7 MB), and 4096 entries (420 KB) that a thread
/// holds at least before it hands them over.
pub const SPILL_SLACK: u64 = 1 << 16;
pub const SPILL_MIN: usize = 1 << 12;

/// The default of `kept_budget` (16 MB: about 3 million rows).
pub const KEPT_BUDGET: u64 = 16 << 20;

/// What `get` answers until `load` has run.
static BEFORE_LOAD: Config = DEFAULT;

/// Never null (the hooks read it several times per event, without a check).
static CONFIG: AtomicPtr<Config> = AtomicPtr::new(&raw const BEFORE_LOAD as *mut Config);

#[inline(always)]
pub fn get() -> &'static Config {
    // SAFETY: BEFORE_LOAD, or set once by `load` from a leaked Box, never
    // freed; never written through.
    unsafe { &*CONFIG.load(Ordering::Acquire) }
}

fn num(v: &[u8]) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    v.iter().try_fold(0u64, |n, &c| {
        c.is_ascii_digit()
            .then(|| n.saturating_mul(10).saturating_add((c - b'0') as u64))
    })
}

pub fn parse(s: &[u8]) -> Config {
    let mut c = DEFAULT;
    for item in s.split(|&b| b == b',') {
        let mut kv = item.splitn(2, |&b| b == b'=');
        let k = kv.next().unwrap_or(&[]);
        let v = kv.next().unwrap_or(&[]);
        match k {
            b"stack" => {
                c.stack_mode = match v {
                    b"none" => StackMode::None,
                    b"fp" => StackMode::Fp,
                    b"enter-exit" => StackMode::EnterExit,
                    _ => StackMode::Dwarf,
                }
            }
            b"depth" => c.max_depth = num(v).map_or(c.max_depth, |n| n.clamp(1, 4096) as u32),
            b"follow" => c.follow = v != b"0",
            b"parent" => c.parent = num(v).unwrap_or(0) as i32,
            b"sample" => c.sample_every = num(v).unwrap_or(0),
            b"lifetimes" if v == b"exact" => c.lifetime_head = u64::MAX,
            b"checkpoint" => c.checkpoint_ms = num(v).unwrap_or(0),
            b"backtrace" => c.backtrace_off = v == b"0",
            b"snapshot_every" => c.snapshot_every_ms = num(v).unwrap_or(0),
            b"snapshot_above" => c.snapshot_above = num(v).unwrap_or(0),
            b"waits" => c.waits = v != b"0",
            b"waits_top" => c.waits_top = num(v).map_or(32, |n| n.clamp(1, 64) as u32),
            b"spill_slack" => c.spill_slack = num(v).unwrap_or(c.spill_slack),
            b"spill_min" => c.spill_min = num(v).map_or(c.spill_min, |n| n.max(1) as usize),
            b"kept_budget" => c.kept_budget = num(v).unwrap_or(c.kept_budget),
            _ => {}
        }
    }
    c
}

pub fn load() {
    // SAFETY: getenv with a NUL-terminated name; it does not allocate.
    let p = unsafe { libc::getenv(c"HEAPLEDGER_OPTS".as_ptr()) };
    let mut c = if p.is_null() {
        DEFAULT
    } else {
        // SAFETY: getenv returns a NUL-terminated string.
        parse(unsafe { core::ffi::CStr::from_ptr(p) }.to_bytes())
    };
    // SAFETY: as above.
    let d = unsafe { libc::getenv(c"HEAPLEDGER_DIR".as_ptr()) };
    if !d.is_null() {
        // SAFETY: getenv returns a NUL-terminated string; the copy lives
        // for the process's life, like the config.
        let copy: &'static core::ffi::CStr =
            alloc::boxed::Box::leak(unsafe { core::ffi::CStr::from_ptr(d) }.into());
        c.dir = Some(copy);
    }
    // SAFETY: as above.
    let o = unsafe { libc::getenv(c"HEAPLEDGER_ONLY_LIB".as_ptr()) };
    if !o.is_null() {
        // SAFETY: as above.
        let copy: &'static core::ffi::CStr =
            alloc::boxed::Box::leak(unsafe { core::ffi::CStr::from_ptr(o) }.into());
        c.only_lib = Some(copy);
    }
    CONFIG.store(
        alloc::boxed::Box::into_raw(alloc::boxed::Box::new(c)),
        Ordering::Release,
    );
}
