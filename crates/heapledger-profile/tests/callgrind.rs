//! The callgrind export read by the real `callgrind_annotate` (Valgrind's):
//! it must parse without warnings and show the inclusive costs that
//! `sample.c` implies.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use heapledger_profile::{
    callgrind, Addr, InstrEntry, Profile, Run, StackInfos, StackStat, StringTable,
};

/// Runs `callgrind_annotate` and returns `file:function -> cost` for `event`.
fn annotate(file: &Path, event: &str, inclusive: bool) -> HashMap<String, u64> {
    let output = Command::new("callgrind_annotate")
        .arg(format!(
            "--inclusive={}",
            if inclusive { "yes" } else { "no" }
        ))
        .arg(format!("--show={event}"))
        .arg("--threshold=100")
        .arg("--auto=no")
        .arg(file)
        .output()
        .expect("callgrind_annotate (from Valgrind) is installed");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "callgrind_annotate failed: {stderr}"
    );
    assert!(
        stderr.trim().is_empty(),
        "callgrind_annotate complained: {stderr}"
    );
    let mut costs = HashMap::new();
    for line in stdout.lines() {
        // "5,040 ( 5.92%)  /path/sample.c:main [/path/sample]"
        let Some((number, rest)) = line.trim_start().split_once(' ') else {
            continue;
        };
        let Ok(cost) = number.replace(',', "").parse::<u64>() else {
            continue;
        };
        let name = match rest.split_once(")  ") {
            Some((_, name)) => name,
            None => rest.trim_start(),
        };
        let name = name.split(" [").next().unwrap_or(name).trim();
        costs.insert(name.to_owned(), cost);
    }
    costs
}

fn get(costs: &HashMap<String, u64>, name: &str) -> u64 {
    *costs
        .get(name)
        .unwrap_or_else(|| panic!("{name} not in callgrind_annotate's output: {costs:?}"))
}

#[test]
fn malt_sample_annotates_with_expected_inclusive_costs() {
    let profile = Profile::from_path(common::sample_path()).unwrap();
    let dir = common::scratch("callgrind");
    let file = dir.join("callgrind.out.sample");
    callgrind::write(&profile, std::fs::File::create(&file).unwrap()).unwrap();

    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("\nversion: 1\n"));
    assert!(text.contains("\npositions: line\n"));
    assert!(text.contains("\nevents: AllocCnt FreeCnt MemOps AllocSum FreeSum Leaks AliveReqMax\n"));
    assert!(text.contains("\ncalls="));

    const SRC: &str = "/home/user/demo/sample.c";
    let calls = annotate(&file, "AllocCnt", true);
    assert_eq!(get(&calls, "PROGRAM TOTALS"), 117);
    // make(): 10 from main, 2 from leak(), 100 from the worker thread.
    assert_eq!(get(&calls, &format!("{SRC}:make")), 112);
    assert_eq!(get(&calls, &format!("{SRC}:worker")), 100);
    assert_eq!(get(&calls, &format!("{SRC}:leak")), 2);
    assert_eq!(get(&calls, &format!("{SRC}:grow")), 2);
    // main: 10 make + 2 leak + 2 grow + 1 pthread_create's TLS block.
    assert_eq!(get(&calls, &format!("{SRC}:main")), 15);

    let bytes = annotate(&file, "AllocSum", true);
    assert_eq!(
        get(&bytes, &format!("{SRC}:make")),
        10 * 32 + 2 * 128 + 100 * 64
    );
    assert_eq!(get(&bytes, &format!("{SRC}:grow")), 16 + 4096);
    assert_eq!(get(&bytes, &format!("{SRC}:main")), 320 + 256 + 4112 + 352);

    let leaks = annotate(&file, "Leaks", true);
    assert_eq!(get(&leaks, &format!("{SRC}:leak")), 256);
    assert_eq!(get(&leaks, "PROGRAM TOTALS"), 72704 + 1040 + 352 + 256);

    // Exclusive: only the leaf functions carry cost.
    let exclusive = annotate(&file, "AllocCnt", false);
    assert_eq!(get(&exclusive, &format!("{SRC}:make")), 112);
    assert_eq!(
        exclusive.get(&format!("{SRC}:main")).copied().unwrap_or(0),
        0
    );
    let frees = annotate(&file, "FreeCnt", false);
    assert_eq!(get(&frees, &format!("{SRC}:worker")), 100);
    assert_eq!(get(&frees, &format!("{SRC}:main")), 10);
}

/// A recursive stack counts once per function: main -> x -> b -> x -> a.
#[test]
fn recursion_is_counted_once() {
    let mut profile = Profile::new(Run::new("heapledger-test", "rec", "./rec"));
    let mut strings = StringTable::new();
    let file = strings.intern("rec.c");
    let binary = strings.intern("/bin/rec");
    let mut frame = |addr: u64, name: &str, line: u32| {
        let function = strings.intern(name);
        profile.sites.instr.insert(
            Addr::native(addr),
            InstrEntry {
                file,
                function,
                line: Some(line),
                binary,
            },
        );
        Addr::native(addr)
    };
    let stack = vec![
        frame(0x10, "a", 1),
        frame(0x20, "x", 2),
        frame(0x30, "b", 3),
        frame(0x21, "x", 4),
        frame(0x40, "main", 5),
    ];
    profile.sites.strings = strings.into_strings();
    let mut infos = StackInfos::default();
    infos.alloc.add(100);
    profile.stacks.push(StackStat::new("0x1", stack, infos));

    let dir = common::scratch("callgrind-rec");
    let path = dir.join("callgrind.out.rec");
    callgrind::write(&profile, std::fs::File::create(&path).unwrap()).unwrap();
    let costs = annotate(&path, "AllocSum", true);
    for f in ["main", "x", "a"] {
        assert_eq!(get(&costs, &format!("rec.c:{f}")), 100, "{f}");
    }
}
