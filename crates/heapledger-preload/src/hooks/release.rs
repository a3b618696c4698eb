//! Releasing a block (free, realloc): finding it in the live table
//! (skipping the table for blocks certainly not recorded: `--sample-every`
//! and `--only-lib` mark the recorded ones in the sampler's filter),
//! charging it to its stack, or counting it apart (inherited, never seen).

use super::alloc::stackless;
use crate::base::clock::ticks;
use crate::base::{config, degrade};
use crate::data::counters::move_level;
use crate::data::timeline;
use crate::data::{live, only, sampler};
use crate::thread::state::ThreadState;

/// Whether recorded blocks are marked in the sampler's filter, and the
/// others not in the live table at all.
#[inline(always)]
pub(super) fn filtered() -> bool {
    config::get().sample_every != 0 || only::active()
}

/// Weights of a recorded block (see `on_alloc`).
#[inline(always)]
pub(super) fn weights(e: &live::Entry) -> (u64, u64) {
    let mean = config::get().sample_every;
    if mean == 0 {
        (1, e.size)
    } else {
        (e.weight as u64, sampler::bytes_weight(e.size, mean))
    }
}

/// Removes a block from the live table, skipping the table for blocks that
/// certainly were not sampled.
#[inline(always)]
pub(super) fn take_live(p: u64) -> Option<live::Entry> {
    if filtered() {
        if !sampler::maybe(p) {
            return None;
        }
        let e = live::remove(p)?;
        sampler::unmark(p);
        return Some(e);
    }
    live::remove(p)
}

/// A freed block that is not in the live table: in a forked child, a
/// block inherited from the parent (forgotten, and counted apart: see
/// `live::inherited`), else a block never seen (counted as such unless
/// sampling, where most blocks are not in the table). Its size, if known.
#[cold]
#[inline(never)]
pub(super) fn not_live(st: &mut ThreadState, p: u64) -> u64 {
    let sampling = st.sampler.is_some() || only::active();
    if sampling && !sampler::maybe(p) {
        return 0;
    }
    match live::inherited::take(p) {
        Some(e) => {
            if sampling {
                sampler::unmark(p);
            }
            e.size
        }
        None => {
            if !sampling {
                st.unknown_frees += 1;
            }
            0
        }
    }
}

/// Charges a released block to the stack that allocated it.
#[inline(always)]
pub(super) fn on_release(st: &mut ThreadState, e: &live::Entry, mut now: u64) {
    if now == 0 && e.time != 0 {
        now = ticks();
    }
    let (cw, bw) = weights(e);
    // The block's bytes leave the process's level whatever follows.
    let m = move_level(-(bw as i64), now);
    timeline::fall(m.level);
    st.moves[2] += cw;
    st.moves[3] += bw;
    let Some(mut c) = st.stacks.get(e.stack) else {
        // No memory for this thread's counters of the stack: recording
        // stops.
        degrade::stop(degrade::Cause::RecorderMemory);
        return;
    };
    c.add_free(e.size, cw, bw);
    if e.addr == core::mem::take(&mut st.last_alloc) {
        c.add_temporary(cw);
    }
    // A block without a time (the empty stack's, or not timed: see
    // `LIFETIME_HEAD`) has no lifetime, even when this free's own duration
    // is measured and `now` was read for it.
    let life = (now != 0 && e.time != 0).then(|| {
        let lt = now.wrapping_sub(e.time).min(i64::MAX as u64);
        let lw = e.weight as u64;
        c.add_lifetime(lt, lw, lt.saturating_mul(lw));
        (lt, lw)
    });
    let ps = c.ps;
    // (A stackless block's bytes alive are in the sums already.)
    if !stackless(e.stack) {
        ps.add_alive(e.stack, -(bw as i64), &m);
    }
    if let Some((lt, lw)) = life {
        st.scatter_free(e.size, lt, lw);
    }
}
