//! The summary of a profile built the way heapledger's converter builds one,
//! with heapledger's own data (pid, exit, exact peak, runtime leaks, recording).

use heapledger_analysis::summary::{format_bytes, format_seconds, Blocks, Summary, SummaryOptions};
use heapledger_profile::{
    stack_mode, Addr, ExitInfo, HeapledgerExt, InstrEntry, Leak, Profile, Run, StackInfos,
    StackStat, StringId, StringTable, ThreadStats,
};

/// Names `addr` in the profile's sites: `function` at `file:line` of /usr/bin/app.
fn sym(p: &mut Profile, addr: u64, function: StringId, file: StringId, line: u32) -> Addr {
    // The first string interned after "??" (each profile below checks).
    let binary = StringId(1);
    p.sites.instr.insert(
        Addr::native(addr),
        InstrEntry {
            file,
            function,
            line: Some(line),
            binary,
        },
    );
    Addr::native(addr)
}

/// `count` allocations of `size` bytes.
fn infos(count: u64, size: u64) -> StackInfos {
    let mut i = StackInfos::default();
    for _ in 0..count {
        i.alloc.add(size);
    }
    i
}

fn built(exit: ExitInfo) -> Profile {
    let mut p = Profile::new(Run::new("heapledger-0.1.0", "app", "./app --big"));
    p.run.runtime = 3_000;
    p.globals.ticks_per_second = 1_000;
    let mut strings = StringTable::new();
    assert_eq!(strings.intern("/usr/bin/app"), StringId(1));
    let file = strings.intern("/src/app.c");
    let (f_big, f_small, f_main) = (
        strings.intern("big"),
        strings.intern("small"),
        strings.intern("main"),
    );
    p.sites.strings = strings.into_strings();
    let big = sym(&mut p, 0x10, f_big, file, 3);
    let small = sym(&mut p, 0x20, f_small, file, 7);
    let main = sym(&mut p, 0x30, f_main, file, 12);
    let small_again = sym(&mut p, 0x21, f_small, file, 7);
    p.stacks
        .push(StackStat::new("1", vec![big, main], infos(2, 3 << 20)));
    p.stacks
        .push(StackStat::new("2", vec![small, main], infos(1000, 16)));
    p.stacks
        .push(StackStat::new("3", vec![small_again, main], infos(500, 16)));
    // An address without a symbol, inside no mapping.
    p.stacks
        .push(StackStat::new("4", vec![Addr::native(0x99)], infos(1, 1)));

    let mut thread = ThreadStats::default();
    thread.stats.malloc.count = 1503;
    thread.stats.malloc.sum = (6 << 20) + 1500 * 16 + 1;
    thread.stats.free.count = 1500;
    p.threads.push(thread);

    p.leaks.push(Leak {
        stack: vec![small, main],
        count: 3,
        memory: 48,
    });
    p.leaks.push(Leak {
        stack: vec![big, main],
        count: 1,
        memory: 3 << 20,
    });
    p.leaks.push(Leak {
        stack: vec![Addr::native(0x99)],
        count: 1,
        memory: 1,
    });

    let mut ext = HeapledgerExt::new(stack_mode::DWARF, 64);
    ext.pid = 4242;
    ext.ppid = 1;
    ext.exit = exit;
    ext.truncated_stacks = 3;
    ext.sample_every = Some(8);
    ext.internal_memory = 2 << 20;
    ext.peak_requested = 6 << 20;
    ext.peak_time = 1_500;
    // heapledger's record wins over the heuristics: the 1-byte leak is the runtime's.
    ext.runtime_leaks = vec![2];
    p.heapledger = Some(ext);
    p
}

#[test]
fn heapledger_figures() {
    let p = built(ExitInfo {
        code: Some(3),
        signal: None,
    });
    let s = Summary::from_profile(&p, &SummaryOptions { top: 2 });
    assert_eq!(s.pid, Some(4242));
    assert_eq!(s.run_seconds, Some(3.0));
    assert_eq!(s.peak_requested, Some(6 << 20));
    assert_eq!(s.peak_seconds, Some(1.5));
    assert_eq!(
        s.alive,
        Blocks {
            count: 5,
            bytes: (3 << 20) + 49
        }
    );
    assert_eq!(s.alive_runtime, Blocks { count: 1, bytes: 1 });
    assert_eq!(s.top_by_bytes.len(), 2);
    assert_eq!(s.top_by_bytes[0].site.function, "big");
    // Two addresses on one line are one site.
    assert_eq!(s.top_by_calls[0].site.function, "small");
    assert_eq!(s.top_by_calls[0].calls, 1500);
    assert_eq!(s.top_leaks.len(), 2);
    assert_eq!(s.top_leaks[0].blocks.bytes, 3 << 20);

    let text = s.to_string();
    for line in [
        "Program          ./app --big",
        "Process          pid 4242, exited with code 3",
        "Run time         3.000 s",
        "Recorded by      heapledger-0.1.0",
        "Recording        dwarf stacks, at most 64 frames (3 stacks cut); frees charged to the allocating stack; sampled 1 in 8",
        "Recorder memory  2.0 MiB (2097152 B)",
        "  malloc       1503  6.0 MiB (6315457 B)",
        "  free         1500",
        "Peak requested memory   6.0 MiB (6291456 B) at 1.500 s",
        "  by the C/C++ runtime  1 block, 1 B (not the program's leaks)",
        "  6.0 MiB (6291456 B)      2  big  /src/app.c:3  (app)",
        "  3.0 MiB (3145728 B) in 1 block",
        "      main  /src/app.c:12  (app)",
        "  48 B in 3 blocks",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
}

#[test]
fn unrecorded_calls_are_said_only_when_there_are_some() {
    let exit = || ExitInfo {
        code: Some(0),
        signal: None,
    };
    let opts = SummaryOptions { top: 10 };
    let text = Summary::from_profile(&built(exit()), &opts).to_string();
    assert!(!text.contains("Not recorded"), "{text}");
    let mut p = built(exit());
    p.heapledger.as_mut().unwrap().unrecorded_events = 14_639_812;
    let text = Summary::from_profile(&p, &opts).to_string();
    assert!(
        text.contains("Not recorded     14639812 allocator calls made while the recorder was busy on the same thread"),
        "{text}"
    );
}

#[test]
fn threads_with_a_merged_row_are_counted_whole() {
    let opts = SummaryOptions { top: 10 };
    let mut p = built(ExitInfo::default());
    p.threads.clear();
    let text = Summary::from_profile(&p, &opts).to_string();
    assert!(!text.contains("Threads"), "{text}");
    p.globals.max_thread_count = 9;
    p.threads.push(ThreadStats::default());
    p.threads.push(ThreadStats::default());
    let text = Summary::from_profile(&p, &opts).to_string();
    assert!(
        text.contains("Threads          2 that called the allocator, at most 9 at once\n"),
        "{text}"
    );
    p.threads.push(ThreadStats {
        merged_threads: 2168,
        ..Default::default()
    });
    let s = Summary::from_profile(&p, &opts);
    assert_eq!((s.threads.count, s.threads.merged), (2170, 2168));
    assert!(
        s.to_string().contains(
            "Threads          2170 that called the allocator, at most 9 at once; the 2168 that ended first are merged in one row of `threads`\n"
        ),
        "{s}"
    );
}

#[test]
fn the_recorders_peak_memory_is_said_where_it_was_higher() {
    let mut p = built(ExitInfo::default());
    let opts = SummaryOptions { top: 10 };
    p.heapledger.as_mut().unwrap().internal_memory_peak = 2 << 20;
    let text = Summary::from_profile(&p, &opts).to_string();
    assert!(
        text.contains("Recorder memory  2.0 MiB (2097152 B)\n"),
        "{text}"
    );
    p.heapledger.as_mut().unwrap().internal_memory_peak = 5 << 20;
    let text = Summary::from_profile(&p, &opts).to_string();
    assert!(
        text.contains(
            "Recorder memory  2.0 MiB (2097152 B) at the end, 5.0 MiB (5242880 B) at most\n"
        ),
        "{text}"
    );
}

#[test]
fn exit_by_signal_and_unknown_frames() {
    let p = built(ExitInfo {
        code: None,
        signal: Some(11),
    });
    let s = Summary::from_profile(&p, &SummaryOptions { top: 10 });
    let text = s.to_string();
    assert!(
        text.contains("pid 4242, killed by signal 11 (SIGSEGV)"),
        "{text}"
    );
    // The unresolved site is shown by address.
    assert!(text.contains("0x99  ??  (??)"), "{text}");
}

#[test]
fn empty_profile_does_not_panic() {
    let p = Profile::new(Run::new("heapledger-0.1.0", "true", ""));
    let s = Summary::from_profile(&p, &SummaryOptions::default());
    let text = s.to_string();
    assert!(text.starts_with("Program      true\n"), "{text}");
    assert!(text.contains("No allocation calls recorded."), "{text}");
    assert!(text.contains("Peak requested memory   unknown"), "{text}");
    assert!(text.contains("Run time     unknown"), "{text}");
    assert!(!text.contains("Top"), "{text}");
    let none = Summary::from_profile(&built(ExitInfo::default()), &SummaryOptions { top: 0 });
    assert!(none.top_by_bytes.is_empty() && none.top_leaks.is_empty());
    assert!(none.to_string().contains("exit status unknown"));
}

#[test]
fn byte_and_time_formats() {
    assert_eq!(format_bytes(0), "0 B");
    assert_eq!(format_bytes(1023), "1023 B");
    assert_eq!(format_bytes(1024), "1.0 KiB (1024 B)");
    assert_eq!(format_bytes(1_572_864), "1.5 MiB (1572864 B)");
    assert_eq!(format_bytes(5 << 30), "5.0 GiB (5368709120 B)");
    assert_eq!(format_bytes(u64::MAX), "16.0 EiB (18446744073709551615 B)");
    assert_eq!(format_seconds(0.4291), "0.429 s");
    assert_eq!(format_seconds(42.25), "42.2 s");
    assert_eq!(format_seconds(200.0), "3 min 20 s");
}

/// A leaf inside Rust's allocation plumbing, reached from two callers, is
/// two sites (each caller's); a plain leaf shared by many stacks is one.
/// The summary remembers sites by leaf address only where the leaf alone
/// decides them.
#[test]
fn sites_past_plumbing_follow_the_caller_and_plain_leaves_are_shared() {
    let mut p = Profile::new(Run::new("heapledger-0.1.0", "app", "./app"));
    let mut strings = StringTable::new();
    assert_eq!(strings.intern("/usr/bin/app"), StringId(1));
    let src = strings.intern("/src/app.rs");
    let rustc = strings.intern("/rustc/abc/library/alloc/src/raw_vec.rs");
    let mut name = |n: &str| strings.intern(n);
    let names = [
        name("alloc::raw_vec::RawVec<T>::grow_one"),
        name("app::parse"),
        name("app::load"),
        name("app::make"),
        name("app::main"),
    ];
    p.sites.strings = strings.into_strings();
    let grow = sym(&mut p, 0x10, names[0], rustc, 5);
    let parse = sym(&mut p, 0x20, names[1], src, 30);
    let load = sym(&mut p, 0x30, names[2], src, 40);
    let leaf = sym(&mut p, 0x40, names[3], src, 50);
    let main = sym(&mut p, 0x50, names[4], src, 60);
    let stacks = [
        (vec![grow, parse, main], infos(3, 100)),
        (vec![grow, load, main], infos(5, 10)),
        (vec![grow, parse, load, main], infos(1, 1)),
        (vec![leaf, parse, main], infos(7, 8)),
        (vec![leaf, load, main], infos(2, 8)),
    ];
    for (i, (frames, infos)) in stacks.into_iter().enumerate() {
        p.stacks.push(StackStat::new(format!("{i}"), frames, infos));
    }
    let s = Summary::from_profile(&p, &SummaryOptions { top: 10 });
    let calls: Vec<(&str, u64, u64)> = s
        .top_by_calls
        .iter()
        .map(|t| (t.site.function.as_str(), t.calls, t.bytes))
        .collect();
    assert_eq!(
        calls,
        [
            ("app::make", 9, 72),
            ("app::load", 5, 50),
            ("app::parse", 4, 301)
        ]
    );
}

/// A frame whose function the symbolizer did not find (`??` in
/// `sites.instr`) is named by its address and module in every list, never
/// a bare `??`: as a site, as a frame of a leak.
#[test]
fn frames_without_a_function_name_are_named_by_address_and_module() {
    let mut p = Profile::new(Run::new("heapledger-0.1.0", "python3", "python3 x.py"));
    let mut strings = StringTable::new();
    let binary = strings.intern("/usr/bin/python3.11");
    let main = strings.intern("main");
    p.sites.strings = strings.into_strings();
    let mut unknown = |addr: u64, function: StringId| {
        p.sites.instr.insert(
            Addr::native(addr),
            InstrEntry {
                file: StringId::UNKNOWN,
                function,
                line: None,
                binary,
            },
        );
        Addr::native(addr)
    };
    let leaf = unknown(0x65072c, StringId::UNKNOWN);
    let outer = unknown(0x401000, main);
    p.stacks
        .push(StackStat::new("1", vec![leaf, outer], infos(3, 100)));
    p.leaks.push(Leak {
        stack: vec![leaf, outer],
        count: 1,
        memory: 100,
    });
    let text = Summary::from_profile(&p, &SummaryOptions::default()).to_string();
    assert!(text.contains("0x65072c  ??  (python3.11)"), "{text}");
    assert!(!text.contains(" ??  ??"), "{text}");
    for line in text.lines() {
        assert!(!line.trim_start().starts_with("?? "), "{line}\n{text}");
    }
}
