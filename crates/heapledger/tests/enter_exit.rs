//! `--stack enter-exit` (issue 35, seed 000): a program built with
//! `-finstrument-functions` is charged by the stack its instrumentation
//! keeps, and gives the same allocations per function as `--stack dwarf`.

mod common;

use common::*;
use heapledger_profile::Profile;
use std::collections::BTreeMap;

/// (calls, bytes) per allocating function (the stack's first frame).
fn per_function(p: &Profile) -> BTreeMap<String, (u64, u64)> {
    let mut m: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for s in &p.stacks.stats {
        let Some(&leaf) = s.stack.first() else {
            continue;
        };
        let (f, _) = frame(p, leaf);
        let e = m.entry(f).or_default();
        e.0 += s.infos.alloc.count;
        e.1 += s.infos.alloc.sum;
    }
    m
}

#[test]
fn instrumented_stacks_agree_with_unwound_ones() {
    let dir = Scratch::new("enter-exit");
    let stub = dir.join("libcyg_stub.so");
    compile("cc", &["cyg_stub.c"], &["-shared", "-fPIC"], &stub);
    let exe = dir.join("instrumented");
    let mut flags = SITE_FLAGS.to_vec();
    let lib_dir = format!("-L{}", dir.join("").display());
    let rpath = format!("-Wl,-rpath,{}", dir.join("").display());
    flags.extend(["-finstrument-functions", &lib_dir, &rpath]);
    compile(
        "cc",
        &["instrumented.c"],
        &[&flags[..], &["-lcyg_stub"]].concat(),
        &exe,
    );
    // It runs alone.
    assert!(std::process::Command::new(&exe).status().unwrap().success());

    let (ee, _) = profile_of("enter-exit", &dir, &exe, &[] as &[&str]);
    assert_eq!(ee.heapledger.as_ref().unwrap().stack_mode, "enter-exit");
    let (dw, _) = profile_of("dwarf", &dir, &exe, &[] as &[&str]);
    let src = "instrumented.c";
    // Each site, exactly, in both.
    for p in [&ee, &dw] {
        let leaf = site(p, "leaf", site_line(src, "leaf"));
        assert_eq!((leaf.alloc.count, leaf.free.count), (17, 17));
        assert_eq!(site(p, "middle", site_line(src, "middle")).alloc.count, 3);
        assert_eq!(site(p, "recurse", site_line(src, "bottom")).alloc.count, 1);
    }
    // Per function, the program's own: the same counts and bytes.
    let (a, b) = (per_function(&ee), per_function(&dw));
    for f in ["leaf", "middle", "recurse"] {
        assert_eq!(a.get(f), b.get(f), "{f}: {a:?} against {b:?}");
    }
    // The stacks are the instrumented functions': the recursion's eleven
    // levels of recurse under main, and main's own call site (in the C
    // library's start).
    let bottom = stacks_at(&ee, "recurse", site_line(src, "bottom"));
    assert_eq!(bottom.len(), 1);
    let names: Vec<String> = bottom[0].stack.iter().map(|&a| frame(&ee, a).0).collect();
    assert_eq!(
        names.iter().filter(|n| is_fn(n, "recurse")).count(),
        11,
        "{names:?}"
    );
    assert!(is_fn(&names[11], "main") && names.len() == 13, "{names:?}");
    // strdup is not instrumented: its block is charged to strdup itself,
    // then to the call site of the instrumented function that called it
    // (copy's, in main): copy, which entered no frame of its own below
    // it, is not in the stack. (`--stack dwarf` has copy.)
    let copies: Vec<Vec<(String, Option<u32>)>> = ee
        .stacks
        .iter()
        .map(|s| s.stack.iter().map(|&a| frame(&ee, a)).collect::<Vec<_>>())
        .filter(|fs| fs.len() > 1 && fs[0].0.contains("strdup"))
        .collect();
    assert_eq!(copies.len(), 1, "{copies:?}");
    assert!(
        is_fn(&copies[0][1].0, "main") && copies[0][1].1 == Some(site_line(src, "copycall")),
        "{copies:?}"
    );
    let in_copy = dw
        .stacks
        .iter()
        .filter(|s| {
            s.stack.iter().any(|&a| {
                let (f, l) = frame(&dw, a);
                is_fn(&f, "copy") && l == Some(site_line(src, "copy"))
            })
        })
        .count();
    assert_eq!(in_copy, 1);
}
