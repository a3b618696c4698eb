//! The raw dump: what the recorder writes when a profiled process ends, and
//! what the `heapledger` CLI reads back to symbolize and write the profile.
//!
//! The recorder runs inside someone else's process, so this format is made to
//! be cheap to write there: a magic, then a flat sequence of records, each a
//! one-byte tag followed by LEB128 varints and length-prefixed byte strings.
//! No JSON, no symbol names, no allocation while encoding beyond one buffer.
//! A dump that does not end with [`Tag::End`] was cut short (the process died
//! while writing it) and is rejected as truncated.
//!
//! The encoder is `no_std` (it writes into any [`Sink`]); the decoder needs `std`.

#![cfg_attr(not(feature = "std"), no_std)]
#![deny(unsafe_code)]

#[cfg(feature = "std")]
mod decode;
#[cfg(feature = "std")]
pub use decode::*;
#[cfg(feature = "std")]
pub mod prefix;
#[cfg(feature = "std")]
mod tree;
#[cfg(feature = "std")]
pub use tree::{FrameTree, ROOT};
mod series;
pub use series::*;

/// First bytes of every dump file.
pub const MAGIC: &[u8; 8] = b"HLEDGR\0\x01";

/// Version of the record layout; bumped on any incompatible change.
pub const VERSION: u64 = 11;

/// Frames at or above this (less one: frames are return addresses) are
/// labels the program pushed, `LABEL_FRAMES + id` ([`Tag::Label`]).
pub const LABEL_FRAMES: u64 = 0xffff_ff00_0000_0000;

/// Environment variable naming the directory where processes leave their dumps.
pub const ENV_DIR: &str = "HEAPLEDGER_DIR";
/// Environment variable holding the recorder's options (`key=value,...`).
pub const ENV_OPTS: &str = "HEAPLEDGER_OPTS";

/// Name of the symbol under which the recorder exports a [`StackRegistry`]:
/// where its table of distinct stacks lies in the process, so that
/// `heapledger run` can read new stacks while the program runs (with
/// `process_vm_readv`) and symbolize them then, not after the program ended.
pub const REGISTRY_SYMBOL: &str = "heapledger_stack_registry";

/// First field of a [`StackRegistry`] (its layout with 2- or 4-byte
/// frame ids).
pub const REGISTRY_MAGIC: u64 = u64::from_le_bytes(*b"MTSTACK3");

/// The recorder's stack table, described for a reader in another process.
///
/// Stack `id` is entry `id % (1 << chunk_bits)` of the chunk whose address is
/// the 8-byte word `id >> chunk_bits` of the directory at `dir`. An entry is
/// `entry_size` bytes; at `len_offset` it holds the number of its own
/// frames (2 bytes), kept as ids of distinct return addresses (2 or 4
/// bytes each, as the recorder's flags in the entry say) at the address at
/// `frames_offset`. A stack's outer frames may be another's, stored before
/// it and not repeated. Ids below the 4-byte count at `count` are
/// complete: the recorder writes an entry, its frames and its chunk's
/// address before it raises the count, and never changes them after.
///
/// The distinct addresses (what `heapledger run` reads while the program
/// runs, to symbolize them then) are a second table: address `i` is word
/// `i % (1 << addr_chunk_bits)` of the chunk whose address is the 8-byte
/// word `i >> addr_chunk_bits` of the directory at `addr_dir`, for `i`
/// below the 4-byte count at `addr_count`, written in the same order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackRegistry {
    pub magic: u64,
    pub dir: u64,
    pub count: u64,
    pub chunk_bits: u32,
    pub max_chunks: u32,
    pub entry_size: u32,
    pub frames_offset: u32,
    pub len_offset: u32,
    pub addr_chunk_bits: u32,
    pub addr_dir: u64,
    pub addr_count: u64,
    pub addr_max_chunks: u32,
}

impl StackRegistry {
    /// Size of the exported structure: the fields above in order, native
    /// (little-endian) layout, padded to 8 bytes.
    pub const SIZE: usize = 72;

    /// Reads a registry from its bytes; `None` if it is not one.
    pub fn parse(b: &[u8; Self::SIZE]) -> Option<StackRegistry> {
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap_or([0; 4]));
        let r = StackRegistry {
            magic: u64_at(0),
            dir: u64_at(8),
            count: u64_at(16),
            chunk_bits: u32_at(24),
            max_chunks: u32_at(28),
            entry_size: u32_at(32),
            frames_offset: u32_at(36),
            len_offset: u32_at(40),
            addr_chunk_bits: u32_at(44),
            addr_dir: u64_at(48),
            addr_count: u64_at(56),
            addr_max_chunks: u32_at(64),
        };
        let sane = r.magic == REGISTRY_MAGIC
            && r.chunk_bits < 32
            && r.addr_chunk_bits < 32
            && r.frames_offset
                .checked_add(4)
                .is_some_and(|e| e <= r.entry_size)
            && r.len_offset
                .checked_add(2)
                .is_some_and(|e| e <= r.entry_size);
        sane.then_some(r)
    }
}

/// Allocation functions, in the order of MALT's per-thread `stats`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum AllocFn {
    Malloc = 0,
    PosixMemalign = 1,
    AlignedAlloc = 2,
    Memalign = 3,
    Valloc = 4,
    Pvalloc = 5,
    Free = 6,
    Calloc = 7,
    Realloc = 8,
}

impl AllocFn {
    pub const COUNT: usize = 9;
    pub const ALL: [AllocFn; 9] = [
        AllocFn::Malloc,
        AllocFn::PosixMemalign,
        AllocFn::AlignedAlloc,
        AllocFn::Memalign,
        AllocFn::Valloc,
        AllocFn::Pvalloc,
        AllocFn::Free,
        AllocFn::Calloc,
        AllocFn::Realloc,
    ];

    /// The key MALT uses for this function.
    pub fn name(self) -> &'static str {
        match self {
            AllocFn::Malloc => "malloc",
            AllocFn::PosixMemalign => "posix_memalign",
            AllocFn::AlignedAlloc => "aligned_alloc",
            AllocFn::Memalign => "memalign",
            AllocFn::Valloc => "valloc",
            AllocFn::Pvalloc => "pvalloc",
            AllocFn::Free => "free",
            AllocFn::Calloc => "calloc",
            AllocFn::Realloc => "realloc",
        }
    }
}

/// How stacks were captured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum StackMode {
    /// No stacks: every event is charged to one empty stack.
    None = 0,
    /// Frame-pointer walk.
    Fp = 1,
    /// DWARF CFI unwinding.
    Dwarf = 2,
    /// The stack the program's own instrumentation maintains
    /// (`-finstrument-functions`: `__cyg_profile_func_enter`/`exit`).
    EnterExit = 3,
}

impl StackMode {
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            0 => Some(StackMode::None),
            1 => Some(StackMode::Fp),
            2 => Some(StackMode::Dwarf),
            3 => Some(StackMode::EnterExit),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            StackMode::None => "none",
            StackMode::Fp => "fp",
            StackMode::Dwarf => "dwarf",
            StackMode::EnterExit => "enter-exit",
        }
    }
}

/// Record tags. Each record's payload is listed beside its tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Tag {
    /// version, pid, ppid, stack mode (u8 as varint), max depth, sample_every,
    /// lifetime head (blocks of a stack timed one by one; u64::MAX: all),
    /// ticks per second, start ticks, end ticks, start unix ns, exe (bytes), cmdline (bytes, NUL separated)
    Header = 1,
    /// start, end, file offset, path (bytes), build id (bytes): one executable mapping
    Module = 2,
    /// the text of /proc/self/maps at the end
    Maps = 3,
    /// id, frame count n, shared count s, then the n - s innermost return
    /// addresses, leaf first, each as the zigzag difference from the one
    /// before (the first from the previous record's leaf, or 0). The s
    /// outermost frames are the previous `Stack` record's s outermost: the
    /// stacks of one program share most of their outer frames, and a dump
    /// of Python's start-up is about 10 times smaller so. See
    /// [`Encoder::stack`].
    Stack = 4,
    /// id, then [`STACK_COUNTERS`] varints (signed ones zigzag-encoded)
    StackStats = 5,
    /// thread number, mem ops, then for each [`AllocFn`]: count, sum, ticks
    Thread = 6,
    /// size, count
    Size = 7,
    /// old size, new size, count
    ReallocJump = 8,
    /// stack id, block count, bytes
    Leak = 9,
    /// see [`Globals`]
    Globals = 10,
    /// allocator functions the program's symbol lookup finds before
    /// heapledger's (an allocator linked into the executable), so that its
    /// calls of them are not seen: their names (bytes, NUL separated), then
    /// the path of the object that defines them (bytes; empty: the
    /// executable)
    Unhooked = 11,
    /// threads that ended early in a program that started many, merged
    /// into one row: how many, then mem ops and the per-[`AllocFn`] triples
    /// as in [`Tag::Thread`]
    EndedThreads = 12,
    /// the recorder degraded because it could not get memory: see
    /// [`Degraded`], whose fields follow in its order
    Degraded = 13,
    /// the process was forked from another and counts from the fork:
    /// the parent's pid, the blocks inherited from it still alive at the
    /// end (count, bytes), and those the process freed (count, bytes)
    Forked = 14,
    /// how the process ended, as the recorder saw it: 1 and the status
    /// passed to `exit`/`_exit` (or returned from `main`), or 2 and the
    /// signal that killed it
    Exit = 15,
    /// the path of the object that defines the `malloc` the recorder
    /// forwards to (bytes)
    Allocator = 16,
    /// the process's peaks of resident and of virtual memory, in bytes
    /// (the kernel's VmHWM and VmPeak at the end, the recorder's own
    /// memory included)
    Memory = 17,
    /// the dump is a checkpoint, written while the process ran (the file
    /// `P.ckpt` beside the final dump `P`, replaced whole each time; see
    /// [`Checkpoint`]): seq (1, 2, ...), then the clock ticks when it was
    /// taken (the header's clock). Right after the header; a final dump
    /// has none.
    Checkpoint = 18,
    /// memory over time: the buckets' length in ns, their number, then
    /// each bucket's [`TimelinePoint::FIELDS`] values in that order
    Timeline = 19,
    /// the scatter's counts: which (0: allocations by time key and size
    /// cell; 1: freed blocks by size cell and lifetime cell), how many
    /// cells, then each cell's two keys and count
    Scatter = 20,
    /// a thread's deepest stack: its number (u64::MAX: the row of ended
    /// threads merged), the bytes of its stack in use (above the hook's
    /// frame at an allocation, or at a function's entry with enter/exit
    /// stacks), the id of that stack, then its frames (a count, then
    /// return addresses, leaf first: it may have no counters)
    StackUse = 21,
    /// a block alive at the end (final dumps only, after the `Leak`
    /// records): its stack id, address and size
    LeakBlock = 22,
    /// blocks alive at the end not written as `LeakBlock` records (past
    /// the recorder's limit): how many
    LeakBlocksOmitted = 23,
    /// the checkpoint is a snapshot the program or `heapledger ctl` asked
    /// for (the file `P.snap.SEQ`, kept; right after the
    /// [`Tag::Checkpoint`] record): its label (bytes)
    Snapshot = 24,
    /// the program reset the counters (`heapledger_reset_stats`; see
    /// [`Reset`]): how many times, the clock ticks of the last, then the
    /// blocks from before it still alive (count, bytes) and those freed
    /// since (count, bytes)
    Reset = 25,
    /// an entry of a thread's log of time lost waiting (see [`Wait`]):
    /// thread number (u64::MAX: the row of ended threads merged), kind,
    /// count, total and longest ns, then the waiter's frames and the
    /// holder's (each a count, then return addresses, leaf first)
    Wait = 26,
    /// a kind of wait the program named (`heapledger_time_lost`,
    /// `heapledger_wait_begin`): its code in [`Tag::Wait`] records, then
    /// its name (bytes)
    WaitKind = 27,
    /// a frame the program labelled (`heapledger_push_label`): its id (a
    /// stack's frame `LABEL_FRAMES + id + 1` is this label), then its text
    /// (bytes)
    Label = 28,
    /// what one thread allocated at one stack (for the views of one
    /// thread): the thread's number (as in [`Tag::Thread`]), the stack id,
    /// the allocations and their bytes. Written where more than one thread
    /// allocated; a final dump only.
    ThreadStack = 29,
    /// threads that ended without their [`Tag::ThreadStack`] records kept
    /// (past the recorder's budget for them): how many
    ThreadStacksUnkept = 30,
    /// threads' tables handed over to the process's while they ran (see
    /// the recorder's `stackmap::ENTRIES`): how many, and the entries
    /// they held
    HandOvers = 31,
    /// end of dump
    End = 0xff,
}

impl Tag {
    pub fn from_u8(v: u8) -> Option<Tag> {
        Some(match v {
            1 => Tag::Header,
            2 => Tag::Module,
            3 => Tag::Maps,
            4 => Tag::Stack,
            5 => Tag::StackStats,
            6 => Tag::Thread,
            7 => Tag::Size,
            8 => Tag::ReallocJump,
            9 => Tag::Leak,
            10 => Tag::Globals,
            11 => Tag::Unhooked,
            12 => Tag::EndedThreads,
            13 => Tag::Degraded,
            14 => Tag::Forked,
            15 => Tag::Exit,
            16 => Tag::Allocator,
            17 => Tag::Memory,
            18 => Tag::Checkpoint,
            19 => Tag::Timeline,
            20 => Tag::Scatter,
            21 => Tag::StackUse,
            22 => Tag::LeakBlock,
            23 => Tag::LeakBlocksOmitted,
            24 => Tag::Snapshot,
            25 => Tag::Reset,
            26 => Tag::Wait,
            27 => Tag::WaitKind,
            28 => Tag::Label,
            29 => Tag::ThreadStack,
            30 => Tag::ThreadStacksUnkept,
            31 => Tag::HandOvers,
            0xff => Tag::End,
            _ => return None,
        })
    }
}

/// The additive part of a stack's counters: each field merges by sum (or
/// min/max), so the recorder's per-thread counters, a dead thread's, and
/// stacks merged by the CLI all combine with [`Totals::merge`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub alloc: MinMaxSum,
    pub free: MinMaxSum,
    pub lifetime: MinMaxSum,
    pub mmap: MinMaxSum,
    pub munmap: MinMaxSum,
    pub zeros: u64,
    pub realloc_count: u64,
    pub realloc_delta: i64,
    /// Temporary blocks (heaptrack's definition): freed, by the thread that
    /// allocated them, before that thread allocated anything else.
    pub temporary: u64,
}

impl Totals {
    pub fn merge(&mut self, o: &Totals) {
        self.alloc.merge(&o.alloc);
        self.free.merge(&o.free);
        self.lifetime.merge(&o.lifetime);
        self.mmap.merge(&o.mmap);
        self.munmap.merge(&o.munmap);
        self.zeros += o.zeros;
        self.realloc_count += o.realloc_count;
        self.realloc_delta += o.realloc_delta;
        self.temporary += o.temporary;
    }

    /// Whether nothing was allocated, freed or mapped.
    pub fn is_empty(&self) -> bool {
        self.alloc.count == 0
            && self.free.count == 0
            && self.mmap.count == 0
            && self.munmap.count == 0
    }
}

/// Per-stack counters, in the order they are written after a [`Tag::StackStats`] id.
/// `*_min` of empty series are 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackCounters {
    pub totals: Totals,
    /// Bytes of this stack alive at the end.
    pub alive: i64,
    /// Largest number of bytes of this stack alive at once.
    pub max_alive: u64,
    /// Bytes of this stack alive when the whole process reached its peak.
    pub at_peak: i64,
}

/// A count with the minimum, maximum and sum of its values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MinMaxSum {
    pub count: u64,
    pub min: u64,
    pub max: u64,
    pub sum: u64,
}

impl MinMaxSum {
    #[inline]
    pub fn add(&mut self, v: u64) {
        if self.count == 0 || v < self.min {
            self.min = v;
        }
        if v > self.max {
            self.max = v;
        }
        self.count += 1;
        self.sum = self.sum.wrapping_add(v);
    }

    /// Adds a value that stands for `count` values summing to `sum` (a
    /// sample's estimate); min and max stay those of values actually seen.
    #[inline]
    pub fn add_weighted(&mut self, v: u64, count: u64, sum: u64) {
        if self.count == 0 || v < self.min {
            self.min = v;
        }
        if v > self.max {
            self.max = v;
        }
        self.count += count;
        self.sum = self.sum.wrapping_add(sum);
    }

    pub fn merge(&mut self, o: &MinMaxSum) {
        if o.count == 0 {
            return;
        }
        if self.count == 0 || o.min < self.min {
            self.min = o.min;
        }
        if o.max > self.max {
            self.max = o.max;
        }
        self.count += o.count;
        self.sum = self.sum.wrapping_add(o.sum);
    }
}

/// Process-wide numbers, written after [`Tag::Globals`] in this order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Globals {
    /// Peak of requested bytes alive at once.
    pub peak_requested: u64,
    /// Ticks since start when the peak was reached.
    pub peak_ticks: u64,
    /// Requested bytes alive at the end.
    pub alive_requested: u64,
    /// Bytes of memory the recorder itself mapped.
    pub internal_memory: u64,
    /// Largest number of threads alive at once.
    pub max_threads: u64,
    /// Stacks cut at the depth limit.
    pub truncated_stacks: u64,
    /// Events that arrived while the recorder could not record them (re-entrancy,
    /// signal handlers interrupting the recorder): forwarded, not counted.
    pub unrecorded_events: u64,
    /// Frees of pointers the recorder never saw allocated.
    pub unknown_frees: u64,
    /// Distinct sizes or realloc jumps not kept because their tables were full.
    pub dropped_histogram_entries: u64,
    /// The most bytes the recorder had mapped for itself at once.
    pub internal_peak: u64,
}

/// What [`Tag::Forked`] says: the process was forked from `parent` and
/// counts from the fork on (blocks it inherited are counted apart).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Forked {
    pub parent: u32,
    /// Blocks inherited from the parent and still alive at the end.
    pub inherited_alive: u64,
    pub inherited_alive_bytes: u64,
    /// Frees (and reallocs) of blocks inherited from the parent.
    pub inherited_freed: u64,
    pub inherited_freed_bytes: u64,
}

/// What [`Tag::Reset`] says: the counters were reset `count` times, the
/// last at `ticks` (the header's clock): they hold what came after it, and
/// the blocks allocated before it are counted apart, as a forked child's
/// inherited blocks are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reset {
    pub count: u64,
    pub ticks: u64,
    pub older_alive: u64,
    pub older_alive_bytes: u64,
    pub older_freed: u64,
    pub older_freed_bytes: u64,
}

/// What [`Tag::Checkpoint`] says: the dump was written while the process
/// ran, the `seq`-th time (from 1), at `ticks` (the header's clock; its
/// end ticks are the same). Counters of different threads may stand a few
/// events apart; each thread's are those between two of its events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Checkpoint {
    pub seq: u64,
    pub ticks: u64,
}

/// One bucket of the timeline ([`Tag::Timeline`]): the lowest and highest
/// requested bytes alive in it, the stack whose allocation reached the
/// highest (`NO_STACK`: none), and the readings at its end: resident and
/// virtual memory, the recorder's own, blocks alive, the allocations and
/// frees in it (counts, bytes), the machine's free memory, swap in use
/// and page cache. A bucket the run never reached is not `touched`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimelinePoint {
    pub touched: bool,
    pub low: u64,
    pub high: u64,
    pub high_stack: u64,
    pub rss: u64,
    pub vsz: u64,
    pub internal: u64,
    pub blocks: u64,
    pub allocs: u64,
    pub alloc_bytes: u64,
    pub frees: u64,
    pub free_bytes: u64,
    pub sys_free: u64,
    pub sys_swap: u64,
    pub sys_cached: u64,
}

impl TimelinePoint {
    pub const NO_STACK: u64 = u32::MAX as u64;
    /// A bucket the run never reached.
    pub const EMPTY: TimelinePoint = TimelinePoint {
        touched: false,
        low: 0,
        high: 0,
        high_stack: Self::NO_STACK,
        rss: 0,
        vsz: 0,
        internal: 0,
        blocks: 0,
        allocs: 0,
        alloc_bytes: 0,
        frees: 0,
        free_bytes: 0,
        sys_free: 0,
        sys_swap: 0,
        sys_cached: 0,
    };
    /// The values of a bucket, in the dump's order.
    pub const FIELDS: usize = 15;

    pub fn to_values(&self) -> [u64; Self::FIELDS] {
        [
            self.touched as u64,
            self.low,
            self.high,
            self.high_stack,
            self.rss,
            self.vsz,
            self.internal,
            self.blocks,
            self.allocs,
            self.alloc_bytes,
            self.frees,
            self.free_bytes,
            self.sys_free,
            self.sys_swap,
            self.sys_cached,
        ]
    }

    pub fn from_values(v: &[u64; Self::FIELDS]) -> TimelinePoint {
        TimelinePoint {
            touched: v[0] != 0,
            low: v[1],
            high: v[2],
            high_stack: v[3],
            rss: v[4],
            vsz: v[5],
            internal: v[6],
            blocks: v[7],
            allocs: v[8],
            alloc_bytes: v[9],
            frees: v[10],
            free_bytes: v[11],
            sys_free: v[12],
            sys_swap: v[13],
            sys_cached: v[14],
        }
    }
}

/// How a process ended ([`Tag::Exit`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// `exit`, `_exit` or a return from `main`, with the status.
    Exited(i32),
    /// Killed by this signal.
    Signal(i32),
}

impl Ending {
    /// The record's (kind, value).
    pub fn to_pair(self) -> (u64, u64) {
        match self {
            Ending::Exited(c) => (1, c as u32 as u64),
            Ending::Signal(s) => (2, s as u32 as u64),
        }
    }

    pub fn from_pair(kind: u64, value: u64) -> Option<Ending> {
        match kind {
            1 => Some(Ending::Exited(value as u32 as i32)),
            2 => Some(Ending::Signal(value as u32 as i32)),
            _ => None,
        }
    }
}

/// How the recorder degraded when memory ran out, written after
/// [`Tag::Degraded`] in this order (the record is absent where it did not).
/// First it stops taking stacks (allocations are charged to the empty
/// stack), then it stops recording (every call is forwarded unrecorded).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Degraded {
    /// Why stacks stopped before recording did ([`DegradeCause`] as a
    /// number; 0: they did not stop on their own, only with recording).
    pub stacks_cause: u64,
    /// Ticks since start when stacks stopped.
    pub stacks_ticks: u64,
    /// Why recording stopped ([`DegradeCause`] as a number; 0: it did not).
    pub stopped_cause: u64,
    /// Ticks since start when recording stopped.
    pub stopped_ticks: u64,
    /// Allocations charged to the empty stack after stacks stopped (before
    /// recording stopped).
    pub allocs_without_stack: u64,
    /// Calls of the allocator forwarded unrecorded after recording stopped.
    pub calls_not_recorded: u64,
    /// Bytes of its tables the recorder gave back when it stopped.
    pub released_bytes: u64,
}

/// Why the recorder degraded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum DegradeCause {
    /// The recorder could not get memory for its own tables.
    RecorderMemory = 1,
    /// The program's allocation failed while the recorder held memory: the
    /// recorder stopped, gave its tables back, and the call was tried again.
    ProgramMemory = 2,
}

impl DegradeCause {
    pub fn from_u64(v: u64) -> Option<DegradeCause> {
        match v {
            1 => Some(DegradeCause::RecorderMemory),
            2 => Some(DegradeCause::ProgramMemory),
            _ => None,
        }
    }
}

/// Where encoded bytes go.
pub trait Sink {
    fn put(&mut self, bytes: &[u8]);

    /// Puts the first `n` bytes of `bytes` (n <= 16): a varint. A sink with
    /// room may copy all 16 and keep `n`, a fixed-size copy rather than a
    /// call to `memcpy` per number.
    #[inline]
    fn put_small(&mut self, bytes: &[u8; 16], n: usize) {
        self.put(&bytes[..n]);
    }
}

/// A record of varints built in place: a tag and at most `MAX` numbers.
struct Record {
    b: [u8; 1 + Record::MAX * 10],
    n: usize,
}

impl Record {
    const MAX: usize = 32;

    #[inline(always)]
    fn new(t: Tag) -> Record {
        let mut b = [0; 1 + Record::MAX * 10];
        b[0] = t as u8;
        Record { b, n: 1 }
    }

    /// Adds a number (the caller adds at most `MAX`).
    #[inline(always)]
    fn u(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.b[self.n] = (v as u8) | 0x80;
            self.n += 1;
            v >>= 7;
        }
        self.b[self.n] = v as u8;
        self.n += 1;
    }

    #[inline(always)]
    fn i(&mut self, v: i64) {
        self.u(((v << 1) ^ (v >> 63)) as u64);
    }

    fn bytes(&self) -> &[u8] {
        &self.b[..self.n]
    }
}

/// Writes records into a [`Sink`].
pub struct Encoder<S: Sink> {
    pub sink: S,
}

impl<S: Sink> Encoder<S> {
    pub fn new(mut sink: S) -> Self {
        sink.put(MAGIC);
        Encoder { sink }
    }

    #[inline]
    pub fn tag(&mut self, t: Tag) {
        self.sink.put(&[t as u8]);
    }

    #[inline]
    pub fn u(&mut self, mut v: u64) {
        let mut buf = [0u8; 16];
        let mut n = 0;
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                buf[n] = b;
                n += 1;
                break;
            }
            buf[n] = b | 0x80;
            n += 1;
        }
        self.sink.put_small(&buf, n);
    }

    #[inline]
    pub fn i(&mut self, v: i64) {
        self.u(((v << 1) ^ (v >> 63)) as u64);
    }

    pub fn bytes(&mut self, b: &[u8]) {
        self.u(b.len() as u64);
        self.sink.put(b);
    }

    pub fn mms(&mut self, m: &MinMaxSum) {
        self.u(m.count);
        self.u(m.min);
        self.u(m.max);
        self.u(m.sum);
    }

    /// A `Stack` record for `frames` (leaf first), written against `prev`,
    /// the frames of the previous `Stack` record (empty for the first).
    pub fn stack(&mut self, id: u64, frames: &[u64], prev: &[u64]) {
        let shared = common_suffix(frames, prev);
        let mut r = Record::new(Tag::Stack);
        r.u(id);
        r.u(frames.len() as u64);
        r.u(shared as u64);
        let mut last = prev.first().copied().unwrap_or(0);
        // Put a record's worth at a time (see `stack_counters`).
        for chunk in frames[..frames.len() - shared].chunks(Record::MAX - 3) {
            for &f in chunk {
                r.i(f.wrapping_sub(last) as i64);
                last = f;
            }
            self.sink.put(r.bytes());
            r.n = 0;
        }
        if r.n > 0 {
            self.sink.put(r.bytes());
        }
    }

    /// A [`Tag::ThreadStack`] record, put at once (a dump writes one per
    /// thread and stack: two million for four threads over half a million
    /// stacks).
    pub fn thread_stack(&mut self, thread: u64, id: u64, count: u64, bytes: u64) {
        let mut r = Record::new(Tag::ThreadStack);
        for v in [thread, id, count, bytes] {
            r.u(v);
        }
        self.sink.put(r.bytes());
    }

    pub fn stack_counters(&mut self, id: u64, c: &StackCounters) {
        // One record of 29 numbers, built here and put at once: a
        // checkpoint writes one per stack while the program's threads
        // wait, and a sink's bookkeeping per number was most of it.
        let mut r = Record::new(Tag::StackStats);
        r.u(id);
        let t = &c.totals;
        for m in [&t.alloc, &t.free, &t.lifetime, &t.mmap, &t.munmap] {
            for v in [m.count, m.min, m.max, m.sum] {
                r.u(v);
            }
        }
        r.u(t.zeros);
        r.u(t.realloc_count);
        r.i(t.realloc_delta);
        r.u(t.temporary);
        r.i(c.alive);
        r.u(c.max_alive);
        r.i(c.at_peak);
        self.sink.put(r.bytes());
    }

    /// A [`Tag::Wait`] record: thread, kind, count, total and longest ns
    /// (`head`), the waiter's frames and the holder's.
    pub fn wait(&mut self, head: [u64; 5], stack: &[u64], holder: &[u64]) {
        self.tag(Tag::Wait);
        for v in head {
            self.u(v);
        }
        self.frames(stack);
        self.frames(holder);
    }

    /// A [`Tag::StackUse`] record.
    pub fn stack_use(&mut self, thread: u64, bytes: u64, stack: u64, frames: &[u64]) {
        self.tag(Tag::StackUse);
        self.u(thread);
        self.u(bytes);
        self.u(stack);
        self.frames(frames);
    }

    /// A count, then `frames`.
    fn frames(&mut self, frames: &[u64]) {
        self.u(frames.len() as u64);
        for &f in frames {
            self.u(f);
        }
    }

    pub fn reset(&mut self, r: &Reset) {
        self.tag(Tag::Reset);
        for v in [
            r.count,
            r.ticks,
            r.older_alive,
            r.older_alive_bytes,
            r.older_freed,
            r.older_freed_bytes,
        ] {
            self.u(v);
        }
    }

    pub fn forked(&mut self, f: &Forked) {
        self.tag(Tag::Forked);
        for v in [
            f.parent as u64,
            f.inherited_alive,
            f.inherited_alive_bytes,
            f.inherited_freed,
            f.inherited_freed_bytes,
        ] {
            self.u(v);
        }
    }

    pub fn checkpoint(&mut self, c: &Checkpoint) {
        self.tag(Tag::Checkpoint);
        self.u(c.seq);
        self.u(c.ticks);
    }

    pub fn timeline(&mut self, step_ns: u64, points: &[TimelinePoint]) {
        self.tag(Tag::Timeline);
        self.u(step_ns);
        self.u(points.len() as u64);
        for p in points {
            for v in p.to_values() {
                self.u(v);
            }
        }
    }

    /// `n` cells, which `cells` yields.
    pub fn scatter(
        &mut self,
        which: u64,
        n: usize,
        cells: impl Iterator<Item = ((u64, u64), u64)>,
    ) {
        self.tag(Tag::Scatter);
        self.u(which);
        self.u(n as u64);
        for ((a, b), c) in cells {
            self.u(a);
            self.u(b);
            self.u(c);
        }
    }

    pub fn ending(&mut self, how: Ending) {
        let (kind, value) = how.to_pair();
        self.tag(Tag::Exit);
        self.u(kind);
        self.u(value);
    }

    pub fn degraded(&mut self, g: &Degraded) {
        self.tag(Tag::Degraded);
        for v in [
            g.stacks_cause,
            g.stacks_ticks,
            g.stopped_cause,
            g.stopped_ticks,
            g.allocs_without_stack,
            g.calls_not_recorded,
            g.released_bytes,
        ] {
            self.u(v);
        }
    }

    pub fn globals(&mut self, g: &Globals) {
        self.tag(Tag::Globals);
        for v in [
            g.peak_requested,
            g.peak_ticks,
            g.alive_requested,
            g.internal_memory,
            g.max_threads,
            g.truncated_stacks,
            g.unrecorded_events,
            g.unknown_frees,
            g.dropped_histogram_entries,
            g.internal_peak,
        ] {
            self.u(v);
        }
    }
}

/// How many last elements `a` and `b` have in common (the outer frames two
/// stacks share), compared eight at a time: consecutive stacks of a deep
/// program share a hundred frames.
fn common_suffix(a: &[u64], b: &[u64]) -> usize {
    let n = a.len().min(b.len());
    let (a, b) = (&a[a.len() - n..], &b[b.len() - n..]);
    let mut shared = 0;
    for (x, y) in a.rchunks_exact(8).zip(b.rchunks_exact(8)) {
        if x != y {
            break;
        }
        shared += 8;
    }
    shared
        + a[..n - shared]
            .iter()
            .rev()
            .zip(b[..n - shared].iter().rev())
            .take_while(|(x, y)| x == y)
            .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_suffix_counts_the_shared_outer_frames() {
        let naive = |a: &[u64], b: &[u64]| {
            a.iter()
                .rev()
                .zip(b.iter().rev())
                .take_while(|(x, y)| x == y)
                .count()
        };
        let base: std::vec::Vec<u64> = (0..40).collect();
        for la in 0..=20 {
            for lb in 0..=20 {
                for cut in 0..=20 {
                    // a and b: the last `cut` of base, after their own heads.
                    let mut a: std::vec::Vec<u64> = (100..100 + la as u64).collect();
                    let mut b: std::vec::Vec<u64> = (200..200 + lb as u64).collect();
                    a.extend_from_slice(&base[40 - cut..]);
                    b.extend_from_slice(&base[40 - cut..]);
                    assert_eq!(common_suffix(&a, &b), naive(&a, &b), "{la} {lb} {cut}");
                    assert_eq!(common_suffix(&a, &b), cut);
                }
            }
        }
        assert_eq!(common_suffix(&[], &[1]), 0);
        assert_eq!(common_suffix(&[1, 2, 3], &[2, 3]), 2);
    }

    fn bytes(magic: u64, entry_size: u32, frames_offset: u32) -> [u8; StackRegistry::SIZE] {
        let mut b = [0u8; StackRegistry::SIZE];
        b[0..8].copy_from_slice(&magic.to_le_bytes());
        b[8..16].copy_from_slice(&0x1000u64.to_le_bytes());
        b[16..24].copy_from_slice(&0x2000u64.to_le_bytes());
        b[24..28].copy_from_slice(&12u32.to_le_bytes());
        b[28..32].copy_from_slice(&4096u32.to_le_bytes());
        b[32..36].copy_from_slice(&entry_size.to_le_bytes());
        b[36..40].copy_from_slice(&frames_offset.to_le_bytes());
        b[40..44].copy_from_slice(&16u32.to_le_bytes());
        b
    }

    #[test]
    fn a_registry_parses_and_anything_else_does_not() {
        let r = StackRegistry::parse(&bytes(REGISTRY_MAGIC, 40, 8)).unwrap();
        assert_eq!((r.dir, r.count, r.chunk_bits), (0x1000, 0x2000, 12));
        assert_eq!((r.max_chunks, r.entry_size), (4096, 40));
        assert_eq!((r.frames_offset, r.len_offset), (8, 16));
        assert_eq!(StackRegistry::parse(&bytes(0, 40, 8)), None);
        // Fields that would lie outside an entry.
        assert_eq!(StackRegistry::parse(&bytes(REGISTRY_MAGIC, 40, 37)), None);
        assert_eq!(StackRegistry::parse(&bytes(REGISTRY_MAGIC, 16, 8)), None);
    }
}
