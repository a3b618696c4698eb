//! Control while the program runs (issue 34, seed 002): `heapledger.h`
//! from inside the program (programs/control.c follows the seed's best
//! practice: stacks off, switched on as blocks pile up, the leak report,
//! a snapshot, off again, the leak fixed, verified), the same calls through
//! Python's ctypes, and `heapledger ctl` from outside on a program that
//! waits for it (programs/ctl_wait.c, which uses SIGUSR1 and SIGUSR2
//! itself).

mod common;

use common::*;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn heapledger(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(args)
        .output()
        .unwrap()
}

/// `export --format malt` of `what` (a store, or `STORE:LABEL`) into
/// `out`, read back.
fn malt_of(what: &str, out: &Path) -> heapledger_profile::Profile {
    let o = heapledger(&[
        "export",
        what,
        "--format",
        "malt",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    heapledger_profile::Profile::from_path(out).unwrap()
}

fn build_control(dir: &Scratch) -> PathBuf {
    let exe = dir.join("control");
    let inc = header_include();
    let mut flags = SITE_FLAGS.to_vec();
    flags.extend(["-rdynamic", inc.as_str()]);
    compile("cc", &["control.c"], &flags, &exe);
    exe
}

/// The lines of `text` starting with `key `, without it.
fn lines_of<'a>(text: &'a str, key: &str) -> Vec<&'a str> {
    text.lines()
        .filter_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(' ')))
        .collect()
}

#[test]
fn the_seeds_phases_from_inside_the_program_are_exact() {
    let dir = Scratch::new("control");
    let exe = build_control(&dir);
    let src = "control.c";
    let store = dir.join("p.sqlite");
    let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["run", "-q", "--backtrace", "off", "-o"])
        .arg(&store)
        .arg("--")
        .arg(&exe)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{err}");

    // The program's own output is what it is alone; there every call says
    // it is not running under heapledger.
    let alone = Command::new(&exe).output().unwrap();
    assert!(alone.status.success());
    assert_eq!(alone.stdout, o.stdout);
    let alone_err = String::from_utf8_lossy(&alone.stderr);
    assert_eq!(lines_of(&alone_err, "running"), ["0 backtrace 0"]);
    assert_eq!(lines_of(&alone_err, "switch"), ["-1", "-1"]);
    assert_eq!(lines_of(&alone_err, "snapshot"), ["-1", "-1"]);
    assert_eq!(lines_of(&alone_err, "reset"), ["-1"]);
    assert!(alone_err.contains("=== Memory Leak Report ===\nnot running under heapledger\n"));
    assert!(lines_of(&alone_err, "stats")
        .iter()
        .all(|l| l.split(' ').nth(1) == Some("-1")));

    // Under heapledger: each phase's counts, from the program's own calls.
    assert_eq!(lines_of(&err, "running"), ["1 backtrace 0"], "{err}");
    assert_eq!(lines_of(&err, "switch"), ["0", "0"]);
    // Snapshots are numbered with the checkpoints (one may come between
    // on a slow machine): positive, increasing.
    let numbers: Vec<u64> = lines_of(&err, "snapshot")
        .iter()
        .map(|n| n.parse().unwrap())
        .collect();
    assert!(
        numbers.len() == 2 && numbers[0] >= 1 && numbers[1] > numbers[0],
        "{numbers:?}"
    );
    assert_eq!(lines_of(&err, "reset"), ["0"]);
    // After the reset: the fixed code's 5 blocks, all freed; the 5 leaked
    // blocks freed as older ones.
    assert_eq!(
        lines_of(&err, "stats"),
        [
            "early 0 blocks=10 bytes=1000 allocations=10 allocated=1000 frees=0 freed=0 backtrace=0",
            "late 0 blocks=5 bytes=1000 allocations=5 allocated=1000 frees=0 freed=0 backtrace=1",
            "fixed 0 blocks=0 bytes=0 allocations=5 allocated=1000 frees=5 freed=1000 backtrace=0",
        ]
    );
    assert_eq!(
        lines_of(&err, "older"),
        ["early 0 0", "late 0 0", "fixed 5 1000"]
    );

    // The in-process leak report: every block with its pointer and size;
    // those allocated with stacks on with their library and frames.
    let report = err
        .split("=== Memory Leak Report ===\n")
        .nth(1)
        .and_then(|r| r.split("=== end of report ===").next())
        .unwrap();
    assert!(report.starts_with("Total Allocations: 15 (2000 bytes)\nTotal Frees: 0 (0 bytes)\nCurrent Leaks: 15 (2000 bytes)\n"), "{report}");
    let entries: Vec<&str> = report.split("\nLeak #").skip(1).collect();
    assert_eq!(entries.len(), 15, "{report}");
    for ptr in lines_of(&err, "late") {
        let e = entries
            .iter()
            .find(|e| e.contains(&format!("ptr={ptr}, ")))
            .unwrap_or_else(|| panic!("{ptr} not in {report}"));
        assert!(e.contains(", size=200, so=control\n  Backtrace ("), "{e}");
        assert!(
            e.contains("    #0: 0x") && e.lines().nth(2).unwrap().ends_with("(leak_late)"),
            "{e}"
        );
    }
    for ptr in lines_of(&err, "early") {
        let e = entries
            .iter()
            .find(|e| e.contains(&format!("ptr={ptr}, ")))
            .unwrap_or_else(|| panic!("{ptr} not in {report}"));
        assert!(e.trim_end().ends_with(", size=100, so=?"), "{e}");
    }

    // The snapshot before the reset: the early blocks without a stack, the
    // late ones with theirs, all alive.
    let early = site_line(src, "early");
    let late = site_line(src, "late");
    let with = malt_of(
        &format!("{}:with-stacks", store.display()),
        &dir.join("with.json"),
    );
    assert!(stacks_at(&with, "leak_early", early).is_empty());
    let w = site(&with, "leak_late", late);
    assert_eq!(
        (w.alloc.count, w.alloc.sum, w.free.count, w.alive_req),
        (5, 1000, 0, 1000)
    );
    let leaks = program_leaks(&with);
    let no_stack: Vec<_> = leaks.iter().filter(|l| l.stack.is_empty()).collect();
    assert_eq!(no_stack.len(), 1, "{}", describe_leaks(&with, &leaks));
    assert_eq!((no_stack[0].count, no_stack[0].memory), (10, 1000));
    // The shares at the peak (2000 B then, the runtime's few blocks
    // aside): the late site's exactly; the blocks without a stack, which
    // track no share of their own (stacks off cost what `--stack none`
    // costs), the peak less every other stack's.
    assert_eq!(w.global_peak, 1000);
    let peak = with.peak_requested().unwrap() as i64;
    let shares: i64 = with.stacks.iter().map(|s| s.infos.global_peak).sum();
    assert_eq!(shares, peak);
    let empty: Vec<_> = with.stacks.iter().filter(|s| s.stack.is_empty()).collect();
    assert_eq!(empty.len(), 1);
    let e = &empty[0].infos;
    assert!(
        e.global_peak >= 1000 && e.global_peak < peak - 1000 + 64,
        "{e:?}, peak {peak}"
    );
    assert!(e.max_alive_req >= e.global_peak.max(e.alive_req), "{e:?}");

    // The end and the snapshot after the fix hold what came after the
    // reset only: the fixed code's 5 blocks (stacks were off), nothing
    // left; the older blocks counted apart.
    for what in [
        store.display().to_string(),
        format!("{}:fixed", store.display()),
    ] {
        let p = malt_of(&what, &dir.join("after.json"));
        let allocs: u64 = p.stacks.iter().map(|s| s.infos.alloc.count).sum();
        let frees: u64 = p.stacks.iter().map(|s| s.infos.free.count).sum();
        assert_eq!((allocs, frees), (5, 5), "{what}");
        assert!(stacks_at(&p, "leak_late", late).is_empty(), "{what}");
        assert!(
            program_leaks(&p).is_empty(),
            "{what}: {}",
            describe_leaks(&p, &program_leaks(&p))
        );
        let r = p.heapledger.as_ref().unwrap().reset.unwrap();
        assert_eq!(
            (
                r.count,
                r.older_freed,
                r.older_freed_bytes,
                r.older_alive,
                r.older_alive_bytes
            ),
            (1, 5, 1000, 10, 1000),
            "{what}"
        );
    }
    let r = heapledger(&[
        "report",
        store.to_str().unwrap(),
        "--snapshot",
        "with-stacks",
    ]);
    let text = String::from_utf8_lossy(&r.stdout);
    assert!(r.status.success());
    assert!(
        text.contains("Snapshot         \"with-stacks\" (number "),
        "{text}"
    );

    // The two snapshots compared: the late site's leak is gone.
    let d = heapledger(&[
        "diff",
        &format!("{}:with-stacks", store.display()),
        &format!("{}:fixed", store.display()),
    ]);
    let text = String::from_utf8_lossy(&d.stdout);
    assert!(d.status.success(), "{}", String::from_utf8_lossy(&d.stderr));
    let row = text
        .lines()
        .find(|l| l.contains("leak_late"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(row.contains("-1000 B"), "{text}");
    let r = heapledger(&["report", store.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&r.stdout);
    assert!(
        text.contains("Reset            the counters were reset 1 time by the program"),
        "{text}"
    );

    // The final report lists the snapshots; a label not there is one line.
    let r = heapledger(&["report", store.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&r.stderr).contains("2 snapshots of this process in"));
    let r = heapledger(&["report", store.to_str().unwrap(), "--snapshot", "nope"]);
    let e = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(2));
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.contains("holds no snapshot nope")
            && e.contains("with-stacks (")
            && e.contains("fixed ("),
        "{e}"
    );
}

#[test]
fn python_steers_the_recorder_through_ctypes() {
    let dir = Scratch::new("control-py");
    let store = dir.join("p.sqlite");
    let script = "import ctypes\n\
lib = ctypes.CDLL(None)\n\
print(hasattr(lib, 'heapledger_api_version') and lib.heapledger_api_version())\n\
print(lib.heapledger_set_backtrace_enabled(0), lib.heapledger_is_backtrace_enabled())\n\
print(lib.heapledger_set_backtrace_enabled(1), lib.heapledger_is_backtrace_enabled())\n\
lib.heapledger_get_leak_report.restype = ctypes.c_void_p\n\
r = lib.heapledger_get_leak_report()\n\
print(ctypes.string_at(r).decode().splitlines()[0])\n\
lib.heapledger_free_leak_report(ctypes.c_void_p(r))\n\
print(lib.heapledger_snapshot(b'py') > 0)\n";
    let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["run", "-q", "-o"])
        .arg(&store)
        .args(["--", "python3", "-c", script])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "1\n0 0\n0 1\n=== Memory Leak Report ===\nTrue\n"
    );
    let r = heapledger(&["report", &format!("{}:py", store.display())]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    // Without heapledger the symbols are not there.
    let o = Command::new("python3")
        .args(["-c", script])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).lines().next(),
        Some("False")
    );
}

/// Sends `line` to the program and waits for its answer line.
fn step(to: &mut impl Write, from: &mut impl BufRead, line: &str) -> String {
    writeln!(to, "{line}").unwrap();
    to.flush().unwrap();
    let mut answer = String::new();
    from.read_line(&mut answer).unwrap();
    answer
}

fn ctl(pid: u32, command: &[&str]) -> String {
    let mut args = vec!["ctl".to_owned(), pid.to_string()];
    args.extend(command.iter().map(|s| s.to_string()));
    let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(&args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "ctl {command:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn ctl_switches_stacks_and_takes_snapshots_from_outside() {
    let dir = Scratch::new("ctl");
    let exe = dir.join("ctl_wait");
    compile("cc", &["ctl_wait.c"], SITE_FLAGS, &exe);
    let store = dir.join("c.sqlite");
    let mut child = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["run", "-q", "--backtrace", "off", "-o"])
        .arg(&store)
        .arg("--")
        .arg(&exe)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut to = child.stdin.take().unwrap();
    let mut from = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    from.read_line(&mut first).unwrap();
    let pid: u32 = first.trim().strip_prefix("pid ").unwrap().parse().unwrap();

    let stats = ctl(pid, &["stats"]);
    assert!(stats.contains("\nbacktrace off"), "{stats}");
    assert_eq!(step(&mut to, &mut from, "go"), "step 1 done\n"); // site a, stacks off
    assert_eq!(ctl(pid, &["backtrace", "on"]), "backtrace on\n");
    assert_eq!(step(&mut to, &mut from, "go"), "step 2 done\n"); // site b, with stacks
    assert!(ctl(pid, &["snapshot", "mid"]).starts_with("snapshot "));
    let stats = ctl(pid, &["stats"]);
    assert!(stats.contains("\nbacktrace on"), "{stats}");
    assert_eq!(ctl(pid, &["backtrace", "off"]), "backtrace off\n");
    assert_eq!(step(&mut to, &mut from, "go"), "step 3 done\n"); // site c, stacks off
    assert!(ctl(pid, &["snapshot", "before-reset"]).starts_with("snapshot "));
    assert_eq!(
        ctl(pid, &["reset"]),
        format!("counters of process {pid} reset\n")
    );
    let stats = ctl(pid, &["stats"]);
    assert!(
        stats.starts_with("blocks_alive 0\nbytes_alive 0\npeak_bytes 0\nallocations 0\n"),
        "{stats}"
    );
    // The program's own signals reached its own handlers, once each.
    assert_eq!(step(&mut to, &mut from, "end"), "usr1 1 usr2 1\n");
    drop(to);
    let status = child.wait().unwrap();
    assert!(status.success());

    let src = "ctl_wait.c";
    // After the reset the program allocated nothing.
    let end = malt_of(store.to_str().unwrap(), &dir.join("end.json"));
    assert_eq!(
        end.stacks.iter().map(|s| s.infos.alloc.count).sum::<u64>(),
        0
    );
    let p = malt_of(
        &format!("{}:before-reset", store.display()),
        &dir.join("before.json"),
    );
    assert!(stacks_at(&p, "site_a", site_line(src, "a")).is_empty());
    assert_eq!(site(&p, "site_b", site_line(src, "b")).alloc.count, 4);
    assert!(stacks_at(&p, "site_c", site_line(src, "c")).is_empty());
    let empty: u64 = p
        .stacks
        .iter()
        .filter(|s| s.stack.is_empty())
        .map(|s| s.infos.alloc.count)
        .sum();
    assert!(empty >= 5, "{empty} allocations without a stack");
    // The snapshot stands between b and c.
    let mid = malt_of(&format!("{}:mid", store.display()), &dir.join("mid.json"));
    assert_eq!(site(&mid, "site_b", site_line(src, "b")).alloc.count, 4);
    let mid_total: u64 = mid.stacks.iter().map(|s| s.infos.alloc.count).sum();
    let end_total: u64 = p.stacks.iter().map(|s| s.infos.alloc.count).sum();
    assert_eq!(
        end_total - mid_total,
        2,
        "site c's two blocks come after the snapshot"
    );

    // Commands to what cannot take them: one line each, non-zero.
    for (args, says) in [
        (vec!["ctl", "999999", "stats"], "no process 999999"),
        (
            vec!["ctl", &std::process::id().to_string(), "stats"],
            "is not running under `heapledger run`",
        ),
        (vec!["ctl", "1", "dance"], "unknown command `dance`"),
        (
            vec!["ctl", &pid.to_string(), "stats"],
            &format!("no process {pid}"),
        ),
    ] {
        let o = heapledger(&args);
        let e = String::from_utf8_lossy(&o.stderr);
        assert_ne!(o.status.code(), Some(0));
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(e.contains(says), "{e}");
    }
}

#[test]
fn the_recorder_takes_snapshots_by_time_and_by_level() {
    // programs/plateaus.c: 10 MB held from 0.2 to 0.5 s, 50 MB from 0.7
    // to 0.8 s, a 5 ms spike of 20 MB at 2.5 s, the end at 3.0 s.
    let dir = Scratch::new("control-auto");
    let exe = dir.join("plateaus");
    compile("cc", &["plateaus.c"], SITE_FLAGS, &exe);
    let store = dir.join("p.sqlite");
    let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args([
            "run",
            "-q",
            "--snapshot-every",
            "1",
            "--snapshot-when-above",
            "30M",
            "-o",
        ])
        .arg(&store)
        .arg("--")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let c = rusqlite::Connection::open(&store).unwrap();
    let snaps: Vec<(String, f64, i64)> = c
        .prepare("SELECT label, seconds, alive_bytes FROM snapshot ORDER BY seq")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let find = |l: &str| {
        snaps
            .iter()
            .find(|s| s.0 == l)
            .unwrap_or_else(|| panic!("no snapshot {l} in {snaps:?}"))
    };
    // Once above 30 MB: while the 50 MB are held (looked at every 50 ms).
    let above = find("above-1");
    assert!((0.69..0.86).contains(&above.1), "{snaps:?}");
    assert!(above.2 >= 50 << 20, "{snaps:?}");
    assert!(!snaps.iter().any(|s| s.0 == "above-2"), "{snaps:?}");
    // Every second.
    assert!((0.95..1.5).contains(&find("every-1").1), "{snaps:?}");
    assert!((1.95..2.5).contains(&find("every-2").1), "{snaps:?}");
}

#[test]
fn the_rust_crate_makes_the_same_calls() {
    let dir = Scratch::new("control-rust");
    let exe = dir.join("steer");
    let o = Command::new("rustc")
        .args(["-g", "-O", "--edition", "2021", "-o"])
        .arg(&exe)
        .arg(programs_dir().join("steer.rs"))
        .output()
        .expect("rustc");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let store = dir.join("p.sqlite");
    let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["run", "-q", "--backtrace", "off", "-o"])
        .arg(&store)
        .arg("--")
        .arg(&exe)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "done\n");
    // 7 vectors of 300 bytes, and the outer vector of 7 (24 bytes each).
    assert_eq!(
        err.lines().collect::<Vec<_>>(),
        [
            "running true",
            "switch true",
            "enabled true",
            "grew 8 2268",
            "report === Memory Leak Report ===",
            "snapshot Some(1)",
            "reset true",
            "frames Some([Label(\"steer.rs:1 in outer\")])",
            "entry io 1 3000000 Some([Label(\"steer.rs:1 in outer\")])",
            "alive 0",
        ]
    );
    // The snapshot holds the 7 vectors at their line, with their stack.
    let r = heapledger(&["report", &format!("{}:kept", store.display())]);
    let text = String::from_utf8_lossy(&r.stdout);
    let at = format!("steer.rs:{}", site_line("steer.rs", "keep"));
    let row = text
        .lines()
        .find(|l| l.contains("steer::keep") && l.contains(&at))
        .unwrap_or_else(|| panic!("no steer::keep at {at} in {text}"));
    assert!(row.contains("2100 B") && row.contains(" 7 "), "{row}");
    // Alone: every call says it is not running under heapledger.
    let o = Command::new(&exe).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success());
    assert!(err.starts_with("running false\nswitch false\nenabled false\ngrew 0 0\nreport === Memory Leak Report ===\nsnapshot None\nreset false\n"), "{err}");
}

#[test]
fn header_prints_the_header_the_tests_build_with() {
    let o = heapledger(&["header"]);
    assert!(o.status.success());
    let file =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../heapledger-preload/include/heapledger.h");
    assert_eq!(o.stdout, std::fs::read(file).unwrap());
    // The build installs it beside the binary.
    let beside = Path::new(env!("CARGO_BIN_EXE_heapledger")).with_file_name("heapledger.h");
    assert_eq!(
        std::fs::read(&beside).ok(),
        Some(o.stdout.clone()),
        "{}",
        beside.display()
    );
    // It compiles as C and as C++, warning-free.
    let dir = Scratch::new("control-header");
    let h = dir.join("heapledger.h");
    std::fs::write(&h, &o.stdout).unwrap();
    for (cc, name) in [("cc", "t.c"), ("c++", "t.cpp")] {
        let src = dir.join(name);
        std::fs::write(
            &src,
            "#include \"heapledger.h\"\nint main(void) { return heapledger_is_running(); }\n",
        )
        .unwrap();
        let out = Command::new(cc)
            .args(["-Wall", "-Wextra", "-Werror", "-o"])
            .arg(dir.join("t"))
            .arg(&src)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{cc}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            Command::new(dir.join("t")).status().unwrap().code(),
            Some(0)
        );
    }
}

#[test]
fn recording_switched_off_for_one_thread() {
    let dir = Scratch::new("control-disable");
    let exe = dir.join("disable");
    let inc = header_include();
    let mut flags = SITE_FLAGS.to_vec();
    flags.extend([inc.as_str(), "-pthread"]);
    compile("cc", &["disable.c"], &flags, &exe);
    let (p, stdout) = profile_of("dwarf", &dir, &exe, &[] as &[&str]);
    assert_eq!(stdout, "0 0\n");
    let src = "disable.c";
    assert!(stacks_at(&p, "main", site_line(src, "hidden")).is_empty());
    let shown = site(&p, "main", site_line(src, "shown"));
    assert_eq!(
        (shown.alloc.count, shown.alloc.sum, shown.free.count),
        (3, 666, 3)
    );
    // The other thread recorded all along.
    let other = site(&p, "worker", site_line(src, "other"));
    assert_eq!(
        (other.alloc.count, other.alloc.sum, other.free.count),
        (5, 1665, 5)
    );
    // The hidden blocks' frees are frees of blocks not seen allocated.
    let r = heapledger(&["report", dir.join("p.sqlite").to_str().unwrap(), "--json"]);
    let j: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert!(r.status.success());
    assert_eq!(j["recording"]["unknown_frees"], 4, "{j}");
    assert_eq!(p.heapledger.as_ref().unwrap().unknown_frees, 4);
    // Alone: -1 twice.
    let o = Command::new(&exe).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout), "-1 -1\n");
}
