//! The checkpoint series (`P.series` beside the dump `P`; its layout is
//! `heapledger_wire::SERIES_MAGIC`'s): each checkpoint and snapshot, once
//! written, appends a record of the stacks whose counters changed since the
//! last record, with their totals then, so that `heapledger run` can store
//! what each stretch of the run between two checkpoints allocated and
//! freed, at each stack (the viewer's time ranges).
//!
//! A stack's change is told by its count of allocations and frees (they
//! only grow), kept per stack as 32 bits: 4 bytes a stack, 2 MB for half a
//! million. The record is built in the recorder's memory (about 10 bytes a
//! changed stack) and appended with `O_APPEND` in one go; where memory or
//! the write fails, no record is kept, and the next one says every change
//! since the last record written.
//!
//! Guarded by `CKPT` (the checkpoint's lock), which the fork takes: the
//! child forgets what was seen (it counts from the fork), as a reset does.

use super::file::{Bytes, FileSink};
use alloc::vec::Vec;
use heapledger_wire::{Encoder, Sink, StackCounters, SERIES_MAGIC, SERIES_SUFFIX};

/// Each stack's count of allocations and frees (wrapping, 32 bits) at the
/// last record written; by stack id.
pub struct Series {
    seen: Vec<u32>,
}

impl Series {
    pub const fn new() -> Series {
        Series { seen: Vec::new() }
    }

    /// The counters start again (a reset, a forked child): the next record
    /// holds every stack with counters.
    pub fn forget(&mut self) {
        self.seen = Vec::new();
    }

    /// A record of checkpoint `seq`, taken at `ticks`, for stacks of ids
    /// below `stacks`; None without memory for it.
    pub(super) fn record(&mut self, seq: u64, ticks: u64, stacks: usize) -> Option<Record<'_>> {
        if self.seen.len() < stacks {
            self.seen.try_reserve_exact(stacks - self.seen.len()).ok()?;
            self.seen.resize(stacks, 0);
        }
        let mut e = Encoder {
            sink: Bytes::with_room(0),
        };
        e.sink.put(&SERIES_MAGIC);
        e.sink.put(&[0; 4]);
        e.u(seq);
        e.u(ticks);
        let rows_at = e.sink.bytes.len();
        Some(Record {
            seen: &mut self.seen,
            e,
            prev: 0,
            rows_at,
        })
    }
}

/// A record being built: [`Record::see`] each stack in order of id, then
/// [`Record::append`].
pub(super) struct Record<'a> {
    seen: &'a mut Vec<u32>,
    e: Encoder<Bytes>,
    prev: i64,
    /// Where the stacks start in the record: once it is written, its own
    /// bytes say each stack's new count for `seen` (a list of them took 8
    /// bytes a changed stack more, at every checkpoint's peak).
    rows_at: usize,
}

impl Record<'_> {
    /// Stack `id`'s counters now; written where they changed. Ids come in
    /// increasing order but the empty stack's (0), which may come last.
    pub(super) fn see(&mut self, id: u32, c: &StackCounters) {
        let a = &c.totals.alloc;
        let f = &c.totals.free;
        let key = a.count.wrapping_add(f.count) as u32;
        match self.seen.get(id as usize) {
            Some(&k) if k != key => {}
            _ => return,
        }
        self.e.i(i64::from(id) - self.prev);
        self.prev = i64::from(id);
        for v in [a.count, a.sum, f.count, f.sum] {
            self.e.u(v);
        }
    }

    /// Appends the record to the series beside the dump at `dump`; false
    /// where it could not be (memory, the file).
    pub(super) fn append(self, dump: &str) -> bool {
        let Record {
            seen, e, rows_at, ..
        } = self;
        let mut bytes = e.sink.bytes;
        if e.sink.failed || bytes.len() < 8 || bytes.len() - 8 > u32::MAX as usize {
            return false;
        }
        let len = (bytes.len() - 8) as u32;
        bytes[4..8].copy_from_slice(&len.to_le_bytes());
        let path = alloc::format!("{dump}{SERIES_SUFFIX}\0");
        // SAFETY: a NUL-terminated path.
        let fd = unsafe {
            libc::open(
                path.as_ptr() as *const _,
                libc::O_WRONLY
                    | libc::O_CREAT
                    | libc::O_APPEND
                    | libc::O_CLOEXEC
                    | libc::O_NOFOLLOW,
                0o644,
            )
        };
        if fd < 0 {
            return false;
        }
        let mut sink = FileSink {
            fd: super::ckpt::move_high(fd),
            buf: Vec::new(),
            err: 0,
        };
        sink.write_all(&bytes);
        // SAFETY: the descriptor is ours.
        unsafe { libc::close(sink.fd) };
        if sink.err != 0 {
            return false;
        }
        // Each stack written: (id less the one before, allocations, bytes,
        // frees, bytes freed), as `see` encoded them.
        let mut r = Varints {
            b: &bytes,
            at: rows_at,
        };
        let mut id = 0i64;
        while let Some(delta) = r.next() {
            let delta = ((delta >> 1) as i64) ^ -((delta & 1) as i64);
            id = id.wrapping_add(delta);
            let (allocs, _, frees, _) = (r.next(), r.next(), r.next(), r.next());
            let key = allocs.unwrap_or(0).wrapping_add(frees.unwrap_or(0)) as u32;
            if let Some(k) = seen.get_mut(id as usize) {
                *k = key;
            }
        }
        true
    }
}

/// Varints read back from a record this module encoded.
struct Varints<'a> {
    b: &'a [u8],
    at: usize,
}

impl Iterator for Varints<'_> {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        let mut v = 0u64;
        let mut shift = 0;
        loop {
            let b = *self.b.get(self.at)?;
            self.at += 1;
            if shift < 64 {
                v |= u64::from(b & 0x7f) << shift;
            }
            shift += 7;
            if b < 0x80 {
                return Some(v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(allocs: u64, frees: u64) -> StackCounters {
        let mut c = StackCounters::default();
        c.totals.alloc.count = allocs;
        c.totals.alloc.sum = allocs * 100;
        c.totals.free.count = frees;
        c.totals.free.sum = frees * 100;
        c
    }

    /// A record written sets each stack's count from its own bytes; the
    /// next holds only the stacks that changed since.
    #[test]
    fn a_written_record_marks_its_stacks_seen() {
        let dir = std::env::temp_dir().join(format!("hl-series-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let dump = dir.join("p.hlraw");
        let dump = dump.to_str().unwrap();
        let mut s = Series::new();
        let mut r = s.record(1, 10, 300).unwrap();
        for id in [1, 2, 200] {
            r.see(id, &counters(u64::from(id) * 1000, 7));
        }
        r.see(0, &counters(5, 0));
        assert!(r.append(dump));
        assert_eq!(&s.seen[..3], &[5, 1007, 2007]);
        assert_eq!(s.seen[200], 200_007);
        let mut r = s.record(2, 20, 300).unwrap();
        let empty = r.e.sink.bytes.len();
        r.see(1, &counters(1000, 7));
        r.see(2, &counters(2000, 8));
        assert!(r.e.sink.bytes.len() > empty, "stack 2 changed");
        assert!(r.append(dump));
        assert_eq!(s.seen[2], 2008);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
