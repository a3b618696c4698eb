//! Tracebacks and time logs the program keeps itself (issue 35,
//! timelog.md's user API, `heapledger.h`): the edge cases of timelog.md end
//! to end (programs/timelogs.c): prefix sharing, the frame count back to
//! its baseline, a traceback copied from a thread that outlives it,
//! regrouping and eviction in the program's own logs, logs enumerated,
//! cleared and destroyed; and allocations and waits charged to pushed
//! frames, in the profile, labels read as file, line and function.

mod common;

use common::*;
use std::process::Command;

/// programs/NAME.c, threaded and with `heapledger.h`, built in `dir`.
fn build(dir: &Scratch, name: &str) -> std::path::PathBuf {
    let exe = dir.join(name);
    let inc = header_include();
    let mut flags = SITE_FLAGS.to_vec();
    flags.extend(["-pthread", inc.as_str()]);
    compile("cc", &[&format!("{name}.c")], &flags, &exe);
    exe
}

#[test]
fn tracebacks_and_logs_of_the_programs_own() {
    let dir = Scratch::new("timelogs");
    let exe = build(&dir, "timelogs");

    let (p, out) = profile_of("dwarf", &dir, &exe, &[] as &[&str]);
    let expected = [
        "shared 1",
        "s1 b a",
        "s2 c a",
        "alive 3",
        "pop-empty -1",
        "alive-held 3",
        "alive-released 0",
        "code 0 1",
        // 1000 x 1 ms at K beat one 500 ms wait at J (N = 1).
        "regrouped 1 [gc K 1000 1000 -]",
        // 5 1 4 2 3 with N = 3.
        "evicted 3 [retry five 1 5 -] [retry four 1 4 -] [retry three 1 3 -]",
        // The worker's traceback, after the worker ended and its handle
        // was released: the entry holds it.
        "cross 1 [contention main.c:99 in wait_for_worker 1 7 worker.c:10 in hold]",
        "logs 3",
        "cleared 0",
        "logs 1",
        "destroy-twice -1",
        "alive-end 0",
    ];
    assert_eq!(out.lines().collect::<Vec<_>>(), expected, "{out}");

    // Allocations charged to the pushed label, read as file, line and
    // function, under the allocation's own line.
    let build = p
        .stacks
        .iter()
        .filter(|s| s.stack.len() >= 2)
        .filter(|s| {
            let (f, line) = frame(&p, s.stack[1]);
            f == "build" && line == Some(7)
        })
        .map(|s| s.infos.alloc.count)
        .sum::<u64>();
    assert_eq!(build, 3);
    let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["report"])
        .arg(dir.join("p.sqlite"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success());
    // The profile's time lost: the regrouped storm at K's label, and the
    // worker's label as the holder's stack.
    let w = heapledger_waits_json(&dir);
    let entries = w.as_array().expect("entries");
    // A frame of a stack, as `waits --json` writes it: "FUNCTION  FILE:LINE
    // (LIBRARY)", pushed frames' library `[pushed]`.
    let pushed = |frames: &serde_json::Value, function: &str| {
        frames.as_array().unwrap().iter().any(|f| {
            let f = f.as_str().unwrap();
            f.starts_with(&format!("{function}  ")) && f.ends_with("([pushed])")
        })
    };
    let at = |label: &str| {
        entries
            .iter()
            .find(|e| pushed(&e["stack"], label))
            .unwrap_or_else(|| panic!("no entry at {label}: {w}"))
    };
    let k = at("K");
    assert_eq!(
        (k["kind"].as_str(), k["count"].as_u64()),
        (Some("gc"), Some(1000)),
        "{k}"
    );
    let cross = at("wait_for_worker");
    assert!(pushed(&cross["holder_stack"], "hold"), "{cross}");
    assert_eq!(cross["holder"]["location"], "worker.c:10", "{cross}");
    assert!(text.contains("Time lost"), "{text}");

    // Alone: every call says it is not running under heapledger.
    let o = Command::new(&exe).output().unwrap();
    assert!(o.status.success());
    let alone = String::from_utf8_lossy(&o.stdout);
    assert!(
        alone.starts_with("shared 1\ns1\ns2\nalive 0\npop-empty -1\n"),
        "{alone}"
    );
    assert!(
        alone.contains("regrouped -1\n") && alone.contains("logs -1\n"),
        "{alone}"
    );
}

/// `heapledger waits --json` of the test's profile: its entries.
fn heapledger_waits_json(dir: &Scratch) -> serde_json::Value {
    let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["waits", "--json"])
        .arg(dir.join("p.sqlite"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    match v.get("entries") {
        Some(e) => e.clone(),
        None => v,
    }
}

/// Forks while other threads push frames, intern labels and name kinds:
/// the recorder takes those locks across the fork, so no child finds one
/// held by a thread it did not inherit (it would spin for ever).
#[test]
fn forks_while_threads_push_frames_do_not_hang() {
    let dir = Scratch::new("timelogs-fork");
    let exe = build(&dir, "timelogs_fork");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_heapledger"));
    cmd.args(["run", "-q", "-o"])
        .arg(dir.join("p.sqlite"))
        .arg("--")
        .arg(&exe);
    let o = output_within(cmd, std::time::Duration::from_secs(120));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "ok\n");
}
