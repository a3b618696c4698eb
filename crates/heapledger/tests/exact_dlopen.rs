//! A library built with -shared -fPIC and dlopen'ed
//! (`tests/programs/dl_main.c`, `dl_lib.c`): its function allocates, and
//! the profile names it by function and line although the library was
//! dlclosed before the profile was written.
//!
//! dl_main dlopens the library twice; lib_alloc allocates 2 then 3 blocks of
//! 777 bytes; all are freed after the dlclose but the last, which leaks.

mod common;

use common::*;
use heapledger_profile::{Addr, Profile};
use std::sync::OnceLock;

fn profile() -> &'static Profile {
    static RUN: OnceLock<Profile> = OnceLock::new();
    RUN.get_or_init(|| {
        let dir = Scratch::new("dlopen");
        let lib = dir.join("libdltest.so");
        let exe = dir.join("dl_main");
        let mut lib_flags = SITE_FLAGS.to_vec();
        lib_flags.extend(["-shared", "-fPIC"]);
        compile("cc", &["dl_lib.c"], &lib_flags, &lib);
        let mut flags = SITE_FLAGS.to_vec();
        flags.push("-ldl");
        compile("cc", &["dl_main.c"], &flags, &exe);
        let (p, stdout) = profile_of("dwarf", &dir, &exe, &[&lib]);
        assert_eq!(stdout, "dlopen: done\n");
        p
    })
}

#[test]
fn library_function_is_named_after_dlclose() {
    let p = profile();
    // The process's mappings at exit no longer hold the library; heapledger's
    // module list remembers it.
    let is_lib = |path: &str| path.ends_with("/libdltest.so");
    assert!(
        !p.sites.map.iter().any(|m| is_lib(&m.file)),
        "still mapped at exit"
    );
    let modules = &p.heapledger.as_ref().unwrap().modules;
    assert!(
        modules.iter().any(|m| is_lib(&m.path)),
        "not in heapledger.modules"
    );
    let line = site_line("dl_lib.c", "lib_alloc");
    let s = site(p, "lib_alloc", line);
    assert_eq!(s.alloc, mms(5, 777, 777, 5 * 777), "{s:?}");
    assert_eq!(s.free, mms(4, 777, 777, 4 * 777), "{s:?}");
    assert_eq!(s.alive_req, 777);
    let want = [
        ("lib_alloc", line),
        ("main", site_line("dl_main.c", "call_lib")),
    ];
    for st in stacks_at(p, "lib_alloc", line) {
        assert!(
            starts_with(p, &st.stack, &want),
            "{}",
            describe(p, &st.stack)
        );
        let leaf = p.resolve_addr(st.stack[0]).unwrap();
        assert_eq!(leaf.binary_name(), "libdltest.so");
        assert_eq!(leaf.file_name(), "dl_lib.c");
    }
}

#[test]
fn only_the_kept_block_leaks() {
    let p = profile();
    let leaks = program_leaks(p);
    let want = [
        ("lib_alloc", site_line("dl_lib.c", "lib_alloc")),
        ("main", site_line("dl_main.c", "call_lib")),
    ];
    assert_eq!(
        leaks.len(),
        1,
        "leaks not marked as the runtime's:{}",
        describe_leaks(p, &leaks)
    );
    assert_eq!((leaks[0].count, leaks[0].memory), (1, 777));
    assert!(
        starts_with(p, &leaks[0].stack, &want),
        "{}",
        describe(p, &leaks[0].stack)
    );
}

/// What the C library allocates inside `dlopen` is charged to the
/// program's call of `dlopen`, as it would be without heapledger: the frame
/// of heapledger's own `dlopen` hook, between the two, is left out of every
/// stack (and of the sites), as the profiler is of a profile.
#[test]
fn the_recorders_own_frames_are_left_out() {
    let p = profile();
    // By address against the recorder's mappings, not through the sites
    // (which leave its frames out too, so a name lookup would miss them).
    let spans: Vec<(u64, u64)> = p
        .heapledger
        .as_ref()
        .expect("heapledger's key")
        .modules
        .iter()
        .filter(|m| m.path.ends_with("libheapledger_preload.so"))
        .map(|m| (m.lower.value(), m.upper.value()))
        .collect();
    assert!(!spans.is_empty(), "the recorder is not among the modules");
    let own = |a: &Addr| spans.iter().any(|&(lo, hi)| (lo..hi).contains(&a.value()));
    let inside_dlopen: Vec<_> = p
        .stacks
        .stats
        .iter()
        .filter(|s| describe(p, &s.stack).contains("dl_open_worker"))
        .collect();
    assert!(
        !inside_dlopen.is_empty(),
        "no allocation inside dlopen recorded"
    );
    for s in &p.stacks.stats {
        assert!(!s.stack.iter().any(own), "{}", describe(p, &s.stack));
    }
    for l in &p.leaks {
        assert!(!l.stack.iter().any(own), "{}", describe(p, &l.stack));
    }
    let own_sites: Vec<_> = p.sites.instr.keys().filter(|a| own(a)).collect();
    assert!(own_sites.is_empty(), "sites of the recorder: {own_sites:?}");
    // The call site stays: main's call of dlopen, right above the C library.
    let line = site_line("dl_main.c", "open_lib");
    assert!(
        inside_dlopen
            .iter()
            .any(|s| describe(p, &s.stack).contains(&format!("main:{line}"))),
        "{}",
        describe(p, &inside_dlopen[0].stack)
    );
}
