//! Four threads, each allocating a known number of blocks
//! (`tests/programs/threads.c`): thread k allocates 10*(k+1) blocks of
//! 1000+8*k bytes at one call site. Per-thread statistics and totals are
//! exact.

mod common;

use common::*;
use heapledger_profile::{Profile, ThreadStats};
use std::time::Duration;

const SRC: &str = "threads.c";

#[test]
fn four_threads_each_with_known_counts() {
    let (p, stdout, _) = threaded("threads", SRC);
    assert_eq!(stdout, "threads: done\n");

    let expected: Vec<(u64, u64)> = (0..4u64)
        .map(|k| (10 * (k + 1), 10 * (k + 1) * (1000 + 8 * k)))
        .collect();

    // One entry per thread: the main thread (which mallocs nothing) and the
    // four workers, each with its own malloc and free counts.
    assert_eq!(p.threads.len(), 5, "threads");
    assert_eq!(p.globals.max_thread_count, 5);
    let mut per_thread: Vec<(u64, u64)> = p
        .threads
        .iter()
        .map(|t| (t.stats.malloc.count, t.stats.malloc.sum))
        .collect();
    per_thread.sort_unstable();
    let mut want = vec![(0, 0)];
    want.extend(&expected);
    assert_eq!(per_thread, want, "malloc (count, bytes) per thread");
    for t in &p.threads {
        let (m, f) = (&t.stats.malloc, &t.stats.free);
        assert_eq!(
            (f.count, f.sum),
            (m.count, m.sum),
            "each worker frees its own blocks"
        );
    }

    let total: (u64, u64) = expected.iter().fold((0, 0), |a, e| (a.0 + e.0, a.1 + e.1));
    let malloc = p.call_totals().malloc;
    assert_eq!((malloc.count, malloc.sum), total);

    // All four threads allocate from the same stack.
    let line = site_line(SRC, "thread_alloc");
    let s = site(&p, "thread_alloc", line);
    assert_eq!(s.alloc, mms(total.0, 1000, 1024, total.1), "{s:?}");
    assert_eq!(s.free, s.alloc);
    for st in stacks_at(&p, "thread_alloc", line) {
        let want = [
            ("thread_alloc", line),
            ("thread_main", site_line(SRC, "thread_main")),
        ];
        assert!(
            starts_with(&p, &st.stack, &want),
            "{}",
            describe(&p, &st.stack)
        );
    }
    // At the barrier every worker holds all its blocks at once.
    assert_eq!(
        s.global_peak as u64, total.1,
        "bytes of thread_alloc at the peak"
    );

    let leaks = program_leaks(&p);
    assert!(leaks.is_empty(), "leaks:{}", describe_leaks(&p, &leaks));
}

/// `tests/programs/getattr_first.c`: a thread whose first allocation is
/// glibc's own, inside `pthread_getattr_np`, which holds the thread's
/// descriptor lock meanwhile. The recorder, meeting the thread for the first
/// time there, asked for the same thread's attributes to bound its stack and
/// waited for that lock forever. Built both ways: with glibc's `realloc`,
/// and with one of the executable's own that maps memory (as rustc's
/// jemalloc does, which is how this was found: rustc hung under heapledger).
#[test]
fn a_thread_whose_first_allocation_is_inside_pthread_getattr_np() {
    const SRC: &str = "getattr_first.c";
    for own_realloc in [false, true] {
        let dir = Scratch::new(if own_realloc {
            "getattr-own"
        } else {
            "getattr"
        });
        let exe = dir.join("getattr_first");
        let mut flags = SITE_FLAGS.to_vec();
        flags.push("-pthread");
        if own_realloc {
            flags.push("-DOWN_REALLOC");
        }
        compile("cc", &[SRC], &flags, &exe);
        let out = dir.join("p.json");
        let none: [&str; 0] = [];
        let o = heapledger_run_within("dwarf", &out, &exe, &none, Duration::from_secs(60));
        let what = if own_realloc {
            "own realloc"
        } else {
            "glibc's"
        };
        assert_eq!(o.status.code(), Some(5), "{what}: {o:?}");
        assert_eq!(String::from_utf8_lossy(&o.stdout), "done\n", "{what}");
        let p = Profile::from_path(&out).unwrap();
        // The thread's later allocation has its whole stack: the bounds the
        // recorder took for the thread's stack are right.
        let line = site_line(SRC, "worker_block");
        let s = site(&p, "worker", line);
        assert_eq!(s.alloc, mms(1, 4242, 4242, 4242), "{what}: {s:?}");
        let stacks = stacks_at(&p, "worker", line);
        assert_eq!(stacks.len(), 1, "{what}");
        let st = &stacks[0].stack;
        assert!(
            starts_with(&p, st, &[("worker", line)]),
            "{what}: {}",
            describe(&p, st)
        );
        let last = frame(&p, *st.last().unwrap()).0;
        assert!(
            last == "clone3" || last == "clone",
            "{what}: the stack reaches the thread's start: {}",
            describe(&p, st)
        );
        if !own_realloc {
            // The first event itself, glibc's realloc, is recorded with its
            // stack too (the recorder read the thread's bounds from
            // /proc/self/maps).
            let inside = p
                .stacks
                .stats
                .iter()
                .filter(|s| {
                    s.infos.alloc.count > 0
                        && s.stack
                            .iter()
                            .any(|&a| frame(&p, a).0.contains("pthread_getattr_np"))
                })
                .map(|s| describe(&p, &s.stack))
                .collect::<Vec<_>>();
            assert!(
                inside.iter().any(|d| d.contains("worker")),
                "allocations inside pthread_getattr_np: {inside:?}"
            );
        }
    }
}

/// Builds `tests/programs/<src>` with -pthread in a scratch folder `tag` and
/// profiles it: the profile, its stdout and the executable's path.
fn threaded(tag: &str, src: &str) -> (heapledger_profile::Profile, String, std::path::PathBuf) {
    let dir = Scratch::new(tag);
    let exe = dir.join(src.trim_end_matches(".c"));
    let mut flags = SITE_FLAGS.to_vec();
    flags.push("-pthread");
    compile("cc", &[src], &flags, &exe);
    let (p, stdout) = profile_of("dwarf", &dir, &exe, &[] as &[&str]);
    (p, stdout, exe)
}

/// `tests/programs/thread_stacks.c`: 320 threads on stacks that glibc
/// reuses and unmaps, half of them allocating nothing of their own. The
/// recorder once kept a state for such a thread (made by glibc's last
/// free(NULL) in it) that pointed into its stack, and read it at exit: the
/// program crashed (SIGSEGV) where the stack was gone, and counted 1024
/// phantom calls where another thread had reused it.
#[test]
fn threads_on_reused_and_unmapped_stacks() {
    let (p, stdout, _) = threaded("thread-stacks", "thread_stacks.c");
    assert_eq!(stdout, "done\n");
    // 20 rounds x 8 allocating threads, k = 1, 3, .., 15.
    let per_round: u64 = (1..16).step_by(2).map(|k| 100 + k).sum();
    let malloc = p.call_totals().malloc;
    assert_eq!((malloc.count, malloc.sum), (20 * 8, 20 * per_round));
    let s = site(&p, "worker", site_line("thread_stacks.c", "worker"));
    assert_eq!(s.alloc, mms(160, 101, 115, 20 * per_round), "{s:?}");
    assert_eq!(s.free, s.alloc);
    // A state per allocating thread and the main thread, none for the rest.
    assert_eq!(p.threads.len(), 1 + 160, "threads");
}

/// `tests/programs/key_destructor.c`: a block freed by the program's own
/// thread-specific key destructor, which glibc runs after heapledger's has
/// retired the thread's state. The free is charged to the block's stack and
/// counted for the thread that made it.
#[test]
fn frees_in_a_key_destructor_count_for_their_thread() {
    let (p, stdout, _) = threaded("key-destructor", "key_destructor.c");
    assert_eq!(stdout, "done\n");
    let s = site(&p, "worker", site_line("key_destructor.c", "keyed"));
    assert_eq!(s.alloc, mms(3, 777, 777, 3 * 777), "{s:?}");
    assert_eq!(s.free, s.alloc, "{s:?}");
    let workers: Vec<(u64, u64, u64, u64)> = p
        .threads
        .iter()
        .filter(|t| t.stats.malloc.count > 0)
        .map(|t| {
            let (m, f) = (&t.stats.malloc, &t.stats.free);
            (m.count, m.sum, f.count, f.sum)
        })
        .collect();
    assert_eq!(workers, vec![(1, 777, 1, 777); 3], "per worker thread");
    let free = p.call_totals().free;
    assert_eq!(free.sum, 3 * 777, "bytes freed");
}

/// `tests/programs/main_exits_first.c`: main leaves through pthread_exit
/// and the process ends in its worker. The profile still names the program
/// (with the main thread gone, /proc/self shows no command line, executable
/// or mappings) and has every allocation, with its source line.
#[test]
fn a_process_whose_main_thread_left_first() {
    let (p, stdout, exe) = threaded("main-exits-first", "main_exits_first.c");
    assert_eq!(stdout, "worker done\n");
    assert_eq!(p.run.exe, "main_exits_first");
    assert_eq!(p.run.command, exe.display().to_string());
    let src = "main_exits_first.c";
    let churn = site(&p, "worker", site_line(src, "churn"));
    assert_eq!(churn.alloc, mms(100, 50, 50, 5000), "{churn:?}");
    assert_eq!(churn.free, churn.alloc);
    let kept = site(&p, "worker", site_line(src, "kept"));
    assert_eq!(kept.alloc, mms(1, 1234, 1234, 1234), "{kept:?}");
    let main = site(&p, "main", site_line(src, "main"));
    assert_eq!(main.alloc, mms(1, 99, 99, 99), "{main:?}");
    let leaks: u64 = program_leaks(&p).iter().map(|l| l.memory).sum();
    assert_eq!(leaks, 1234 + 99);
}

/// What the recorder keeps of a thread once it has ended (its state, kept
/// for the profile's list of threads) stays small: 1 000 more threads that
/// come and go (`tests/programs/thread_churn.c`) add at most 3 KB each to
/// its memory (2.4 KB here; 6.2 KB when an ended thread's empty tables still
/// held their first allocations). Past the last 1 024 ended threads, whose
/// rows the profile keeps one by one, the states are reused: 4 000 more
/// threads add nothing that grows with them (a program that starts a
/// thread per request runs for days), and their rows are summed into one.
#[test]
fn an_ended_thread_costs_little_recorder_memory_and_then_none() {
    let dir = Scratch::new("thread-churn");
    let exe = compile_threaded("thread_churn", &dir);
    let memory = |n: u64| {
        let (p, stdout) = profile_of("dwarf", &dir, &exe, &[n.to_string()]);
        assert_eq!(stdout, "done\n");
        // Rows: main, the last ended threads one by one, and the others
        // summed into one that says how many it stands for.
        let merged: Vec<&ThreadStats> = p.threads.iter().filter(|t| t.merged_threads > 0).collect();
        let singles = p.threads.len() as u64 - merged.len() as u64;
        let summed: u64 = merged.iter().map(|t| t.merged_threads).sum();
        assert_eq!(singles + summed, 1 + n, "threads");
        assert!(singles <= 1 + 1025, "{singles} rows of one thread");
        assert!(merged.len() <= 1, "{} merged rows", merged.len());
        // Each worker: one malloc(64) and its free.
        let malloc = p.call_totals().malloc;
        let main = p
            .threads
            .iter()
            .find(|t| t.stats.malloc.sum != 64 && t.merged_threads == 0);
        let main_mallocs = main.map_or(0, |t| t.stats.malloc.count);
        assert_eq!(malloc.count, n + main_mallocs, "mallocs");
        for m in merged {
            let s = &m.stats.malloc;
            assert_eq!((s.count, s.sum), (m.merged_threads, 64 * m.merged_threads));
        }
        (singles, p.heapledger.as_ref().unwrap().internal_memory)
    };
    let (few, many, more, most) = (memory(50), memory(1000), memory(2000), memory(6000));
    assert_eq!(
        (few.0, many.0),
        (51, 1001),
        "one row per thread up to 1 024"
    );
    let per_thread = many.1.saturating_sub(few.1) / 950;
    assert!(
        per_thread <= 3 * 1024,
        "{per_thread} bytes per ended thread"
    );
    // 4 000 more ended threads add less than 80 bytes each: the recorder's
    // memory grows by whole arena chunks (256 KiB), and on a busy machine
    // more threads overlap, whose states then stay for reuse.
    assert!(
        most.1 <= more.1 + 320 * 1024,
        "2 000 threads: {} B; 6 000: {} B",
        more.1,
        most.1
    );
}

/// `tests/programs/thread_storm.c`: 8 threads each start 400 short
/// threads one after another, so that threads end, their states are summed
/// and reused, and new ones start, all at once. Every thread is counted
/// once (in its own row or in the merged one), and every call exactly.
#[test]
fn threads_ending_and_starting_at_once_are_each_counted_once() {
    let dir = Scratch::new("thread-storm");
    let exe = compile_threaded("thread_storm", &dir);
    let (spawners, each) = (8u64, 400u64);
    let (p, stdout) = profile_of(
        "dwarf",
        &dir,
        &exe,
        &[spawners.to_string(), each.to_string()],
    );
    assert_eq!(stdout, "done\n");
    let leaves = spawners * each;
    let threads: u64 = p.threads.iter().map(|t| t.merged_threads.max(1)).sum();
    assert_eq!(threads, 1 + spawners + leaves, "threads");
    assert!(
        p.threads.iter().any(|t| t.merged_threads > 0),
        "no merged row"
    );
    // Main, the spawners, the last 1 024 ended threads (one more while a
    // new one waits to reuse a state) and the merged row; the threads that
    // end after the last start (the last leaves, the spawners) stay in the
    // queue of ended ones: one each.
    assert!(
        p.threads.len() <= 1 + 8 + 1025 + 2 * 8 + 1,
        "{} rows",
        p.threads.len()
    );
    // Each leaf: malloc(48) and malloc(777), both freed (the second by the
    // key's destructor in its last clean-up), in its own row; main makes one
    // malloc of its own (stdout's buffer), the spawners none. A spawner that
    // ends early may be merged too.
    let malloc = p.call_totals().malloc;
    assert_eq!(
        (malloc.count, malloc.sum),
        (2 * leaves + 1, 825 * leaves + 4096),
        "mallocs"
    );
    let single_leaves = p
        .threads
        .iter()
        .filter(|t| t.merged_threads == 0 && t.stats.malloc.sum == 825)
        .inspect(|t| {
            let (m, f) = (&t.stats.malloc, &t.stats.free);
            assert_eq!((m.count, f.count, f.sum), (2, 2, 825), "{t:?}");
        })
        .count() as u64;
    let merged = p.threads.iter().find(|t| t.merged_threads > 0).unwrap();
    let merged_leaves = merged.stats.malloc.sum / 825;
    assert_eq!(merged.stats.malloc.sum % 825, 0, "{merged:?}");
    assert_eq!(merged.stats.malloc.count, 2 * merged_leaves, "{merged:?}");
    assert!(
        merged.merged_threads - merged_leaves <= spawners,
        "{merged:?}"
    );
    assert_eq!(single_leaves + merged_leaves, leaves, "leaf threads");
}

/// What the recorder keeps per running thread (its unwinding tables and
/// counters), from the most memory it used at once
/// (`heapledger.internalMemoryPeak`) with 10 and with 210 threads alive
/// together (`tests/programs/threads_alive.c`): at most 160 KB each (132 KB
/// here; 307 KB when its tables were sized for the deepest stack at the
/// start, and a whole 4 KiB size histogram taken at the first count). A
/// thread's alternate signal stack is address space of which a page or two
/// is touched, as its own stack, and is not counted.
#[test]
fn a_running_thread_costs_a_bounded_recorder_memory() {
    let dir = Scratch::new("threads-alive");
    let exe = compile_threaded("threads_alive", &dir);
    let peak = |n: u64| {
        let (p, stdout) = profile_of("dwarf", &dir, &exe, &[n.to_string()]);
        assert_eq!(stdout, "done\n");
        let m = p.heapledger.as_ref().unwrap();
        assert!(m.internal_memory_peak >= m.internal_memory, "{m:?}");
        assert_eq!(p.threads.len() as u64, n + 1);
        m.internal_memory_peak
    };
    let (few, many) = (peak(10), peak(210));
    let per_thread = many.saturating_sub(few) / 200;
    assert!(
        per_thread <= 160 * 1000,
        "{per_thread} bytes per running thread"
    );
}

/// `tests/programs/key_destructor.c` with 1 500 threads, and one more
/// that lingers in its last clean-up (the program's key destructor, run
/// after heapledger's retired the thread's state) until they have all come
/// and gone. That clean-up still counts in its thread's state, and a state
/// is reused only once its thread is gone: no call is lost or counted for
/// another thread when the states of ended threads are summed and reused
/// (reusing the lingering thread's state with the others counts its free
/// in a later thread's row, and two threads then write one state).
#[test]
fn reused_thread_states_lose_no_late_call() {
    let dir = Scratch::new("key-destructor-many");
    let exe = compile_threaded("key_destructor", &dir);
    let n = 1500u64;
    let (p, stdout) = profile_of("dwarf", &dir, &exe, &[&n.to_string(), "linger"]);
    assert_eq!(stdout, "done\n");
    each_keyed_block_freed_in_its_row(&p, n + 1);
}

/// `threads` threads of `key_destructor.c` each allocated a block of 777
/// bytes and freed it in their last clean-up: each row (one thread, or k
/// merged) frees exactly the blocks its threads allocated, and some rows
/// are merged. (A row may also hold glibc's own small calls: `free(NULL)`,
/// or 56 bytes when a `pthread_exit` loads the unwinder; they are under
/// 777 bytes a thread, and free nothing.)
fn each_keyed_block_freed_in_its_row(p: &Profile, threads: u64) {
    let s = site(p, "worker", site_line("key_destructor.c", "keyed"));
    assert_eq!(s.alloc, mms(threads, 777, 777, threads * 777), "{s:?}");
    assert_eq!(s.free, s.alloc, "{s:?}");
    let mut keyed = 0;
    for t in &p.threads {
        let blocks = t.stats.malloc.sum / 777;
        assert_eq!(t.stats.free.sum, 777 * blocks, "{t:?}");
        keyed += blocks;
    }
    assert_eq!(keyed, threads, "threads with a keyed block");
    assert!(
        p.threads.iter().any(|t| t.merged_threads > 0),
        "no merged row"
    );
}

/// The same in a forked child whose main thread (the one that forked, with
/// a new kernel id there) lingers in its last clean-up while 1 100 others
/// come and go: its state is not taken for gone (the kernel id it carries
/// is the child's, not the parent's).
#[test]
fn a_forked_threads_state_is_not_reused_while_it_lingers() {
    let dir = Scratch::new("key-destructor-fork");
    let exe = compile_threaded("key_destructor", &dir);
    let n = 1100u64;
    let (_, stdout) = profile_of("dwarf", &dir, &exe, &[&n.to_string(), "fork"]);
    assert_eq!(stdout, "child done\ndone\n");
    let children: Vec<_> = std::fs::read_dir(dir.join("p.children"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(children.len(), 1, "{children:?}");
    let child = Profile::from_path(&children[0]).unwrap();
    each_keyed_block_freed_in_its_row(&child, n + 1);
}
