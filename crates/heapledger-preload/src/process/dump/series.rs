//! The checkpoint series (`P.series` beside the dump `P`; its layout is
//! `heapledger_wire::SERIES_MAGIC`'s): each checkpoint and snapshot, once
//! written, appends a record of the stacks whose counters changed since the
//! last record, with their totals then, so that `heapledger run` can store
//! what each stretch of the run between two checkpoints allocated and
//! freed, at each stack (the viewer's time ranges).
//!
//! A stack's change is told by its count of allocations and frees (they
//! only grow), kept per stack as 32 bits: 4 bytes a stack, 2 MB for half a
//! million. The record is built in the recorder's memory (about 15 bytes a
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
        Some(Record {
            seen: &mut self.seen,
            e,
            prev: 0,
            changed: Vec::new(),
        })
    }
}

/// A record being built: [`Record::see`] each stack in order of id, then
/// [`Record::append`].
pub(super) struct Record<'a> {
    seen: &'a mut Vec<u32>,
    e: Encoder<Bytes>,
    prev: i64,
    /// (id, its count) of the stacks written, set in `seen` once the record
    /// is.
    changed: Vec<(u32, u32)>,
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
        if self.changed.try_reserve(1).is_err() {
            self.e.sink.failed = true;
            return;
        }
        self.changed.push((id, key));
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
            seen, e, changed, ..
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
        for (id, key) in changed {
            seen[id as usize] = key;
        }
        true
    }
}
