//! A program in a tight seccomp sandbox (`tests/programs/seccomp_filter.c`):
//! `getpid`, `gettid` and `open` refused with EPERM once it runs. The
//! recorder took the failed `getpid` for another process's id, as in a
//! `vfork` child, wrote no profile, and `run` said the program had
//! replaced itself with one that ran without the recorder. Now the profile
//! holds every block, with the command line `run` started (the recorder
//! could not read it), and the program's exit code stands.

mod common;

use common::*;
use std::process::Command;

#[test]
fn a_program_in_a_seccomp_sandbox_is_profiled() {
    let dir = Scratch::new("seccomp");
    let exe = dir.join("seccomp_filter");
    let mut flags = SITE_FLAGS.to_vec();
    flags.push("-pthread");
    compile("cc", &["seccomp_filter.c"], &flags, &exe);
    let alone = Command::new(&exe).output().unwrap();
    if alone.status.code() == Some(9) {
        // A container that forbids installing a seccomp filter.
        eprintln!("skipped: no seccomp filter can be installed here: {alone:?}");
        return;
    }
    assert_eq!(alone.status.code(), Some(6), "{alone:?}");
    let store = dir.join("p.sqlite");
    let o = heapledger_run("dwarf", &store, &exe, &[] as &[&str]);
    assert_eq!(o.status.code(), Some(6), "{o:?}");
    assert_eq!(o.stdout, alone.stdout);
    assert_eq!(String::from_utf8_lossy(&o.stderr), "", "{o:?}");
    let json = dir.join("p.json");
    export_malt(&store, None, &json);
    let p = read_profile(&json);
    let s = site(&p, "work", site_line("seccomp_filter.c", "work"));
    assert_eq!(s.alloc.count, 500_000, "{s:?}");
    assert_eq!(s.free.count, 500_000, "{s:?}");
    let r = report_json(&store);
    assert_eq!(r["program"]["command"], exe.to_str().unwrap(), "{r}");
    assert_eq!(r["program"]["exit_code"], 6, "{r}");
    assert_eq!(r["threads"]["count"], 5, "{r}");
}
