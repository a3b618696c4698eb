//! fork (`tests/programs/fork.c`): before the fork the process allocates
//! 2 x 111 bytes; the child allocates 6 x 2222 (leaking one) and exits; the
//! parent then allocates 3 x 3333. The parent's profile is the `-o` file,
//! the child's lands in `<out-stem>.children/heapledger-<exe>-<pid>.json` and
//! holds what the child did after the fork (the pre-fork blocks it frees are
//! inherited ones, counted apart). `fork_fresh.c`: a parent with 2 threads
//! and 1000 blocks forks a child that makes 10.

mod common;

use common::*;
use heapledger_profile::Profile;
use std::sync::OnceLock;

const SRC: &str = "fork.c";

struct Forked {
    parent: Profile,
    child: Profile,
    child_pid: u32,
}

fn forked() -> &'static Forked {
    static RUN: OnceLock<Forked> = OnceLock::new();
    RUN.get_or_init(|| {
        let dir = Scratch::new("fork");
        let exe = dir.join("forker");
        compile("cc", &[SRC], SITE_FLAGS, &exe);
        let (parent, stdout) = profile_of("dwarf", &dir, &exe, &[] as &[&str]);
        let child_pid = child_pid(&stdout);
        let children = dir.join("p.children");
        let names: Vec<String> = std::fs::read_dir(&children)
            .unwrap_or_else(|e| panic!("{}: {e}", children.display()))
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        let name = format!("heapledger-forker-{child_pid}.json");
        assert_eq!(names, vec![name.clone()], "files in {}", children.display());
        let child = Profile::from_path(children.join(&name)).unwrap();
        Forked {
            parent,
            child,
            child_pid,
        }
    })
}

fn line(name: &str) -> u32 {
    site_line(SRC, name)
}

#[test]
fn parent_profile_has_its_own_allocations_only() {
    let f = forked();
    let p = &f.parent;
    let ext = p.heapledger.as_ref().unwrap();
    assert_eq!(ext.exit.code, Some(0));
    let pre = site(p, "pre_fork_alloc", line("pre_fork"));
    assert_eq!(pre.alloc, mms(2, 111, 111, 222), "{pre:?}");
    assert_eq!(pre.free, pre.alloc);
    let parent = site(p, "parent_alloc", line("parent"));
    assert_eq!(parent.alloc, mms(3, 3333, 3333, 9999), "{parent:?}");
    assert_eq!(parent.free, parent.alloc);
    assert_eq!(
        site(p, "child_alloc", line("child")).stacks,
        0,
        "child's allocations in the parent"
    );
    for st in stacks_at(p, "parent_alloc", line("parent")) {
        assert!(
            starts_with(
                p,
                &st.stack,
                &[
                    ("parent_alloc", line("parent")),
                    ("main", line("call_parent"))
                ]
            ),
            "{}",
            describe(p, &st.stack)
        );
    }
    let t = p.call_totals();
    assert_eq!((t.malloc.count, t.malloc.sum), (5, 222 + 9999));
    assert_eq!((t.free.count, t.free.sum), (5, 222 + 9999));
    let leaks = program_leaks(p);
    assert!(leaks.is_empty(), "leaks:{}", describe_leaks(p, &leaks));
}

#[test]
fn child_profile_has_its_own_allocations_only() {
    let f = forked();
    let c = &f.child;
    let ext = c.heapledger.as_ref().unwrap();
    assert_eq!(ext.pid, f.child_pid);
    let parent_pid = f.parent.heapledger.as_ref().unwrap().pid;
    assert_eq!(ext.ppid, parent_pid);
    assert_eq!(ext.forked_from, Some(parent_pid));
    assert_eq!(ext.exit.code, Some(0), "the child's own exit status");
    // Allocated before the fork: the parent's, freed by the child.
    assert_eq!(
        site(c, "pre_fork_alloc", line("pre_fork")).stacks,
        0,
        "the parent's history in the child"
    );
    let inh = ext.inherited.expect("inherited blocks");
    assert_eq!((inh.freed, inh.freed_bytes), (2, 222), "{inh:?}");
    assert_eq!(ext.unknown_frees, 0);
    let child = site(c, "child_alloc", line("child"));
    assert_eq!(child.alloc, mms(6, 2222, 2222, 6 * 2222), "{child:?}");
    assert_eq!(child.free, mms(5, 2222, 2222, 5 * 2222), "{child:?}");
    assert_eq!(
        site(c, "parent_alloc", line("parent")).stacks,
        0,
        "parent's allocations in the child"
    );
    for st in stacks_at(c, "child_alloc", line("child")) {
        assert!(
            starts_with(
                c,
                &st.stack,
                &[("child_alloc", line("child")), ("main", line("call_child"))]
            ),
            "{}",
            describe(c, &st.stack)
        );
    }
    let t = c.call_totals();
    assert_eq!((t.malloc.count, t.malloc.sum), (6, 6 * 2222));
    // The frees of the inherited blocks are calls of the child.
    assert_eq!((t.free.count, t.free.sum), (2 + 5, 222 + 5 * 2222));
    assert_eq!(ext.peak_requested, 6 * 2222);
    let leaks = program_leaks(c);
    assert_eq!(leaks.len(), 1, "leaks:{}", describe_leaks(c, &leaks));
    assert_eq!((leaks[0].count, leaks[0].memory), (1, 2222));
    assert!(starts_with(
        c,
        &leaks[0].stack,
        &[("child_alloc", line("child"))]
    ));
}

/// `tests/programs/fork_fresh.c`: the parent makes 1000 blocks of 100
/// bytes and has a second thread (5 blocks of 50) when it forks; the child
/// makes 10 blocks of 64 bytes, frees 3 of them and 501 of the parent's
/// (one with `realloc(p, 0)`). The child's profile counts from the fork:
/// 10 allocations, its own peak, 1 thread, the parent named; the parent's
/// profile is its own.
#[test]
fn a_forked_child_counts_from_the_fork() {
    let dir = Scratch::new("fork-fresh");
    let exe = compile_threaded("fork_fresh", &dir);
    let (parent, stdout) = profile_of("dwarf", &dir, &exe, &[] as &[&str]);
    let child_pid = child_pid(&stdout);
    let path = dir
        .join("p.children")
        .join(format!("heapledger-fork_fresh-{child_pid}.json"));
    let c = Profile::from_path(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let line = |name| site_line("fork_fresh.c", name);
    let pext = parent.heapledger.as_ref().unwrap();
    let ext = c.heapledger.as_ref().unwrap();

    let mine = site(&c, "child_alloc", line("child"));
    assert_eq!(mine.alloc, mms(10, 64, 64, 640), "{mine:?}");
    assert_eq!(mine.free, mms(3, 64, 64, 192), "{mine:?}");
    let allocs: u64 = c.stacks.stats.iter().map(|s| s.infos.alloc.count).sum();
    assert_eq!(allocs, 10, "allocations charged to the child's stacks");
    let t = c.call_totals();
    assert_eq!((t.malloc.count, t.malloc.sum), (10, 640));
    assert_eq!((t.realloc.count, t.free.count), (1, 3 + 500));
    for (f, l) in [("parent_alloc", "parent"), ("worker", "worker")] {
        assert_eq!(site(&c, f, line(l)).stacks, 0, "{f} in the child");
    }
    assert_eq!(ext.peak_requested, 640, "the child's own peak");
    assert_eq!(c.threads.len(), 1, "threads: {:?}", c.threads);
    assert_eq!(c.globals.max_thread_count, 1);
    assert_eq!(ext.forked_from, Some(pext.pid));
    assert_eq!(ext.ppid, pext.pid);
    assert_eq!(ext.exit.code, Some(0));
    assert_eq!(ext.unknown_frees, 0);
    let inh = ext.inherited.expect("inherited blocks");
    assert_eq!((inh.freed, inh.freed_bytes), (501, 501 * 100), "{inh:?}");
    // The rest of the parent's blocks (and the runtime's) are no leak of the
    // child's: its leaks are its 7 blocks.
    assert!(inh.alive >= 499 + 5, "{inh:?}");
    let leaks: u64 = c.leaks.iter().map(|l| l.count).sum();
    let alive: u64 = c.leaks.iter().map(|l| l.memory).sum();
    assert_eq!((leaks, alive), (7, 7 * 64), "{:?}", c.leaks);
    // The child's run starts at the fork.
    assert!(
        c.run.runtime < parent.run.runtime,
        "{} {}",
        c.run.runtime,
        parent.run.runtime
    );

    // The parent's profile is its own.
    let p = &parent;
    assert_eq!(
        site(p, "parent_alloc", line("parent")).alloc,
        mms(1000, 100, 100, 100_000)
    );
    assert_eq!(site(p, "worker", line("worker")).alloc, mms(5, 50, 50, 250));
    assert_eq!(site(p, "child_alloc", line("child")).stacks, 0);
    assert_eq!(p.threads.len(), 2);
    assert!(pext.peak_requested >= 100_250, "{}", pext.peak_requested);
    assert_eq!(pext.forked_from, None);
    assert_eq!(pext.inherited, None);
    assert_eq!(pext.exit.code, Some(0));
}

/// `tests/programs/daemon.c`, built in a scratch folder `tag`.
fn daemon_exe(tag: &str) -> (Scratch, std::path::PathBuf) {
    let dir = Scratch::new(tag);
    let exe = dir.join("daemon");
    compile("cc", &["daemon.c"], SITE_FLAGS, &exe);
    (dir, exe)
}

/// The daemon's pid, from the program's "daemon PID" line.
fn daemon_pid(stdout: &[u8]) -> Option<u32> {
    String::from_utf8_lossy(stdout)
        .strip_prefix("daemon ")
        .and_then(|s| s.trim_end().parse().ok())
}

/// `tests/programs/daemon.c`: a process the program starts, detached in its
/// own session, allocates after the program has ended. heapledger waits for
/// it (it reaps the program's orphans) and its profile is complete.
#[test]
fn a_daemon_that_outlives_the_program_is_waited_for() {
    let (dir, exe) = daemon_exe("daemon");
    let out = dir.join("p.json");
    let o = heapledger_run("dwarf", &out, &exe, &[] as &[&str]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{}: {stderr}", o.status);
    assert_eq!(stderr, "", "heapledger -q said something");
    let pid = daemon_pid(&o.stdout).unwrap_or_else(|| panic!("stdout: {:?}", o.stdout));
    let path = dir
        .join("p.children")
        .join(format!("heapledger-daemon-{pid}.json"));
    let d = Profile::from_path(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let line = site_line("daemon.c", "daemon");
    let s = site(&d, "daemon_alloc", line);
    assert_eq!(s.alloc, mms(4, 4444, 4444, 4 * 4444), "{s:?}");
    assert_eq!(s.free, mms(3, 4444, 4444, 3 * 4444), "{s:?}");
    let leaks = program_leaks(&d);
    assert_eq!(leaks.len(), 1, "leaks:{}", describe_leaks(&d, &leaks));
    assert_eq!((leaks[0].count, leaks[0].memory), (1, 4444));
}

/// A daemon that runs on: heapledger stops waiting after --wait-children,
/// says so in one line naming it, and passes the program's exit code.
#[test]
fn a_daemon_still_running_is_named_and_not_waited_for_longer() {
    let (dir, exe) = daemon_exe("daemon-long");
    let out = dir.join("p.json");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["run", "-q", "--wait-children", "0.2", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&exe)
        .arg("long")
        .output()
        .expect("cannot run heapledger");
    let pid = daemon_pid(&o.stdout);
    if let Some(pid) = pid {
        // SAFETY: signalling the test's own daemon.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    let pid = pid.unwrap_or_else(|| panic!("stdout: {:?}", o.stdout));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{}: {stderr}", o.status);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].starts_with("heapledger: not waiting longer for 1 process")
            && lines[0].contains(&format!("daemon ({pid})")),
        "{stderr}"
    );
    assert!(Profile::from_path(&out).is_ok(), "no main profile");
}

/// The child pid the forker prints.
fn child_pid(stdout: &str) -> u32 {
    stdout
        .strip_prefix("child ")
        .and_then(|s| s.trim_end().parse().ok())
        .unwrap_or_else(|| panic!("stdout: {stdout:?}"))
}

/// A second run to the same `-o` leaves in `p.children/` the profile of its
/// own child only (the first run's, under another pid, is gone), and a run
/// with no child leaves no `p.children/`. What heapledger does not write
/// there stays, and so does the folder that holds it.
#[test]
fn the_children_folder_holds_the_last_runs_children_only() {
    let dir = Scratch::new("fork-again");
    let exe = dir.join("forker");
    compile("cc", &[SRC], SITE_FLAGS, &exe);
    let children = dir.join("p.children");
    let names = || -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&children)
            .unwrap_or_else(|e| panic!("{}: {e}", children.display()))
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let none: &[&str] = &[];
    let (_, first) = profile_of_json("dwarf", &dir, &exe, none);
    let (_, second) = profile_of_json("dwarf", &dir, &exe, none);
    assert_ne!(child_pid(&first), child_pid(&second));
    assert_eq!(
        names(),
        vec![format!("heapledger-forker-{}.json", child_pid(&second))]
    );

    let childless = std::path::Path::new("/bin/true");
    profile_of_json("dwarf", &dir, childless, none);
    assert!(!children.exists(), "{:?}", names());

    let (_, third) = profile_of_json("dwarf", &dir, &exe, none);
    std::fs::write(children.join("notes.txt"), "mine").unwrap();
    assert_eq!(
        names(),
        vec![
            format!("heapledger-forker-{}.json", child_pid(&third)),
            "notes.txt".to_string()
        ]
    );
    profile_of_json("dwarf", &dir, childless, none);
    assert_eq!(names(), vec!["notes.txt".to_string()]);
}
