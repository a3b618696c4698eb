//! What each thread allocated at each stack (`Tag::ThreadStack`), for the
//! profile's views of one thread: the threads kept one by one (numbers
//! below `SPARE`), live ones from their tables, ended ones from the rows
//! they kept (`thread::kept`). Written only where more than one thread
//! allocated: with one, its rows are the stacks' own counters.

use super::file::FileSink;
use crate::thread::{kept, state};
use core::sync::atomic::Ordering;
use heapledger_wire::{Encoder, Tag};

pub(super) fn write(e: &mut Encoder<FileSink>, states: &[&state::ThreadState]) {
    let [times, entries] = &crate::data::stackmap::HAND_OVERS;
    if times.load(Ordering::Relaxed) > 0 {
        e.tag(Tag::HandOvers);
        e.u(times.load(Ordering::Relaxed));
        e.u(entries.load(Ordering::Relaxed));
    }
    let kept_one = |s: &&&state::ThreadState| s.number < state::SPARE;
    let mut with_rows = 0;
    for s in states.iter().filter(kept_one) {
        let mut any = false;
        kept::each_row(s, |_| any = true);
        with_rows += usize::from(any);
    }
    let unkept = kept::UNKEPT.load(Ordering::Relaxed);
    if with_rows < 2 && unkept == 0 {
        return;
    }
    for s in states.iter().filter(kept_one) {
        kept::each_row(s, |(id, count, bytes)| {
            e.thread_stack(s.number, u64::from(id), count, bytes);
        });
    }
    if unkept > 0 {
        e.tag(Tag::ThreadStacksUnkept);
        e.u(unkept);
    }
}
