//! Stacks agree frame for frame with libgcc's unwinder on code built
//! without frame pointers (`tests/programs/unwind_main.c`, `unwind_lib.c`,
//! `-O2 -fomit-frame-pointer -fasynchronous-unwind-tables`).
//!
//! At each site the program calls `_Unwind_Backtrace` and then mallocs a
//! unique size from the same function, and writes libgcc's IPs per size.
//! The test takes the profile stack whose only allocation has that size and
//! compares:
//! - frame 0: the profile's frame is the malloc call, libgcc's the
//!   `_Unwind_Backtrace` call just before it in the same function: the
//!   profile must name the site function and line, and its address must lie
//!   just after libgcc's (the two calls are a few instructions apart);
//! - frames 1..: equal, as profile address == libgcc IP - 1 (the profile
//!   stores return address minus one, `_Unwind_GetIP` the return address),
//!   up to and including `_start`; the same number of frames.
//!
//! Skipped: libgcc's last entry, IP 0, reported past `_start` (whose CFI
//! marks the return address undefined).

mod common;

use common::*;
use heapledger_profile::{Addr, Profile, StackStat};
use std::collections::BTreeMap;
use std::path::PathBuf;

const UNWIND_FLAGS: &[&str] = &[
    "-g",
    "-O2",
    "-fomit-frame-pointer",
    "-fasynchronous-unwind-tables",
    "-fno-builtin",
];

/// Builds the library and the program; returns the program.
fn build(dir: &Scratch) -> PathBuf {
    let lib = dir.join("libunwlib.so");
    let mut lib_flags = UNWIND_FLAGS.to_vec();
    lib_flags.extend(["-shared", "-fPIC"]);
    compile("cc", &["unwind_lib.c"], &lib_flags, &lib);
    let exe = dir.join("unwind_main");
    let lib = lib.to_str().unwrap();
    compile("cc", &["unwind_main.c", lib], UNWIND_FLAGS, &exe);
    exe
}

/// Runs the program under heapledger; returns the profile and libgcc's IPs
/// per allocation size (trailing zero IPs dropped).
fn run(stack: &str) -> (Profile, BTreeMap<u64, Vec<u64>>) {
    let dir = Scratch::new(&format!("unwind-{stack}"));
    let exe = build(&dir);
    let traces = dir.join("traces.txt");
    let (p, _) = profile_of(stack, &dir, &exe, &[&traces]);
    let text = std::fs::read_to_string(&traces).unwrap();
    let hex = |s: &str| u64::from_str_radix(s, 16).unwrap();
    let mut ips = BTreeMap::new();
    for line in text.lines() {
        let mut words = line.split_whitespace().map(hex);
        let size = words.next().unwrap();
        let mut frames: Vec<u64> = words.collect();
        while frames.last() == Some(&0) {
            frames.pop();
        }
        ips.insert(size, frames);
    }
    assert_eq!(ips.len(), 7, "{text}");
    (p, ips)
}

/// The stack holding the one allocation of `size`, if there is one.
fn stack_of(p: &Profile, size: u64) -> Option<&StackStat> {
    let mut it = p
        .stacks
        .iter()
        .filter(|s| s.infos.alloc.count == 1 && s.infos.alloc.sum == size);
    let s = it.next()?;
    assert!(it.next().is_none(), "two stacks allocate {size} bytes");
    Some(s)
}

fn names(p: &Profile, stack: &[Addr]) -> Vec<String> {
    stack.iter().map(|&a| frame(p, a).0).collect()
}

/// (source, marker) of the function that calls malloc for each size, and
/// the functions expected between it and main.
fn expected(size: u64) -> ((&'static str, &'static str), Vec<&'static str>) {
    let rec = |depth: usize, top: &'static str| -> Vec<&'static str> {
        let other = if top == "rec_even" {
            "rec_odd"
        } else {
            "rec_even"
        };
        let mut v: Vec<_> = (0..=depth)
            .map(|i| if i % 2 == 0 { top } else { other })
            .collect();
        v.reverse();
        v
    };
    match size {
        1001 => (("unwind_main.c", "main"), vec![]),
        1003 => (("unwind_main.c", "site_leaf"), rec(3, "rec_even")),
        1007 => (("unwind_main.c", "site_leaf"), rec(7, "rec_even")),
        1012 => (("unwind_main.c", "site_leaf"), rec(12, "rec_odd")),
        1020 => (("unwind_main.c", "site_fnptr"), vec!["through_pointer"]),
        1030 => (("unwind_lib.c", "lib_static_site"), vec!["lib_entry"]),
        1040 => (
            ("unwind_main.c", "site_fnptr"),
            vec!["lib_static_caller", "lib_call_back"],
        ),
        _ => panic!("unexpected size {size}"),
    }
}

#[test]
fn dwarf_stacks_match_libgcc_frame_for_frame() {
    let (p, traces) = run("dwarf");
    for (&size, ips) in &traces {
        let stack = &stack_of(&p, size)
            .unwrap_or_else(|| panic!("no stack allocates {size} bytes"))
            .stack;
        let got: Vec<u64> = stack.iter().map(|a| a.value()).collect();
        let ctx = || {
            let want: Vec<String> = ips.iter().map(|ip| format!("{:#x}", ip - 1)).collect();
            format!(
                "size {size}\n profile {}\n = {:x?}\n libgcc-1 {want:?}",
                describe(&p, stack),
                got
            )
        };

        // Frame 0: the site function, at the marked line, right after the
        // _Unwind_Backtrace call.
        let ((src, marker), between) = expected(size);
        let (func, line) = frame(&p, stack[0]);
        assert_eq!(func, marker, "{}", ctx());
        assert_eq!(line, Some(site_line(src, marker)), "{}", ctx());
        let gap = (got[0] + 1).wrapping_sub(ips[0]);
        assert!(
            (1..=32).contains(&gap),
            "malloc call {gap} bytes after libgcc's frame 0: {}",
            ctx()
        );

        // Frames 1..: identical, to the outermost frame.
        assert_eq!(got.len(), ips.len(), "frame count: {}", ctx());
        let want: Vec<u64> = ips[1..].iter().map(|ip| ip - 1).collect();
        assert_eq!(&got[1..], &want[..], "{}", ctx());

        // And they name the functions the program went through.
        let n = names(&p, stack);
        let mut want_names = vec![marker];
        want_names.extend(&between);
        if marker != "main" {
            want_names.push("main");
        }
        assert_eq!(&n[..want_names.len()], &want_names[..], "{}", ctx());
        assert_eq!(n.last().map(String::as_str), Some("_start"), "{}", ctx());
    }
}

/// The same program with `--stack fp`: the frame-pointer walk cannot follow
/// code without frame pointers. This documents what it gets (printed with
/// `--nocapture`); it asserts only that the counts are right, that the
/// first frame (read from the hook's own frame) is still right, and that at
/// least one stack differs from libgcc's, which shows the binary really has
/// no frame pointers.
#[test]
fn fp_stacks_on_code_without_frame_pointers_differ() {
    let (p, traces) = run("fp");
    let mut differing = 0;
    for (&size, ips) in &traces {
        assert_eq!(p.mem_stats.size_map.get(&size), Some(&1), "size {size}");
        let libgcc: Vec<u64> = ips.iter().map(|ip| ip - 1).collect();
        let Some(s) = stack_of(&p, size) else {
            // Stacks that came out equal were merged with another size's.
            differing += 1;
            let merged = p
                .stacks
                .iter()
                .find(|s| s.infos.alloc.min <= size && size <= s.infos.alloc.max)
                .expect("a stack with this size");
            println!(
                "size {size}: merged with other sites into {} ({} allocations); libgcc has {} frames",
                describe(&p, &merged.stack),
                merged.infos.alloc.count,
                libgcc.len()
            );
            continue;
        };
        let got: Vec<u64> = s.stack.iter().map(|a| a.value()).collect();
        let ((_, marker), _) = expected(size);
        assert_eq!(frame(&p, s.stack[0]).0, marker, "size {size}");
        let same = got.len() == libgcc.len() && got[1..] == libgcc[1..];
        if !same {
            differing += 1;
        }
        println!(
            "size {size}: fp {} frames {}, libgcc {} frames",
            got.len(),
            describe(&p, &s.stack),
            libgcc.len()
        );
    }
    assert!(differing > 0, "fp agreed with libgcc everywhere");
}
