//! Allocations where the program has little stack left: a thread started
//! with `PTHREAD_STACK_MIN`, a coroutine on a 16 KiB stack, a signal handler
//! on a small `sigaltstack`, glibc's timer threads. The program fits in
//! them alone; under heapledger it must too (the recorder takes a stack of its
//! own there, `side.rs`), in every stack mode, with exact counts and the
//! allocating function named; and `exit` called on such a thread writes the
//! profile there. `tests/programs/small_stacks.c`.

mod common;

use common::*;
use heapledger_profile::Profile;

const SRC: &str = "small_stacks.c";

#[test]
fn little_stack_left_is_enough() {
    let dir = Scratch::new("small-stacks");
    let exe = compile_threaded("small_stacks", &dir);
    let line = site_line(SRC, "leaf");
    for what in ["thread", "coroutine", "altstack", "timer"] {
        for stack in ["dwarf", "fp", "none"] {
            let (p, out) = profile_of(stack, &dir, &exe, &[what]);
            assert_eq!(out, "ok\n", "{what} --stack {stack}");
            if stack == "none" {
                continue;
            }
            let s = site(&p, "leaf", line);
            assert_eq!(s.alloc, mms(100, 40, 40, 4000), "{what} --stack {stack}");
            assert_eq!(s.free.count, 100, "{what} --stack {stack}");
        }
    }
    let out = dir.join("exit.json");
    let o = heapledger_run("dwarf", &out, &exe, &["exit"]);
    assert_eq!(o.status.code(), Some(3), "{o:?}");
    let p = Profile::from_path(&out).expect("the profile written on the small stack");
    assert_eq!(site(&p, "leaf", line).alloc.count, 100);
}

/// heapledger under `ulimit -s 32` (a 32 KiB stack for the main thread,
/// which the program inherits; C programs alone start down to about 16
/// KiB, less the environment's size): heapledger runs on a stack of its
/// own, and the recorder makes the main thread's state on its side stack,
/// so the program runs as it would alone and the profile is written.
/// Before, heapledger's main thread overflowed under 64 KiB and aborted,
/// and the program died of SIGSEGV in one run in two (this test build).
#[test]
fn heapledger_runs_under_a_small_stack_limit() {
    use std::os::unix::process::CommandExt;
    let dir = Scratch::new("ulimit-s");
    let exe = compile_threaded("small_stacks", &dir);
    let out = dir.join("p.sqlite");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_heapledger"));
    // The environment's strings sit on the main thread's stack too: only
    // what heapledger needs, so that a large one (a CI job's) does not
    // take the 32 KiB by itself.
    cmd.args(["run", "-q", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&exe)
        .arg("exit")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("TMPDIR", std::env::temp_dir());
    // SAFETY: only getrlimit and setrlimit between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            // The soft limit lowered, the hard one kept (no privilege
            // needed).
            let mut small: libc::rlimit = std::mem::zeroed();
            if libc::getrlimit(libc::RLIMIT_STACK, &mut small) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            small.rlim_cur = (32 << 10).min(small.rlim_max);
            if libc::setrlimit(libc::RLIMIT_STACK, &small) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
    let o = cmd.output().unwrap();
    assert_eq!(o.status.code(), Some(3), "{o:?}");
    let json = dir.join("p.json");
    export_malt(&out, None, &json);
    let p = read_profile(&json);
    assert_eq!(site(&p, "leaf", site_line(SRC, "leaf")).alloc.count, 100);
}
