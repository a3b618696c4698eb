//! The process's counters per stack, packed: what the threads that ended
//! and the tables threads handed over (`spill.rs`) gave the retired state.
//! Nothing counts an event there, so its entries need not be the 104-byte
//! `PerStack` a thread's table keeps for speed: four threads going round
//! the same half a million stacks left them all there, 54 MB of entries
//! and their index, more than the stacks' own table and frames.
//!
//! Here each stack is a row of LEB128 numbers (about 30 bytes): its id's
//! distance from the row before, a byte of flags saying which groups of
//! counters follow, and those counters, each range as its minimum and its
//! width, the bytes freed and at the peak as their distance from the bytes
//! alive (most often 0). Rows come in runs sorted by id, one per table
//! handed over (in the order of its ids, from the table's index), and a
//! run is merged with the one before while it holds as many rows (a
//! binary counter, as `data::runs` does for a thread's own rows): a stack's
//! rows in several runs become one. Readers walk the runs side by side
//! ([`Packed::cursor`]), in the order of the ids.
//!
//! Each run keeps the peak at which its rows were handed over (its epoch),
//! and each row its bytes at that peak, as `Full::at_peak_final` tells
//! them: a row of an older run stands, at any later peak, for its bytes
//! alive, so that runs merge as `Full::absorb` merges entries.

use super::spill::ENTRIES;
use super::StackMap;
use crate::data::counters::Full;
use crate::data::stacks::{self, StackId};
use alloc::vec::Vec;
use core::cmp::Ordering::{Equal, Greater, Less};
use core::sync::atomic::Ordering;
use row::{put_row, room, Raw, SegIter, MAX_ROW};

mod row;

/// The process's counters per stack, packed (see the top of this file).
#[derive(Default)]
pub struct Packed {
    /// Oldest first.
    runs: Vec<Run>,
    /// Its part of [`ENTRIES`]: its rows, at most the distinct stacks.
    counted: u64,
}

/// Rows sorted by id, in segments.
struct Run {
    /// Sorted, each segment's ids above the one's before.
    segs: Vec<Seg>,
    rows: usize,
}

/// Rows a segment holds at most. Two runs merge a segment at a time: a
/// segment whose ids meet none of the other run's is moved as it is, and
/// only those that meet are merged row by row. Threads running the same
/// code meet new stacks at about the same time, and hand over the stacks
/// they met lately: rows of a narrow range of ids, which meet few
/// segments of the runs before (merged whole, a run of half a million
/// stacks was written again at each of its merges: 6.3 M rows merged for
/// 2.5 M handed over, a quarter of the recorder's time in `stacks 500000
/// 500000 0 4`).
const SEG_ROWS: usize = 4096;

/// Rows of a run, their first's distance counted from id 0.
struct Seg {
    bytes: Vec<u8>,
    rows: usize,
    first: StackId,
    last: StackId,
    /// The peak when its rows were handed over or last merged (see the top).
    epoch: u64,
}

impl Packed {
    pub const fn new() -> Packed {
        Packed {
            runs: Vec::new(),
            counted: 0,
        }
    }

    /// Rows in all runs (a stack in several runs counts in each).
    pub fn rows(&self) -> usize {
        self.runs.iter().map(|r| r.rows).sum()
    }

    /// Adds the entries of `from` (a thread's table, handed over or of a
    /// thread that ended) as a run, at the peak `epoch_now`, then merges
    /// runs; `from` is left as it was (the caller empties it). False where
    /// memory ran out: the entries are not added (recording stops, as
    /// where the arena fails), and the runs stay right.
    pub fn push_map(&mut self, from: &StackMap, epoch_now: u64) -> bool {
        if from.is_empty() {
            return true;
        }
        if self.runs.try_reserve(1).is_err() {
            return false;
        }
        // The entries in the order of their ids, fetched ahead: a table's
        // entries lie in the order they were made, and read in the order
        // of the ids each missed the cache (a table of 65 536 entries is 7
        // MB): half the time of a hand-over (`tests/packed.rs`'
        // `time_hand_overs`: 320 ms, 170 so).
        let mut order: Vec<(StackId, u32)> = Vec::new();
        if order.try_reserve_exact(from.len()).is_err() {
            return false;
        }
        order.extend(from.iter_by_id().map(|(id, at)| (id, at as u32)));
        let mut w = SegWriter::new(epoch_now);
        for (k, &(id, at)) in order.iter().enumerate() {
            if let Some(&(_, ahead)) = order.get(k + 8) {
                from.prefetch(ahead as usize);
            }
            if w.put_full(id, &from.full(at as usize)).is_err() {
                return false;
            }
        }
        drop(order);
        let Ok((segs, rows)) = w.finish() else {
            return false;
        };
        self.runs.push(Run { segs, rows });
        while let [.., a, b] = &self.runs[..] {
            if b.rows < a.rows || !self.merge_last_two() {
                break;
            }
        }
        self.recount();
        true
    }

    /// Keeps [`ENTRIES`] counting this map's rows, as many as there are
    /// distinct stacks at most (rows of one stack in two runs, not yet
    /// merged, are one stack's counters).
    fn recount(&mut self) {
        let now = (self.rows() as u64).min(u64::from(stacks::count()));
        let was = core::mem::replace(&mut self.counted, now);
        let _ = ENTRIES.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |e| {
            Some((e + now).saturating_sub(was))
        });
    }

    /// Merges the last two runs into one, a row for each id: segments
    /// that meet none of the other run's moved, the others merged row by
    /// row at the latest of their peaks. False where there is no memory
    /// for the merged rows (the runs are left as they were).
    fn merge_last_two(&mut self) -> bool {
        let n = self.runs.len();
        let (a, b) = (&self.runs[n - 2].segs, &self.runs[n - 1].segs);
        // Groups of segments whose ids meet, in order: (segments of a,
        // of b, their rows merged where they are more than one).
        let mut plan: Vec<(usize, usize, Option<Vec<Seg>>)> = Vec::new();
        let (mut i, mut j) = (0, 0);
        while i < a.len() || j < b.len() {
            let (i0, j0) = (i, j);
            let mut hi = if j == b.len() || (i < a.len() && a[i].first <= b[j].first) {
                i += 1;
                a[i - 1].last
            } else {
                j += 1;
                b[j - 1].last
            };
            loop {
                if i < a.len() && a[i].first <= hi {
                    hi = hi.max(a[i].last);
                    i += 1;
                } else if j < b.len() && b[j].first <= hi {
                    hi = hi.max(b[j].last);
                    j += 1;
                } else {
                    break;
                }
            }
            let merged = if i - i0 + j - j0 == 1 {
                None
            } else {
                match merge_segs(&a[i0..i], &b[j0..j]) {
                    Ok(m) => Some(m),
                    Err(()) => return false,
                }
            };
            if plan.try_reserve(1).is_err() {
                return false;
            }
            plan.push((i - i0, j - j0, merged));
        }
        let mut segs = Vec::new();
        if segs.try_reserve(a.len() + b.len()).is_err() {
            return false;
        }
        let Some(Run { segs: b, .. }) = self.runs.pop() else {
            return false;
        };
        let a = core::mem::take(&mut self.runs[n - 2].segs);
        let (mut a, mut b) = (a.into_iter(), b.into_iter());
        for (na, nb, merged) in plan {
            match merged {
                Some(m) => {
                    a.by_ref().take(na).for_each(drop);
                    b.by_ref().take(nb).for_each(drop);
                    segs.extend(m);
                }
                None => segs.extend(a.by_ref().take(na).chain(b.by_ref().take(nb))),
            }
        }
        let rows = segs.iter().map(|s| s.rows).sum();
        self.runs[n - 2] = Run { segs, rows };
        true
    }

    /// A reader of every stack's counters, in the order of the ids.
    pub fn cursor(&self) -> Cursor<'_> {
        Cursor {
            runs: self
                .runs
                .iter()
                .map(|r| {
                    let mut it = SegsIter::new(&r.segs);
                    let next = it.next_raw();
                    (it, next)
                })
                .collect(),
        }
    }

    /// Empties the map (the counts forgotten: `heapledger_reset`), which
    /// leaves [`ENTRIES`].
    pub fn clear(&mut self) {
        self.runs = Vec::new();
        self.recount();
    }
}

#[cfg(test)]
std::thread_local! {
    /// Rows this thread's merges wrote again (tests: segments that meet
    /// no other's move without being written again).
    pub static REWRITTEN: core::cell::Cell<usize> = const { core::cell::Cell::new(0) };
}

/// The rows of segments `a` and `b` (each sorted, ids meeting), merged
/// into new segments at the latest of their peaks.
fn merge_segs(a: &[Seg], b: &[Seg]) -> Result<Vec<Seg>, ()> {
    let epoch = a.iter().chain(b).map(|s| s.epoch).max().unwrap_or(0);
    let mut w = SegWriter::new(epoch);
    let (mut x, mut y) = (SegsIter::new(a), SegsIter::new(b));
    let (mut p, mut q) = (x.next_raw(), y.next_raw());
    loop {
        let side = match (&p, &q) {
            (None, None) => break,
            (Some(r), Some(t)) => r.0.id.cmp(&t.0.id),
            (Some(_), None) => Less,
            (None, Some(_)) => Greater,
        };
        match (side, &p, &q) {
            (Equal, Some((r, er)), Some((t, et))) => {
                // A stack in both: its counters added up.
                let mut f = r.full(*er);
                f.absorb(&t.full(*et), epoch);
                w.put_full(r.id, &f)?;
                p = x.next_raw();
                q = y.next_raw();
            }
            (Less, Some((r, er)), _) => {
                w.put_raw(r, *er < epoch)?;
                p = x.next_raw();
            }
            (_, _, Some((t, et))) => {
                w.put_raw(t, *et < epoch)?;
                q = y.next_raw();
            }
            _ => break,
        }
    }
    let (segs, rows) = w.finish()?;
    #[cfg(test)]
    REWRITTEN.with(|r| r.set(r.get() + rows));
    let _ = rows;
    Ok(segs)
}

/// Writes rows into segments of at most [`SEG_ROWS`], at one peak.
struct SegWriter {
    segs: Vec<Seg>,
    /// The segment being written, and its rows.
    cur: Vec<u8>,
    rows: usize,
    all: usize,
    first: StackId,
    prev: StackId,
    epoch: u64,
}

impl SegWriter {
    fn new(epoch: u64) -> Self {
        SegWriter {
            segs: Vec::new(),
            cur: Vec::new(),
            rows: 0,
            all: 0,
            first: 0,
            prev: 0,
            epoch,
        }
    }

    /// Room for the next row, of stack `id`; the distance to write.
    fn start(&mut self, id: StackId) -> Result<u32, ()> {
        room(&mut self.cur, MAX_ROW)?;
        if self.rows == 0 {
            self.first = id;
            self.prev = 0;
        }
        Ok(id - self.prev)
    }

    fn done(&mut self, id: StackId) -> Result<(), ()> {
        self.prev = id;
        self.rows += 1;
        self.all += 1;
        if self.rows == SEG_ROWS {
            self.close()?;
        }
        Ok(())
    }

    fn put_full(&mut self, id: StackId, f: &Full) -> Result<(), ()> {
        let dist = self.start(id)?;
        put_row(&mut self.cur, dist, f, self.epoch);
        self.done(id)
    }

    /// A row as it is, or as the same row at a later peak where `older`.
    fn put_raw(&mut self, r: &Raw, older: bool) -> Result<(), ()> {
        let dist = self.start(r.id)?;
        r.copy(&mut self.cur, dist, older);
        self.done(r.id)
    }

    /// Ends the segment being written: its bytes are copied to a block of
    /// their size (the writer's grows by a quarter at a time).
    fn close(&mut self) -> Result<(), ()> {
        if self.rows == 0 {
            return Ok(());
        }
        let mut bytes = Vec::new();
        bytes.try_reserve_exact(self.cur.len()).map_err(|_| ())?;
        self.segs.try_reserve(1).map_err(|_| ())?;
        bytes.extend_from_slice(&self.cur);
        self.segs.push(Seg {
            bytes,
            rows: self.rows,
            first: self.first,
            last: self.prev,
            epoch: self.epoch,
        });
        self.cur.clear();
        self.rows = 0;
        Ok(())
    }

    /// The segments written, and their rows.
    fn finish(mut self) -> Result<(Vec<Seg>, usize), ()> {
        self.close()?;
        Ok((self.segs, self.all))
    }
}

/// Reads a [`Packed`] map's counters, asked in the order of the ids.
pub struct Cursor<'a> {
    /// Each run's rows, and its next row with its segment's peak.
    runs: Vec<(SegsIter<'a>, Option<(Raw<'a>, u64)>)>,
}

impl Cursor<'_> {
    /// The counters of `id`, their rows in every run merged at the peak
    /// `epoch` (the latest); ids must be asked in increasing order (rows
    /// of the ids skipped are passed).
    pub fn take(&mut self, id: StackId, epoch: u64) -> Option<Full> {
        let mut sum: Option<Full> = None;
        for (it, next) in self.runs.iter_mut() {
            while let Some((r, e)) = next {
                if r.id > id {
                    break;
                }
                if r.id == id {
                    let f = r.full(*e);
                    match sum.as_mut() {
                        None => sum = Some(f),
                        Some(s) => s.absorb(&f, epoch),
                    }
                }
                *next = it.next_raw();
            }
        }
        sum
    }
}

/// The rows of a run's segments, in order, each with its segment's peak.
struct SegsIter<'a> {
    segs: core::slice::Iter<'a, Seg>,
    cur: SegIter<'a>,
    epoch: u64,
}

impl<'a> SegsIter<'a> {
    fn new(segs: &'a [Seg]) -> Self {
        SegsIter {
            segs: segs.iter(),
            cur: SegIter::new(&[], 0),
            epoch: 0,
        }
    }

    #[inline]
    fn next_raw(&mut self) -> Option<(Raw<'a>, u64)> {
        loop {
            if let Some(r) = self.cur.next_raw() {
                return Some((r, self.epoch));
            }
            let s = self.segs.next()?;
            self.cur = SegIter::new(&s.bytes, s.rows);
            self.epoch = s.epoch;
        }
    }
}
