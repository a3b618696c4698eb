//! One step of the unwinder, and the checks that the words a record was
//! unwound from still hold.

use super::rules::{rule_slot, Rule, SLOW};
use super::*;

impl Unwind {
    /// Whether every stack word read while unwinding record frames 0..=p
    /// still holds the value that was read.
    ///
    /// Every address was inside this thread's stack (below `hi`) when it was
    /// read, and the stack does not move; when none lies below our own frame
    /// (`lo`), the words are compared without checking each address.
    #[inline]
    pub(super) fn reads_unchanged(&self, p: usize, lo: u64, hi: u64) -> bool {
        let f = &self.rec[p];
        let reads = &self.reads[..f.rd_end as usize];
        if f.min >= lo {
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
    pub(super) fn cache_index(&mut self, ra: u64) -> usize {
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
                // Where memory for the others runs out, the one cache
                // stays (the walk is slower, the stacks the same).
                let mut rules = alloc::vec::Vec::new();
                if self.caches.try_reserve_exact(RULE_CACHES).is_err()
                    || rules.try_reserve_exact(DEP_CACHE).is_err()
                {
                    return 0;
                }
                let mut more = alloc::vec::Vec::new();
                if more.try_reserve_exact(RULE_CACHES - 1).is_err() {
                    return 0;
                }
                for _ in 1..RULE_CACHES {
                    match try_box(CacheX86_64::new_in()) {
                        Some(c) => more.push(c),
                        None => return 0,
                    }
                }
                self.caches.extend(more);
                rules.resize(DEP_CACHE, Rule::default());
                self.rules = rules;
                return ((ra / RULE_CACHE_SLOTS) % RULE_CACHES as u64) as usize;
            }
        }
        0
    }

    /// Unwinds one frame; logs every stack word read into tmp_reads.
    #[inline(always)]
    pub(super) fn step(&mut self, st: State, unwinder: Option<&Fh>, mem: Mem) -> Option<State> {
        let Some(u) = unwinder else {
            return self.step_fp(st, mem);
        };
        let key = st.ra ^ (u64::from(st.flags) << 63);
        let slot = rule_slot(key, self.rules.len());
        let known = self.rules[slot];
        if known.key == key && known.kind != SLOW {
            return self.step_rule(known, st, mem);
        }
        // The slow step's result comes back through memory: read it field by
        // field, so that the walk's state stays in registers (copied whole,
        // a 16-byte load over two stores stalled every step, fast or not).
        let mut out = State::default();
        if self.step_slow(st, u, mem, key, slot, &mut out) {
            Some(State {
                ra: out.ra,
                sp: out.sp,
                bp: out.bp,
                flags: out.flags,
            })
        } else {
            None
        }
    }

    /// Frame pointers: [bp] is the caller's bp, [bp+8] its return address.
    #[inline(always)]
    fn step_fp(&mut self, st: State, mem: Mem) -> Option<State> {
        self.last_dep = BP_DEP;
        let bp = st.bp;
        if bp < st.sp {
            return None;
        }
        let ra = self.read_logged(bp + 8, mem)?;
        let nbp = self.read_logged(bp, mem)?;
        // A frame built without a frame pointer leaves rbp holding data:
        // a "return address" that is null, tiny, or points into the
        // stack itself ends the walk instead of adding a bogus frame.
        if ra < 4096 || (ra >= mem.lo && ra < mem.hi) {
            return None;
        }
        Some(State {
            ra,
            sp: bp + 16,
            bp: nbp,
            flags: 0,
        })
    }

    /// The step out of a CPython perf trampoline (see [`TRAMPOLINE`]):
    /// `sub rsp, 8; call rcx; add rsp, 8; ret`, returned to after the call:
    /// the caller's return address is at sp + 8, its sp is sp + 16, and bp
    /// passes through untouched.
    #[inline(never)]
    fn step_trampoline(&mut self, st: State, mem: Mem) -> Option<State> {
        self.last_dep = 0;
        let ra = self.read_logged(st.sp + 8, mem)?;
        if ra < 4096 || (ra >= mem.lo && ra < mem.hi) {
            return None;
        }
        Some(State {
            ra,
            sp: st.sp + 16,
            bp: st.bp,
            flags: 0,
        })
    }

    /// Whether `ra`, an address framehop could not step from, returns into
    /// a CPython perf trampoline: its code read once (by
    /// `process_vm_readv`, which fails rather than faults where nothing is
    /// mapped) and the answer kept in a direct-mapped table of the
    /// thread's, made at the first question. Asked only in a process where
    /// a CPython is mapped (`modules::PYTHON`).
    #[inline(never)]
    fn is_trampoline(&mut self, ra: u64) -> bool {
        if ra < TRAMPOLINE_CALL as u64 {
            return false;
        }
        if self.trampolines.is_empty() {
            if self
                .trampolines
                .try_reserve_exact(TRAMPOLINE_SLOTS)
                .is_err()
            {
                return false;
            }
            self.trampolines.resize(TRAMPOLINE_SLOTS, 0);
        }
        let slot = (ra ^ (ra >> 11)) as usize & (TRAMPOLINE_SLOTS - 1);
        let known = self.trampolines[slot];
        if known & !NOT_TRAMPOLINE == ra {
            return known & NOT_TRAMPOLINE == 0;
        }
        let mut code = [0u8; TRAMPOLINE.len()];
        let _errno = crate::base::sync::ErrnoGuard::new();
        let local = libc::iovec {
            iov_base: code.as_mut_ptr().cast(),
            iov_len: code.len(),
        };
        let remote = libc::iovec {
            iov_base: (ra - TRAMPOLINE_CALL as u64) as *mut core::ffi::c_void,
            iov_len: code.len(),
        };
        // SAFETY: reads this process's memory into `code`; an address that
        // is not mapped fails the call.
        let n =
            unsafe { libc::process_vm_readv(crate::base::phase::pid(), &local, 1, &remote, 1, 0) };
        let yes = n == code.len() as isize && code == TRAMPOLINE;
        self.trampolines[slot] = if yes { ra } else { ra | NOT_TRAMPOLINE };
        yes
    }

    /// A step by framehop (no rule of ours for this address): a signal
    /// frame, a rule not learnt yet, or one that is not ours to run.
    #[inline(never)]
    fn step_slow(
        &mut self,
        st: State,
        u: &Fh,
        mem: Mem,
        key: u64,
        slot: usize,
        res: &mut State,
    ) -> bool {
        match self.step_slow_inner(st, u, mem, key, slot) {
            Some(s) => {
                *res = s;
                true
            }
            None => false,
        }
    }

    #[inline(always)]
    fn step_slow_inner(
        &mut self,
        st: State,
        u: &Fh,
        mem: Mem,
        key: u64,
        slot: usize,
    ) -> Option<State> {
        self.last_dep = BP_DEP;
        let ci = self.cache_index(st.ra);
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
                if mem.shift != 0 && a >= mem.hi {
                    *past_copy = true;
                }
                return Err(());
            };
            reads.push((a, v));
            Ok(v)
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
        // A step framehop could not take, from code with no unwind
        // information and no frame pointer: a CPython perf trampoline's?
        if r1.is_err()
            && st.flags & IP_FRAME == 0
            && modules::PYTHON.load(Ordering::Relaxed)
            && self.is_trampoline(st.ra)
        {
            self.tmp_reads.truncate(self.step_from as usize);
            return self.step_trampoline(st, mem);
        }
        // Known for this address from an earlier successful probe? (A step
        // that failed is always probed again.)
        let logged_from = self.step_from as usize;
        if out.is_some() && self.rules[slot].key == key {
            self.last_dep = self.rules[slot].dep | self.ra_read(logged_from, out);
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
        self.last_dep |= self.ra_read(logged_from, out);
        // What a step depends on is its unwind rule's, a property of the
        // address: remembered for the next step from it, with the rule
        // itself where it is one of ours to run (see `rules`). A probe that
        // failed where the step succeeded depends on bp too (an rbp-based
        // CFA, as in code built with frame pointers); leaving that out
        // probed every such step twice.
        let rule = if st.flags & IP_FRAME == 0 {
            self.learn(st.ra, u, ci, out.is_some(), self.last_dep)
        } else {
            Rule {
                key,
                dep: self.last_dep & (BP_DEP | BP_RESTORED),
                ..Rule::default()
            }
        };
        if rule.kind != SLOW || out.is_some() {
            self.rules[slot] = rule;
        }
        out
    }

    /// The mark (see `RA_READ_SHIFT`) of the read among `tmp_reads[from..]`
    /// that gave the step's return address: the word just below the
    /// caller's stack pointer, holding that address.
    #[inline]
    pub(super) fn ra_read(&self, from: usize, out: Option<State>) -> u8 {
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
pub(super) unsafe fn words_unchanged(reads: &[(u64, u64)]) -> bool {
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
pub(super) fn first_state(hook_fp: u64) -> State {
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
pub(super) fn same_state(a: &State, b: &State, bp_matters: bool) -> bool {
    a.ra == b.ra && a.sp == b.sp && a.flags == b.flags && (!bp_matters || a.bp == b.bp)
}

/// glibc's x86-64 `__restore_rt`: `mov $15, %rax; syscall`.
#[inline]
pub(super) fn is_sigreturn(ra: u64) -> bool {
    let lo = modules::LIBC_LO.load(Ordering::Relaxed);
    if ra < lo || ra + 9 > modules::LIBC_HI.load(Ordering::Relaxed) {
        return false;
    }
    // SAFETY: inside libc's mapped executable segment.
    let code = unsafe { core::slice::from_raw_parts(ra as *const u8, 9) };
    code == [0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05]
}

/// The code CPython 3.12 and later copy for each Python function under
/// `-X perf` (`Python/asm_trampoline.S`, x86-64), the return address
/// `TRAMPOLINE_CALL` bytes in: it keeps no frame pointer and has no unwind
/// information, so stacks ended at the innermost Python function. With its
/// step known, they go on through every Python function to `main`, each
/// named from the perf map (`heapledger_symbols::perfmap`).
const TRAMPOLINE: [u8; 11] = [
    0x48, 0x83, 0xec, 0x08, // sub rsp, 8
    0xff, 0xd1, // call rcx
    0x48, 0x83, 0xc4, 0x08, // add rsp, 8
    0xc3, // ret
];
const TRAMPOLINE_CALL: usize = 6;
/// Slots of a thread's table of answers (see `Unwind::is_trampoline`): a
/// Python program has a trampoline per function it ran, Node thousands of
/// return addresses into its JIT code.
const TRAMPOLINE_SLOTS: usize = 1024;
/// Marks an address found not to be a trampoline's (user addresses are
/// below 2^47).
const NOT_TRAMPOLINE: u64 = 1 << 63;

/// `Box::new(v)`, or None when memory ran out (where `Box::new` would
/// abort the program).
fn try_box<T>(v: T) -> Option<alloc::boxed::Box<T>> {
    let layout = core::alloc::Layout::new::<T>();
    // SAFETY: T is not zero-sized here (a cache).
    let p = unsafe { alloc::alloc::alloc(layout) } as *mut T;
    if p.is_null() {
        return None;
    }
    // SAFETY: a fresh allocation of T's layout, written before it is owned.
    unsafe {
        p.write(v);
        Some(alloc::boxed::Box::from_raw(p))
    }
}
