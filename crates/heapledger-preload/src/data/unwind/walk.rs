//! A capture that walks: from the hook's frame record up to a frame the
//! record of the last stack holds, or to the end of a foreign stack.

use super::step::{first_state, same_state};
use super::*;

impl Unwind {
    /// The unwinder of the current module list, or None without DWARF or
    /// before there is one. A change of unwinder invalidates every
    /// remembered stack and every rule learnt with the last one.
    #[inline]
    fn sync_unwinder(&mut self) -> Option<&'static Fh> {
        let unwinder = if self.dwarf {
            let p = modules::UNWINDER.load(Ordering::Acquire);
            // SAFETY: published unwinders are never freed.
            (!p.is_null()).then(|| unsafe { &*p })
        } else {
            None
        };
        let u_now = unwinder.map_or(0, |u| u as *const Fh as usize);
        if u_now != self.snap_unwinder {
            self.snap_unwinder = u_now;
            self.rec_valid = false;
            for s in self.snaps.iter_mut() {
                s.valid = false;
            }
            self.rules.fill(Rule::default());
        }
        unwinder
    }

    /// `capture` when no snapshot holds: walks the frames that changed
    /// since the last stack, and remembers the new stack.
    #[inline(never)]
    pub(super) fn capture_walk(&mut self, hook_fp: u64) -> Option<Capture> {
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
        self.tmp_reads.clear();
        let mut unwinder = self.sync_unwinder();
        let set = snapshot_set(&first);
        let mut cursor = self.rec.len(); // record frames at >= cursor have sp < current
        let mut st = first;
        let mut matched: Option<usize> = None;
        let mut truncated = false;
        let mut refreshed = false;
        loop {
            // Does this state continue as the record did?
            if self.rec_valid {
                while cursor > 0 && self.rec[cursor - 1].st.sp < st.sp {
                    cursor -= 1;
                }
                // Reuse only what fits under the depth limit (the kept outer
                // frames plus the new inner ones); beyond it the unwinding
                // goes on and cuts the stack at the limit.
                if cursor > 0 && cursor + self.tmp.len() <= self.max_depth {
                    let f = &self.rec[cursor - 1];
                    if same_state(&f.st, &st, f.bp_matters)
                        && self.reads_unchanged(cursor - 1, lo, hi)
                    {
                        matched = Some(cursor - 1);
                        break;
                    }
                }
            }
            if self.tmp.len() == self.max_depth {
                truncated = true;
                break;
            }
            let rd = self.tmp_reads.len() as u32;
            self.step_from = rd;
            let next = self.step(st, unwinder, mem);
            self.tmp.push(Walked {
                st,
                rd,
                dep: self.last_dep,
            });
            match next {
                Some(next) => st = next,
                None => {
                    // An address outside every known module may belong to a
                    // library loaded behind our back: refresh once and retry.
                    if self.dwarf && !refreshed {
                        refreshed = true;
                        let before = modules::UNWINDER.load(Ordering::Acquire);
                        modules::refresh(false);
                        let after = modules::UNWINDER.load(Ordering::Acquire);
                        if after != before {
                            // SAFETY: as above.
                            let u = unsafe { &*after };
                            // Rules learnt with the old module list are not
                            // this one's (the next capture forgets the rest).
                            self.rules.fill(Rule::default());
                            // Retry this frame with the new module list.
                            self.tmp.pop();
                            self.tmp_reads.truncate(rd as usize);
                            // Every later frame uses the new module list too.
                            unwinder = Some(u);
                            let next = self.step(st, Some(u), mem);
                            self.tmp.push(Walked {
                                st,
                                rd,
                                dep: self.last_dep,
                            });
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
        let n = self.tmp.len();
        if n == 0 && matched.is_some() && matched == self.rec.len().checked_sub(1) {
            return Some(Capture {
                id: self.rec_id,
                truncated: false,
            });
        }
        // The new stack: the kept outer part of the record + the new frames.
        // Its hash first, so that the stack table's slot for it is fetched
        // while the record is built (with 500 000 distinct stacks, that
        // slot was a cache miss in most captures, a quarter of the walk).
        let keep = matched.map_or(0, |p| p + 1);
        let outer = keep.checked_sub(1).map(|k| self.rec[k]);
        let mut h = outer.map_or(HASH_SEED, |f| f.hash);
        for w in self.tmp.iter().rev() {
            h = stacks::mix(h, w.st.ra);
        }
        stacks::prefetch(h);
        let keep_reads = outer.map_or(0, |f| f.rd_end as usize);
        let total = keep_reads + self.tmp_reads.len();
        if self
            .reads
            .try_reserve(total.saturating_sub(self.reads.len()))
            .is_err()
        {
            // Out of memory for the record's words: the record is left as
            // it was and not trusted (the next capture walks it all).
            self.rec_valid = false;
            return None;
        }
        self.rec.truncate(keep);
        self.reads.truncate(keep_reads);
        self.rec_ra_at = self.rec_ra.len() - keep;
        let (mut h, mut above, mut lowest) = outer.map_or((HASH_SEED, false, u64::MAX), |f| {
            (f.hash, f.bp_matters, f.min)
        });
        for j in (0..n).rev() {
            let w = self.tmp[j];
            let a = w.rd as usize;
            let b = self
                .tmp
                .get(j + 1)
                .map_or(self.tmp_reads.len(), |x| x.rd as usize);
            let ra_read = (w.dep >> RA_READ_SHIFT) as usize;
            let (a, b) = if ra_read != 0 && a + ra_read <= b && !above {
                // The caller's bp cannot change the unwinding: only the
                // return address's read matters (see `RA_READ_SHIFT`).
                (a + ra_read - 1, a + ra_read)
            } else {
                (a, b)
            };
            let frame_reads = &self.tmp_reads[a..b];
            let at = self.reads.len();
            // SAFETY: room for every read of the walk was reserved above,
            // and frame_reads.len() elements are written before set_len.
            unsafe {
                let dst = self.reads.as_mut_ptr().add(at);
                for (k, r) in frame_reads.iter().enumerate() {
                    lowest = lowest.min(r.0);
                    dst.add(k).write(*r);
                }
                self.reads.set_len(at + frame_reads.len());
            }
            h = stacks::mix(h, w.st.ra);
            above = w.dep & BP_DEP != 0 || (w.dep & BP_RESTORED == 0 && above);
            self.rec.push(RecFrame {
                st: w.st,
                hash: h,
                min: lowest,
                rd_end: self.reads.len() as u32,
                bp_matters: above,
            });
            self.rec_ra_at -= 1;
            self.rec_ra[self.rec_ra_at] = w.st.ra;
        }
        // A truncated stack has no root; it cannot be continued next time.
        self.rec_valid = !truncated;
        // Remember this stack whole, unless it was cut (no root to verify):
        // its words now, its id once known.
        let way = self.snap_next[set] as usize;
        let s = &mut self.snaps[set * SNAPSHOT_WAYS + way];
        // Its words are reserved as the stacks it holds need them (32 at a
        // time); out of memory for them, the stack is not remembered.
        let need = self.reads.len().next_multiple_of(SNAPSHOT_STEP);
        let snap = !truncated
            && self.reads.len() <= SNAPSHOT_READS
            && (s.reads.capacity() >= need
                || s.reads.try_reserve_exact(need - s.reads.len()).is_ok());
        if snap {
            s.valid = false;
            s.first = first;
            s.bp_matters = self.rec.last().is_none_or(|f| f.bp_matters);
            s.reads.clear();
            s.reads.extend_from_slice(&self.reads);
        }
        let rec = &self.rec_ra[self.rec_ra_at..];
        let eq = |f: stacks::Frames| f.is(rec);
        let slot = (h as usize) % ID_CACHE;
        let id = if self.ids[slot].0 == h && eq(stacks::frames(stacks::entry(self.ids[slot].1))) {
            self.ids[slot].1
        } else {
            // A new stack shares its kept outer frames with the stack
            // captured before it (compared there, not trusted).
            let outer = (keep > 0).then(|| (self.rec_id, keep, &rec[rec.len() - keep..]));
            let Some(id) = stacks::intern_sharing(h, rec.len(), outer, &eq, |dst| {
                dst.copy_from_slice(&rec[..dst.len()]);
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
        if snap {
            let s = &mut self.snaps[set * SNAPSHOT_WAYS + way];
            s.id = id;
            s.valid = true;
            self.snap_next[set] = ((way + 1) % SNAPSHOT_WAYS) as u8;
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
    pub(super) fn capture_foreign(&mut self, hook_fp: u64) -> Option<Capture> {
        let first = first_state(hook_fp);
        let unwinder = self.sync_unwinder();
        self.rec_valid = false;
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
            self.tmp_reads.clear();
            self.past_copy = false;
            let mut st = first;
            let mut truncated = false;
            loop {
                if self.tmp.len() == self.max_depth {
                    truncated = true;
                    break;
                }
                let rd = self.tmp_reads.len() as u32;
                self.step_from = rd;
                let next = self.step(st, unwinder, mem);
                self.tmp.push(Walked {
                    st,
                    rd,
                    dep: self.last_dep,
                });
                match next {
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
                .fold(HASH_SEED, |h, w| stacks::mix(h, w.st.ra));
            // Frames are stored leaf first, as `tmp` holds them; the hash
            // folds from the root, as the record's does.
            let eq = |f: stacks::Frames| {
                f.len() == n && f.iter().zip(tmp.iter()).all(|(a, w)| a == w.st.ra)
            };
            return stacks::intern(h, n, &eq, |dst| {
                for (d, w) in dst.iter_mut().zip(tmp.iter()) {
                    *d = w.st.ra;
                }
            })
            .map(|id| Capture { id, truncated });
        }
    }

    /// Copies up to `want` bytes of this process's memory from `from` into
    /// `foreign`; returns how many were readable (at least the hook's own
    /// frame, 16 bytes).
    fn copy_foreign(&mut self, from: u64, want: usize) -> usize {
        if self.foreign.len() < want / 8
            && self
                .foreign
                .try_reserve_exact(want / 8 - self.foreign.len())
                .is_ok()
        {
            self.foreign.resize(want / 8, 0);
        }
        // Not past the end of the page range: up to the top of the address
        // space the kernel would refuse the whole read. Not past the copy
        // there is room for (memory ran out: the stack is cut there).
        let want = want
            .min((u64::MAX - from) as usize)
            .min(self.foreign.len() * 8)
            & !7;
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
}
