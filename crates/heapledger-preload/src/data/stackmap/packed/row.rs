//! A row of the packed counters (see `mod.rs`): its bytes, written and
//! read.

use crate::data::counters::Full;
use crate::data::stacks::StackId;
use alloc::vec::Vec;
use core::mem::MaybeUninit;
use heapledger_wire::MinMaxSum;

/// Groups of counters a row holds (its flags byte).
const ALLOC: u8 = 1;
const FREE: u8 = 2;
const LIFE: u8 = 4;
const TEMP: u8 = 8;
/// mmap, munmap, zero-sized calls and reallocs: rare.
const RARE: u8 = 16;
/// Bytes alive other than the sums say (not seen; kept exact anyway).
const ALIVE: u8 = 32;
/// Bytes not yet added to the stack's shared counter (0 once handed over).
const FLUSH: u8 = 64;
/// Bytes at the peak other than the bytes alive.
const PEAK: u8 = 128;

/// The most bytes a row takes: its distance (5), flags (1), four ranges
/// of four numbers, five numbers of the rare group and four others.
pub(super) const MAX_ROW: usize = 5 + 1 + 16 * 10 + 5 * 10 + 4 * 10;

/// Room for `n` more bytes, grown by a quarter at a time.
pub(super) fn room(v: &mut Vec<u8>, n: usize) -> Result<(), ()> {
    if v.capacity() - v.len() >= n {
        return Ok(());
    }
    v.try_reserve_exact(n.max(v.capacity() / 4).max(4096))
        .map_err(|_| ())
}

/// Writes a row into the room a run's bytes have beyond their length
/// (`room` makes [`MAX_ROW`] bytes of it before each row): no check of the
/// room a byte, and no buffer to clear and copy (those took a tenth of the
/// time handed-over tables took).
struct Writer<'a> {
    room: &'a mut [MaybeUninit<u8>],
    n: usize,
}

impl<'a> Writer<'a> {
    fn new(v: &'a mut Vec<u8>) -> Self {
        Writer {
            room: v.spare_capacity_mut(),
            n: 0,
        }
    }

    #[inline(always)]
    fn byte(&mut self, x: u8) {
        if let Some(b) = self.room.get_mut(self.n) {
            b.write(x);
            self.n += 1;
        }
    }

    #[inline(always)]
    fn put(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.byte(v as u8 | 0x80);
            v >>= 7;
        }
        self.byte(v as u8);
    }

    #[inline(always)]
    fn range(&mut self, m: &MinMaxSum) {
        self.put(m.count);
        self.put(m.sum);
        self.put(m.min);
        self.put(m.max.wrapping_sub(m.min));
    }

    fn slice(&mut self, b: &[u8]) {
        if let Some(dst) = self.room.get_mut(self.n..self.n + b.len()) {
            for (d, &x) in dst.iter_mut().zip(b) {
                d.write(x);
            }
            self.n += b.len();
        }
    }

    /// The bytes written, now part of `v` (the vector `new` was given).
    fn commit(self, v_len: usize) -> usize {
        v_len + self.n
    }
}

/// Puts a row into `out` with `f`, which writes it (see [`Writer`]).
#[inline(always)]
fn write(out: &mut Vec<u8>, f: impl FnOnce(&mut Writer)) {
    debug_assert!(out.capacity() - out.len() >= MAX_ROW, "room for a row");
    let len = out.len();
    let mut w = Writer::new(out);
    f(&mut w);
    let new_len = w.commit(len);
    // SAFETY: the writer initialised the bytes from `len` to `new_len`,
    // within the vector's capacity (it wrote only into its spare room).
    unsafe { out.set_len(new_len) };
}

fn zig(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzig(v: u64) -> i64 {
    (v >> 1) as i64 ^ -((v & 1) as i64)
}

/// The bytes alive that an entry's sums say (see `PerStack::alive`).
fn sums_alive(f: &Full) -> i64 {
    f.t.alloc.sum.wrapping_sub(f.t.free.sum) as i64
}

/// Puts the row of `f`, `dist` ids after the row before, in a run of the
/// peak `epoch`.
pub(super) fn put_row(out: &mut Vec<u8>, dist: u32, f: &Full, epoch: u64) {
    let t = &f.t;
    let at_peak = f.at_peak_final(epoch);
    let rare = t.mmap.count != 0
        || t.munmap.count != 0
        || t.zeros != 0
        || t.realloc_count != 0
        || t.realloc_delta != 0;
    let bit = |set: bool, flag: u8| if set { flag } else { 0 };
    let flags = bit(t.alloc.count != 0, ALLOC)
        | bit(t.free.count != 0, FREE)
        | bit(t.lifetime.count != 0, LIFE)
        | bit(t.temporary != 0, TEMP)
        | bit(rare, RARE)
        | bit(f.alive != sums_alive(f), ALIVE)
        | bit(f.flushed != f.alive, FLUSH)
        | bit(at_peak != f.alive, PEAK);
    write(out, |w| {
        w.put(u64::from(dist));
        w.byte(flags);
        if flags & ALLOC != 0 {
            w.range(&t.alloc);
        }
        if flags & FREE != 0 {
            w.range(&t.free);
        }
        if flags & LIFE != 0 {
            w.range(&t.lifetime);
        }
        if flags & TEMP != 0 {
            w.put(t.temporary);
        }
        if flags & RARE != 0 {
            w.range(&t.mmap);
            w.range(&t.munmap);
            w.put(t.zeros);
            w.put(t.realloc_count);
            w.put(zig(t.realloc_delta));
        }
        if flags & ALIVE != 0 {
            w.put(zig(f.alive.wrapping_sub(sums_alive(f))));
        }
        if flags & FLUSH != 0 {
            w.put(zig(f.alive.wrapping_sub(f.flushed)));
        }
        if flags & PEAK != 0 {
            w.put(zig(f.alive.wrapping_sub(at_peak)));
        }
    });
}

/// The rows of one segment, in order.
pub(super) struct SegIter<'a> {
    b: &'a [u8],
    left: usize,
    id: StackId,
}

/// A row as its bytes: its id, flags and the numbers after them.
pub(super) struct Raw<'a> {
    pub(super) id: StackId,
    flags: u8,
    body: &'a [u8],
}

/// How many numbers follow a row's flags.
fn numbers(flags: u8) -> usize {
    let n = |flag: u8, k: usize| if flags & flag != 0 { k } else { 0 };
    n(ALLOC, 4)
        + n(FREE, 4)
        + n(LIFE, 4)
        + n(TEMP, 1)
        + n(RARE, 11)
        + n(ALIVE, 1)
        + n(FLUSH, 1)
        + n(PEAK, 1)
}

impl<'a> SegIter<'a> {
    /// The `rows` rows of a segment's bytes `b`.
    pub(super) fn new(b: &'a [u8], rows: usize) -> Self {
        SegIter {
            b,
            left: rows,
            id: 0,
        }
    }

    /// The next row, its numbers not read.
    #[inline]
    pub(super) fn next_raw(&mut self) -> Option<Raw<'a>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        self.id = self
            .id
            .wrapping_add(Numbers(self.b).get_from(&mut self.b) as StackId);
        let (&flags, rest) = self.b.split_first()?;
        // The body ends after as many bytes below 0x80 as it has numbers.
        let mut k = numbers(flags);
        let mut len = 0;
        while k > 0 && len < rest.len() {
            k -= (rest[len] < 0x80) as usize;
            len += 1;
        }
        let (body, rest) = rest.split_at(len);
        self.b = rest;
        Some(Raw {
            id: self.id,
            flags,
            body,
        })
    }
}

impl Raw<'_> {
    /// Puts this row, `dist` ids after the row before, into a run of a
    /// later peak where `older` (its bytes at the peak are then its bytes
    /// alive: the last number and its flag go).
    #[inline]
    pub(super) fn copy(&self, out: &mut Vec<u8>, dist: u32, older: bool) {
        let mut body = self.body;
        let mut flags = self.flags;
        if older && flags & PEAK != 0 {
            flags &= !PEAK;
            // Its last number: the bytes before the last byte below 0x80
            // that ends another number.
            let end = body.len() - 1;
            let start = body[..end]
                .iter()
                .rposition(|&x| x < 0x80)
                .map_or(0, |p| p + 1);
            body = &body[..start];
        }
        write(out, |w| {
            w.put(u64::from(dist));
            w.byte(flags);
            w.slice(body);
        });
    }

    /// The row's counters, in a run of the peak `epoch`.
    pub(super) fn full(&self, epoch: u64) -> Full {
        let mut n = Numbers(self.body);
        let flags = self.flags;
        let mut f = Full::default();
        let t = &mut f.t;
        if flags & ALLOC != 0 {
            t.alloc = n.range();
        }
        if flags & FREE != 0 {
            t.free = n.range();
        }
        if flags & LIFE != 0 {
            t.lifetime = n.range();
        }
        if flags & TEMP != 0 {
            t.temporary = n.get();
        }
        if flags & RARE != 0 {
            t.mmap = n.range();
            t.munmap = n.range();
            t.zeros = n.get();
            t.realloc_count = n.get();
            t.realloc_delta = unzig(n.get());
        }
        f.alive = sums_alive(&f);
        if flags & ALIVE != 0 {
            f.alive = f.alive.wrapping_add(unzig(n.get()));
        }
        f.flushed = f.alive;
        if flags & FLUSH != 0 {
            f.flushed = f.alive.wrapping_sub(unzig(n.get()));
        }
        f.at_peak = f.alive;
        if flags & PEAK != 0 {
            f.at_peak = f.alive.wrapping_sub(unzig(n.get()));
        }
        f.epoch = epoch;
        f
    }
}

/// LEB128 numbers read from the front of a slice.
struct Numbers<'a>(&'a [u8]);

impl<'a> Numbers<'a> {
    #[inline]
    fn get(&mut self) -> u64 {
        let mut b = self.0;
        let v = self.get_from(&mut b);
        self.0 = b;
        v
    }

    /// The number at the front of `b`, which moves past it.
    #[inline]
    fn get_from(&self, b: &mut &'a [u8]) -> u64 {
        if let Some((&x, rest)) = b.split_first() {
            if x < 0x80 {
                *b = rest;
                return u64::from(x);
            }
        }
        let mut v = 0u64;
        let mut shift = 0;
        while let Some((&x, rest)) = b.split_first() {
            *b = rest;
            v |= u64::from(x & 0x7f) << shift;
            shift += 7;
            if x < 0x80 || shift >= 64 {
                break;
            }
        }
        v
    }

    fn range(&mut self) -> MinMaxSum {
        let count = self.get();
        let sum = self.get();
        let min = self.get();
        let max = min.wrapping_add(self.get());
        MinMaxSum {
            count,
            min,
            max,
            sum,
        }
    }
}
