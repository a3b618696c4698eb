//! Global and thread-local variables (issue 31): each object's data and
//! TLS symbols with their sizes, and the file and line that declare them
//! where DWARF says, in MALT's `memStats.globalVariables`.

mod common;

use common::*;
use heapledger_profile::Profile;
use std::path::Path;

#[test]
fn known_globals_and_tls_variables_with_their_sizes_and_lines() {
    let dir = Scratch::new("globals");
    let exe = dir.join("globals");
    compile("cc", &["globals.c"], SITE_FLAGS, &exe);
    let (p, _) = profile_of("dwarf", &dir, &exe, &[] as &[&str]);
    let exe_path = std::fs::canonicalize(&exe).unwrap();
    let (path, vars) = p
        .mem_stats
        .global_variables
        .iter()
        .find(|(path, _)| std::fs::canonicalize(path).ok().as_deref() == Some(&*exe_path))
        .unwrap_or_else(|| {
            panic!(
                "no variables of the executable among {:?}",
                p.mem_stats.global_variables.keys().collect::<Vec<_>>()
            )
        });
    for (name, size, tls) in [
        ("big_table", 40000, false),
        ("counters", 300 * 8, false),
        ("tls_buffer", 4096, true),
        ("tls_depth", 4, true),
    ] {
        let v = vars
            .iter()
            .find(|v| v.name == name)
            .unwrap_or_else(|| panic!("{name} is not among the variables of {path}"));
        assert_eq!((v.size, v.tls), (size, tls), "{name}");
        assert_eq!(v.line, Some(site_line("globals.c", name)), "{name}'s line");
        assert!(
            v.source_file
                .as_deref()
                .is_some_and(|f| f.ends_with("globals.c")),
            "{name}'s file: {:?}",
            v.source_file
        );
        assert_eq!(v.binary_file, *path);
    }
    // Not the recorder's own.
    assert!(
        !p.mem_stats
            .global_variables
            .keys()
            .any(|path| path.contains("heapledger_preload")),
        "the recorder's variables are listed"
    );
    // The C library's are there too (MALT lists every object's).
    assert!(
        p.mem_stats
            .global_variables
            .iter()
            .any(|(path, vars)| path.contains("libc.so")
                && vars.iter().any(|v| v.name == "errno" && v.tls)),
        "libc's errno (TLS) is not listed"
    );
}

/// Processes that load the same binaries share its variables: the store
/// holds each binary's list once, and each process's export lists them.
#[test]
fn processes_of_one_run_share_each_binarys_variables() {
    let dir = Scratch::new("globals_shared");
    let exe = dir.join("globals");
    compile("cc", &["globals.c"], SITE_FLAGS, &exe);
    let script = format!("{0} && {0}", exe.display());
    let (main, _) = profile_of("dwarf", &dir, Path::new("/bin/sh"), &["-c", &script]);
    let children: Vec<Profile> = std::fs::read_dir(dir.join("p.children"))
        .expect("the children's exports")
        .map(|e| Profile::from_path(e.unwrap().path()).unwrap())
        .collect();
    assert_eq!(children.len(), 2, "two runs of the program");
    let exe_path = std::fs::canonicalize(&exe).unwrap();
    for p in &children {
        let vars = p
            .mem_stats
            .global_variables
            .iter()
            .find(|(path, _)| std::fs::canonicalize(path).ok().as_deref() == Some(&*exe_path))
            .map(|(_, v)| v)
            .expect("the program's variables");
        assert!(vars
            .iter()
            .any(|v| v.name == "big_table" && v.size == 40000));
        assert!(p
            .mem_stats
            .global_variables
            .keys()
            .any(|k| k.contains("libc.so")));
    }
    assert!(main
        .mem_stats
        .global_variables
        .keys()
        .any(|k| k.contains("libc.so")));

    let c = rusqlite::Connection::open(dir.join("p.sqlite")).unwrap();
    let (rows, binaries): (i64, i64) = c
        .query_row(
            "SELECT count(*), count(DISTINCT binary) FROM variables",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(rows, binaries, "a binary's variables are written once");
    let libc: i64 = c
        .query_row(
            "SELECT count(*) FROM variables WHERE binary LIKE '%libc.so%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(libc, 1);
}
