//! What a profile says of its process beyond the counters: how each child
//! ended (`tests/programs/fork_ends.c`, and a shell's subshells), read from
//! the child's own dump (`heapledger run` waits for the main process only),
//! and which allocator served heapledger's calls
//! (`tests/programs/bump_malloc.c`, preloaded by the user).

mod common;

use common::*;
use heapledger_profile::Profile;
use std::collections::BTreeMap;
use std::path::Path;

/// The profiles in `dir`, by pid.
fn children(dir: &Path) -> BTreeMap<u32, Profile> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let p = Profile::from_path(e.unwrap().path()).unwrap();
            (p.heapledger.as_ref().unwrap().pid, p)
        })
        .collect()
}

/// Children ending by `exit(7)`, a return of 5 from `main`, `_exit(9)` and
/// SIGTERM: their profiles say so, not "exit status unknown".
#[test]
fn each_child_profile_says_how_the_child_ended() {
    let dir = Scratch::new("fork-ends");
    let exe = dir.join("fork_ends");
    compile("cc", &["fork_ends.c"], SITE_FLAGS, &exe);
    let (parent, stdout) = profile_of("dwarf", &dir, &exe, &[] as &[&str]);
    let kids = children(&dir.join("p.children"));
    let parent_pid = parent.heapledger.as_ref().unwrap().pid;
    let mut seen = 0;
    for l in stdout.lines() {
        let (pid, how) = l.split_once(' ').unwrap();
        let pid: u32 = pid.parse().unwrap();
        let c = kids
            .get(&pid)
            .unwrap_or_else(|| panic!("no profile of {pid} ({how})"));
        let ext = c.heapledger.as_ref().unwrap();
        let (code, signal) = match how {
            "exit7" => (Some(7), None),
            "return5" => (Some(5), None),
            "_exit9" => (Some(9), None),
            "sigterm" => (None, Some(libc::SIGTERM)),
            _ => panic!("{l}"),
        };
        assert_eq!((ext.exit.code, ext.exit.signal), (code, signal), "{how}");
        assert_eq!(ext.forked_from, Some(parent_pid), "{how}");
        let summary = heapledger_analysis::summary::Summary::from_profile(c, &Default::default());
        let text = summary.to_string();
        assert!(!text.contains("exit status unknown"), "{text}");
        seen += 1;
    }
    assert_eq!(seen, 4, "stdout: {stdout}");
    assert_eq!(parent.heapledger.as_ref().unwrap().exit.code, Some(0));
}

/// A shell's subshell `(exit 7)` (a fork) and a shell it runs (`sh -c
/// "exit 9"`, a fork then an exec: a new program, forked from no profiled
/// process in the profile's sense) say how they ended.
#[test]
fn a_shells_children_say_how_they_ended() {
    let dir = Scratch::new("sh-ends");
    let out = dir.join("p.json");
    let o = heapledger_run(
        "dwarf",
        &out,
        Path::new("/bin/sh"),
        &["-c", "(exit 7); sh -c 'exit 9'; true"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let main = Profile::from_path(&out).unwrap();
    let main_pid = main.heapledger.as_ref().unwrap().pid;
    let mut ends: Vec<(Option<i32>, Option<u32>)> = children(&dir.join("p.children"))
        .values()
        .map(|c| {
            let e = c.heapledger.as_ref().unwrap();
            (e.exit.code, e.forked_from)
        })
        .collect();
    ends.sort();
    assert_eq!(ends, [(Some(7), Some(main_pid)), (Some(9), None)]);
}

/// An allocator preloaded by the user (after heapledger) serves the
/// recorder's calls: `run.allocator` names it, not glibc.
#[test]
fn run_allocator_names_a_preloaded_allocator() {
    let dir = Scratch::new("bump-malloc");
    let lib = dir.join("libbump_malloc.so");
    compile("cc", &["bump_malloc.c"], &["-shared", "-fPIC", "-O1"], &lib);
    let exe = dir.join("basic");
    compile("cc", &["basic.c"], SITE_FLAGS, &exe);
    let out = dir.join("p.json");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["run", "-q", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&exe)
        .env("LD_PRELOAD", &lib)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let p = Profile::from_path(&out).unwrap();
    assert_eq!(Path::new(&p.run.allocator), lib.as_path());
    assert!(
        p.call_totals().malloc.count > 0,
        "heapledger recorded nothing"
    );

    // Without it: glibc.
    let out = dir.join("q.json");
    let o = heapledger_run("dwarf", &out, &exe, &[] as &[&str]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let q = Profile::from_path(&out).unwrap();
    assert!(q.run.allocator.contains("/libc.so"), "{}", q.run.allocator);
}
