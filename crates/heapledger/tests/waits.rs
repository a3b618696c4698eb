//! Time lost (issue 35, seed 004): lock waits charged to the waiter's
//! stack, with the holder's; C, C++ (std::mutex, std::condition_variable)
//! and python3's threads waiting for the interpreter lock; `heapledger
//! waits`, the summary's section, and `--no-waits`.

mod common;

use common::*;
use heapledger_profile::{Profile, TimeLost, WaitKind};
use std::process::Command;

/// Entries whose waiter's stack has `function` at `line` (any line: None).
fn at<'a>(p: &'a Profile, function: &str, line: Option<u32>) -> Vec<&'a TimeLost> {
    p.heapledger
        .as_ref()
        .unwrap()
        .time_lost
        .iter()
        .filter(|t| {
            t.stack.iter().any(|&a| {
                let (f, l) = frame(p, a);
                is_fn(&f, function) && line.is_none_or(|want| l == Some(want))
            })
        })
        .collect()
}

fn secs(v: &[&TimeLost]) -> f64 {
    v.iter().map(|t| t.total_ns as f64 / 1e9).sum()
}

#[test]
fn a_mutex_held_five_times_200_ms() {
    let dir = Scratch::new("waits");
    let exe = compile_threaded("waits", &dir);
    let (p, out) = profile_of("dwarf", &dir, &exe, &[] as &[&str]);
    assert_eq!(out, "done\n");
    let src = "waits.c";
    let waits = at(&p, "wait_for_lock", Some(site_line(src, "wait")));
    let count: u64 = waits.iter().map(|t| t.count).sum();
    let lost = secs(&waits);
    assert_eq!(count, 5, "{waits:?}");
    assert!(waits.iter().all(|t| t.kind == WaitKind::Mutex));
    assert!((0.85..2.0).contains(&lost), "lost {lost} s");
    // The holder's stack, from the second wait on (the first taught the
    // recorder that this lock is waited for).
    let with_holder: u64 = waits
        .iter()
        .filter(|t| starts_with(&p, &t.holder, &[("hold_lock", site_line(src, "hold"))]))
        .map(|t| t.count)
        .sum();
    assert!(with_holder >= 4, "{with_holder} waits name the holder");
    // The holder itself never waited for the lock.
    assert!(at(&p, "hold_lock", None).is_empty());

    // The summary and `heapledger waits` say the same.
    let store = dir.join("p.sqlite");
    let j = report_json(&store);
    let top = &j["time_lost"]["entries"][0];
    assert_eq!(top["kind"], "mutex");
    assert_eq!(top["site"]["function"], "wait_for_lock");
    assert_eq!(top["holder"]["function"], "hold_lock");
    let w = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .arg("waits")
        .arg(&store)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&w.stdout);
    assert!(w.status.success());
    assert!(
        text.contains("mutex waits") && text.contains("held by") && text.contains("hold_lock"),
        "{text}"
    );

    // --no-waits: nothing.
    let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["run", "-q", "--no-waits", "-o"])
        .arg(dir.join("n.sqlite"))
        .arg("--")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(o.status.success());
    let w = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .arg("waits")
        .arg(dir.join("n.sqlite"))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&w.stdout).starts_with("No time lost waiting was recorded"));
}

#[test]
fn std_mutex_and_condition_variable() {
    let dir = Scratch::new("waits-cxx");
    let exe = dir.join("waits_cxx");
    let mut flags = SITE_FLAGS.to_vec();
    flags.push("-pthread");
    compile("c++", &["waits_cxx.cpp"], &flags, &exe);
    let (p, out) = profile_of("dwarf", &dir, &exe, &[] as &[&str]);
    assert_eq!(out, "done\n");
    let src = "waits_cxx.cpp";
    // (lock_it's and wait_turn's own frames show the library code inlined
    // in them: the waits are found by main's lines that call them.)
    let locks: Vec<&TimeLost> = at(&p, "main", Some(site_line(src, "lock")))
        .into_iter()
        .filter(|t| t.kind == WaitKind::Mutex)
        .collect();
    assert_eq!(locks.iter().map(|t| t.count).sum::<u64>(), 3, "{locks:?}");
    assert!((0.25..0.9).contains(&secs(&locks)), "{}", secs(&locks));
    let conds: Vec<&TimeLost> = at(&p, "main", Some(site_line(src, "cv")))
        .into_iter()
        .filter(|t| t.kind == WaitKind::Condition)
        .collect();
    assert!(conds.iter().map(|t| t.count).sum::<u64>() >= 3, "{conds:?}");
    assert!((0.25..0.9).contains(&secs(&conds)), "{}", secs(&conds));
    let joins: Vec<&TimeLost> = at(&p, "main", None)
        .into_iter()
        .filter(|t| t.kind == WaitKind::Join)
        .collect();
    assert_eq!(joins.iter().map(|t| t.count).sum::<u64>(), 1);
}

#[test]
fn python_threads_wait_for_the_interpreter_lock() {
    let dir = Scratch::new("waits-py");
    // The interpreter itself, not a wrapper script that would run first.
    let exe = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .unwrap();
    let python = String::from_utf8_lossy(&exe.stdout).trim().to_owned();
    let script = "import threading\n\
def work():\n    s = 0\n    for i in range(1500000):\n        s += i\n\
ts = [threading.Thread(target=work) for _ in range(4)]\n\
[t.start() for t in ts]\n[t.join() for t in ts]\nprint('done')\n";
    let (_, out) = profile_of(
        "dwarf",
        &dir,
        std::path::Path::new(&python),
        &["-c", script],
    );
    assert_eq!(out, "done\n");
    // Four threads on one interpreter lock: their time goes to waiting for
    // it, each in the interpreter's condition wait (take_gil).
    let r = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["report", "--json", "--top", "1000"])
        .arg(dir.join("p.sqlite"))
        .output()
        .unwrap();
    let j: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    let gil: Vec<&serde_json::Value> = j["time_lost"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["kind"] == "condition"
                && e["site"]["library"]
                    .as_str()
                    .is_some_and(|l| l.contains("python"))
        })
        .collect();
    let threads: std::collections::HashSet<String> =
        gil.iter().map(|e| e["thread"].to_string()).collect();
    let lost: f64 = gil
        .iter()
        .map(|e| e["total_seconds"].as_f64().unwrap())
        .sum();
    assert!(threads.len() >= 3, "{threads:?}: {gil:?}");
    assert!(lost > 0.3, "{lost} s in the interpreter's condition waits");
}

#[test]
fn threads_canceled_while_they_wait() {
    let dir = Scratch::new("waits-cancel");
    let exe = compile_threaded("cancel", &dir);
    let want = "cond canceled\ntimedwait canceled\nsem canceled\njoin canceled\n";
    let alone = Command::new(&exe).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&alone.stdout), want);
    let o = heapledger_run_within(
        "dwarf",
        &dir.join("p.sqlite"),
        &exe,
        &[] as &[&str],
        std::time::Duration::from_secs(60),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout), want);
}

#[test]
fn the_call_tree_and_flame_graph_weigh_time_lost() {
    let dir = Scratch::new("waits-tree");
    let exe = compile_threaded("waits", &dir);
    let store = dir.join("p.sqlite");
    let o = heapledger_run("dwarf", &store, &exe, &[] as &[&str]);
    assert!(o.status.success());
    let t = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["tree", "--metric", "waited", "--json"])
        .arg(&store)
        .output()
        .unwrap();
    assert!(t.status.success(), "{}", String::from_utf8_lossy(&t.stderr));
    let j: serde_json::Value = serde_json::from_slice(&t.stdout).unwrap();
    // The tree's total is the time lost, every entry's.
    let rj = report_json(&store);
    let total = j["total"].as_u64().unwrap() as f64 / 1e9;
    let lost = rj["time_lost"]["total_seconds"].as_f64().unwrap();
    assert!((total - lost).abs() < 1e-6, "{total} against {lost}");
    assert!(j.to_string().contains("wait_for_lock"));
    let svg = dir.join("w.svg");
    let e = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args([
            "export",
            "--format",
            "flamegraph",
            "--metric",
            "waited",
            "-o",
        ])
        .arg(&svg)
        .arg(&store)
        .output()
        .unwrap();
    assert!(e.status.success());
    assert!(std::fs::read_to_string(&svg)
        .unwrap()
        .contains("wait_for_lock"));
}

#[test]
fn time_lost_the_program_records_itself() {
    let dir = Scratch::new("waits-user");
    let exe = dir.join("userwaits");
    let inc = header_include();
    let mut flags = SITE_FLAGS.to_vec();
    flags.push(&inc);
    compile("cc", &["userwaits.c"], &flags, &exe);
    let src = "userwaits.c";
    let (p, out) = profile_of("dwarf", &dir, &exe, &[] as &[&str]);
    assert_eq!(out, "-1\n");
    // Each entry at the line that began it (heapledger.h's calls, inlined
    // there, are looked past), of the kind it named.
    let r = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["report", "--json"])
        .arg(dir.join("p.sqlite"))
        .output()
        .unwrap();
    let j: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    let entries = j["time_lost"]["entries"].as_array().unwrap().clone();
    let find = |function: &str, site: &str| -> serde_json::Value {
        let at = format!(":{}", site_line(src, site));
        entries
            .iter()
            .find(|e| {
                e["site"]["function"] == function
                    && e["site"]["location"].as_str().unwrap().ends_with(&at)
            })
            .cloned()
            .unwrap_or_else(|| panic!("no entry at {function}{at}: {entries:?}"))
    };
    let io = find("read_input", "io");
    assert_eq!(
        (io["kind"].as_str(), io["count"].as_u64()),
        (Some("io"), Some(1))
    );
    assert!(
        (0.045..0.5).contains(&io["total_seconds"].as_f64().unwrap()),
        "{io}"
    );
    // Wait pairing: the second begin ended the first.
    let first = find("retry_twice", "first");
    let second = find("retry_twice", "second");
    assert_eq!(first["kind"], "retry");
    assert!(
        (0.018..0.5).contains(&first["total_seconds"].as_f64().unwrap()),
        "{first}"
    );
    assert!(
        (0.028..0.5).contains(&second["total_seconds"].as_f64().unwrap()),
        "{second}"
    );
    let user = p
        .heapledger
        .as_ref()
        .unwrap()
        .time_lost
        .iter()
        .filter(|t| t.kind == WaitKind::User)
        .count();
    assert_eq!(user, 3);

    // timelog.md's storm, end to end, with one entry a thread: 1 000 × 1 ms
    // at one stack beat one 500 ms at another.
    let store = dir.join("storm.sqlite");
    let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["run", "-q", "--waits-top", "1", "-o"])
        .arg(&store)
        .arg("--")
        .arg(&exe)
        .arg("storm")
        .output()
        .unwrap();
    assert!(o.status.success());
    let j = report_json(&store);
    let entries = j["time_lost"]["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0]["kind"], "gc");
    assert_eq!(entries[0]["count"], 1000);
    assert_eq!(entries[0]["total_seconds"], 1.0);
    assert_eq!(entries[0]["site"]["function"], "small_pauses");
}
