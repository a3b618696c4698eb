//! The recorder's allocator (`src/base/arena.rs`): growing and shrinking a block
//! keeps its bytes, whether it moves between size classes, from a class to
//! a mapping of its own, or (moved by the kernel) between two mappings; and
//! the memory it reports comes back to where it was once the blocks are
//! freed.

#![allow(dead_code)]

#[path = "../src/base/arena.rs"]
mod arena;
#[path = "../src/base/clock.rs"]
mod clock;
#[path = "../src/base/degrade.rs"]
mod degrade;
#[path = "../src/base/sync.rs"]
mod sync;
/// The recorder's layout, for the paths inside (`crate::base::sync`).
mod base {
    pub(crate) use super::{clock, degrade, sync};
}

use arena::{Arena, INTERNAL_BYTES};
use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::Ordering;

fn fill(p: *mut u8, len: usize, seed: u8) {
    for i in 0..len {
        // SAFETY: p holds at least len bytes.
        unsafe { *p.add(i) = seed.wrapping_add((i / 7) as u8) };
    }
}

fn check(p: *mut u8, len: usize, seed: u8) {
    for i in 0..len {
        // SAFETY: p holds at least len bytes.
        let got = unsafe { *p.add(i) };
        assert_eq!(got, seed.wrapping_add((i / 7) as u8), "byte {i} of {len}");
    }
}

fn realloc_keeps_the_bytes_across_classes_and_mappings() {
    let before = INTERNAL_BYTES.load(Ordering::Relaxed);
    // Sizes crossing the largest class (32 KiB): class -> class, class ->
    // mapping, mapping -> larger mapping (moved by the kernel), mapping ->
    // same pages, mapping -> smaller mapping, mapping -> class.
    let steps = [
        100usize,
        3000,
        40_000,
        1 << 20,
        (1 << 20) + 100,
        5 << 20,
        200_000,
        50_000,
        20_000,
        64,
    ];
    let align = 8;
    let mut size = 48;
    // SAFETY: a valid layout; every pointer used below came from the arena.
    let mut p = unsafe { Arena.alloc(Layout::from_size_align(size, align).unwrap()) };
    assert!(!p.is_null());
    fill(p, size, 0);
    for (n, &next) in steps.iter().enumerate() {
        let layout = Layout::from_size_align(size, align).unwrap();
        // SAFETY: p is a live block of `layout`.
        let q = unsafe { Arena.realloc(p, layout, next) };
        assert!(!q.is_null(), "realloc {size} -> {next}");
        let kept = size.min(next);
        check(q, kept, n as u8);
        fill(q, next, n as u8 + 1);
        p = q;
        size = next;
    }
    // SAFETY: p is a live block of this layout.
    unsafe { Arena.dealloc(p, Layout::from_size_align(size, align).unwrap()) };
    // Mappings are returned to the kernel; class blocks stay on free lists,
    // which are counted from when their chunk was mapped.
    let after = INTERNAL_BYTES.load(Ordering::Relaxed);
    assert!(
        after <= before + 256 * 1024,
        "internal memory grew by {} bytes for blocks all freed",
        after - before
    );
}

/// Both checks read the process-wide count of internal memory: one test,
/// so that the test harness does not run them side by side.
#[test]
fn realloc() {
    realloc_keeps_the_bytes_across_classes_and_mappings();
    a_mapping_that_grows_is_counted_once();
}

fn a_mapping_that_grows_is_counted_once() {
    let layout = Layout::from_size_align(1 << 20, 16).unwrap();
    let before = INTERNAL_BYTES.load(Ordering::Relaxed);
    // SAFETY: a valid layout.
    let p = unsafe { Arena.alloc(layout) };
    assert!(!p.is_null());
    fill(p, 1 << 20, 9);
    // SAFETY: p is a live block of `layout`.
    let q = unsafe { Arena.realloc(p, layout, 4 << 20) };
    assert!(!q.is_null());
    check(q, 1 << 20, 9);
    let grown = INTERNAL_BYTES.load(Ordering::Relaxed) - before;
    assert_eq!(grown, 4 << 20, "a 4 MiB mapping counted as {grown} bytes");
    // SAFETY: q is a live block of 4 MiB.
    unsafe { Arena.dealloc(q, Layout::from_size_align(4 << 20, 16).unwrap()) };
}
