//! The recorder never allocates from the program's heap on the hot path.
//!
//! Two independent witnesses, on an allocation-heavy program
//! (`tests/stress_programs/no_alloc.c`: every allocation function, held
//! blocks by the ten thousand, thousands of distinct stacks, so that the
//! recorder's tables grow while it runs), in each of `--stack dwarf`, `fp`,
//! `none` and `--sample-every 65536`:
//!
//! 1. A counting allocator (`heap_counter.c`) preloaded *after* the
//!    recorder: it is what the recorder forwards to, so it sees every
//!    program call once plus any call the recorder itself, or a libc
//!    function it uses, makes to the allocator. Between two readings of its
//!    per-thread counter the program makes C allocator calls; the counter
//!    must have moved by exactly C.
//! 2. The recorder's own `heapledger.unrecordedEvents`: allocator calls of
//!    the program that arrive while the same thread is already inside the
//!    recorder: 0. The only calls the recorder causes are those the counter
//!    sees while each thread is set up (its first allocator call, outside
//!    the measured window), the same few for every thread: the recorder
//!    asks glibc for the thread's stack bounds with `pthread_getattr_np`,
//!    which costs 6 allocator calls with glibc 2.36 on up to 256 CPUs
//!    (realloc(NULL) and free of a CPU-set buffer; calloc of the
//!    attribute's extension and realloc of its CPU set, freed by
//!    `pthread_attr_destroy`). They are the recorder's, marked as such, and
//!    not counted as the program's unrecorded calls.
//!
//! Also: no free of a block the recorder did not see allocated, and the
//! per-function call counts in the profile are exactly the program's.

mod common;
#[path = "stress_programs/support.rs"]
mod support;

use heapledger_profile::Profile;
use std::collections::BTreeMap;
use std::path::PathBuf;
use support::*;

const FUNCTIONS: [&str; 9] = [
    "malloc",
    "calloc",
    "posix_memalign",
    "aligned_alloc",
    "memalign",
    "valloc",
    "pvalloc",
    "realloc",
    "free",
];

/// Most allocator calls the recorder may make when a thread starts: 6 with
/// glibc 2.36, one more realloc per doubling of the CPU set beyond 256
/// CPUs.
const STARTUP_CALLS_MAX: i64 = 8;

/// Builds the program and the counting allocator into `dir`.
fn build(dir: &Scratch) -> (PathBuf, PathBuf) {
    let lib = dir.join("libheapcount.so");
    compile(
        "cc",
        "heap_counter.c",
        &["-O2", "-shared", "-fPIC", "-Wall"],
        &lib,
    );
    let exe = dir.join("no_alloc");
    // -fno-builtin: gcc would otherwise turn realloc(NULL, n) into malloc(n)
    // and drop free(NULL), and the program's counts would be off. Frame
    // pointers: so that `--stack fp` sees the distinct stacks too.
    compile(
        "cc",
        "no_alloc.c",
        &[
            "-g",
            "-O2",
            "-fno-builtin",
            "-fno-omit-frame-pointer",
            "-pthread",
            "-Wall",
            "-Wno-deprecated-declarations",
        ],
        &exe,
    );
    (exe, lib)
}

/// The program's lines, one per working thread.
fn thread_lines(stdout: &str) -> Vec<BTreeMap<String, i64>> {
    stdout
        .lines()
        .filter(|l| l.starts_with("thread="))
        .map(parse_counters)
        .collect()
}

/// A thread's counts per function, in `FUNCTIONS` order.
fn program_counts(line: &BTreeMap<String, i64>) -> Vec<u64> {
    FUNCTIONS.iter().map(|f| line[*f] as u64).collect()
}

fn profile_counts(stats: &heapledger_profile::AllocFuncStats) -> Vec<u64> {
    let by_name: BTreeMap<&str, u64> = stats.iter().iter().map(|(n, s)| (*n, s.count)).collect();
    FUNCTIONS.iter().map(|f| by_name[f]).collect()
}

/// Runs `no_alloc THREADS ROUNDS LIVE` under heapledger with `options` and
/// the counting allocator; returns the profile and the program's lines.
fn run(
    tag: &str,
    options: &[&str],
    threads: u32,
    rounds: u32,
    live: u32,
) -> (Profile, Vec<BTreeMap<String, i64>>) {
    let dir = Scratch::new(tag);
    let (exe, lib) = build(&dir);
    let args = [threads.to_string(), rounds.to_string(), live.to_string()];
    let (p, stdout) = profile_of(
        options,
        &[("LD_PRELOAD", lib.as_os_str())],
        &dir,
        &exe,
        &args,
    );
    let lines = thread_lines(&stdout);
    assert_eq!(lines.len(), threads.max(1) as usize, "{stdout}");
    for l in &lines {
        assert!(
            l["heap"] >= 0,
            "the counting allocator was not preloaded: {stdout}"
        );
        // Witness 1: nothing but the program's own calls reached the heap.
        assert_eq!(
            l["heap"], l["calls"],
            "{options:?}: allocator calls while the program made {} (the rest are the \
             recorder's): {stdout}",
            l["calls"]
        );
        assert!(l["calls"] as u32 >= 2 * live + 3 * rounds, "{stdout}");
    }
    let ext = p.heapledger.as_ref().expect("heapledger extension");
    assert_eq!(ext.unknown_frees, 0, "{options:?}");
    (p, lines)
}

fn single_thread(tag: &str, options: &[&str], mode: &str, min_stacks: usize) {
    let (p, lines) = run(tag, options, 0, 20_000, 50_000);
    let ext = p.heapledger.as_ref().unwrap();
    assert_eq!(ext.stack_mode, mode);
    // Witness 2.
    assert_eq!(ext.unrecorded_events, 0, "{options:?}");
    assert_eq!(lines[0]["startup"], 0, "the main thread costs nothing");
    // Exact counts: the program is all there is.
    assert_eq!(
        profile_counts(&p.call_totals()),
        program_counts(&lines[0]),
        "{options:?}: calls per function {FUNCTIONS:?}"
    );
    // The stack table grew while the recorder ran.
    let stacks = p.stacks.iter().filter(|s| s.infos.alloc.count > 0).count();
    assert!(
        stacks >= min_stacks,
        "{options:?}: {stacks} stacks, expected at least {min_stacks}"
    );
    println!(
        "{options:?}: {} allocator calls, {stacks} stacks, 0 unrecorded, 0 extra heap calls",
        lines[0]["calls"]
    );
}

fn threads(tag: &str, options: &[&str]) {
    const THREADS: u32 = 4;
    let (p, lines) = run(tag, options, THREADS, 5_000, 10_000);
    let ext = p.heapledger.as_ref().unwrap();
    // Every thread's set-up costs the same few calls of the recorder's own,
    // and the measured windows (30 000+ calls per thread) none; no call of
    // the program goes unrecorded.
    let per_thread: Vec<i64> = lines.iter().map(|l| l["startup"]).collect();
    println!("{options:?}: allocator calls at thread set-up {per_thread:?}");
    let first = per_thread[0];
    assert!(
        per_thread.iter().all(|&s| s == first),
        "{options:?}: set-up calls per thread {per_thread:?}"
    );
    assert!(first <= STARTUP_CALLS_MAX, "{per_thread:?}");
    assert_eq!(ext.unrecorded_events, 0, "{options:?}");
    // Exact counts per worker thread (the main thread's are glibc's, for
    // creating the threads).
    let want = program_counts(&lines[0]);
    assert!(lines.iter().all(|l| program_counts(l) == want));
    let got: Vec<Vec<u64>> = p.threads.iter().map(|t| profile_counts(&t.stats)).collect();
    assert_eq!(
        got.iter().filter(|c| **c == want).count(),
        THREADS as usize,
        "{options:?}: per-thread calls {got:?}, each worker made {want:?}"
    );
}

#[test]
fn no_heap_calls_single_thread_dwarf() {
    single_thread("st-dwarf", &["--stack", "dwarf"], "dwarf", 4096);
}

#[test]
fn no_heap_calls_single_thread_fp() {
    single_thread("st-fp", &["--stack", "fp"], "fp", 4096);
}

#[test]
fn no_heap_calls_single_thread_none() {
    single_thread("st-none", &["--stack", "none"], "none", 1);
}

#[test]
fn no_heap_calls_single_thread_sampled() {
    single_thread(
        "st-sampled",
        &["--stack", "dwarf", "--sample-every", "65536"],
        "dwarf",
        10,
    );
}

#[test]
fn no_heap_calls_threads_dwarf() {
    threads("mt-dwarf", &["--stack", "dwarf"]);
}

#[test]
fn no_heap_calls_threads_fp() {
    threads("mt-fp", &["--stack", "fp"]);
}

#[test]
fn no_heap_calls_threads_none() {
    threads("mt-none", &["--stack", "none"]);
}

#[test]
fn no_heap_calls_threads_sampled() {
    threads(
        "mt-sampled",
        &["--stack", "dwarf", "--sample-every", "65536"],
    );
}
