//! Checkpoints (`checkpoint=MS` in HEAPLEDGER_OPTS): while a program runs,
//! the recorder writes its dump so far beside the final one, as
//! `PID.hlraw.ckpt`, so that a process killed by SIGKILL leaves a profile.
//! These tests drive the recorder directly (LD_PRELOAD, HEAPLEDGER_DIR,
//! HEAPLEDGER_OPTS) and read what it wrote with heapledger-wire.

mod common;

use common::{compile, Scratch, SITE_FLAGS};
use heapledger_wire::Dump;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `exe args` under the recorder with `opts`, its dumps in `dir`;
/// the exit signal (or None for an exit).
fn run(exe: &Path, args: &[&str], dir: &Path, opts: &str) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    let status = Command::new(exe)
        .args(args)
        .env("LD_PRELOAD", heapledger::preload::find_preload().unwrap())
        .env(heapledger_wire::ENV_DIR, dir)
        .env(heapledger_wire::ENV_OPTS, opts)
        .status()
        .unwrap();
    status.signal()
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

fn name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

fn decode(p: &Path) -> Dump {
    heapledger_wire::decode(&std::fs::read(p).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// What the stacks whose blocks all have `lo..=hi` bytes hold together
/// (a loop the compiler unrolled has one stack per copy of its call):
/// allocs and bytes, frees and bytes, bytes alive, leaks and their bytes.
fn sum_of(d: &Dump, lo: u64, hi: u64) -> [i64; 7] {
    let mut sum = [0i64; 7];
    let mut n = 0;
    for (i, s) in d.stacks.iter().enumerate() {
        let c = d.counters(i);
        let t = &c.totals;
        if t.alloc.count > 0 && t.alloc.min >= lo && t.alloc.max <= hi {
            n += 1;
            let (lc, lb) = d
                .leaks
                .iter()
                .find(|l| l.stack == s.id)
                .map_or((0, 0), |l| (l.count, l.bytes));
            let v = [
                t.alloc.count,
                t.alloc.sum,
                t.free.count,
                t.free.sum,
                c.alive as u64,
                lc,
                lb,
            ];
            for (a, b) in sum.iter_mut().zip(v) {
                *a += b as i64;
            }
        }
    }
    assert!(n > 0, "no stack allocates {lo}..={hi} bytes");
    sum
}

#[test]
fn a_process_killed_by_sigkill_leaves_its_checkpoint() {
    let dir = Scratch::new("ckpt-kill");
    let exe = dir.join("checkpoint");
    compile("cc", &["checkpoint.c"], SITE_FLAGS, &exe);
    let dumps = dir.join("dumps");
    std::fs::create_dir(&dumps).unwrap();
    let signal = run(&exe, &[], &dumps, "stack=dwarf,checkpoint=100");
    assert_eq!(signal, Some(libc::SIGKILL));
    let all = files(&dumps);
    let names: Vec<String> = all.iter().map(|p| name(p)).collect();
    assert!(
        !names.iter().any(|n| n.ends_with(".tmp")),
        "a temporary file was left: {names:?}"
    );
    let ckpt: Vec<&PathBuf> = all
        .iter()
        .filter(|p| name(p).ends_with(".hlraw.ckpt"))
        .collect();
    assert_eq!(ckpt.len(), 1, "{names:?}");
    // Its final dump, reserved when recording started, was never written.
    let fin = PathBuf::from(ckpt[0].to_string_lossy().trim_end_matches(".ckpt"));
    assert_eq!(std::fs::metadata(&fin).unwrap().len(), 0);

    let d = decode(ckpt[0]);
    let c = d.checkpoint.expect("the checkpoint record");
    assert!(c.seq >= 1);
    assert!(c.ticks >= d.start_ticks && c.ticks == d.end_ticks);
    assert!(d.ending.is_none());

    // allocs, bytes, frees, bytes, alive, leaks, bytes
    assert_eq!(sum_of(&d, 1237, 1237), [10, 12370, 0, 0, 12370, 10, 12370]);
    assert_eq!(sum_of(&d, 2345, 2345), [5, 11725, 5, 11725, 0, 0, 0]);
    assert_eq!(sum_of(&d, 3457, 3457), [3, 10371, 0, 0, 10371, 3, 10371]);
    let calloc = d.threads[0].stats[heapledger_wire::AllocFn::Calloc as usize];
    assert!(calloc.0 >= 3, "calloc calls {calloc:?}");
    assert!(d.globals.peak_requested >= 12370 + 10371);
}

#[test]
fn a_normal_exit_leaves_no_checkpoint() {
    let dir = Scratch::new("ckpt-exit");
    let exe = dir.join("checkpoint");
    compile("cc", &["checkpoint.c"], SITE_FLAGS, &exe);
    let dumps = dir.join("dumps");
    std::fs::create_dir(&dumps).unwrap();
    assert_eq!(run(&exe, &["exit"], &dumps, "checkpoint=50"), None);
    let all = files(&dumps);
    let names: Vec<String> = all.iter().map(|p| name(p)).collect();
    // The dump, and the series of the checkpoints written before it.
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names[0].ends_with(".hlraw"), "{names:?}");
    assert!(names[1].ends_with(".hlraw.series"), "{names:?}");
    let d = decode(&all[0]);
    assert!(d.checkpoint.is_none());
    assert_eq!(sum_of(&d, 1237, 1237), [10, 12370, 0, 0, 12370, 10, 12370]);
}

#[test]
fn threads_allocating_while_checkpoints_are_written() {
    let dir = Scratch::new("ckpt-threads");
    let exe = dir.join("checkpoint_threads");
    let mut flags = SITE_FLAGS.to_vec();
    flags.push("-pthread");
    compile("cc", &["checkpoint_threads.c"], &flags, &exe);
    for round in 0..16 {
        let dumps = dir.join(&format!("dumps{round}"));
        std::fs::create_dir(&dumps).unwrap();
        let kill = round % 2 == 1;
        let args: &[&str] = if kill { &["kill"] } else { &[] };
        let signal = run(&exe, args, &dumps, "stack=dwarf,checkpoint=5");
        let all = files(&dumps);
        let names: Vec<String> = all.iter().map(|p| name(p)).collect();
        let want = if kill { ".hlraw.ckpt" } else { ".hlraw" };
        assert_eq!(signal, kill.then_some(libc::SIGKILL), "round {round}");
        let dump: Vec<&PathBuf> = all.iter().filter(|p| name(p).ends_with(want)).collect();
        assert_eq!(dump.len(), 1, "round {round}: {names:?}");
        assert!(
            !names.iter().any(|n| n.ends_with(".tmp")),
            "round {round}: {names:?}"
        );
        if !kill {
            assert_eq!(names.len(), 2, "round {round}: {names:?}");
        }
        let d = decode(dump[0]);
        // The series: a record per checkpoint, in order, each stack's
        // totals never going down, the last no further than the dump's.
        let series = all.iter().find(|p| name(p).ends_with(".series"));
        let series = heapledger_wire::decode_series(&std::fs::read(series.unwrap()).unwrap());
        assert!(!series.is_empty(), "round {round}");
        let mut last: std::collections::HashMap<u64, [u64; 4]> = Default::default();
        for (i, r) in series.iter().enumerate() {
            assert_eq!(r.seq, i as u64 + 1, "round {round}");
            for (id, c) in &r.stacks {
                let old = last.insert(*id, *c).unwrap_or_default();
                assert!(
                    (0..4).all(|k| c[k] >= old[k]),
                    "round {round}: {old:?} {c:?}"
                );
            }
        }
        for (id, c) in &last {
            let i = d.stacks.iter().position(|s| s.id == *id).unwrap();
            assert!(c[0] <= d.counters(i).totals.alloc.count, "round {round}");
        }
        if let Some(ck) = d.checkpoint {
            assert!(series.last().unwrap().seq <= ck.seq, "round {round}");
        }
        assert_eq!(d.checkpoint.is_some(), kill);
        if let Some(c) = d.checkpoint {
            // Checkpoints were written while the threads ran, then the last.
            assert!(c.seq >= 2, "round {round}: {c:?}");
        }
        // The threads' one call site: 20000 pairs each, of 3001 + t bytes.
        let bytes = 20000 * (3001 + 3002 + 3003 + 3004);
        assert_eq!(
            sum_of(&d, 3001, 3004),
            [80000, bytes, 80000, bytes, 0, 0, 0],
            "round {round}"
        );
    }
}
