//! What the dump says of the process beyond its counters: the process it
//! was forked from, how it ended, the allocator underneath heapledger, and
//! its peaks of resident and virtual memory.

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
    if let Some((count, ticks)) = crate::process::control::resets() {
        let (alive, alive_bytes, freed, freed_bytes) = live::inherited::counts();
        e.reset(&heapledger_wire::Reset {
            count,
            ticks,
            older_alive: alive,
            older_alive_bytes: alive_bytes,
            older_freed: freed,
            older_freed_bytes: freed_bytes,
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
    let status = super::encode::read_proc(c"/proc/thread-self/status", c"/proc/self/status");
    let (rss, virt) = (kib(&status, b"VmHWM:"), kib(&status, b"VmPeak:"));
    if rss != 0 || virt != 0 {
        e.tag(Tag::Memory);
        e.u(rss << 10);
        e.u(virt << 10);
    }
}

/// The number of KiB on the line of `/proc/self/status` that starts with
/// `key` (`VmHWM:   1234 kB`); 0 where there is none.
fn kib(status: &[u8], key: &[u8]) -> u64 {
    status
        .split(|&b| b == b'\n')
        .find_map(|line| line.strip_prefix(key))
        .map_or(0, |rest| {
            rest.iter()
                .skip_while(|b| b.is_ascii_whitespace())
                .take_while(|b| b.is_ascii_digit())
                .fold(0u64, |v, &b| {
                    v.saturating_mul(10).saturating_add((b - b'0') as u64)
                })
        })
}
