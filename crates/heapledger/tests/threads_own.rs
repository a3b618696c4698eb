//! What each thread allocated at each stack (the views of one thread:
//! `tree --thread`, the viewer's thread filter). `threads.c`: thread k of
//! four allocates 10 (k + 1) blocks of 1000 + 8 k bytes at one call site,
//! shared by all; each thread's view holds its own share of it exactly,
//! whether the thread still runs at the end or ended long before.

mod common;

use common::*;
use std::path::Path;

/// `thread_alloc`'s (allocations, bytes) in `tree --thread N`, or the
/// error line.
fn of_thread(store: &Path, n: u32) -> Result<(u64, u64), String> {
    let n = n.to_string();
    let of = |metric: &str| -> Result<u64, String> {
        let w = tree_own_weights(store, &["--metric", metric, "--thread", &n])?;
        Ok(w.get("thread_alloc").copied().unwrap_or(0))
    };
    Ok((of("count")?, of("bytes")?))
}

#[test]
fn each_threads_view_holds_its_own_allocations() {
    let dir = Scratch::new("threads-own");
    let exe = compile_threaded("threads", &dir);
    let store = dir.join("p.sqlite");
    let o = heapledger_run("dwarf", &store, &exe, &[] as &[&str]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Threads 2 to 5 are the four (in the order they first allocated).
    let mut counts = Vec::new();
    for n in 2..=5 {
        let (count, bytes) = of_thread(&store, n).unwrap();
        assert!(
            count % 10 == 0 && (10..=40).contains(&count),
            "thread {n}: {count}"
        );
        let k = count / 10 - 1;
        assert_eq!(bytes, count * (1000 + 8 * k), "thread {n}");
        counts.push(count);
    }
    counts.sort();
    assert_eq!(counts, [10, 20, 30, 40]);
    // The main thread allocated none there; no thread 6.
    assert_eq!(of_thread(&store, 1).map(|c| c.0).unwrap_or(0), 0);
    let err = of_thread(&store, 6).unwrap_err();
    assert!(
        err.contains("no stacks of thread 6") && err.lines().count() == 1,
        "{err}"
    );
}

#[test]
fn a_single_thread_has_no_views_of_its_own() {
    let dir = Scratch::new("threads-own-one");
    let store = phases_recorded(&dir, "2", &[]);
    let err = of_thread(&store, 1).unwrap_err();
    assert!(err.contains("one thread allocated"), "{err}");
}
