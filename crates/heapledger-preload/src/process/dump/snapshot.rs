//! A checkpoint's dump: what it takes while the program's threads are held
//! out of their hooks, and how it is written after they are let go.

use super::encode::{each_stack, gather, leaks, preamble, rest, Gathered, Sources, Totals};
use super::file::{FileSink, SINK_BUF};
use crate::data::counters::{self, StackMap, PEAK_TICKS, UNRECORDED};
use crate::data::stacks;
use crate::thread::freeze;
use alloc::vec::Vec;
use core::sync::atomic::Ordering;
use heapledger_wire::{Checkpoint, Encoder, Sink, StackCounters, Tag};

/// What a checkpoint takes while the threads are held out of their hooks
/// (`take_snapshot`), to write after they are let go (`encode_snapshot`).
pub(super) struct Snapshot {
    /// Every stack's counters, summed over the threads and encoded as the
    /// dump's `StackStats` records, in the order they are written, in a
    /// file of their own (see [`take_snapshot`]).
    stats: i32,
    g: Gathered,
    leaks: Vec<(u64, u64)>,
    totals: Totals,
}

/// Every counter of the process, taken with the threads held out of their
/// hooks (`thread::freeze`); None where they could not be held within
/// `limit_ns`, or the stacks' counters could not be written.
///
/// The stacks' counters are encoded while the threads are held, as the
/// dump will hold them (about 40 bytes a stack), into `stats`, a file
/// already unlinked (it leaves nothing behind, whatever ends the process)
/// in the dumps' folder. A copy of the largest table (112 bytes a stack and
/// its index), encoded after the threads were let go, was the recorder's
/// largest block: Python compiling its library (405 000 stacks) held 232 MB
/// at most, 184 MB at its end; the encoded counters in memory still took
/// 18 to 27 MB of 443 000 stacks at each checkpoint.
pub(super) fn take_snapshot(limit_ns: u64, stats: i32) -> Option<Snapshot> {
    let mut out = Encoder {
        sink: FileSink {
            fd: stats,
            buf: Vec::new(),
            err: 0,
        },
    };
    out.sink.buf.try_reserve_exact(SINK_BUF).ok()?;
    freeze::with_states_frozen(limit_ns, |states, max_threads| {
        let epoch = counters::peak();
        let base = (0..states.len()).max_by_key(|&i| states[i].stacks.len());
        let mut g = gather(states, epoch, base);
        each_stack(&Sources::new(states, base, &g), epoch, &mut |id, c| {
            out.stack_counters(id as u64, c)
        });
        out.sink.flush();
        // The other threads' merged counters are in `stats` now.
        g.merged = StackMap::new();
        let (leaks, alive_total) = leaks();
        (out.sink.err == 0).then(|| Snapshot {
            stats,
            g,
            leaks,
            totals: Totals {
                epoch,
                peak_ticks: PEAK_TICKS.load(Ordering::Relaxed),
                alive_total,
                max_threads,
                unrecorded: UNRECORDED.load(Ordering::Relaxed),
            },
        })
    })
    .flatten()
}

/// A checkpoint's dump: the final dump's records, from `snap`, with
/// `Tag::Checkpoint` after the header; false where its counters could not
/// be read back.
pub(super) fn encode_snapshot(
    e: &mut Encoder<FileSink>,
    snap: Snapshot,
    ckpt: Checkpoint,
    label: Option<&str>,
    see: &mut dyn FnMut(u32, &StackCounters),
) -> bool {
    let start_ticks = preamble(e, ckpt.ticks, Some(ckpt));
    if let Some(label) = label {
        e.tag(Tag::Snapshot);
        e.bytes(label.as_bytes());
    }
    // Each stack's frames (published, never changed: read now), then its
    // counters as encoded while the threads were held, read back in turn.
    let (mut cur, mut prev): (Vec<u64>, Vec<u64>) = (Vec::new(), Vec::new());
    let mut buf: Vec<u8> = Vec::new();
    if buf.try_reserve_exact(SINK_BUF).is_err() {
        return false;
    }
    // SAFETY: a descriptor of ours.
    if unsafe { libc::lseek(snap.stats, 0, libc::SEEK_SET) } != 0 {
        return false;
    }
    let mut at = 0;
    let mut ended = false;
    loop {
        match StatsRecord::read(&buf, at) {
            Some(r) => {
                stacks::frames(stacks::entry(r.id)).copy_to(&mut cur);
                e.stack(r.id as u64, &cur, &prev);
                core::mem::swap(&mut cur, &mut prev);
                e.sink.put(&buf[at..r.end]);
                see(r.id, &r.counters());
                at = r.end;
            }
            None if ended => break,
            None => {
                // A record cut by the end of what was read: the rest first.
                buf.drain(..at);
                at = 0;
                let have = buf.len();
                buf.resize(SINK_BUF, 0);
                // SAFETY: reading into our buffer past its kept bytes.
                let n = unsafe {
                    libc::read(
                        snap.stats,
                        buf[have..].as_mut_ptr() as *mut _,
                        SINK_BUF - have,
                    )
                };
                if n < 0 {
                    return false;
                }
                buf.truncate(have + n as usize);
                ended = n == 0;
            }
        }
    }
    if at != buf.len() {
        return false;
    }
    rest(e, snap.g, &snap.leaks, &snap.totals, start_ticks, false);
    true
}

/// A `StackStats` record in a snapshot's bytes (see `Encoder::stack_counters`).
struct StatsRecord {
    id: u32,
    /// Allocations (count, bytes) and frees (count, bytes).
    alloc: (u64, u64),
    free: (u64, u64),
    /// Where the record ends.
    end: usize,
}

impl StatsRecord {
    /// The record at `at`, if one starts there.
    fn read(b: &[u8], at: usize) -> Option<StatsRecord> {
        if b.get(at) != Some(&(Tag::StackStats as u8)) {
            return None;
        }
        let mut at = at + 1;
        let mut next = || {
            let (mut v, mut shift) = (0u64, 0);
            loop {
                let byte = *b.get(at)?;
                at += 1;
                v |= u64::from(byte & 0x7f) << shift;
                shift += 7;
                if byte & 0x80 == 0 {
                    return Some(v);
                }
            }
        };
        let id = next()? as u32;
        // Five (count, min, max, sum): allocations, frees, lifetimes,
        // mmap, munmap; then seven numbers.
        let mut v = [0u64; 27];
        for x in v.iter_mut() {
            *x = next()?;
        }
        Some(StatsRecord {
            id,
            alloc: (v[0], v[3]),
            free: (v[4], v[7]),
            end: at,
        })
    }

    /// What the series needs of the counters (see `series::Record::see`).
    fn counters(&self) -> StackCounters {
        let mut c = StackCounters::default();
        (c.totals.alloc.count, c.totals.alloc.sum) = self.alloc;
        (c.totals.free.count, c.totals.free.sum) = self.free;
        c
    }
}
