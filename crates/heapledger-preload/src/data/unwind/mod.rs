//! Stack capture with reuse of the unchanged outer part of the previous stack.
//!
//! Each thread keeps the last stack it captured as a *record*, root first,
//! with for every frame the register state (return address, sp, bp) from
//! which that frame was unwound and every stack word the unwinder read to
//! reach its caller. A new capture unwinds from the leaf (framehop for DWARF
//! CFI, or the frame-pointer chain) until a frame's state equals a state in
//! the record. From there on, unwinding is a function of that state and of
//! the stack words it reads; so if every word read for the rest of the
//! record still holds the value it held, the rest of the stack is the same
//! and is reused. Otherwise unwinding simply goes on. A reused stack is
//! therefore never stale: the check covers every word the unwinder read that
//! can change the stack (a word that only becomes a caller's bp is left out
//! where that bp cannot change the unwinding; see `RA_READ_SHIFT`).
//! Recent stacks are also kept whole (`Snapshot`), and a capture that starts
//! from the same state, with the same words, is one of them.
//!
//! All reads are bounded to the thread's stack (or to a copy of a stack that
//! is not, see `FOREIGN_FIRST`); a frame whose state cannot be read ends the
//! walk. Signal frames (glibc's `__restore_rt`) are crossed by
//! reading the saved registers from the kernel's `ucontext`.
//!
//! - `mod.rs`: the unwinder's state, and a capture that a snapshot holds;
//! - `walk.rs`: a capture that walks the frames (on the thread's stack, or
//!   over a copy of a foreign one);
//! - `step.rs`: one frame's step, and the checks that a part of the
//!   record still holds;
//! - `rules.rs`: the thread's cache of unwind rules by return address,
//!   learnt from framehop's, so that most steps do not go through framehop.

mod rules;
mod step;
mod walk;

use rules::Rule;
use step::{first_state, same_state, words_unchanged};

use crate::base::sync;
use crate::data::modules::{self, Fh};
use crate::data::stacks::{self, StackId, HASH_SEED};
use alloc::vec;
use alloc::vec::Vec;
use core::sync::atomic::Ordering;
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64};
use framehop::{FrameAddress, MustNotAllocateDuringUnwind, Unwinder};

/// Set on a frame that holds an interrupted instruction pointer plus one
/// (the frame after a signal frame), rather than a return address.
const IP_FRAME: u8 = 1;

/// Per-frame facts about the step from a frame to its caller:
/// the step's results (return address, sp, the words it reads) depend on
/// the incoming bp (an rbp-based CFA, or a frame-pointer walk);
const BP_DEP: u8 = 1;
/// the caller's bp comes from the stack (or the CFA), not from the incoming bp.
const BP_RESTORED: u8 = 2;
/// A frame's facts also say, from this bit up, 1 + which of its step's reads
/// gave the return address (0: not known). framehop's steps read the return
/// address and otherwise only words that become the caller's bp (its rbp
/// slot, or other saved registers it does not keep): where the caller's bp
/// cannot change the unwinding (`RecFrame::bp_matters`), those words cannot change
/// the stack, and only the return address's read is kept and checked. In
/// code built without frame pointers that halves the words a reused stack
/// is checked against.
const RA_READ_SHIFT: u8 = 2;

/// Where a capture may read stack words: `[lo, hi)`, at `address + shift`
/// (0 on the thread's own stack; for a copy of a foreign stack, the copy's
/// offset from the original), and, unshifted, the thread's own stack
/// `[own_lo, own_hi)` (empty on the thread's own stack, where `[lo, hi)`
/// already lies inside it).
#[derive(Clone, Copy)]
struct Mem {
    lo: u64,
    hi: u64,
    shift: u64,
    own_lo: u64,
    own_hi: u64,
}

impl Mem {
    /// The word at `a`, if it may be read.
    #[inline(always)]
    fn get(&self, a: u64) -> Option<u64> {
        if !a.is_multiple_of(8) {
            return None;
        }
        if a >= self.lo && a + 8 <= self.hi {
            // SAFETY: inside the thread's stack above the hook's frame, or
            // inside the copy of a foreign stack (`shift`).
            Some(unsafe { *(a.wrapping_add(self.shift) as *const u64) })
        } else if a >= self.own_lo && a + 8 <= self.own_hi {
            // SAFETY: inside this thread's own stack.
            Some(unsafe { *(a as *const u64) })
        } else {
            None
        }
    }
}

/// A stack the hook runs on that is not the thread's own (a coroutine's,
/// made with `makecontext` or a fiber library, or an alternate signal
/// stack) is copied, from the hook's frame up, with `process_vm_readv` on
/// the process itself, which stops at the first unmapped page instead of
/// faulting: the recorder cannot know the bounds of such a stack, nor keep
/// them, since it may be freed and its memory reused at any time. First
/// this much (a copy's cost grows with its pages: 16 KiB cost about 4 us a
/// capture, 2 KiB about half); where the walk leaves the copy, four times
/// more, up to `FOREIGN_MAX`.
const FOREIGN_FIRST: usize = 2 << 10;
const FOREIGN_MAX: usize = 1 << 20;

#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct State {
    ra: u64,
    sp: u64,
    bp: u64,
    flags: u8,
}

/// A frame of the record (root first): its state; the hash of the stack
/// from the root to it; the lowest address read for it and every frame
/// above; where its reads end in `reads` (they start where the frame
/// above's end); whether its incoming bp can change the unwinding of it
/// and the frames above (through a BP_DEP frame reached before a
/// BP_RESTORED one). Where it cannot, states are compared without bp: in
/// code built without frame pointers rbp is an ordinary register whose
/// value changes from call to call. One array of these, where there were
/// six of their fields, is one push a frame.
#[derive(Clone, Copy, Default)]
struct RecFrame {
    st: State,
    hash: u64,
    min: u64,
    rd_end: u32,
    bp_matters: bool,
}

/// A frame of a walk (leaf first): its state, where the reads of its step
/// start in `tmp_reads`, and what the step found (BP_DEP, BP_RESTORED, the
/// return address's read).
#[derive(Clone, Copy, Default)]
struct Walked {
    st: State,
    rd: u32,
    dep: u8,
}

/// A recent stack kept whole: the state of its first frame, every stack word
/// its unwinding read, and its id. A capture whose first frame has the same
/// state (bp compared only where `bp_matters`) and whose words all still hold
/// the same values is that stack again.
struct Snapshot {
    first: State,
    bp_matters: bool,
    reads: Vec<(u64, u64)>,
    id: StackId,
    valid: bool,
}

/// Snapshots are kept in sets of `SNAPSHOT_WAYS`, the set chosen by the
/// first frame's state, so that a capture looks at one set only. Python's
/// start-up (83 000 captures of 16 000 distinct stacks) under callgrind,
/// with 8 snapshots in one list, 32 and 64 in sets of 4: 51 500, 32 600 and
/// 27 300 captures walk; 207 000, 143 000 and 121 000 unwinding steps; 486,
/// 434 and 417 M instructions (Python alone: 152 M), 128 snapshots 405 M.
/// Building 300 000 strings after it, where every capture finds its
/// snapshot, adds 5 M fewer with sets (each capture looks at 4 snapshots
/// instead of 8). A snapshot's words are reserved as it is used, in steps
/// of `SNAPSHOT_STEP` up to `SNAPSHOT_READS` (4 KiB): a stack 20 frames
/// deep takes about 1 KiB.
const SNAPSHOT_SETS: usize = 16;
const SNAPSHOT_WAYS: usize = 4;
const SNAPSHOTS: usize = SNAPSHOT_SETS * SNAPSHOT_WAYS;
const SNAPSHOT_READS: usize = 256;
const SNAPSHOT_STEP: usize = 32;

/// The set of snapshots for a first state (bp is not part of it: it is
/// compared only where it matters).
#[inline(always)]
fn snapshot_set(first: &State) -> usize {
    let h = (first.ra ^ first.sp.rotate_left(23)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (h >> (64 - SNAPSHOT_SETS.trailing_zeros())) as usize
}
const _: () = assert!(SNAPSHOT_SETS.is_power_of_two() && SNAPSHOT_SETS > 1);

pub struct Unwind {
    snaps: Vec<Snapshot>,
    /// The way of each set that the next snapshot of that set replaces.
    snap_next: [u8; SNAPSHOT_SETS],
    snap_unwinder: usize,
    max_depth: usize,
    dwarf: bool,
    // The record, root first.
    rec: Vec<RecFrame>,
    /// The record's return addresses leaf first, as the stack table keeps
    /// them, so that a stack of the table is compared with one `==`: they
    /// fill `rec_ra[rec_ra_at..]`, the root in the last slot.
    rec_ra: Vec<u64>,
    rec_ra_at: usize,
    reads: Vec<(u64, u64)>,
    rec_valid: bool,
    rec_id: StackId,
    // Scratch for the new leaf frames, leaf first.
    tmp: Vec<Walked>,
    tmp_reads: Vec<(u64, u64)>,
    /// Where the reads of the step being taken start in `tmp_reads`.
    step_from: u32,
    /// Facts about the last step (BP_DEP, BP_RESTORED).
    last_dep: u8,
    /// framehop's caches of unwind rules: one, and `RULE_CACHES` once that
    /// one misses often (see `RULE_CACHES`). Boxed one by one, so that a
    /// thread that never needs the others does not reserve their room.
    #[allow(clippy::vec_box)]
    caches: Vec<alloc::boxed::Box<Cache>>,
    /// Steps since the miss rate was last looked at, and the misses then.
    cache_steps: u32,
    cache_misses: u64,
    /// The unwind rule learnt for a return address (see `rules.rs`), or at
    /// least the bp-dependence (BP_DEP, BP_RESTORED) of its step, so that
    /// the probing second step runs once per address: both are properties
    /// of the unwind rule at that address. Direct-mapped on the address
    /// (with the IP_FRAME flag folded in); emptied when the module list
    /// changes. `DEP_CACHE_FIRST` slots, `DEP_CACHE` once the thread's
    /// stacks prove to cover thousands of addresses (with the rule caches).
    rules: Vec<Rule>,
    /// The most words one walk may read (`tmp_reads` and `reads` grow to it
    /// as stacks need).
    max_reads: usize,
    ids: Vec<(u64, StackId)>,
    pub stack_lo: u64,
    pub stack_hi: u64,
    /// The copy of a foreign stack (see `FOREIGN_FIRST`), grown on demand.
    foreign: Vec<u64>,
    /// Set by a step that wanted a word past the end of that copy.
    past_copy: bool,
    /// Which return addresses in no module are CPython perf trampolines'
    /// (see `step::TRAMPOLINE`), made at the first such address.
    trampolines: Vec<u64>,
}

type Cache = CacheX86_64<MustNotAllocateDuringUnwind>;

/// framehop's rule cache is direct-mapped on `address % 509`, and a thread
/// whose stacks cover thousands of return addresses (Python's start-up: about
/// 3 000) misses in it for one step in ten, each miss evaluating the CFI
/// again (thousands of instructions in a large function). Such a thread gets
/// this many caches, the one for an address chosen by `address / 509`, so
/// that addresses 509 apart land in different caches: 8 x 509 slots, for 7
/// more caches of about 44 KB each (310 KB, measured; only threads that miss
/// that often).
const RULE_CACHES: usize = 8;
const RULE_CACHE_SLOTS: u64 = 509;
/// Steps between two looks at the single cache's misses, and the misses
/// (for another address) in that many steps that bring in the others.
const CACHE_WINDOW: u32 = 1024;
const CACHE_SPLIT_MISSES: u64 = 64;

const ID_CACHE: usize = 512;
const DEP_CACHE: usize = 4096;
const DEP_CACHE_FIRST: usize = 512;
/// What `reads` and `tmp_reads` hold before a stack needs more: 32 frames
/// of the usual 2 words read each (4 KiB each, instead of 33 KiB for 257
/// frames of 8).
const READS_FIRST: usize = 256;
const MAX_READS_PER_FRAME: usize = 8;

pub struct Capture {
    pub id: StackId,
    pub truncated: bool,
}

impl Unwind {
    pub fn new(max_depth: usize, dwarf: bool, stack_lo: u64, stack_hi: u64) -> Self {
        Unwind {
            snaps: (0..SNAPSHOTS)
                .map(|_| Snapshot {
                    first: State::default(),
                    bp_matters: true,
                    // Reserved as used (see `capture_walk`).
                    reads: Vec::new(),
                    id: 0,
                    valid: false,
                })
                .collect(),
            snap_next: [0; SNAPSHOT_SETS],
            snap_unwinder: 0,
            max_depth,
            dwarf,
            // A record and a walk hold at most `max_depth` frames (the
            // walk stops there, and a record keeps only what fits under
            // it): 256 states fill an 8 KiB block of the arena exactly,
            // where 257 took 16.
            rec: Vec::with_capacity(max_depth),
            rec_ra: vec![0; max_depth + 1],
            rec_ra_at: max_depth + 1,
            reads: Vec::with_capacity(READS_FIRST),
            rec_valid: false,
            rec_id: 0,
            tmp: Vec::with_capacity(max_depth),
            tmp_reads: Vec::with_capacity(READS_FIRST),
            step_from: 0,
            last_dep: 0,
            max_reads: (max_depth + 1) * MAX_READS_PER_FRAME,
            caches: {
                let mut v = Vec::with_capacity(RULE_CACHES);
                v.push(alloc::boxed::Box::new(CacheX86_64::new_in()));
                v
            },
            cache_steps: 0,
            cache_misses: 0,
            rules: vec![Rule::default(); DEP_CACHE_FIRST],
            ids: vec![(0, 0); ID_CACHE],
            stack_lo,
            stack_hi,
            foreign: Vec::new(),
            past_copy: false,
            trampolines: Vec::new(),
        }
    }

    /// Captures the stack of the caller of the hook whose frame pointer is
    /// `hook_fp`. Returns None if memory for the stack table ran out.
    ///
    /// The common case, a stack remembered whole (see `Snapshot`), is
    /// checked here, inlined into the hook; the rest is `capture_walk`, a
    /// large function whose entry alone (registers saved, scratch cleared)
    /// cost more than the check. Python building strings (callgrind): 149
    /// -> 104 instructions per capture.
    #[inline(always)]
    pub fn capture(&mut self, hook_fp: u64) -> Option<Capture> {
        if hook_fp < self.stack_lo || hook_fp + 16 > self.stack_hi {
            return self.capture_foreign(hook_fp);
        }
        let first = first_state(hook_fp);
        if self.unwinder_now() != self.snap_unwinder {
            return self.capture_walk(hook_fp);
        }
        let set = snapshot_set(&first);
        for s in &self.snaps[set * SNAPSHOT_WAYS..(set + 1) * SNAPSHOT_WAYS] {
            // Same first state means the same stack pointer, so every word
            // the snapshot read lies where it did then: inside this
            // thread's stack, above our own frame. bp is compared only where
            // it can change the unwinding (as for the record below): in code
            // built without frame pointers it is an ordinary register, and
            // comparing it made about a third of the captures of a Python
            // loop miss their snapshot.
            // SAFETY: as just said; the reads were bounds-checked when logged.
            if s.valid
                && same_state(&s.first, &first, s.bp_matters)
                && unsafe { words_unchanged(&s.reads) }
            {
                return Some(Capture {
                    id: s.id,
                    truncated: false,
                });
            }
        }
        self.capture_walk(hook_fp)
    }

    /// The unwinder of the current module list (0 without DWARF, or before
    /// there is one), as `snap_unwinder` keeps it.
    #[inline(always)]
    fn unwinder_now(&self) -> usize {
        if self.dwarf {
            modules::UNWINDER.load(Ordering::Acquire) as usize
        } else {
            0
        }
    }
}
