//! Stack reuse never yields a stale or wrong stack: every stack the
//! recorder captures (`--stack dwarf`) in a program driven through
//! randomized call patterns equals libgcc's unwinder's, frame for frame.
//!
//! The program (`tests/stress_programs/stress.cpp`, see there) runs 5
//! threads; each walks random call trees (random recursion depths, direct
//! and mutual recursion, returning part-way and calling again at another
//! depth, longjmp out of deep recursion, C++ exceptions thrown through
//! frames, raise(SIGUSR1) whose handler walks and allocates, single-stepped
//! walks whose SIGTRAP handler allocates at arbitrary instructions, handlers
//! nested in handlers) for about 4000 allocations. Right before each
//! malloc, in the function that calls it, the program takes libgcc's
//! backtrace (`_Unwind_Backtrace`); every allocation has a size of its own.
//!
//! Identical stacks are merged in the profile, so the test compares per
//! stack: it groups the program's allocations by their libgcc stack and
//! requires that the profile holds exactly those groups, each with the same
//! number of allocations and the same sum, smallest and largest size. As the
//! sizes are unique, an allocation charged to any other stack (stale reused
//! frames, a wrong frame, a missing or extra frame) shows as a group that
//! differs. Frames are compared as follows:
//! - frame 0: libgcc's is the `_Unwind_Backtrace` call, the profile's the
//!   malloc call right after it in the same function: the profile's address
//!   must lie within `SITE_GAP` bytes after libgcc's (and each libgcc site
//!   must map to a single malloc call);
//! - frames 1..: profile address == libgcc IP - 1 (return address minus one),
//!   except where libgcc reports the interrupted instruction itself (the
//!   frame after a signal frame, `_Unwind_GetIPInfo` sets `ip_before_insn`):
//!   there the recorder stores that IP plus one and writes it minus one, so
//!   the addresses are equal;
//! - the same number of frames. libgcc's last entry, IP 0 (after `_start` or
//!   `clone3`, whose CFI marks the return address undefined), is dropped.
//!
//! Three runs of the -O2 build (`-fomit-frame-pointer
//! -fasynchronous-unwind-tables`), seeds 1 to 3, and one of a -O0 build.
//! With the recorder made to skip the check of the words a reused record
//! read (or only the matched frame's), or to reuse recent stacks without
//! checking their words, these runs report 60 to 1800 stacks that differ.
//!
//! Targeted cases follow, each with a program of its own: two stacks that
//! differ only by rbp at an rbp-based frame (`same_sp.c`), `--max-depth`
//! with a reusable record (`max_depth.c`), and the first stack inside a
//! library loaded behind the recorder's dlopen hook (`dlm_main.c`).

mod common;
#[path = "stress_programs/support.rs"]
mod support;

use heapledger_profile::Profile;
use heapledger_symbols::{symbolize, MappedModule};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use support::*;

/// Sizes of the program's traced allocations: 2^20 + slot * 2^17 + k.
const SIZE_LO: u64 = 1 << 20;
const SIZE_HI: u64 = 2 << 20;
/// Most bytes between the `_Unwind_Backtrace` call's return address and the
/// malloc call's in `TRACE_MALLOC`.
const SITE_GAP: u64 = 64;
const THREADS: u32 = 5;
const ALLOCS_PER_THREAD: u32 = 4000;

const O2: &[&str] = &[
    "-g",
    "-O2",
    "-fomit-frame-pointer",
    "-fasynchronous-unwind-tables",
    "-fno-plt",
    "-Wl,-z,now",
    "-pthread",
];
const O0: &[&str] = &[
    "-g",
    "-O0",
    "-fasynchronous-unwind-tables",
    "-fno-plt",
    "-Wl,-z,now",
    "-pthread",
];

/// One allocation as the program logged it.
struct Trace {
    size: u64,
    tag: u64,
    /// libgcc's frames as the profile would write them: IP - 1, or the IP
    /// itself where it is the interrupted instruction; frame 0 as libgcc's
    /// IP (the `_Unwind_Backtrace` call's return address).
    frames: Vec<u64>,
}

fn parse_traces(text: &str) -> Vec<Trace> {
    let hex = |s: &str| u64::from_str_radix(s, 16).unwrap_or_else(|e| panic!("{s:?}: {e}"));
    text.lines()
        .map(|line| {
            let mut words = line.split_whitespace();
            let size = hex(words.next().unwrap());
            let tag = hex(words.next().unwrap());
            let mut ips: Vec<(u64, bool)> = words
                .map(|w| match w.strip_suffix('*') {
                    Some(w) => (hex(w), true),
                    None => (hex(w), false),
                })
                .collect();
            while ips.last().is_some_and(|&(ip, _)| ip == 0) {
                ips.pop();
            }
            assert!(!ips.is_empty(), "empty trace: {line}");
            assert!(!ips[0].1, "frame 0 cannot be an interrupted IP: {line}");
            let frames = ips
                .iter()
                .enumerate()
                .map(|(i, &(ip, before))| if i == 0 || before { ip } else { ip - 1 })
                .collect();
            Trace { size, tag, frames }
        })
        .collect()
}

/// Count, sum, smallest and largest size of a group of allocations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Agg {
    count: u64,
    sum: u64,
    min: u64,
    max: u64,
}

impl Agg {
    fn new() -> Agg {
        Agg {
            count: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
        }
    }
    fn add(&mut self, size: u64) {
        self.count += 1;
        self.sum += size;
        self.min = self.min.min(size);
        self.max = self.max.max(size);
    }
}

/// Symbolized frames, for failure messages (with the binaries on disk, so
/// that addresses the profile has no symbol for are named too).
fn describe(p: &Profile, frames: &[u64]) -> String {
    let modules: Vec<MappedModule> = p
        .sites
        .map
        .iter()
        .map(|m| MappedModule {
            path: m.file.clone().into(),
            start: m.lower.value(),
            end: m.upper.value(),
            file_offset: m.offset.value(),
            build_id: None,
        })
        .collect();
    let resolved = symbolize(&modules, frames);
    let mut s = String::new();
    for (i, (&a, r)) in frames.iter().zip(&resolved).enumerate() {
        let name = match r.as_ref().map(|r| &r.frames[..]) {
            Some([inner, .., outer]) => format!(
                "{}:{} (inlined in {})",
                inner.function.as_deref().unwrap_or("??"),
                inner.line.unwrap_or(0),
                outer.function.as_deref().unwrap_or("??")
            ),
            Some([f]) => format!(
                "{}:{}",
                f.function.as_deref().unwrap_or("??"),
                f.line.unwrap_or(0)
            ),
            _ => "??".to_owned(),
        };
        let _ = write!(s, "\n      #{i:<3} {a:#x} {name}");
    }
    s
}

/// Runs the stress program built with `flags` under `--stack dwarf` with
/// `seed` and checks every recorded stack against libgcc's.
fn check(tag: &str, flags: &[&str], seed: u64) {
    let dir = Scratch::new(tag);
    let exe = dir.join("stress");
    compile("c++", "stress.cpp", flags, &exe);
    let traces_path = dir.join("traces.txt");
    let args = [
        seed.to_string(),
        ALLOCS_PER_THREAD.to_string(),
        THREADS.to_string(),
        traces_path.to_str().unwrap().to_owned(),
    ];
    let started = std::time::Instant::now();
    let (p, stdout) = profile_of(&["--stack", "dwarf"], &[], &dir, &exe, &args);
    let elapsed = started.elapsed();
    let c = counters(&stdout, "stress:");
    println!("{tag} seed {seed}: {elapsed:.2?}, {c:?}");

    // The run went through every pattern it is meant to exercise.
    for k in [
        "usr1_allocs",
        "trap_allocs",
        "raises",
        "throws",
        "longjmps",
        "traced_walks",
        "alloca_calls",
    ] {
        assert!(c[k] > 0, "{tag} seed {seed}: no {k}: {stdout}");
    }
    assert_eq!(c["throws"], c["catches"], "{stdout}");
    assert_eq!(c["longjmps"], c["landings"], "{stdout}");
    assert_eq!(c["overflow"], 0, "{stdout}");

    let traces = parse_traces(&std::fs::read_to_string(&traces_path).unwrap());
    assert_eq!(traces.len() as i64, c["allocs"], "one trace per allocation");
    assert!(traces.len() >= (THREADS * ALLOCS_PER_THREAD) as usize);
    let sizes: BTreeSet<u64> = traces.iter().map(|t| t.size).collect();
    assert_eq!(sizes.len(), traces.len(), "sizes are unique");
    assert!(traces
        .iter()
        .all(|t| (SIZE_LO..SIZE_HI).contains(&t.size) && t.tag & 0x100 == 0));
    let ext = p.heapledger.as_ref().expect("heapledger extension");
    assert_eq!(ext.truncated_stacks, 0, "no stack reaches --max-depth");

    // libgcc's frame 0 of each call site, and the profile's stacks of the
    // traced allocations.
    let sites: BTreeSet<u64> = traces.iter().map(|t| t.frames[0]).collect();
    let ours: Vec<_> = p
        .stacks
        .iter()
        .filter(|s| s.infos.alloc.count > 0 && s.infos.alloc.max >= SIZE_LO)
        .collect();
    // Problems, each with the frames to show.
    let mut bad: Vec<(String, Vec<u64>)> = Vec::new();
    // The profile's frame 0 (malloc call) -> libgcc's (the call before it).
    let mut site_of: BTreeMap<u64, u64> = BTreeMap::new();
    let mut got: HashMap<Vec<u64>, Agg> = HashMap::new();
    for s in &ours {
        let a = &s.infos.alloc;
        let frames: Vec<u64> = s.stack.iter().map(|a| a.value()).collect();
        if a.min < SIZE_LO || a.max >= SIZE_HI {
            bad.push((
                format!("profile stack mixes traced and other allocations: {a:?}"),
                frames,
            ));
            continue;
        }
        let Some(&f0) = frames.first() else {
            bad.push((format!("empty profile stack with {a:?}"), frames));
            continue;
        };
        let site = sites.range(..=f0).next_back().copied();
        let Some(site) = site.filter(|&s| f0 - s < SITE_GAP) else {
            bad.push((
                format!("profile frame 0 {f0:#x} is no traced malloc call: {a:?}"),
                frames,
            ));
            continue;
        };
        if let Some(&other) = site_of.get(&site) {
            if other != f0 {
                bad.push((
                    format!(
                        "libgcc site {site:#x} maps to two malloc calls {other:#x} and {f0:#x}"
                    ),
                    frames.clone(),
                ));
            }
        }
        site_of.insert(site, f0);
        let mut key = frames;
        key[0] = site;
        let agg = Agg {
            count: a.count,
            sum: a.sum,
            min: a.min,
            max: a.max,
        };
        if let Some(old) = got.insert(key.clone(), agg) {
            bad.push((
                format!("two profile stacks with the same frames: {old:?} and {agg:?}"),
                key,
            ));
        }
    }

    // The program's allocations grouped by libgcc's stack.
    let mut want: HashMap<&[u64], (Agg, Vec<&Trace>)> = HashMap::new();
    for t in &traces {
        let e = want
            .entry(&t.frames[..])
            .or_insert_with(|| (Agg::new(), Vec::new()));
        e.0.add(t.size);
        e.1.push(t);
    }

    #[allow(clippy::type_complexity)]
    let mut mismatches: Vec<(u64, &[u64], Agg, Option<Agg>, &Trace)> = Vec::new();
    for (frames, (agg, ts)) in &want {
        let g = got.get(*frames).copied();
        if g != Some(*agg) {
            mismatches.push((ts[0].size, frames, *agg, g, ts[0]));
        }
    }
    let mut extra: Vec<(&Vec<u64>, Agg)> = got
        .iter()
        .filter(|(f, _)| !want.contains_key(&f[..]))
        .map(|(f, g)| (f, *g))
        .collect();
    extra.sort_by_key(|e| e.1.min);
    mismatches.sort_by_key(|m| m.0);
    let total: u64 = got.values().map(|g| g.count).sum();
    if !bad.is_empty() || !mismatches.is_empty() || !extra.is_empty() {
        let mut report = String::new();
        for (b, frames) in bad.iter().take(4) {
            let _ = write!(report, "\n  {b}:{}", describe(&p, frames));
        }
        for &(size, frames, agg, g, t) in mismatches.iter().take(4) {
            let _ = write!(
                report,
                "\n  size {size:#x} (tag {}): {} allocations with this libgcc stack ({agg:?}), \
                 the profile's stack with these frames has {g:?}\n    libgcc:{}",
                t.tag,
                agg.count,
                describe(&p, frames)
            );
            // The profile's stack that holds this size, or the likeliest ones.
            let mut holders: Vec<_> = ours
                .iter()
                .filter(|s| s.infos.alloc.min <= size && size <= s.infos.alloc.max)
                .collect();
            holders.sort_by_key(|s| s.infos.alloc.count);
            for s in holders.iter().take(2) {
                let a = &s.infos.alloc;
                let exact = a.count == 1 && a.sum == size;
                let got: Vec<u64> = s.stack.iter().map(|a| a.value()).collect();
                // Frame 0 differs by design (see above); the rest must not.
                let first_diff = (1..got.len().max(frames.len()))
                    .find(|&i| got.get(i) != frames.get(i))
                    .map_or("none after frame 0".to_owned(), |i| format!("#{i}"));
                let _ = write!(
                    report,
                    "\n    profile stack that {} it ({a:?}), first difference {first_diff}:{}",
                    if exact { "holds" } else { "may hold" },
                    describe(&p, &got)
                );
            }
        }
        for (frames, agg) in extra.iter().take(2) {
            let _ = write!(
                report,
                "\n  profile stack ({agg:?}) that no allocation has in libgcc:{}",
                describe(&p, frames)
            );
        }
        panic!(
            "{tag} seed {seed}: {} malformed profile stacks; {} of {} libgcc stacks and {} of {} profile stacks \
             differ ({} traced allocations, {} in the profile's stacks); first ones:{report}",
            bad.len(),
            mismatches.len(),
            want.len(),
            extra.len(),
            got.len(),
            traces.len(),
            total,
        );
    }
    assert_eq!(total, traces.len() as u64);
    println!(
        "{tag} seed {seed}: {} allocations, {} distinct stacks, all equal to libgcc's",
        traces.len(),
        want.len()
    );
}

#[test]
fn dwarf_stacks_equal_libgcc_o2_seed_1() {
    check("o2", O2, 1);
}

#[test]
fn dwarf_stacks_equal_libgcc_o2_seed_2() {
    check("o2", O2, 2);
}

#[test]
fn dwarf_stacks_equal_libgcc_o2_seed_3() {
    check("o2", O2, 3);
}

#[test]
fn dwarf_stacks_equal_libgcc_o0_seed_1() {
    check("o0", O0, 1);
}

/// Function names of `stack`, for failure messages and comparisons.
fn names(p: &Profile, stack: &[heapledger_profile::Addr]) -> Vec<String> {
    stack
        .iter()
        .map(|&a| {
            p.resolve_addr(a)
                .map_or("??".into(), |s| s.function.to_owned())
        })
        .collect()
}

/// The stack of the one allocation of `size` bytes.
fn stack_of(p: &Profile, size: u64) -> &heapledger_profile::StackStat {
    let mut it = p
        .stacks
        .iter()
        .filter(|s| s.infos.alloc.count == 1 && s.infos.alloc.sum == size);
    let s = it.next().unwrap_or_else(|| {
        let holders: Vec<_> = p
            .stacks
            .iter()
            .filter(|s| s.infos.alloc.min <= size && size <= s.infos.alloc.max)
            .map(|s| (s.infos.alloc, names(p, &s.stack)))
            .collect();
        panic!("no stack holds just the {size}-byte allocation; candidates: {holders:?}")
    });
    assert!(it.next().is_none(), "two stacks allocate {size} bytes");
    s
}

/// `--max-depth` holds whatever the thread captured before: a stack deeper
/// than the limit keeps exactly its innermost `max_depth` frames and counts
/// as truncated, also when the previous capture left a record whose outer
/// frames the deep capture could reuse (`tests/stress_programs/max_depth.c`:
/// an allocation at depth 20, then one at depth 40, from the same frames,
/// under `--max-depth 32`). The deep stack must be the same as in a run
/// without the first allocation.
#[test]
fn max_depth_holds_when_outer_frames_are_reused() {
    const MAX_DEPTH: usize = 32;
    let dir = Scratch::new("max-depth");
    let exe = dir.join("max_depth");
    compile(
        "cc",
        "max_depth.c",
        &["-g", "-O2", "-fno-omit-frame-pointer", "-fno-builtin"],
        &exe,
    );
    let mut errors = Vec::new();
    for mode in ["dwarf", "fp"] {
        let mut deep = Vec::new();
        for seed_depth in ["-1", "20"] {
            let options = ["--stack", mode, "--max-depth", "32"];
            let (p, _) = profile_of(&options, &[], &dir, &exe, &[seed_depth]);
            let truncated = p.heapledger.as_ref().unwrap().truncated_stacks;
            let lens: Vec<(u64, usize)> = p
                .stacks
                .iter()
                .filter(|s| s.infos.alloc.count > 0)
                .map(|s| (s.infos.alloc.sum, s.stack.len()))
                .collect();
            let s = stack_of(&p, 2000);
            let n = names(&p, &s.stack);
            let what = format!(
                "--stack {mode}, seed depth {seed_depth}: (bytes, frames) {lens:?}, \
                 truncated stacks {truncated}"
            );
            println!("{what}");
            if lens.iter().any(|&(_, len)| len > MAX_DEPTH)
                || s.stack.len() != MAX_DEPTH
                || truncated != 1
            {
                errors.push(format!(
                    "{what}; want the 2000-byte stack cut to {MAX_DEPTH} frames and counted \
                     as truncated, got {} frames: {n:?}",
                    n.len()
                ));
            }
            deep.push(n);
        }
        if deep[0] != deep[1] {
            errors.push(format!(
                "--stack {mode}: the depth-40 stack depends on what was captured before: \
                 {} frames alone, {} after the depth-20 allocation",
                deep[0].len(),
                deep[1].len()
            ));
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

/// The first stack captured inside a library loaded behind the recorder's
/// back (`dlmopen`, which it does not hook) is complete: the recorder
/// refreshes its module list when it meets the unknown address, and must go
/// on with the new list for the library's outer frames too
/// (`tests/stress_programs/dlm_main.c`, `dlm_lib.c`, no frame pointers).
#[test]
fn first_stack_in_a_library_loaded_behind_the_hooks_is_complete() {
    let dir = Scratch::new("dlmopen");
    let lib = dir.join("libdlm.so");
    compile(
        "cc",
        "dlm_lib.c",
        &["-g", "-O2", "-fomit-frame-pointer", "-shared", "-fPIC"],
        &lib,
    );
    let exe = dir.join("dlm_main");
    compile("cc", "dlm_main.c", &["-g", "-O2", "-ldl"], &exe);
    let (p, _) = profile_of(
        &["--stack", "dwarf"],
        &[],
        &dir,
        &exe,
        &[lib.to_str().unwrap()],
    );
    let before = stack_of(&p, 1111);
    let main_callers: Vec<u64> = before.stack[2..].iter().map(|a| a.value()).collect();
    for size in [3001, 3002] {
        let s = stack_of(&p, size);
        let n = names(&p, &s.stack);
        assert_eq!(
            n.get(..3),
            Some(&["lib_inner".to_owned(), "lib_outer".into(), "main".into()][..]),
            "{size} bytes: {n:?}"
        );
        let callers: Vec<u64> = s
            .stack
            .get(3..)
            .unwrap_or(&[])
            .iter()
            .map(|a| a.value())
            .collect();
        assert_eq!(
            callers, main_callers,
            "{size} bytes: main's callers as for the allocation before the load: {n:?}"
        );
    }
}

/// Reuse tells apart two stacks that differ only by rbp where a frame's
/// CFA is rbp-based (`tests/stress_programs/same_sp.c`: through an alloca
/// frame sized so that the leaf frames have the same return addresses and
/// stack pointers, and every stack word the first unwinding read still
/// holds its value; only rbp shows that the callers differ).
#[test]
fn reuse_tells_apart_stacks_that_differ_only_by_rbp() {
    same_sp("same-sp", &[]);
}

/// The same, where the leaf saves its caller's rbp on its stack and then
/// uses rbp for itself: its incoming rbp is the same both times, and only
/// the saved copy, a stack word the step reads for the caller's bp, tells
/// the stacks apart. The recorder checks such words only where the caller's
/// bp matters, which it does here (g's CFA is rbp-based).
#[test]
fn reuse_tells_apart_stacks_that_differ_only_by_a_saved_rbp() {
    same_sp("same-sp-saved", &["-DLEAF_SAVES_RBP"]);
}

fn same_sp(tag: &str, defines: &[&str]) {
    let dir = Scratch::new(tag);
    let exe = dir.join("same_sp");
    let mut flags = vec!["-g", "-O2", "-fomit-frame-pointer", "-fno-builtin"];
    flags.extend_from_slice(defines);
    compile("cc", "same_sp.c", &flags, &exe);
    let (p, stdout) = profile_of(&["--stack", "dwarf"], &[], &dir, &exe, &[] as &[&str]);
    // The set-up holds: same stack pointer, different frame pointer.
    let hex = |k: &str| -> u64 {
        let v = stdout
            .split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("no {k} in {stdout:?}"));
        u64::from_str_radix(v, 16).unwrap()
    };
    assert_eq!(hex("sp1"), hex("sp2"), "{stdout}");
    assert_ne!(hex("fp1"), hex("fp2"), "{stdout}");

    // Each stack holds its two calls: the second round (4003, 4004) reuses
    // what the first learnt about each return address, and must tell the
    // stacks apart just the same.
    let holding = |a: u64, b: u64| -> Vec<String> {
        let s = p
            .stacks
            .iter()
            .find(|s| s.infos.alloc.min == a)
            .unwrap_or_else(|| panic!("no stack starts at {a} bytes"));
        let m = s.infos.alloc;
        assert_eq!((m.count, m.min, m.max, m.sum), (2, a, b, a + b), "{a}/{b}");
        names(&p, &s.stack)
    };
    let big = holding(4001, 4003);
    let small = holding(4002, 4004);
    assert_eq!(
        big.get(..5),
        Some(&["leaf", "g", "caller_big", "call_via", "main"].map(String::from)[..]),
        "{big:?}"
    );
    assert_eq!(
        small.get(..5),
        Some(&["leaf", "g", "caller_small", "call_via", "main"].map(String::from)[..]),
        "{small:?}"
    );
    assert_eq!(big.len(), small.len());
}
