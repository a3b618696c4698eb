//! `heapledger leaks` (issue 32): the leak report in SoHook's layout on a
//! program that prints the blocks it leaves allocated (programs/leaks.c):
//! exact totals, every block with its own pointer and size (`--each`),
//! stacks that read alike grouped, the C runtime's own blocks taken out
//! by the built-in list, a LeakSanitizer suppression that takes out a
//! known leak, and bad suppressions refused in one line.

mod common;

use common::*;
use std::path::Path;
use std::process::{Command, Output};

fn leaks(store: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .arg("leaks")
        .arg(store)
        .args(args)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    assert!(
        o.status.success(),
        "exit {:?}: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

#[test]
fn the_leak_report_names_every_block_left() {
    let dir = Scratch::new("leaks");
    let exe = dir.join("leaks");
    compile("cc", &["leaks.c"], SITE_FLAGS, &exe);
    let (p, stdout) = profile_of("dwarf", &dir, &exe, &[] as &[&str]);
    let store = dir.join("p.sqlite");
    // What the program says it left: (pointer, size).
    let left: Vec<(u64, u64)> = stdout
        .lines()
        .map(|l| {
            let (ptr, size) = l.split_once(' ').unwrap();
            (
                u64::from_str_radix(ptr.trim_start_matches("0x"), 16).unwrap(),
                size.parse().unwrap(),
            )
        })
        .collect();
    assert_eq!(left.len(), 6);

    // The totals: the profile's allocations and frees, and the program's
    // six blocks (3 x 100 + 7 + 2 x 50); stdout's buffer is the runtime's.
    let allocs: u64 = p.stacks.iter().map(|s| s.infos.alloc.count).sum();
    let bytes: u64 = p.stacks.iter().map(|s| s.infos.alloc.sum).sum();
    let frees: u64 = p.stacks.iter().map(|s| s.infos.free.count).sum();
    let freed: u64 = p.stacks.iter().map(|s| s.infos.free.sum).sum();
    let report = text(&leaks(&store, &[]));
    let lines: Vec<&str> = report.lines().collect();
    assert_eq!(lines[0], "=== Memory Leak Report ===");
    assert_eq!(
        lines[1],
        format!("Total Allocations: {allocs} ({bytes} bytes)")
    );
    assert_eq!(lines[2], format!("Total Frees: {frees} ({freed} bytes)"));
    assert_eq!(lines[3], "Current Leaks: 6 (407 bytes)");
    assert!(
        lines[4].starts_with("Suppressed: 1 (4096 bytes) the C/C++ runtime keeps"),
        "{report}"
    );
    // Grouped by stack: the buffers, the tables (two call sites on one
    // line, one leak), the cache; each with its library and backtrace.
    let heads: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.starts_with("Leak #"))
        .collect();
    let lowest = |size: u64| {
        left.iter()
            .filter(|b| b.1 == size)
            .map(|b| b.0)
            .min()
            .unwrap()
    };
    assert_eq!(
        heads,
        [
            format!(
                "Leak #1: 3 blocks, 300 bytes, ptr={:#x} (the lowest of 3), so=leaks",
                lowest(100)
            ),
            format!(
                "Leak #2: 2 blocks, 100 bytes, ptr={:#x} (the lowest of 2), so=leaks",
                lowest(50)
            ),
            format!("Leak #3: ptr={:#x}, size=7, so=leaks", lowest(7)),
        ],
        "{report}"
    );
    let frame0 = |name: &str| {
        let line = site_line("leaks.c", name);
        report
            .lines()
            .any(|l| l.trim_start().starts_with("#0: ") && l.contains(&format!("leaks.c:{line}")))
    };
    assert!(
        frame0("buffer") && frame0("table") && frame0("cache"),
        "{report}"
    );

    // One entry per block: exactly the program's blocks, by pointer.
    let each = text(&leaks(&store, &["--each"]));
    let mut listed: Vec<(u64, u64)> = each
        .lines()
        .filter(|l| l.starts_with("Leak #"))
        .map(|l| {
            let ptr = l.split("ptr=0x").nth(1).unwrap();
            let ptr = u64::from_str_radix(&ptr[..ptr.find(',').unwrap()], 16).unwrap();
            let size = l.split("size=").nth(1).unwrap();
            (ptr, size[..size.find(',').unwrap()].parse().unwrap())
        })
        .collect();
    listed.sort();
    let mut want = left.clone();
    want.sort();
    assert_eq!(listed, want, "{each}");

    // The runtime's own blocks on request: stdout's buffer comes back.
    let all = text(&leaks(&store, &["--no-builtin-suppressions"]));
    assert!(all.contains("Current Leaks: 7 (4503 bytes)"), "{all}");
    assert!(all.contains("_IO_file_doallocate"), "{all}");
    let builtin = text(&leaks(&store, &["--print-suppressions"]));
    assert!(
        builtin.lines().any(|l| l == "leak:_IO_file_doallocate"),
        "{builtin}"
    );

    // A suppressions file takes the cache out, and says so.
    let sup = dir.join("lsan.supp");
    std::fs::write(&sup, "# known\nleak:make_cache\n\n").unwrap();
    let s = text(&leaks(&store, &["--suppressions", sup.to_str().unwrap()]));
    assert!(s.contains("Current Leaks: 5 (400 bytes)"), "{s}");
    assert!(
        s.lines().any(|l| l
            == format!(
                "Suppressed: 1 (7 bytes) by leak:make_cache ({}:2)",
                sup.display()
            )),
        "{s}"
    );
    assert!(!s.contains("make_cache  "), "{s}");
    // By file and by library, with LeakSanitizer's anchors and wildcards.
    std::fs::write(&sup, "leak:leaks.c$\n").unwrap();
    let s = text(&leaks(&store, &["--suppressions", sup.to_str().unwrap()]));
    assert!(s.contains("Current Leaks: 0 (0 bytes)"), "{s}");
    std::fs::write(&sup, "leak:^make_t*e$\n").unwrap();
    let s = text(&leaks(&store, &["--suppressions", sup.to_str().unwrap()]));
    assert!(s.contains("Current Leaks: 4 (307 bytes)"), "{s}");

    // A line that is no leak suppression, or no such file: one line, exit 2.
    std::fs::write(&sup, "leak:ok\nrace:foo\n").unwrap();
    for bad in [sup.clone(), dir.join("missing.supp"), "/dev/null".into()] {
        let o = leaks(&store, &["--suppressions", bad.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains(bad.file_name().unwrap().to_str().unwrap()),
            "{err}"
        );
    }
}

/// Peak resident memory (KiB, `common::peak`) and standard output of
/// `heapledger ARGS`, which must succeed.
fn with_peak(args: &[&std::ffi::OsStr]) -> (i64, String) {
    let dir = Scratch::new("leaks-peak");
    let out = dir.join("stdout");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_heapledger"));
    cmd.args(args).stdout(std::fs::File::create(&out).unwrap());
    let (ended, what) = peak::heapledger_with_peak(cmd, std::time::Duration::from_secs(120));
    assert!(
        libc::WIFEXITED(ended.status) && libc::WEXITSTATUS(ended.status) == 0,
        "{what} ended with status {}",
        ended.status
    );
    (ended.peak_kib, std::fs::read_to_string(&out).unwrap())
}

/// Many leaking stacks, deep ones (8 192 of about 60 frames, as a large
/// program's leaks at exit are): `report` and `leaks` group them by how
/// they read in memory for the distinct addresses, not for every frame of
/// every leak, and `leaks` writes its 14 MB as it goes. Before, each frame
/// of each leak became three strings: 250 MB for `report` here (25 now),
/// and 376 MB on a Python run's 3 MB profile.
#[test]
fn many_deep_leaking_stacks_are_grouped_in_little_memory() {
    let dir = Scratch::new("deep-leaks");
    let exe = dir.join("deep_leaks");
    compile("cc", &["deep_leaks.c"], SITE_FLAGS, &exe);
    let store = dir.join("p.sqlite");
    let o = heapledger_run("dwarf", &store, &exe, &["13", "40"]);
    assert!(o.status.success(), "{o:?}");
    let s = store.as_os_str();
    let (report_kib, report) = with_peak(&["report".as_ref(), s]);
    assert!(
        report.contains("Top leaking stacks (10 of 8192)"),
        "{report}"
    );
    let (leaks_kib, leaks) = with_peak(&["leaks".as_ref(), s]);
    assert!(
        leaks.contains("Current Leaks: 8192 (196608 bytes)"),
        "{}",
        &leaks[..leaks.len().min(2000)]
    );
    assert_eq!(leaks.matches("Leak #").count(), 8192);
    for (what, kib) in [("report", report_kib), ("leaks", leaks_kib)] {
        assert!(kib < 40 << 10, "{what} took {kib} KiB");
    }
}
