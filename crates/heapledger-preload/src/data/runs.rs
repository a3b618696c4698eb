//! Rows of (stack id, allocations, bytes allocated), packed: sorted runs
//! of LEB128 numbers, each row its id's distance from the row before, its
//! allocations and its bytes. A thread's rows (`thread::kept`) are made
//! from its table in the order of the ids, a run at a time (each time the
//! thread hands its table over, and when it ends); half a million stacks
//! allocated once each take 4 to 6 bytes a row here, 24 as tuples.
//!
//! A run is merged with the one before while it holds as many rows (a
//! binary counter): a thread that hands its table over k times keeps
//! about log2(k) runs, and a stack met again after a hand-over is one row
//! again once its runs merge. Rows of one id in two runs are left for the
//! reader to add up.

use alloc::vec::Vec;

/// (stack id, allocations, bytes allocated).
pub type Row = (u32, u64, u64);

/// The most bytes one row takes: 5 for the id's distance, 10 for each
/// number.
pub const MAX_ROW: usize = 25;

#[derive(Default)]
pub struct Runs {
    bytes: Vec<u8>,
    /// Each run, oldest first.
    runs: Vec<Run>,
}

#[derive(Clone, Copy)]
struct Run {
    /// Its first byte.
    start: usize,
    rows: usize,
    /// Its lowest id and its highest.
    first: u32,
    last: u32,
}

impl Runs {
    pub const fn new() -> Runs {
        Runs {
            bytes: Vec::new(),
            runs: Vec::new(),
        }
    }

    /// The bytes held (what a budget counts).
    pub fn capacity(&self) -> usize {
        self.bytes.capacity() + self.runs.capacity() * core::mem::size_of::<Run>()
    }

    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// Adds a run of `rows`, ids strictly rising, then merges runs as the
    /// type says. Where memory runs out, false, and the rows are as they
    /// were before the call (a merge that cannot be made is left undone:
    /// the rows stay right).
    pub fn push_run(&mut self, rows: impl Iterator<Item = Row>) -> bool {
        if self.runs.try_reserve(1).is_err() {
            return false;
        }
        let start = self.bytes.len();
        let mut n = 0;
        let (mut first, mut prev) = (0u32, 0u32);
        for (id, count, bytes) in rows {
            if room(&mut self.bytes, MAX_ROW).is_err() {
                self.bytes.truncate(start);
                return false;
            }
            put_row(&mut self.bytes, id - prev, count, bytes);
            if n == 0 {
                first = id;
            }
            prev = id;
            n += 1;
        }
        if n == 0 {
            return true;
        }
        self.runs.push(Run {
            start,
            rows: n,
            first,
            last: prev,
        });
        while let [.., a, b] = self.runs[..] {
            if b.rows < a.rows {
                break;
            }
            if a.last < b.first {
                self.join_last_two();
            } else if !self.merge_last_two() {
                break;
            }
        }
        true
    }

    /// Makes the last two runs one, where each id of the last is above
    /// every id of the one before: only the last's first distance changes
    /// (threads going round the same stacks hand them over in the order
    /// of their ids, and merging such runs row by row was a tenth of the
    /// recorder's time).
    fn join_last_two(&mut self) {
        let (Some(b), Some(&a)) = (self.runs.last().copied(), self.runs.iter().rev().nth(1)) else {
            return;
        };
        self.runs.pop();
        let old = varint_len(u64::from(b.first));
        let mut new = Vec::new();
        put(&mut new, u64::from(b.first - a.last));
        // The new distance is no longer than the old: move the rest back.
        let at = b.start;
        self.bytes[at..at + new.len()].copy_from_slice(&new);
        self.bytes.copy_within(at + old.., at + new.len());
        self.bytes.truncate(self.bytes.len() - (old - new.len()));
        if let Some(a) = self.runs.last_mut() {
            a.rows += b.rows;
            a.last = b.last;
        }
    }

    /// Merges the last two runs into one, a row for each id; false where
    /// there is no memory for the merged run.
    fn merge_last_two(&mut self) -> bool {
        let rb = self.runs[self.runs.len() - 1];
        let ra = self.runs[self.runs.len() - 2];
        let (start, mid, na, nb) = (ra.start, rb.start, ra.rows, rb.rows);
        let mut out = Vec::new();
        if out.try_reserve_exact(self.bytes.len() - start).is_err() {
            return false;
        }
        let mut a = RunIter::new(&self.bytes[start..mid], na).peekable();
        let mut b = RunIter::new(&self.bytes[mid..], nb).peekable();
        let (mut n, mut prev) = (0, 0u32);
        loop {
            let (x, y) = (a.peek().copied(), b.peek().copied());
            let row = match (x, y) {
                (Some(x), Some(y)) if x.0 == y.0 => {
                    a.next();
                    b.next();
                    (x.0, x.1 + y.1, x.2 + y.2)
                }
                (Some(x), Some(y)) if x.0 < y.0 => {
                    a.next();
                    x
                }
                (Some(x), None) => {
                    a.next();
                    x
                }
                (_, Some(y)) => {
                    b.next();
                    y
                }
                (None, None) => break,
            };
            // The merged run is no longer than the two: a row's distance
            // is at most the sum of the two it stands for.
            put_row(&mut out, row.0 - prev, row.1, row.2);
            prev = row.0;
            n += 1;
        }
        self.bytes.truncate(start);
        self.bytes.extend_from_slice(&out);
        self.runs.pop();
        let last = self.runs.len() - 1;
        self.runs[last] = Run {
            start,
            rows: n,
            first: ra.first.min(rb.first),
            last: ra.last.max(rb.last),
        };
        true
    }

    /// Every row, run by run (an id may have a row in several runs).
    pub fn iter(&self) -> impl Iterator<Item = Row> + '_ {
        self.runs.iter().enumerate().flat_map(move |(k, r)| {
            let end = self.runs.get(k + 1).map_or(self.bytes.len(), |r| r.start);
            RunIter::new(&self.bytes[r.start..end], r.rows)
        })
    }
}

/// Room for `n` more bytes, grown by a quarter at a time (doubling took
/// twice the memory the rows need, counted against the budget).
fn room(v: &mut Vec<u8>, n: usize) -> Result<(), ()> {
    if v.capacity() - v.len() >= n {
        return Ok(());
    }
    v.try_reserve_exact(n.max(v.capacity() / 4).max(4096))
        .map_err(|_| ())
}

fn put_row(out: &mut Vec<u8>, dist: u32, count: u64, bytes: u64) {
    put(out, u64::from(dist));
    put(out, count);
    put(out, bytes);
}

fn varint_len(v: u64) -> usize {
    (64 - v.max(1).leading_zeros() as usize).div_ceil(7)
}

fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

struct RunIter<'a> {
    b: &'a [u8],
    left: usize,
    id: u32,
}

impl<'a> RunIter<'a> {
    fn new(b: &'a [u8], rows: usize) -> Self {
        RunIter {
            b,
            left: rows,
            id: 0,
        }
    }

    fn get(&mut self) -> u64 {
        let mut v = 0u64;
        let mut shift = 0;
        while let Some((&x, rest)) = self.b.split_first() {
            self.b = rest;
            v |= u64::from(x & 0x7f) << shift;
            shift += 7;
            if x < 0x80 || shift >= 64 {
                break;
            }
        }
        v
    }
}

impl Iterator for RunIter<'_> {
    type Item = Row;

    fn next(&mut self) -> Option<Row> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        self.id = self.id.wrapping_add(self.get() as u32);
        let count = self.get();
        let bytes = self.get();
        Some((self.id, count, bytes))
    }
}
