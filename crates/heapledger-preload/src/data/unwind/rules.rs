//! A thread's own cache of unwind rules, by return address: the step from a
//! return address whose rule framehop has cached runs here, without
//! framehop's lookup, its register file or its rule's dispatch (a stack of
//! 500 000 distinct paths 21 frames deep: 279 -> about 40 instructions a
//! step).
//!
//! framehop does not hand out its rules, so a rule is learnt by running
//! framehop's step once more from that address over a made-up stack (sp
//! and bp far apart, every word reading as its address with high bits
//! set), right after a real step that framehop's cache served or filled.
//! Only a step that framehop's cache served (its hit count moved) is
//! learnt: a cached rule is one of `UnwindRuleX86_64`'s variants, a fixed
//! function of (sp, bp) and the words it reads, and the made-up stack tells
//! which one and its offsets (every word's value names its address). Three
//! shapes are kept, which cover what `.eh_frame` gives a return address:
//!
//! - `SP`: `sp' = sp + off`, `ra = [sp' - 8]`, bp passed through
//!   (`OffsetSp`, `JustReturn`, `OffsetSpAndPopRegisters` popping nothing);
//! - `SP_BP`: the same, and `bp' = [sp + boff]`, read first
//!   (`OffsetSpAndRestoreBp`, or popping rbp alone);
//! - `FP`: `sp' = bp + 16`, `bp' = [bp]`, `ra = [bp + 8]` (`UseFramePointer`);
//! - `END`: no caller (`EndOfStack`).
//!
//! Any other outcome (a rule framehop could not cache, DWARF evaluated
//! afresh; registers popped besides rbp; a signal frame) stays framehop's
//! (`SLOW`), with only the bp-dependence of its step remembered. Each
//! shape is run exactly as framehop's `exec` runs it: the same reads in the
//! same order (bounded and logged alike), the same overflow checks, the
//! same ends (a null return address; a frame that did not advance).

use super::*;
use framehop::x86_64::UnwindRegsX86_64;
use framehop::FrameAddress;

pub(super) const SLOW: u8 = 0;
pub(super) const SP: u8 = 1;
pub(super) const SP_BP: u8 = 2;
pub(super) const FP: u8 = 3;
pub(super) const END: u8 = 4;

/// A rule, or only the bp-dependence (`SLOW`), for one return address.
/// `key` is the address, with bit 63 set for a frame holding an interrupted
/// instruction pointer (`IP_FRAME`, always `SLOW`); 0 is an empty slot.
#[derive(Clone, Copy, Default)]
pub(super) struct Rule {
    pub key: u64,
    /// sp' - sp (`SP`, `SP_BP`).
    pub off: u32,
    /// Where bp is restored from: sp + 8 * `boff8` (`SP_BP`).
    pub boff8: i16,
    pub kind: u8,
    /// The step's dependence on bp (`BP_DEP`, `BP_RESTORED`) and, for the
    /// shapes run here, which read gives the return address (see
    /// `RA_READ_SHIFT`); for `SLOW`, the dependence only.
    pub dep: u8,
}

const _: () = assert!(core::mem::size_of::<Rule>() == 16);

/// The made-up stack of a probe: sp, bp (far above, so that no offset of a
/// rule reaches from one to the other), and the mark of every word's value,
/// which makes it neither null nor a code address.
const PROBE_SP: u64 = 0x4000_0000_0000;
const PROBE_BP: u64 = PROBE_SP + (1 << 40);
const PROBE_MARK: u64 = 0xA5A5_0000_0000_0000;

#[inline(always)]
pub(super) fn rule_slot(key: u64, len: usize) -> usize {
    // `len` is a power of two.
    (key ^ (key >> 12)) as usize & (len - 1)
}

/// What a probe read: up to 4 words.
struct Probe {
    at: [u64; 4],
    n: usize,
}

impl Unwind {
    /// Learns the rule of return address `ra` after a step from it that
    /// framehop took with cache `ci`; `ok`: whether it found a caller;
    /// `dep`: what the step found (bp-dependence and the return address's
    /// read). Returns the rule to keep: a shape, or `SLOW` where the probe
    /// does not prove one (kept only after a successful step, as before).
    pub(super) fn learn(&mut self, ra: u64, u: &Fh, ci: usize, ok: bool, dep: u8) -> Rule {
        let slow = Rule {
            key: ra,
            kind: SLOW,
            dep: dep & (BP_DEP | BP_RESTORED),
            ..Rule::default()
        };
        let Some(addr) = FrameAddress::from_return_address(ra) else {
            return slow;
        };
        let mut regs = UnwindRegsX86_64::new(ra, PROBE_SP, PROBE_BP);
        let mut p = Probe { at: [0; 4], n: 0 };
        let mut read = |a: u64| -> Result<u64, ()> {
            if p.n == p.at.len() {
                return Err(());
            }
            p.at[p.n] = a;
            p.n += 1;
            Ok(a ^ PROBE_MARK)
        };
        let cache = &mut self.caches[ci];
        let hits = cache.stats().hit_count;
        let r = u.unwind_frame(addr, &mut regs, cache, &mut read);
        if cache.stats().hit_count != hits + 1 {
            // Not a rule from framehop's cache: DWARF evaluated afresh.
            return slow;
        }
        let (sp, bp) = (regs.sp(), regs.bp());
        let val = |a: u64| a ^ PROBE_MARK;
        let at = &p.at[..p.n];
        let rule = match (r, at) {
            (Ok(None), []) => Rule {
                kind: END,
                dep: BP_RESTORED,
                ..slow
            },
            (Ok(Some(v)), &[a])
                if a == sp.wrapping_sub(8)
                    && v == val(a)
                    && bp == PROBE_BP
                    && sp >= PROBE_SP
                    && sp - PROBE_SP < 1 << 20 =>
            {
                Rule {
                    kind: SP,
                    off: (sp - PROBE_SP) as u32,
                    dep: 1 << RA_READ_SHIFT,
                    ..slow
                }
            }
            (Ok(Some(v)), &[b, a])
                if a == sp.wrapping_sub(8)
                    && v == val(a)
                    && bp == val(b)
                    && sp >= PROBE_SP
                    && sp - PROBE_SP < 1 << 20
                    && b.is_multiple_of(8)
                    && i16::try_from((b.wrapping_sub(PROBE_SP) as i64) / 8).is_ok() =>
            {
                let ra_read: u8 = if a == b { 1 } else { 2 };
                Rule {
                    kind: SP_BP,
                    off: (sp - PROBE_SP) as u32,
                    boff8: ((b.wrapping_sub(PROBE_SP) as i64) / 8) as i16,
                    dep: BP_RESTORED | ra_read << RA_READ_SHIFT,
                    ..slow
                }
            }
            (Ok(Some(v)), &[b, a])
                if b == PROBE_BP
                    && a == PROBE_BP + 8
                    && sp == PROBE_BP + 16
                    && v == val(a)
                    && bp == val(b) =>
            {
                Rule {
                    kind: FP,
                    dep: BP_DEP | 2 << RA_READ_SHIFT,
                    ..slow
                }
            }
            _ => return slow,
        };
        // The real step must have found the same (it did, for any rule
        // above; this keeps a wrong guess from ever being used).
        if ok != (rule.kind != END) || rule.dep != dep {
            return slow;
        }
        rule
    }

    /// One step by a learnt rule (not `SLOW`), as framehop's `exec` takes
    /// it, logging every word read.
    #[inline(always)]
    pub(super) fn step_rule(&mut self, r: Rule, st: State, mem: Mem) -> Option<State> {
        self.last_dep = r.dep;
        let (sp, bp) = match r.kind {
            SP => (st.sp.checked_add(u64::from(r.off))?, st.bp),
            SP_BP => {
                let sp = st.sp.checked_add(u64::from(r.off))?;
                let at = st.sp.checked_add_signed(i64::from(r.boff8) * 8)?;
                (sp, self.read_logged(at, mem)?)
            }
            FP => {
                if st.bp == 0 {
                    return None;
                }
                let sp = st.bp.checked_add(16)?;
                if sp <= st.sp {
                    return None;
                }
                (sp, self.read_logged(st.bp, mem)?)
            }
            _ => return None,
        };
        let ra = self.read_logged(sp - 8, mem)?;
        if ra == 0 || (sp == st.sp && ra == st.ra) {
            return None;
        }
        Some(State {
            ra,
            sp,
            bp,
            flags: 0,
        })
    }

    /// A word of `mem`, logged into `tmp_reads` (see `step`'s `read`).
    #[inline(always)]
    pub(super) fn read_logged(&mut self, a: u64, mem: Mem) -> Option<u64> {
        let reads = &mut self.tmp_reads;
        if reads.len() >= reads.capacity()
            && (reads.len() >= self.max_reads || reads.try_reserve(reads.len()).is_err())
        {
            return None;
        }
        let Some(v) = mem.get(a) else {
            if mem.shift != 0 && a >= mem.hi {
                self.past_copy = true;
            }
            return None;
        };
        reads.push((a, v));
        Some(v)
    }
}
