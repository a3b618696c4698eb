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
/// cannot change the unwinding (`rec_bp_matters`), those words cannot change
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
    rec: Vec<State>,
    rec_hash: Vec<u64>,
    /// The record's return addresses leaf first, as the stack table keeps
    /// them, so that a stack of the table is compared with one `==`: they
    /// fill `rec_ra[rec_ra_at..]`, the root in the last slot.
    rec_ra: Vec<u64>,
    rec_ra_at: usize,
    rec_rd: Vec<u32>, // reads of frame i are reads[rec_rd[i]..rec_rd[i+1]]
    /// `rec_min[i]`: the lowest address read for frames 0..=i.
    rec_min: Vec<u64>,
    reads: Vec<(u64, u64)>,
    /// `bp_matters[i]`: whether the incoming bp of frame i can change the
    /// unwinding of frames i..=0 (through a BP_DEP frame reached before a
    /// BP_RESTORED one). Where it cannot, states are compared without bp:
    /// in code built without frame pointers rbp is an ordinary register
    /// whose value changes from call to call.
    rec_bp_matters: Vec<bool>,
    rec_dep: Vec<u8>,
    rec_valid: bool,
    rec_id: StackId,
    // Scratch for the new leaf frames, leaf first.
    tmp: Vec<State>,
    tmp_rd: Vec<u32>,
    tmp_dep: Vec<u8>,
    tmp_reads: Vec<(u64, u64)>,
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
    /// The bp-dependence (BP_DEP, BP_RESTORED) found for a return address,
    /// so that the probing second step runs once per address: it is a
    /// property of the unwind rule at that address. Direct-mapped on the
    /// address (with the IP_FRAME flag folded in); emptied when the module
    /// list changes. `DEP_CACHE_FIRST` slots, `DEP_CACHE` once the thread's
    /// stacks prove to cover thousands of addresses (with the rule caches).
    deps: Vec<(u64, u8)>,
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
            rec_hash: Vec::with_capacity(max_depth),
            rec_ra: vec![0; max_depth + 1],
            rec_ra_at: max_depth + 1,
            rec_rd: Vec::with_capacity(max_depth + 2),
            rec_min: Vec::with_capacity(max_depth),
            reads: Vec::with_capacity(READS_FIRST),
            rec_bp_matters: Vec::with_capacity(max_depth + 1),
            rec_dep: Vec::with_capacity(max_depth + 1),
            rec_valid: false,
            rec_id: 0,
            tmp: Vec::with_capacity(max_depth),
            tmp_rd: Vec::with_capacity(max_depth + 2),
            tmp_dep: Vec::with_capacity(max_depth + 1),
            last_dep: 0,
            tmp_reads: Vec::with_capacity(READS_FIRST),
            max_reads: (max_depth + 1) * MAX_READS_PER_FRAME,
            caches: {
                let mut v = Vec::with_capacity(RULE_CACHES);
                v.push(alloc::boxed::Box::new(CacheX86_64::new_in()));
                v
            },
            cache_steps: 0,
            cache_misses: 0,
            deps: vec![(0, 0); DEP_CACHE_FIRST],
            ids: vec![(0, 0); ID_CACHE],
            stack_lo,
            stack_hi,
            foreign: Vec::new(),
            past_copy: false,
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

    /// `capture` when no snapshot holds: walks the frames that changed
    /// since the last stack, and remembers the new stack.
    #[inline(never)]
    fn capture_walk(&mut self, hook_fp: u64) -> Option<Capture> {
        let (lo, hi) = (hook_fp, self.stack_hi);
        let mem = Mem {
            lo,
            hi,
            shift: 0,
            own_lo: 0,
            own_hi: 0,
        };
        let first = first_state(hook_fp);
        self.tmp.clear();
        self.tmp_rd.clear();
        self.tmp_dep.clear();
        self.tmp_reads.clear();
        let mut unwinder = if self.dwarf {
            let p = modules::UNWINDER.load(Ordering::Acquire);
            // SAFETY: published unwinders are never freed.
            (!p.is_null()).then(|| unsafe { &*p })
        } else {
            None
        };
        // A module change invalidates every remembered stack.
        let u_now = unwinder.map_or(0, |u| u as *const Fh as usize);
        if u_now != self.snap_unwinder {
            self.snap_unwinder = u_now;
            self.rec_valid = false;
            for s in self.snaps.iter_mut() {
                s.valid = false;
            }
            self.deps.fill((0, 0));
        }
        let set = snapshot_set(&first);
        let mut cursor = self.rec.len(); // record frames at >= cursor have sp < current
        let mut st = first;
        let mut matched: Option<usize> = None;
        let mut truncated = false;
        let mut refreshed = false;
        loop {
            // Does this state continue as the record did?
            if self.rec_valid {
                while cursor > 0 && self.rec[cursor - 1].sp < st.sp {
                    cursor -= 1;
                }
                // Reuse only what fits under the depth limit (the kept outer
                // frames plus the new inner ones); beyond it the unwinding
                // goes on and cuts the stack at the limit.
                if cursor > 0
                    && cursor + self.tmp.len() <= self.max_depth
                    && same_state(&self.rec[cursor - 1], &st, self.rec_bp_matters[cursor - 1])
                    && self.reads_unchanged(cursor - 1, lo, hi)
                {
                    matched = Some(cursor - 1);
                    break;
                }
            }
            if self.tmp.len() == self.max_depth {
                truncated = true;
                break;
            }
            self.tmp.push(st);
            self.tmp_rd.push(self.tmp_reads.len() as u32);
            let next = self.step(st, unwinder, mem);
            self.tmp_dep.push(self.last_dep);
            match next {
                Some(next) => st = next,
                None => {
                    // An address outside every known module may belong to a
                    // library loaded behind our back: refresh once and retry.
                    if self.dwarf && !refreshed && !self.tmp.is_empty() {
                        refreshed = true;
                        let before = modules::UNWINDER.load(Ordering::Acquire);
                        modules::refresh(false);
                        let after = modules::UNWINDER.load(Ordering::Acquire);
                        if after != before {
                            // SAFETY: as above.
                            let u = unsafe { &*after };
                            let r = self.tmp_rd.pop().unwrap();
                            self.tmp_reads.truncate(r as usize);
                            self.tmp.pop();
                            // Retry this frame with the new module list.
                            self.tmp_dep.pop();
                            self.tmp.push(st);
                            self.tmp_rd.push(self.tmp_reads.len() as u32);
                            // Every later frame uses the new module list too.
                            unwinder = Some(u);
                            let next = self.step(st, Some(u), mem);
                            self.tmp_dep.push(self.last_dep);
                            if let Some(next) = next {
                                st = next;
                                continue;
                            }
                        }
                    }
                    break;
                }
            }
        }
        self.tmp_rd.push(self.tmp_reads.len() as u32);
        let unchanged = matched == Some(self.rec.len().wrapping_sub(1)) && self.tmp.is_empty();
        if unchanged {
            return Some(Capture {
                id: self.rec_id,
                truncated: false,
            });
        }
        // Build the new record: kept outer part + new frames, root first.
        let keep = matched.map_or(0, |p| p + 1);
        let keep_reads = if keep == 0 {
            0
        } else {
            self.rec_rd[keep] as usize
        };
        let want = (keep_reads + self.tmp_reads.len()).saturating_sub(self.reads.len());
        if self.reads.try_reserve(want).is_err() {
            // Out of memory for the record's words: the record is left as
            // it was and not trusted (the next capture walks it all).
            self.rec_valid = false;
            return None;
        }
        self.rec.truncate(keep);
        self.rec_dep.truncate(keep);
        self.rec_bp_matters.truncate(keep);
        self.rec_hash.truncate(keep);
        self.rec_ra_at = self.rec_ra.len() - keep;
        self.rec_rd.truncate(keep);
        self.rec_min.truncate(keep);
        self.reads.truncate(keep_reads);
        let mut h = if keep == 0 {
            HASH_SEED
        } else {
            self.rec_hash[keep - 1]
        };
        for j in (0..self.tmp.len()).rev() {
            let s = self.tmp[j];
            self.rec_rd.push(self.reads.len() as u32);
            let (a, b) = (self.tmp_rd[j] as usize, self.tmp_rd[j + 1] as usize);
            let dep = self.tmp_dep.get(j).copied().unwrap_or(BP_DEP);
            let above = self.rec_bp_matters.last().copied().unwrap_or(false);
            let ra_read = (dep >> RA_READ_SHIFT) as usize;
            let frame_reads = if ra_read != 0 && a + ra_read <= b && !above {
                // The caller's bp cannot change the unwinding: only the
                // return address's read matters (see `RA_READ_SHIFT`).
                &self.tmp_reads[a + ra_read - 1..a + ra_read]
            } else {
                &self.tmp_reads[a..b]
            };
            self.reads.extend_from_slice(frame_reads);
            let lowest = frame_reads.iter().map(|r| r.0).min();
            let outer = self.rec_min.last().copied().unwrap_or(u64::MAX);
            self.rec_min.push(lowest.map_or(outer, |l| l.min(outer)));
            h = stacks::mix(h, s.ra);
            self.rec_bp_matters
                .push(dep & BP_DEP != 0 || (dep & BP_RESTORED == 0 && above));
            self.rec_dep.push(dep);
            self.rec.push(s);
            self.rec_hash.push(h);
            self.rec_ra_at -= 1;
            self.rec_ra[self.rec_ra_at] = s.ra;
        }
        self.rec_rd.push(self.reads.len() as u32);
        // A truncated stack has no root; it cannot be continued next time.
        self.rec_valid = !truncated;
        let n = self.rec.len();
        let rec = &self.rec_ra[self.rec_ra_at..];
        let eq = |f: &[u64]| f == rec;
        let slot = (h as usize) % ID_CACHE;
        let id = if self.ids[slot].0 == h && eq(stacks::frames(stacks::entry(self.ids[slot].1))) {
            self.ids[slot].1
        } else {
            let Some(id) = stacks::intern(h, n, &eq, |dst| {
                dst.copy_from_slice(rec);
            }) else {
                // Out of memory for stacks: forget the record, so that the
                // next capture does not return a stale id for it.
                self.rec_valid = false;
                return None;
            };
            self.ids[slot] = (h, id);
            id
        };
        self.rec_id = id;
        // Remember this stack whole, unless it was cut (no root to verify).
        let way = self.snap_next[set] as usize;
        let s = &mut self.snaps[set * SNAPSHOT_WAYS + way];
        // Its words are reserved as the stacks it holds need them (32 at a
        // time); out of memory for them, the stack is not remembered.
        let need = self.reads.len().next_multiple_of(SNAPSHOT_STEP);
        if !truncated
            && self.reads.len() <= SNAPSHOT_READS
            && (s.reads.capacity() >= need
                || s.reads.try_reserve_exact(need - s.reads.len()).is_ok())
        {
            self.snap_next[set] = ((way + 1) % SNAPSHOT_WAYS) as u8;
            s.first = first;
            s.bp_matters = self.rec_bp_matters.last().copied().unwrap_or(true);
            s.reads.clear();
            s.reads.extend_from_slice(&self.reads);
            s.id = id;
            s.valid = true;
        }
        Some(Capture { id, truncated })
    }

    /// `capture` for a hook running on a stack that is not the thread's own
    /// (see `FOREIGN_FIRST`): a whole walk over a copy of that stack, which
    /// may go on into the thread's own stack (from an alternate signal
    /// stack to the interrupted code). Neither the record nor the snapshots
    /// are used or kept: their words are read in place, and a foreign stack
    /// may be gone by the next capture. Where the stack cannot be copied,
    /// the stack is the immediate caller alone.
    #[cold]
    fn capture_foreign(&mut self, hook_fp: u64) -> Option<Capture> {
        let first = first_state(hook_fp);
        self.rec_valid = false;
        let unwinder = if self.dwarf {
            let p = modules::UNWINDER.load(Ordering::Acquire);
            // SAFETY: published unwinders are never freed.
            (!p.is_null()).then(|| unsafe { &*p })
        } else {
            None
        };
        let mut want = FOREIGN_FIRST;
        loop {
            let copied = self.copy_foreign(hook_fp, want);
            let mem = Mem {
                lo: hook_fp,
                hi: hook_fp + copied as u64,
                shift: (self.foreign.as_ptr() as u64).wrapping_sub(hook_fp),
                own_lo: self.stack_lo,
                own_hi: self.stack_hi,
            };
            self.tmp.clear();
            self.tmp_rd.clear();
            self.tmp_dep.clear();
            self.tmp_reads.clear();
            self.past_copy = false;
            let mut st = first;
            let mut truncated = false;
            loop {
                if self.tmp.len() == self.max_depth {
                    truncated = true;
                    break;
                }
                self.tmp.push(st);
                self.tmp_rd.push(self.tmp_reads.len() as u32);
                match self.step(st, unwinder, mem) {
                    Some(next) => st = next,
                    None => break,
                }
            }
            // The walk wanted more of a stack that was copied whole so far.
            if self.past_copy && copied == want {
                if want < FOREIGN_MAX {
                    want = (want * 4).min(FOREIGN_MAX);
                    continue;
                }
                // Cut at the largest copy.
                truncated = true;
            }
            let n = self.tmp.len();
            let tmp = &self.tmp;
            let h = tmp
                .iter()
                .rev()
                .fold(HASH_SEED, |h, s| stacks::mix(h, s.ra));
            // Frames are stored leaf first, as `tmp` holds them; the hash
            // folds from the root, as the record's does.
            let eq = |f: &[u64]| f.len() == n && f.iter().zip(tmp.iter()).all(|(a, s)| *a == s.ra);
            return stacks::intern(h, n, &eq, |dst| {
                for (d, s) in dst.iter_mut().zip(tmp.iter()) {
                    *d = s.ra;
                }
            })
            .map(|id| Capture { id, truncated });
        }
    }

    /// Copies up to `want` bytes of this process's memory from `from` into
    /// `foreign`; returns how many were readable (at least the hook's own
    /// frame, 16 bytes).
    fn copy_foreign(&mut self, from: u64, want: usize) -> usize {
        if self.foreign.len() < want / 8 {
            self.foreign.resize(want / 8, 0);
        }
        // Not past the end of the page range: up to the top of the address
        // space the kernel would refuse the whole read.
        let want = want.min((u64::MAX - from) as usize) & !7;
        let local = libc::iovec {
            iov_base: self.foreign.as_mut_ptr() as *mut _,
            iov_len: want,
        };
        let remote = libc::iovec {
            iov_base: from as *mut _,
            iov_len: want,
        };
        let _e = sync::ErrnoGuard::new();
        // SAFETY: the local buffer holds `want` bytes; the kernel checks the
        // remote range and stops at its first unmapped page.
        let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
        if n >= 16 {
            return (n as usize) & !7;
        }
        // Not allowed (a seccomp filter...): the hook's own frame, which is
        // ours to read.
        // SAFETY: hook_fp's two words are our own frame.
        unsafe {
            self.foreign[0] = *(from as *const u64);
            self.foreign[1] = *((from + 8) as *const u64);
        }
        16
    }

    /// Whether every stack word read while unwinding record frames 0..=p
    /// still holds the value that was read.
    ///
    /// Every address was inside this thread's stack (below `hi`) when it was
    /// read, and the stack does not move; when none lies below our own frame
    /// (`lo`), the words are compared without checking each address.
    #[inline]
    fn reads_unchanged(&self, p: usize, lo: u64, hi: u64) -> bool {
        let reads = &self.reads[..self.rec_rd[p + 1] as usize];
        if self.rec_min[p] >= lo {
            // SAFETY: inside this thread's stack, above our own frame.
            unsafe { words_unchanged(reads) }
        } else {
            reads.iter().rev().all(|&(a, v)| {
                // SAFETY: bounded to the thread's stack above our own frame.
                a >= lo && a + 8 <= hi && unsafe { *(a as *const u64) } == v
            })
        }
    }

    /// The rule cache for a step from return address `ra`; brings in the
    /// other caches when the single one misses often.
    #[inline]
    fn cache_index(&mut self, ra: u64) -> usize {
        if self.caches.len() > 1 {
            return ((ra / RULE_CACHE_SLOTS) % RULE_CACHES as u64) as usize;
        }
        self.cache_steps += 1;
        if self.cache_steps >= CACHE_WINDOW {
            self.cache_steps = 0;
            let misses = self.caches[0].stats().miss_wrong_address_count;
            let recent = misses - self.cache_misses;
            self.cache_misses = misses;
            if recent >= CACHE_SPLIT_MISSES {
                while self.caches.len() < RULE_CACHES {
                    self.caches
                        .push(alloc::boxed::Box::new(CacheX86_64::new_in()));
                }
                self.deps = vec![(0, 0); DEP_CACHE];
                return ((ra / RULE_CACHE_SLOTS) % RULE_CACHES as u64) as usize;
            }
        }
        0
    }

    /// Unwinds one frame; logs every stack word read into tmp_reads.
    #[inline]
    fn step(&mut self, st: State, unwinder: Option<&Fh>, mem: Mem) -> Option<State> {
        self.last_dep = BP_DEP;
        let ci = if unwinder.is_some() {
            self.cache_index(st.ra)
        } else {
            0
        };
        let (lo, hi) = (mem.lo, mem.hi);
        let reads = &mut self.tmp_reads;
        let max_reads = self.max_reads;
        let past_copy = &mut self.past_copy;
        let mut read = |a: u64| -> Result<u64, ()> {
            if reads.len() >= reads.capacity()
                && (reads.len() >= max_reads || reads.try_reserve(reads.len()).is_err())
            {
                return Err(());
            }
            let Some(v) = mem.get(a) else {
                if mem.shift != 0 && a >= hi {
                    *past_copy = true;
                }
                return Err(());
            };
            reads.push((a, v));
            Ok(v)
        };
        let Some(u) = unwinder else {
            // Frame pointers: [bp] is the caller's bp, [bp+8] its return address.
            let bp = st.bp;
            if bp < st.sp {
                return None;
            }
            let ra = read(bp + 8).ok()?;
            let nbp = read(bp).ok()?;
            // A frame built without a frame pointer leaves rbp holding data:
            // a "return address" that is null, tiny, or points into the
            // stack itself ends the walk instead of adding a bogus frame.
            if ra < 4096 || (ra >= lo && ra < hi) {
                return None;
            }
            return Some(State {
                ra,
                sp: bp + 16,
                bp: nbp,
                flags: 0,
            });
        };
        if st.flags & IP_FRAME == 0 && is_sigreturn(st.ra) {
            // The kernel's signal frame: a ucontext sits at sp; its
            // mcontext's gregs start at offset 40 (REG_RBP 10, REG_RSP 15, REG_RIP 16).
            let g = st.sp + 40;
            let bp = read(g + 10 * 8).ok()?;
            let sp = read(g + 15 * 8).ok()?;
            let ip = read(g + 16 * 8).ok()?;
            self.last_dep = BP_RESTORED;
            return Some(State {
                ra: ip.wrapping_add(1),
                sp,
                bp,
                flags: IP_FRAME,
            });
        }
        let mut regs = UnwindRegsX86_64::new(st.ra, st.sp, st.bp);
        let addr = if st.flags & IP_FRAME != 0 {
            FrameAddress::from_instruction_pointer(st.ra - 1)
        } else {
            FrameAddress::from_return_address(st.ra)?
        };
        let r1 = u.unwind_frame(addr, &mut regs, &mut self.caches[ci], &mut read);
        let out = match r1 {
            Ok(Some(ra)) if ra != 0 => Some(State {
                ra,
                sp: regs.sp(),
                bp: regs.bp(),
                flags: 0,
            }),
            _ => None,
        };
        // Known for this address from an earlier successful probe? (A step
        // that failed is always probed again.)
        let key = st.ra ^ (u64::from(st.flags) << 63);
        // Both sizes are powers of two.
        let slot = (key ^ (key >> 12)) as usize & (self.deps.len() - 1);
        let logged_from = self.tmp_rd.last().copied().unwrap_or(0) as usize;
        if out.is_some() && self.deps[slot].0 == key {
            self.last_dep = self.deps[slot].1 | self.ra_read(logged_from, out);
            return out;
        }
        // Run the step again with another incoming bp, reading without
        // logging: if nothing but a passed-through bp changes, the step does
        // not depend on bp.
        let probe_bp = st.bp ^ (1 << 44) ^ 0x10;
        let mut regs2 = UnwindRegsX86_64::new(st.ra, st.sp, probe_bp);
        let mut k = logged_from;
        let log = &self.tmp_reads;
        let mut same_reads = true;
        let mut read2 = |a: u64| -> Result<u64, ()> {
            let v = mem.get(a).ok_or(())?;
            if log.get(k).map(|e| e.0) != Some(a) {
                same_reads = false;
            }
            k += 1;
            Ok(v)
        };
        let r2 = u.unwind_frame(addr, &mut regs2, &mut self.caches[ci], &mut read2);
        let out2 = match r2 {
            Ok(Some(ra)) if ra != 0 => Some(State {
                ra,
                sp: regs2.sp(),
                bp: regs2.bp(),
                flags: 0,
            }),
            _ => None,
        };
        let same_reads = same_reads && k == self.tmp_reads.len();
        self.last_dep = match (out, out2) {
            (Some(a), Some(b)) if same_reads && a.ra == b.ra && a.sp == b.sp => {
                if a.bp == b.bp {
                    BP_RESTORED
                } else if a.bp == st.bp && b.bp == probe_bp {
                    0
                } else {
                    BP_DEP
                }
            }
            (None, None) if same_reads => BP_RESTORED,
            _ => BP_DEP,
        };
        // What a step depends on is its unwind rule's, a property of the
        // address: remembered for the next step from it. A probe that failed
        // where the step succeeded depends on bp too (an rbp-based CFA, as in
        // code built with frame pointers); leaving that out probed every such
        // step twice.
        if out.is_some() && key != 0 {
            self.deps[slot] = (key, self.last_dep);
        }
        self.last_dep |= self.ra_read(logged_from, out);
        out
    }

    /// The mark (see `RA_READ_SHIFT`) of the read among `tmp_reads[from..]`
    /// that gave the step's return address: the word just below the
    /// caller's stack pointer, holding that address.
    #[inline]
    fn ra_read(&self, from: usize, out: Option<State>) -> u8 {
        let Some(o) = out else { return 0 };
        let at = o.sp.wrapping_sub(8);
        match self.tmp_reads[from..]
            .iter()
            .position(|&(a, v)| a == at && v == o.ra)
        {
            Some(i) if i < 63 => ((i + 1) as u8) << RA_READ_SHIFT,
            _ => 0,
        }
    }
}

/// Whether every word still holds the value read: `(address, value)` pairs,
/// compared four at a time (this check is most of what a reused stack costs).
///
/// # Safety
/// Every address must be readable: inside this thread's stack.
#[inline(always)]
unsafe fn words_unchanged(reads: &[(u64, u64)]) -> bool {
    // SAFETY: forwarded to the caller.
    let differs = |&(a, v): &(u64, u64)| unsafe { *(a as *const u64) } ^ v;
    // From the leaf end: a stack that changed most likely changed there.
    let mut quads = reads.rchunks_exact(4);
    for q in &mut quads {
        if differs(&q[0]) | differs(&q[1]) | differs(&q[2]) | differs(&q[3]) != 0 {
            return false;
        }
    }
    quads.remainder().iter().all(|r| differs(r) == 0)
}

/// The state of the hook's caller, from the hook's frame pointer.
#[inline(always)]
fn first_state(hook_fp: u64) -> State {
    // SAFETY: hook_fp is our own hook's frame pointer: [fp] is the caller's
    // bp, [fp+8] the return address into the caller.
    unsafe {
        State {
            ra: *((hook_fp + 8) as *const u64),
            sp: hook_fp + 16,
            bp: *(hook_fp as *const u64),
            flags: 0,
        }
    }
}

/// Equal states, comparing bp only where it can change what follows.
#[inline(always)]
fn same_state(a: &State, b: &State, bp_matters: bool) -> bool {
    a.ra == b.ra && a.sp == b.sp && a.flags == b.flags && (!bp_matters || a.bp == b.bp)
}

/// glibc's x86-64 `__restore_rt`: `mov $15, %rax; syscall`.
#[inline]
fn is_sigreturn(ra: u64) -> bool {
    let lo = modules::LIBC_LO.load(Ordering::Relaxed);
    if ra < lo || ra + 9 > modules::LIBC_HI.load(Ordering::Relaxed) {
        return false;
    }
    // SAFETY: inside libc's mapped executable segment.
    let code = unsafe { core::slice::from_raw_parts(ra as *const u8, 9) };
    code == [0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05]
}
