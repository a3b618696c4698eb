//! Threads that run the same code keep their per-stack counters within a
//! bound: once the live threads hold more entries than there are distinct
//! stacks (plus a slack), a thread hands its entries to the process's
//! (`stackmap::ENTRIES`, `thread::life::spill`). `shared_stacks.c`: four
//! threads, three rounds each over the same 512 stacks. With the slack at
//! 0 and a thread handing its entries over from 64 on, they are handed
//! over many times a round; every stack's counts, bytes and leaks, the
//! shares of the peak and each thread's own view must still be exact.

mod common;

use common::*;
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

const BITS: u32 = 9;
const ROUNDS: u64 = 3;
const THREADS: u64 = 4;

/// The path of a folded line of `shared_stacks`: bit K is 1 where the
/// stack goes through aK, 0 through bK; None for another stack.
fn path_of(frames: &str) -> Option<u32> {
    let names: Vec<&str> = frames.split(';').collect();
    if names.last() != Some(&"leaf") {
        return None;
    }
    let mut p = 0;
    for k in 0..BITS {
        let (a, b) = (format!("a{k}"), format!("b{k}"));
        match (names.contains(&a.as_str()), names.contains(&b.as_str())) {
            (true, false) => p |= 1 << k,
            (false, true) => {}
            _ => return None,
        }
    }
    Some(p)
}

/// `export --format folded --metric METRIC`: each stack's frames and
/// weight.
fn folded_stacks(store: &Path, metric: &str, dir: &Scratch) -> Vec<(String, u64)> {
    let out = dir.join(&format!("{metric}.folded"));
    let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["export", "--format", "folded", "--metric", metric, "-o"])
        .arg(&out)
        .arg(store)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|line| {
            let (frames, w) = line.rsplit_once(' ').unwrap();
            (frames.to_owned(), w.parse().unwrap())
        })
        .collect()
}

/// The same by path of `shared_stacks`, and the weight of the other
/// stacks.
fn folded(store: &Path, metric: &str, dir: &Scratch) -> (HashMap<u32, u64>, u64) {
    let mut by_path = HashMap::new();
    let mut other = 0;
    for (frames, w) in folded_stacks(store, metric, dir) {
        match path_of(&frames) {
            Some(p) => *by_path.entry(p).or_insert(0) += w,
            None => other += w,
        }
    }
    (by_path, other)
}

/// Runs `exe args` under the recorder with hand-overs from `spill_min`
/// entries and no slack, its raw data where an interrupted run would have
/// left it, so that `heapledger recover` makes the profile store of it.
/// Returns the store, and how many times the threads handed their tables
/// over (the dump's count).
fn recorded_handing_over(
    exe: &Path,
    args: &[&str],
    spill_min: u32,
    more_opts: &str,
    dir: &Scratch,
) -> (std::path::PathBuf, u64) {
    let tmpdir = dir.join("tmpdir");
    std::fs::create_dir(&tmpdir).unwrap();
    let mut gone = Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let left = tmpdir.join(format!("heapledger-{dead}-0-0"));
    std::fs::create_dir(&left).unwrap();
    let o = Command::new(exe)
        .args(args)
        .env("LD_PRELOAD", heapledger::preload::find_preload().unwrap())
        .env(heapledger_wire::ENV_DIR, &left)
        .env(
            heapledger_wire::ENV_OPTS,
            format!(
                "stack=dwarf,depth=256,follow=1,sample=0,spill_slack=0,spill_min={spill_min}{more_opts}"
            ),
        )
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let raw = only_file(&left, "");
    let d = heapledger_wire::decode_owned(std::fs::read(&raw).unwrap()).unwrap();
    let handed = d.hand_overs.0;

    let out = dir.join("out");
    let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["recover", "--in"])
        .arg(&tmpdir)
        .arg("-o")
        .arg(&out)
        .env("TMPDIR", &tmpdir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    (only_file(&out, &String::from_utf8_lossy(&o.stderr)), handed)
}

/// The one file in `dir` (`why`: what to say if there are others or none).
fn only_file(dir: &Path, why: &str) -> std::path::PathBuf {
    let files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?} {why}");
    files[0].clone()
}

#[test]
fn threads_that_hand_their_counters_over_keep_every_count_exact() {
    let dir = Scratch::new("threads-spill");
    let exe = compile_threaded("shared_stacks", &dir);
    let (store, handed) = recorded_handing_over(&exe, &[], 64, "", &dir);
    // Four threads, three rounds of 512 stacks, handed over from 64: many
    // times.
    assert!(
        handed >= 8,
        "threads handed their tables over {handed} times"
    );
    let store = &store;

    let size = |p: u32, t: u64| 16 + u64::from(p % 61) + 8 * t;
    let (counts, _) = folded(store, "count", &dir);
    let (bytes, _) = folded(store, "bytes", &dir);
    let (leaked, _) = folded(store, "leaked", &dir);
    assert_eq!(counts.len(), 1 << BITS);
    for p in 0..1u32 << BITS {
        assert_eq!(counts.get(&p), Some(&(THREADS * ROUNDS)), "path {p}");
        let all: u64 = (0..THREADS).map(|t| size(p, t)).sum();
        assert_eq!(bytes.get(&p), Some(&(ROUNDS * all)), "path {p}");
        let kept = if p % 7 == 0 { all } else { 0 };
        assert_eq!(leaked.get(&p).copied().unwrap_or(0), kept, "path {p}");
    }

    // The stacks' shares of the peak add up to it.
    let (peak, other) = folded(store, "peak", &dir);
    let report = report_json(store);
    let total: u64 = peak.values().sum::<u64>() + other;
    assert_eq!(
        Some(total),
        report["peak"]["requested_bytes"].as_u64(),
        "{report}"
    );

    // Each thread's own view: its 512 blocks a round at leaf.
    let mut per_thread = Vec::new();
    for n in 1..=5 {
        let n = n.to_string();
        let w = |metric: &str| {
            tree_own_weights(store, &["--metric", metric, "--thread", &n])
                .unwrap()
                .get("leaf")
                .copied()
                .unwrap_or(0)
        };
        let c = w("count");
        if c > 0 {
            assert_eq!(c, ROUNDS << BITS, "thread {n}");
            per_thread.push(w("bytes"));
        }
    }
    per_thread.sort();
    let expected: Vec<u64> = (0..THREADS)
        .map(|t| ROUNDS * (0..1u32 << BITS).map(|p| size(p, t)).sum::<u64>())
        .collect();
    assert_eq!(per_thread, expected);
}

/// A process of one thread hands its table over too, once it holds the
/// slack (here none, from 64 entries): `shared_stacks one`, the main
/// thread making thread 0's three rounds over 512 stacks alone. Every
/// stack's count, bytes and leak, and the shares of the peak, stay exact.
/// It fails when a process of one thread keeps its whole table (no
/// hand-over: checked).
#[test]
fn one_thread_that_hands_its_counters_over_keeps_every_count_exact() {
    let dir = Scratch::new("threads-spill-one");
    let exe = compile_threaded("shared_stacks", &dir);
    let (store, handed) = recorded_handing_over(&exe, &["one"], 64, "", &dir);
    assert!(
        handed >= 8,
        "the thread handed its table over {handed} times"
    );
    let store = &store;
    let size = |p: u32| 16 + u64::from(p % 61);
    let (counts, _) = folded(store, "count", &dir);
    let (bytes, _) = folded(store, "bytes", &dir);
    let (leaked, _) = folded(store, "leaked", &dir);
    assert_eq!(counts.len(), 1 << BITS);
    for p in 0..1u32 << BITS {
        assert_eq!(counts.get(&p), Some(&ROUNDS), "path {p}");
        assert_eq!(bytes.get(&p), Some(&(ROUNDS * size(p))), "path {p}");
        let kept = if p % 7 == 0 { size(p) } else { 0 };
        assert_eq!(leaked.get(&p).copied().unwrap_or(0), kept, "path {p}");
    }
    let (peak, other) = folded(store, "peak", &dir);
    let report = report_json(store);
    assert_eq!(
        Some(peak.values().sum::<u64>() + other),
        report["peak"]["requested_bytes"].as_u64(),
        "{report}"
    );
}

/// Threads that start and end while others hand their tables over, each
/// handing over from its first entry (`thread_storm.c`: 4 threads each
/// start 200 short threads one after another; each short one mallocs 48
/// bytes and frees them, and mallocs 777 that its key's destructor frees
/// as it ends): every call is counted once, every block freed.
#[test]
fn threads_that_start_and_end_while_others_hand_over_lose_no_count() {
    let dir = Scratch::new("threads-spill-storm");
    let exe = compile_threaded("thread_storm", &dir);
    let (spawners, each) = (4u64, 200u64);
    let (store, _) = recorded_handing_over(
        &exe,
        &[&spawners.to_string(), &each.to_string()],
        1,
        "",
        &dir,
    );
    let leaves = spawners * each;
    let calls = &report_json(&store)["calls"];
    assert_eq!(
        (
            calls["malloc"]["count"].as_u64(),
            calls["malloc"]["bytes"].as_u64()
        ),
        (Some(2 * leaves + 1), Some(825 * leaves + 4096)),
        "{calls}"
    );
    let (count, _) = folded_by_leaf(&store, "count", &dir);
    let (bytes, _) = folded_by_leaf(&store, "bytes", &dir);
    let (leaked, _) = folded_by_leaf(&store, "leaked", &dir);
    assert_eq!((count, bytes, leaked), (2 * leaves, 825 * leaves, 0));
}

/// The weight of the stacks through `leaf` (folded), and of the others.
fn folded_by_leaf(store: &Path, metric: &str, dir: &Scratch) -> (u64, u64) {
    let (mut leaf, mut other) = (0, 0);
    for (frames, w) in folded_stacks(store, metric, dir) {
        match frames.split(';').any(|f| f == "leaf") {
            true => leaf += w,
            false => other += w,
        }
    }
    (leaf, other)
}

/// Past the budget for the threads' own rows (`kept_budget`, here none),
/// a thread keeps none: `tree --thread` says how many were left out, in
/// one line, and the process's counts are whole.
#[test]
fn threads_past_the_budget_for_their_rows_are_named_left_out() {
    let dir = Scratch::new("threads-spill-budget");
    let exe = compile_threaded("shared_stacks", &dir);
    let (store, _) = recorded_handing_over(&exe, &[], 64, ",kept_budget=0", &dir);
    let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["tree", "--thread", "2"])
        .arg(&store)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("left 4 threads out") && err.lines().count() == 1,
        "{err}"
    );
    let (counts, _) = folded(&store, "count", &dir);
    assert_eq!(counts.len(), 1 << BITS);
    assert!(counts.values().all(|&c| c == ROUNDS * THREADS));
}
