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
    assert!(text.contains("\nevents: AllocCnt FreeCnt MemOps AllocSum FreeSum Leaks AtPeak\n"));
    assert!(text.contains("\ncalls="));
    // A call's count is no allocation count: each call arc is written once.
    for line in text.lines().filter(|l| l.starts_with("calls=")) {
        assert!(line.starts_with("calls=1 "), "{line}");
    }

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

/// A recursive stack counts once per function: main -> x -> b -> x -> a;
/// `b`, only inside the cycle, too (it had 0).
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
    for f in ["main", "x", "b", "a"] {
        assert_eq!(get(&costs, &format!("rec.c:{f}")), 100, "{f}");
    }
}

/// Builds a profile from stacks of named frames, innermost first; a name
/// `?NAME` is a frame without a function name (`??` in `sites.instr`), in
/// the binary NAME. Each stack allocates `count` blocks of 10 bytes.
fn profile_of(stacks: &[(&[&str], u64)]) -> Profile {
    let mut profile = Profile::new(Run::new("heapledger-test", "t", "./t"));
    let mut strings = StringTable::new();
    let file = strings.intern("t.c");
    let unknown_file = strings.intern("??");
    let mut addrs: HashMap<String, Addr> = HashMap::new();
    for (i, (frames, count)) in stacks.iter().enumerate() {
        let stack = frames
            .iter()
            .map(|name| {
                let next = Addr::native(0x1000 + addrs.len() as u64 * 16);
                *addrs.entry(name.to_string()).or_insert_with(|| {
                    let (function, binary, file) = match name.strip_prefix('?') {
                        Some(bin) => (strings.intern("??"), strings.intern(bin), unknown_file),
                        None => (strings.intern(name), strings.intern("/bin/t"), file),
                    };
                    profile.sites.instr.insert(
                        next,
                        InstrEntry {
                            file,
                            function,
                            line: Some(7),
                            binary,
                        },
                    );
                    next
                })
            })
            .collect();
        let mut infos = StackInfos::default();
        for _ in 0..*count {
            infos.alloc.add(10);
        }
        profile
            .stacks
            .push(StackStat::new(format!("0x{i:x}"), stack, infos));
    }
    profile.sites.strings = strings.into_strings();
    profile
}

fn write_and_annotate(profile: &Profile, tag: &str) -> HashMap<String, u64> {
    let dir = common::scratch(tag);
    let path = dir.join("callgrind.out");
    callgrind::write(profile, std::fs::File::create(&path).unwrap()).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(!text.contains("fn=(1) ??\n"), "{text}");
    annotate(&path, "AllocCnt", true)
}

/// For every function, the inclusive count is the number of allocations
/// with that function on the stack: mutual recursion, self recursion,
/// unresolved frames between resolved ones (each its own function, named by
/// address and module, so that what lies between them stays), and stacks
/// cut above a function that other stacks call.
#[test]
fn inclusive_is_the_allocations_with_the_function_on_the_stack() {
    let stacks: &[(&[&str], u64)] = &[
        (&["ma", "mb", "ma", "main", "_start"], 1),
        (&["mb", "ma", "mb", "ma", "main", "_start"], 2),
        (
            &[
                "leaf",
                "?libpython.so",
                "PyObject_Str",
                "?python3",
                "main",
                "_start",
            ],
            4,
        ),
        (
            &[
                "leaf",
                "?python3",
                "PyObject_Str",
                "?libpython.so",
                "main",
                "_start",
            ],
            8,
        ),
        (&["r", "r", "r", "leaf", "main", "_start"], 16),
        (&["leaf", "r", "r", "main", "_start"], 32),
        // Cut above PyObject_Str, which other stacks call.
        (&["leaf", "PyObject_Str"], 64),
        (&["main"], 128),
    ];
    let profile = profile_of(stacks);
    let costs = write_and_annotate(&profile, "callgrind-inclusive");
    let name = |frame: &str| -> String {
        match frame.strip_prefix('?') {
            Some(bin) => {
                let addr = profile
                    .sites
                    .instr
                    .iter()
                    .find(|(_, e)| profile.sites.string(e.binary) == bin)
                    .map(|(a, _)| *a)
                    .unwrap();
                format!("??:{addr} ({bin})")
            }
            None => format!("t.c:{frame}"),
        }
    };
    let mut want: HashMap<String, u64> = HashMap::new();
    for (frames, count) in stacks {
        let mut names: Vec<String> = frames.iter().map(|f| name(f)).collect();
        names.sort();
        names.dedup();
        for n in names {
            *want.entry(n).or_default() += count;
        }
    }
    for (function, count) in &want {
        assert_eq!(get(&costs, function), *count, "{function}: {costs:?}");
    }
    assert_eq!(get(&costs, "PROGRAM TOTALS"), 255);
    // The two stacks whose outermost function others call.
    assert_eq!(get(&costs, &format!("??:{}", callgrind::ROOT)), 64 + 128);
}

/// `AtPeak` is the bytes alive at the process's peak, a sum over stacks;
/// a stack's largest alive amount is not written as one.
#[test]
fn at_peak_adds_up_over_stacks() {
    let mut profile = profile_of(&[(&["a", "main"], 1), (&["b", "main"], 1)]);
    for (s, (peak, max_alive)) in profile.stacks.stats.iter_mut().zip([(30, 50), (12, 40)]) {
        s.infos.global_peak = peak;
        s.infos.max_alive_req = max_alive;
    }
    let dir = common::scratch("callgrind-peak");
    let path = dir.join("callgrind.out");
    callgrind::write(&profile, std::fs::File::create(&path).unwrap()).unwrap();
    let at_peak = annotate(&path, "AtPeak", true);
    assert_eq!(get(&at_peak, "t.c:main"), 42);
    assert_eq!(get(&at_peak, "t.c:a"), 30);
}
