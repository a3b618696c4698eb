//! Acceptance point 5, native programs of `tests/real_programs/`: a C++
//! program with std::thread and exceptions, a program that leaves through
//! `_exit`, programs killed by a signal, and a program with its own SIGINT
//! handler. Each runs exactly as without heapledger and leaves a profile.

mod support;

use heapledger_profile::Profile;
use support::*;

/// The leaks of `p` whose stack passes through `function`.
fn leaks_through<'a>(
    p: &'a Profile,
    function: &'a str,
) -> impl Iterator<Item = &'a heapledger_profile::Leak> + 'a {
    p.leaks
        .iter()
        .filter(move |l| stack_has_function(p, &l.stack, &[function]))
}

fn describe_leaks(p: &Profile) -> String {
    p.leaks
        .iter()
        .map(|l| {
            format!(
                "  {} blocks, {} B: {}\n",
                l.count,
                l.memory,
                describe_stack(p, &l.stack)
            )
        })
        .collect()
}

#[test]
fn cxx_threads_and_exceptions() {
    let tmp = TempDir::new("cxx-threads");
    let exe = compile("cxx_threads.cpp", tmp.path(), &["-pthread"]);
    let out = tmp.join("p.json");
    let cmd = Cmd::new(&exe).cwd(tmp.path());
    let (plain, _) = assert_same_run(&cmd, &cmd, &out, true);
    assert_eq!(plain.code, Some(0));
    assert_eq!(
        plain.stdout,
        "thread 0: caught 200, then \"worker 0 finished\" (id 0)\n\
         thread 1: caught 300, then \"worker 1 finished\" (id 1)\n\
         thread 2: caught 400, then \"worker 2 finished\" (id 2)\n\
         thread 3: caught 500, then \"worker 3 finished\" (id 3)\n\
         main: main thread\n"
    );
    let p = assert_profile_with_allocations(&out, "cxx_threads");
    let allocating = p
        .threads
        .iter()
        .filter(|t| t.stats.malloc.count > 0)
        .count();
    assert!(
        allocating >= 5,
        "cxx_threads: {allocating} threads with allocations in the profile, expected the main thread and 4 workers"
    );
    // Thrown exceptions are allocated by __cxa_allocate_exception: the
    // stacks through it were unwound (from the workers, 4 x 301 throws).
    let thrown: u64 = p
        .stacks
        .allocating()
        .filter(|s| stack_has_function(&p, &s.stack, &["__cxa_allocate_exception"]))
        .map(|s| s.infos.alloc.count)
        .sum();
    assert!(
        thrown >= 4 * 301,
        "cxx_threads: only {thrown} allocations through __cxa_allocate_exception, expected at least {}",
        4 * 301
    );
}

#[test]
fn program_leaving_through_underscore_exit() {
    let tmp = TempDir::new("exit");
    let exe = compile("exit_live.c", tmp.path(), &[]);
    let out = tmp.join("p.json");
    let cmd = Cmd::new(&exe).cwd(tmp.path());
    let (plain, traced) = assert_same_run(&cmd, &cmd, &out, true);
    assert_eq!(plain.code, Some(7));
    assert_eq!(traced.code, Some(7));
    assert_eq!(plain.stdout, "live blocks: 5 of 4321 bytes\n");

    let p = assert_profile_with_allocations(&out, "_exit");
    let ext = p.heapledger.as_ref().expect("no heapledger section");
    assert_eq!(
        ext.exit.code,
        Some(7),
        "the profile does not record exit code 7"
    );
    assert_eq!(ext.exit.signal, None);
    // The 5 blocks alive at _exit are leaks, charged to make_live_blocks.
    let live: Vec<_> = leaks_through(&p, "make_live_blocks").collect();
    let (count, memory) = live
        .iter()
        .fold((0, 0), |(c, m), l| (c + l.count, m + l.memory));
    assert_eq!(
        (count, memory),
        (5, 5 * 4321),
        "_exit: the live blocks are not the leaks through make_live_blocks; leaks:\n{}",
        describe_leaks(&p)
    );
    // The 100 blocks freed before are not leaks.
    let calls = p.call_totals();
    assert_eq!(
        calls.free.count, 100,
        "_exit: 100 frees expected, the profile has {}",
        calls.free.count
    );
}

/// `signal_death MODE` dies of `signal`: heapledger exits with 128 + signal,
/// as the plain run does, and the recorder still writes the profile.
fn killed_by(mode: &str, signal: i32) {
    let tmp = TempDir::new(&format!("signal-{mode}"));
    let exe = compile("signal_death.c", tmp.path(), &[]);
    let out = tmp.join("p.json");
    let cmd = Cmd::new(&exe).arg(mode).cwd(tmp.path());
    let plain = cmd.run_plain();
    assert_eq!(
        plain.signal,
        Some(signal),
        "the plain run did not die of {signal}"
    );
    let traced = cmd.run_heapledger(&out, &[]);
    let what = format!("signal_death {mode}");
    assert_no_panic(&traced, &what);
    assert_eq!(
        traced.code,
        Some(128 + signal),
        "{what}: heapledger should exit with 128+{signal}; stderr:\n{}",
        traced.stderr
    );
    assert_eq!(traced.stdout, plain.stdout, "{what}: stdout differs");
    assert!(
        out.is_file(),
        "{what}: no profile written for a process killed by signal {signal}; heapledger said:\n{}",
        traced.stderr
    );
    assert_eq!(traced.stderr, "", "{what}: heapledger -q printed something");
    let p = assert_profile_with_allocations(&out, &what);
    let ext = p.heapledger.as_ref().expect("no heapledger section");
    assert_eq!(ext.exit.signal, Some(signal), "{what}: the profile's exit");
    assert_eq!(ext.exit.code, None, "{what}: the profile's exit");
    // The 3 blocks of 7777 bytes alive when the signal came are leaks.
    let alive: u64 = p
        .leaks
        .iter()
        .filter(|l| stack_has_function(&p, &l.stack, &["main"]))
        .map(|l| l.memory)
        .sum();
    assert!(
        alive >= 3 * 7777,
        "{what}: the blocks alive at the signal are not in the leaks:\n{}",
        describe_leaks(&p)
    );
}

/// The profile of a process a signal ended, at `out`: it holds the churn
/// loop's blocks, all freed but the last one maybe.
fn assert_loop_profile(out: &std::path::Path, what: &str) {
    let p = assert_profile_with_allocations(out, what);
    let (alloc, free) = p
        .stacks
        .stats
        .iter()
        .filter(|s| stack_has_function(&p, &s.stack, &["churn"]))
        .fold((0, 0), |(a, f), s| {
            (a + s.infos.alloc.count, f + s.infos.free.count)
        });
    assert!(
        alloc > 1 && alloc - free <= 1,
        "{what}: churn's blocks: {alloc} allocated, {free} freed"
    );
}

/// A signal that ends the program while its thread is inside the recorder
/// (where writing the profile could deadlock) is held until the thread
/// leaves it, microseconds later; the profile is then written and the
/// program dies of the signal. It used to cost the profile: five times in
/// six for `timeout` on a malloc loop. Here an interval timer's SIGALRM,
/// eight times: the loop spends most of its time in the recorder.
#[test]
fn a_timer_signal_amid_allocations_keeps_the_profile() {
    let tmp = TempDir::new("signal-alarm");
    let exe = compile("signal_in_loop.c", tmp.path(), &[]);
    let out = tmp.join("p.json");
    for round in 0..8 {
        let what = format!("signal_in_loop alarm, round {round}");
        let traced = Cmd::new(&exe)
            .arg("alarm")
            .cwd(tmp.path())
            .run_heapledger(&out, &[]);
        assert_no_panic(&traced, &what);
        assert_eq!(
            traced.code,
            Some(128 + libc::SIGALRM),
            "{what}: {}",
            traced.stderr
        );
        assert_eq!(traced.stderr, "", "{what}");
        assert_loop_profile(&out, &what);
        std::fs::remove_file(&out).unwrap();
    }
}

/// The same for SIGTERM sent to `heapledger run` (as `timeout` does), which
/// passes it on to the program.
#[test]
fn sigterm_from_outside_amid_allocations_keeps_the_profile() {
    use std::io::BufRead;
    use std::os::unix::process::ExitStatusExt;
    let tmp = TempDir::new("signal-term-loop");
    let exe = compile("signal_in_loop.c", tmp.path(), &[]);
    let out = tmp.join("p.json");
    for round in 0..5 {
        let what = format!("signal_in_loop wait, round {round}");
        let mut child = std::process::Command::new(heapledger())
            .args(["run", "-q", "-o"])
            .arg(&out)
            .arg("--")
            .arg(&exe)
            .arg("wait")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("cannot run heapledger");
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(line, "ready\n", "{what}");
        std::thread::sleep(std::time::Duration::from_millis(30));
        // SAFETY: signalling the test's own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let o = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(
            (o.status.code(), o.status.signal()),
            (Some(128 + libc::SIGTERM), None),
            "{what}: {stderr}"
        );
        assert_eq!(stderr, "", "{what}");
        assert_loop_profile(&out, &what);
        std::fs::remove_file(&out).unwrap();
    }
}

#[test]
fn program_killed_by_sigterm() {
    killed_by("term", libc::SIGTERM);
}

#[test]
fn program_killed_by_abort() {
    killed_by("abort", libc::SIGABRT);
}

#[test]
fn program_killed_by_default_sigint() {
    killed_by("int", libc::SIGINT);
}

#[test]
fn program_with_its_own_sigint_handler() {
    let tmp = TempDir::new("sigint-handler");
    let exe = compile("sigint_handler.c", tmp.path(), &[]);
    let out = tmp.join("p.json");
    let cmd = Cmd::new(&exe).cwd(tmp.path());
    let (plain, _) = assert_same_run(&cmd, &cmd, &out, true);
    assert_eq!(
        plain.code,
        Some(0),
        "sigint_handler fails: {}",
        plain.stdout
    );
    assert_eq!(
        plain.stdout,
        "handler reads back: yes\nhandler ran\nhandler ran\nhandler ran\n\
         signal() returned the handler: yes\nhits: 3\n"
    );
    let p = assert_profile_with_allocations(&out, "sigint_handler");
    assert_eq!(p.heapledger.as_ref().unwrap().exit.code, Some(0));
}

/// What `timeout` does to `heapledger run`: SIGTERM to heapledger, then to its
/// whole process group. heapledger passes its own on to the program, whose
/// recorder starts writing the dump; the group's signal then reaches the
/// program a second time while it writes (here: sent once the dump file
/// exists). The dump is finished all the same (the second signal waits; it
/// cut the dump short before), the profile says SIGTERM ended the program,
/// heapledger exits as the program did, and no raw data is left behind.
#[test]
fn sigterm_to_heapledger_and_its_group_as_timeout_sends_it() {
    use std::io::BufRead;
    use std::os::unix::process::CommandExt;
    let python = real_python();
    let tmp = TempDir::new("under-timeout");
    let out = tmp.join("p.json");
    let raw = tmp.join("raw");
    std::fs::create_dir(&raw).unwrap();
    let mut child = std::process::Command::new(heapledger())
        .args(["run", "-q", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&python)
        .args([
            "-c",
            "import time\nx = [str(i) for i in range(100000)]\nprint('ready', flush=True)\ntime.sleep(60)",
        ])
        .env("TMPDIR", &raw)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("cannot run heapledger");
    let pgid = child.id() as i32;
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    // SAFETY: signalling the test's own processes.
    unsafe { libc::kill(pgid, libc::SIGTERM) };
    let started = std::time::Instant::now();
    let dump_exists = || {
        std::fs::read_dir(&raw)
            .into_iter()
            .flatten()
            .flatten()
            .any(|d| {
                std::fs::read_dir(d.path())
                    .into_iter()
                    .flatten()
                    .flatten()
                    .any(|f| f.path().extension().is_some_and(|e| e == "hlraw"))
            })
    };
    while !dump_exists() && started.elapsed() < std::time::Duration::from_secs(30) {
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    // SAFETY: as above; the whole group, heapledger and the program.
    unsafe { libc::kill(-pgid, libc::SIGTERM) };
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(stderr, "");
    assert_eq!(
        status.code(),
        Some(128 + libc::SIGTERM),
        "heapledger's exit"
    );
    let p = Profile::from_path(&out).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
    let ext = p.heapledger.as_ref().unwrap();
    assert_eq!(ext.exit.signal, Some(libc::SIGTERM), "the profile's exit");
    let left: Vec<_> = std::fs::read_dir(&raw).unwrap().collect();
    assert!(left.is_empty(), "raw data left in {}", raw.display());
}
