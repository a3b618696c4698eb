//! What the dump says of the process beyond its counters: the process it
//! was forked from, how it ended, and the allocator underneath heapledger.

use super::file::FileSink;
use crate::base::real;
use crate::data::live;
use crate::process::{end, fork};
use core::sync::atomic::Ordering;
use heapledger_wire::{Encoder, Forked, Tag};

pub(super) fn encode(e: &mut Encoder<FileSink>) {
    let parent = fork::FORKED_FROM.load(Ordering::Relaxed);
    if parent != 0 {
        let (alive, alive_bytes, freed, freed_bytes) = live::inherited::counts();
        e.forked(&Forked {
            parent,
            inherited_alive: alive,
            inherited_alive_bytes: alive_bytes,
            inherited_freed: freed,
            inherited_freed_bytes: freed_bytes,
        });
    }
    if let Some(how) = end::get() {
        e.ending(how);
    }
    let allocator = real::allocator();
    if !allocator.is_empty() {
        e.tag(Tag::Allocator);
        e.bytes(allocator);
    }
}
