//! The `heapledger` key: what heapledger records that MALT's layout has no place for.
//!
//! It lives under one top-level key so that every MALT key keeps MALT's
//! meaning and MALT's tools simply ignore it. It carries its own `version`:
//! a reader refuses a newer version instead of misreading it (see
//! [`crate::ProfileError::UnsupportedExtension`]). Adding an optional field
//! (`#[serde(default)]`) does not need a new version; changing the meaning or
//! type of one does.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use crate::addr::Addr;
use crate::strings::StringId;

/// The version of [`HeapledgerExt`] this crate writes and the newest it reads.
pub const EXT_VERSION: u32 = 1;

/// How stacks were captured.
pub mod stack_mode {
    /// DWARF CFI unwinding (`.eh_frame`).
    pub const DWARF: &str = "dwarf";
    /// Frame-pointer walking.
    pub const FP: &str = "fp";
    /// No stacks: every allocation is charged to one empty stack.
    pub const NONE: &str = "none";
}

/// `heapledger`: heapledger's own data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeapledgerExt {
    /// Version of this structure ([`EXT_VERSION`]).
    pub version: u32,
    /// `"dwarf"`, `"fp"` or `"none"` (see [`stack_mode`]).
    pub stack_mode: String,
    /// Deepest stack recorded; deeper stacks are cut.
    pub max_depth: u32,
    /// Stacks cut at `max_depth` (their outermost frames are missing).
    pub truncated_stacks: u64,
    /// `true`: frees were unwound and charged to their own call site, as MALT
    /// does. `false`: a free is charged to the stack that allocated the block
    /// (its `free`, `lifetime` and `aliveReq` counters), with no entry of its own.
    pub frees_unwound: bool,
    /// Sampling: one allocation in `n` was recorded; `None` (no key): all were.
    /// No `Option` here is written as `null`, which MALT's reader cannot
    /// parse even in a key it never reads: an absent value has no key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_every: Option<u64>,
    /// Lifetimes: each stack's first `n` blocks in each thread were timed,
    /// then one in 16 at random, standing for 16 (counts exact, sums
    /// estimated, minimum and maximum those of the timed blocks); `None`:
    /// every block was timed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifetimes_sampled_after: Option<u64>,
    /// Bytes the recorder itself used in the profiled process, at its end.
    pub internal_memory: u64,
    /// The most bytes it used at once (threads alive at the same time, a
    /// table while it was rehashed); 0 in files before heapledger recorded it.
    #[serde(default)]
    pub internal_memory_peak: u64,
    /// Peak of requested (live) bytes over the run: the exact maximum, not a
    /// timeline bucket's.
    #[serde(default)]
    pub peak_requested: u64,
    /// When `peak_requested` was reached, in ticks since the start of the run
    /// (the unit of `run.runtime`; see `globals.ticksPerSecond`).
    #[serde(default)]
    pub peak_time: u64,
    /// The process's peak of resident memory, bytes (the kernel's VmHWM at
    /// its end; the recorder's own memory included; a forked process
    /// starts from its parent's). 0 where it is not known.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub peak_rss: u64,
    /// The process's peak of virtual memory, bytes (VmPeak), as `peak_rss`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub peak_virtual: u64,
    /// Process id of the profiled process.
    pub pid: u32,
    /// Its parent's process id.
    pub ppid: u32,
    /// The process it was forked from, when it was forked from a profiled
    /// process and did not exec since (no key otherwise): its profile then
    /// holds what it did after the fork only, as if it had started there,
    /// and the blocks it inherited are counted apart (`inherited`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<u32>,
    /// In a forked process: the blocks it inherited from the process it
    /// forked from (no key otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inherited: Option<Inherited>,
    /// How it ended.
    pub exit: ExitInfo,
    /// The executable and libraries loaded, with build ids, so that addresses
    /// can be symbolized again later (elsewhere, with debug files).
    #[serde(default)]
    pub modules: Vec<ModuleInfo>,
    /// Inlining: for an address whose innermost frame (in `sites.instr`) was
    /// inlined, the frames it was inlined into, innermost first, excluding
    /// that innermost frame. Names are indexes into `sites.strings`.
    #[serde(default)]
    pub inlined: IndexMap<Addr, Vec<InlineFrame>>,
    /// Indexes into the top-level `leaks` of the leaks that belong to the C/C++
    /// runtime itself (loader, libc's atexit list and thread caches,
    /// libstdc++'s emergency pool...), not to the program. Sorted ascending.
    /// See [`crate::runtime`] for how they are recognised.
    #[serde(default)]
    pub runtime_leaks: Vec<usize>,
    /// Allocator calls the recorder forwarded without recording them (a hook
    /// re-entered from inside the recorder, e.g. by a signal handler).
    #[serde(default)]
    pub unrecorded_events: u64,
    /// Frees of blocks the recorder never saw allocated.
    #[serde(default)]
    pub unknown_frees: u64,
    /// Allocator functions the program did not call through heapledger: the
    /// executable defines them itself (an allocator linked into it), and
    /// the dynamic linker finds its definitions first. Their calls are
    /// missing from the profile. None when there were none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unhooked: Option<Unhooked>,
    /// The recorder degraded because memory ran out: what it stopped, when
    /// and why. None (no key) when it recorded to the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degraded: Option<Degraded>,
    /// The process was killed (SIGKILL, the OOM killer) before it could
    /// write its profile: this one is its last checkpoint, written while it
    /// ran. None (no key) for a profile written at the process's end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<CheckpointInfo>,
    /// A snapshot the program or `heapledger ctl` asked for while the
    /// process ran: its label (`checkpoint` says when). None (no key) for a
    /// profile of the process's end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
    /// The program reset the counters (`heapledger_reset_stats`, `heapledger
    /// ctl PID reset`): they hold what came after the last reset. None (no
    /// key) where it never did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset: Option<ResetInfo>,
    /// Time lost waiting (lock waits, condition variables, joins,
    /// semaphores): each thread's longest entries, longest first. Empty
    /// (no key) where nothing waited or waits were not recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub time_lost: Vec<TimeLost>,
    /// The lowest requested bytes alive in each bucket of
    /// `timeline.memoryTimeline` (whose values hold the highest): with both,
    /// a bucket shows how far memory moved in it. Empty where the profile
    /// has no timeline.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timeline_low_requested: Vec<u64>,
}

/// What a thread waited for (see [`HeapledgerExt::time_lost`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitKind {
    /// pthread_mutex_lock (std::mutex).
    Mutex,
    /// pthread_rwlock_rdlock.
    RwlockRead,
    /// pthread_rwlock_wrlock.
    RwlockWrite,
    /// pthread_cond_wait and timedwait (std::condition_variable).
    Condition,
    /// pthread_join (std::thread::join).
    Join,
    /// sem_wait.
    Semaphore,
    /// A kind the program named (`heapledger_time_lost`,
    /// `heapledger_wait_begin`): see [`TimeLost::label`].
    User,
    /// A kind this reader does not know.
    Other,
}

impl WaitKind {
    /// From the recorder's code (`heapledger_wire::Wait::kind`).
    pub fn from_code(c: u64) -> WaitKind {
        match c {
            0 => WaitKind::Mutex,
            1 => WaitKind::RwlockRead,
            2 => WaitKind::RwlockWrite,
            3 => WaitKind::Condition,
            4 => WaitKind::Join,
            5 => WaitKind::Semaphore,
            16..=255 => WaitKind::User,
            _ => WaitKind::Other,
        }
    }

    /// In words, for reports.
    pub fn name(self) -> &'static str {
        match self {
            WaitKind::Mutex => "mutex",
            WaitKind::RwlockRead => "rwlock read",
            WaitKind::RwlockWrite => "rwlock write",
            WaitKind::Condition => "condition",
            WaitKind::Join => "join",
            WaitKind::Semaphore => "semaphore",
            WaitKind::User => "user",
            WaitKind::Other => "other",
        }
    }
}

/// One entry of a thread's log of time lost (see
/// [`HeapledgerExt::time_lost`]): waits of one kind at one stack, with the
/// stack of the thread that held the lock, where known.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimeLost {
    /// The thread's number (None: the row of threads that ended first).
    pub thread: Option<u64>,
    /// What it waited for.
    pub kind: WaitKind,
    /// The name the program gave a user kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Waits.
    pub count: u64,
    /// Their total, in nanoseconds.
    pub total_ns: u64,
    /// The longest, in nanoseconds.
    pub max_ns: u64,
    /// The waiter's stack, innermost first.
    pub stack: Vec<Addr>,
    /// The holder's stack where known (the last thread that took the lock
    /// after waiting for it), innermost first; empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holder: Vec<Addr>,
}

impl TimeLost {
    /// Its kind in words: the program's name for a user kind.
    pub fn kind_name(&self) -> &str {
        self.label.as_deref().unwrap_or(self.kind.name())
    }
}

/// See [`HeapledgerExt::reset`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResetInfo {
    /// How many times the counters were reset.
    pub count: u64,
    /// When the last reset happened, in ticks since the process started.
    pub time: u64,
    /// Blocks allocated before it, still alive at the end.
    pub older_alive: u64,
    /// Their bytes.
    pub older_alive_bytes: u64,
    /// Blocks allocated before it and freed after it.
    pub older_freed: u64,
    /// Their bytes.
    pub older_freed_bytes: u64,
}

/// See [`HeapledgerExt::checkpoint`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointInfo {
    /// Its number: 1 for the first checkpoint of the process.
    pub seq: u64,
    /// When it was taken, in ticks since the process started recording.
    pub time: u64,
}

/// See [`HeapledgerExt::degraded`]. Where memory runs out, the recorder
/// first stops taking stacks (allocations are charged to the empty stack),
/// then stops recording (every call is passed on unrecorded); the program
/// runs on. Every figure of the profile stops where the step says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Degraded {
    /// Stacks stopped before recording did (no key: they stopped with it,
    /// or not at all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stacks_stopped: Option<DegradeStep>,
    /// Recording stopped (no key: it did not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recording_stopped: Option<DegradeStep>,
    /// Allocations charged to the empty stack because stacks had stopped.
    #[serde(default)]
    pub allocations_without_stack: u64,
    /// Allocator calls passed on unrecorded because recording had stopped.
    #[serde(default)]
    pub calls_not_recorded: u64,
    /// Bytes of its tables the recorder gave back to the program when it
    /// stopped.
    #[serde(default)]
    pub released_bytes: u64,
}

/// One step of [`Degraded`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DegradeStep {
    /// When, in ticks since the start of the run (see `globals.ticksPerSecond`).
    pub time: u64,
    /// Why: [`degrade_cause::RECORDER_MEMORY`] or
    /// [`degrade_cause::PROGRAM_MEMORY`].
    pub cause: String,
}

/// Why the recorder degraded ([`DegradeStep::cause`]).
pub mod degrade_cause {
    /// The recorder could not get memory for its own tables.
    pub const RECORDER_MEMORY: &str = "recorderMemory";
    /// An allocation of the program failed while the recorder held memory:
    /// it stopped and gave its tables back, and the call was made again.
    pub const PROGRAM_MEMORY: &str = "programMemory";
}

/// See [`HeapledgerExt::inherited`]. Freeing an inherited block is a call
/// of the process (it counts in the threads' `free` calls) but charged to
/// no stack, and moves none of its counters: its bytes alive, peak and
/// leaks are its own blocks'.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Inherited {
    /// Inherited blocks it freed (or reallocated).
    pub freed: u64,
    /// Their bytes.
    pub freed_bytes: u64,
    /// Inherited blocks still alive at its end.
    pub alive: u64,
    /// Their bytes.
    pub alive_bytes: u64,
}

/// See [`HeapledgerExt::unhooked`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unhooked {
    /// Their names (`malloc`, `free`...).
    pub functions: Vec<String>,
    /// The file that defines them.
    pub by: String,
}

impl HeapledgerExt {
    /// A current-version extension with everything else zero or empty.
    pub fn new(stack_mode: impl Into<String>, max_depth: u32) -> HeapledgerExt {
        HeapledgerExt {
            version: EXT_VERSION,
            stack_mode: stack_mode.into(),
            max_depth,
            truncated_stacks: 0,
            frees_unwound: false,
            sample_every: None,
            lifetimes_sampled_after: None,
            internal_memory: 0,
            internal_memory_peak: 0,
            peak_requested: 0,
            peak_rss: 0,
            peak_virtual: 0,
            peak_time: 0,
            pid: 0,
            ppid: 0,
            forked_from: None,
            inherited: None,
            exit: ExitInfo::default(),
            modules: Vec::new(),
            inlined: IndexMap::new(),
            runtime_leaks: Vec::new(),
            unrecorded_events: 0,
            unknown_frees: 0,
            unhooked: None,
            degraded: None,
            checkpoint: None,
            snapshot: None,
            reset: None,
            time_lost: Vec::new(),
            timeline_low_requested: Vec::new(),
        }
    }
}

/// How the process ended: an exit code, or the signal that killed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ExitInfo {
    /// Exit status when it exited (no key otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
    /// Signal number when a signal ended it (no key otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
}

/// One loaded module (executable or shared library).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModuleInfo {
    /// Path as the loader saw it.
    pub path: String,
    /// GNU build id, lowercase hex, when the file has one (no key otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_id: Option<String>,
    /// First address of its executable mapping.
    pub lower: Addr,
    /// End of its executable mapping (exclusive).
    pub upper: Addr,
    /// File offset that `lower` maps.
    pub file_offset: Addr,
}

/// One frame of an inline chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct InlineFrame {
    /// Function name (index into `sites.strings`).
    pub function: StringId,
    /// Source file (index into `sites.strings`).
    pub file: StringId,
    /// Source line, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
