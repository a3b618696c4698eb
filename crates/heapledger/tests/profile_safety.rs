//! A profile is whole or absent, never truncated, and the program's exit
//! code is its own: an interrupt while heapledger writes (once: finished;
//! twice: no file, nothing left behind), a full disk, an exec into an
//! environment without the recorder, and the raw data an interrupted run
//! left behind (mentioned by the next run, turned into profiles by
//! `heapledger recover`).

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

/// The files in `dir` whose name starts with `prefix`.
fn named(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Runs heapledger on a program with 2^16 distinct stacks (a profile of
/// tens of MB, seconds to write in a test build), sends it `signals`
/// SIGINTs once its temporary profile file appears, and returns its exit
/// code and stderr, with the output path and the TMPDIR it used.
fn interrupted_while_writing(tag: &str, signals: usize) -> (Option<i32>, String, PathBuf, TempDir) {
    let tmp = TempDir::new(tag);
    let exe = compile("many_stacks.c", tmp.path(), &["-O0"]);
    let raw = tmp.join("tmpdir");
    std::fs::create_dir(&raw).unwrap();
    let out = tmp.join("p.json");
    let mut child = Command::new(heapledger())
        .args(["run", "-q", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&exe)
        .arg("16")
        .env("TMPDIR", &raw)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while named(tmp.path(), ".p.json.").is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no temporary profile appeared"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "heapledger ended first"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    for _ in 0..signals {
        // SAFETY: signalling the test's own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    let code = o.status.code().or_else(|| {
        use std::os::unix::process::ExitStatusExt;
        o.status.signal().map(|s| 128 + s)
    });
    (code, stderr, out, tmp)
}

#[test]
fn one_interrupt_while_writing_finishes_the_profile() {
    let (code, stderr, out, tmp) = interrupted_while_writing("intr-once", 1);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("finishing its profile") && stderr.contains("interrupt again"),
        "{stderr}"
    );
    let p = load_profile(&out);
    assert!(
        alloc_calls(&p) >= 1 << 16,
        "{} allocations",
        alloc_calls(&p)
    );
    assert!(
        named(tmp.path(), ".p.json.").is_empty(),
        "a temporary file is left"
    );
    assert!(
        named(&tmp.join("tmpdir"), "").is_empty(),
        "raw data is left"
    );
}

#[test]
fn two_interrupts_while_writing_leave_no_file() {
    let (code, stderr, out, tmp) = interrupted_while_writing("intr-twice", 2);
    assert_eq!(code, Some(128 + libc::SIGINT), "{stderr}");
    assert!(stderr.contains("no profile was written"), "{stderr}");
    assert!(!out.exists(), "a profile is at the output path");
    assert!(
        named(tmp.path(), ".p.json.").is_empty(),
        "a temporary file is left"
    );
    assert!(
        named(&tmp.join("tmpdir"), "").is_empty(),
        "raw data is left: {:?}",
        named(&tmp.join("tmpdir"), "")
    );
}

/// A disk that fills while the profile is written: no file at the output
/// path (nor a temporary one), one line naming it, a non-zero exit; the
/// program ran to its end; the raw data is kept, and `heapledger recover`
/// writes the profile elsewhere. Needs a tmpfs of 8 KB, mounted in a
/// mount namespace of the test's own (root); skipped where that cannot be.
/// Runs `script` with `sh` in a mount namespace of its own, where it
/// mounts a small tmpfs (exiting 99 if it cannot); None, said on stderr,
/// where this machine allows neither (the test is then skipped).
fn with_small_tmpfs(script: &str) -> Option<Outcome> {
    let mut c = Command::new("unshare");
    c.args(["--mount", "--propagation", "private", "sh", "-c", script]);
    let o = run(c, DEFAULT_LIMIT);
    if o.code == Some(99) || o.stderr.contains("unshare:") {
        eprintln!("skipped: cannot mount a small tmpfs here: {}", o.stderr);
        return None;
    }
    Some(o)
}

#[test]
fn a_full_disk_leaves_no_truncated_profile() {
    let tmp = TempDir::new("full-disk");
    let exe = compile("many_stacks.c", tmp.path(), &["-O0"]);
    // The shell's profile (about 15 KB) does not fit in 8 KB; the program
    // it starts is not followed.
    let small = tmp.join("small");
    std::fs::create_dir(&small).unwrap();
    let out = small.join("p.json");
    let marker = tmp.join("marker");
    let raw = tmp.join("raw");
    std::fs::create_dir(&raw).unwrap();
    let script = format!(
        "mount -t tmpfs -o size=8k tmpfs '{small}' || exit 99; \
         TMPDIR='{raw}' '{hl}' run -q --no-follow -o '{out}' -- sh -c \"'{exe}' 12 && touch '{marker}'\"; code=$?; \
         ls -A '{small}'; exit $code",
        small = small.display(),
        raw = raw.display(),
        hl = heapledger().display(),
        out = out.display(),
        exe = exe.display(),
        marker = marker.display(),
    );
    let Some(o) = with_small_tmpfs(&script) else {
        return;
    };
    assert_no_panic(&o, "heapledger run onto a full disk");
    assert!(marker.exists(), "the program did not run to its end");
    assert!(
        matches!(o.code, Some(c) if c != 0),
        "exit {:?}: {}",
        o.code,
        o.stderr
    );
    let lines = o.stderr_lines();
    assert_eq!(lines.len(), 1, "{}", o.stderr);
    assert!(
        lines[0].contains(&out.display().to_string())
            && lines[0].contains("No space left")
            && lines[0].contains("the raw data is kept: `heapledger recover"),
        "{}",
        lines[0]
    );
    // What `ls -A` saw on the small file system before it went away.
    assert_eq!(o.stdout, "", "files left on the full disk");
    // The raw data, made into the profile where there is room.
    let recovered = tmp.join("recovered");
    std::fs::create_dir(&recovered).unwrap();
    let r = std::process::Command::new(heapledger())
        .args(["recover", "--in"])
        .arg(&raw)
        .arg("-o")
        .arg(&recovered)
        .env("TMPDIR", &raw)
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let made: Vec<_> = std::fs::read_dir(&recovered).unwrap().flatten().collect();
    assert_eq!(made.len(), 1, "{made:?}");
    assert!(
        std::fs::read_dir(&raw).unwrap().next().is_none(),
        "recover left raw data"
    );
}

/// `env -i` (or clearenv and exec) runs the final program without the
/// recorder: no profile, said in one line, and the exit code is the
/// program's.
#[test]
fn an_exec_into_an_empty_environment_keeps_the_exit_code() {
    let tmp = TempDir::new("env-i");
    let out = tmp.join("p.json");
    for (args, code) in [
        (vec!["env", "-i", "/bin/true"], 0),
        (vec!["env", "-i", "/bin/sh", "-c", "exit 7"], 7),
        (
            vec!["sh", "-c", "exec env -i /bin/sh -c 'echo out; exit 3'"],
            3,
        ),
    ] {
        let o = Cmd::new(args[0]).args(&args[1..]).run_heapledger(&out, &[]);
        let what = args.join(" ");
        assert_no_panic(&o, &what);
        assert_eq!(o.code, Some(code), "{what}: {}", o.stderr);
        let lines = o.stderr_lines();
        assert_eq!(lines.len(), 1, "{what}: {}", o.stderr);
        assert!(
            lines[0].contains("without the recorder") && lines[0].contains("no profile"),
            "{what}: {}",
            lines[0]
        );
        assert!(!out.exists());
    }
}

/// The raw data of a run whose heapledger was killed: the next run says
/// where it is in one line, and `heapledger recover` turns it into a
/// profile and removes it.
#[test]
fn an_interrupted_runs_data_is_found_and_recovered() {
    let tmp = TempDir::new("leftover");
    let exe = compile("hello.c", tmp.path(), &[]);
    let tmpdir = tmp.join("tmpdir");
    std::fs::create_dir(&tmpdir).unwrap();
    // What `heapledger run` would have left, had it been killed: the
    // program's dump, in a directory named after a heapledger that is gone.
    let mut gone = Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let left = tmpdir.join(format!("heapledger-{dead}-0-0"));
    std::fs::create_dir(&left).unwrap();
    let o = Command::new(&exe)
        .env("LD_PRELOAD", heapledger::preload::find_preload().unwrap())
        .env("HEAPLEDGER_DIR", &left)
        .env("HEAPLEDGER_OPTS", "stack=dwarf,depth=256,follow=1,sample=0")
        .output()
        .unwrap();
    assert!(o.status.success());
    assert_eq!(named(&left, "").len(), 1, "the recorder left no dump");

    // A failed run says only why it failed, and `-q` says nothing; a run
    // that went well ends with the line.
    let mut c = Command::new(heapledger());
    c.args(["run", "-o"])
        .arg(tmp.join("p.json"))
        .args(["--", "no-such-program-heapledger"])
        .env("TMPDIR", &tmpdir);
    let o = run(c, DEFAULT_LIMIT);
    assert_eq!(o.stderr_lines().len(), 1, "{}", o.stderr);
    let o = Cmd::new("true")
        .env("TMPDIR", &tmpdir)
        .run_heapledger(&tmp.join("p.json"), &[]);
    assert_eq!((o.code, o.stderr.as_str()), (Some(0), ""));
    let mut c = Command::new(heapledger());
    c.args(["run", "-o"])
        .arg(tmp.join("p.json"))
        .args(["--", "true"])
        .env("TMPDIR", &tmpdir);
    let o = run(c, DEFAULT_LIMIT);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert!(
        o.stderr
            .contains("an interrupted run left its profile data")
            && o.stderr.contains(&left.display().to_string())
            && o.stderr.contains("heapledger recover"),
        "{}",
        o.stderr
    );

    let recovered = tmp.join("recovered");
    let mut c = Command::new(heapledger());
    c.args(["recover", "--in"])
        .arg(&tmpdir)
        .arg("-o")
        .arg(&recovered)
        .env("TMPDIR", &tmpdir);
    let o = run(c, DEFAULT_LIMIT);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let profiles = named(&recovered, "heapledger-hello-");
    assert_eq!(profiles.len(), 1, "{}", o.stderr);
    let json = tmp.join("recovered.json");
    let e = Command::new(heapledger())
        .args(["export", "--format", "malt", "-o"])
        .arg(&json)
        .arg(&profiles[0])
        .output()
        .unwrap();
    assert!(e.status.success(), "{}", String::from_utf8_lossy(&e.stderr));
    let p = load_profile(&json);
    assert!(alloc_calls(&p) > 0);
    assert!(!left.exists(), "the raw data is still there");
    assert!(o.stderr.contains("removed"), "{}", o.stderr);
}

/// `heapledger run` with a file size limit (`ulimit -f`, which the program
/// inherits): `(exit code, stderr, files left in the output folder, raw
/// data directories kept)`.
fn under_file_size_limit(
    tmp: &TempDir,
    limit: u64,
    depth: &str,
) -> (Option<i32>, String, Vec<String>, usize) {
    use std::os::unix::process::CommandExt;
    let exe = compile("many_stacks.c", tmp.path(), &["-O0"]);
    let out_dir = tmp.join(format!("out-{limit}"));
    std::fs::create_dir(&out_dir).unwrap();
    let raw = tmp.join(format!("raw-{limit}"));
    std::fs::create_dir(&raw).unwrap();
    let mut cmd = Command::new(heapledger());
    cmd.args(["run", "-q", "-o"])
        .arg(out_dir.join("p.sqlite"))
        .arg("--")
        .arg(&exe)
        .arg(depth)
        .env("TMPDIR", &raw);
    // SAFETY: only getrlimit and setrlimit between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            // The soft limit lowered, the hard one kept (no privilege
            // needed).
            let mut small: libc::rlimit = std::mem::zeroed();
            if libc::getrlimit(libc::RLIMIT_FSIZE, &mut small) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            small.rlim_cur = (limit).min(small.rlim_max);
            if libc::setrlimit(libc::RLIMIT_FSIZE, &small) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
    let o = cmd.output().unwrap();
    let left: Vec<String> = std::fs::read_dir(&out_dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let kept = std::fs::read_dir(&raw).unwrap().count();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        left,
        kept,
    )
}

/// A file size limit never ends the program nor heapledger with SIGXFSZ
/// (alone, the program exits 0; before, both died of it, exit 153, and
/// heapledger left its temporary file). Where the program's raw data
/// passes the limit (2^14 stacks, 630 KB against 256 KB), the recorder
/// says so and the program ends as alone; heapledger then has no profile
/// (exit 1). Where only the profile passes it (2^10 stacks: 45 KB of raw
/// data, a 147 KB store, a 100 KB limit), one line says so, the raw data
/// is kept, and no file is left.
#[test]
fn a_file_size_limit_fails_writes_without_killing_anything() {
    let tmp = TempDir::new("ulimit-f");
    let (code, stderr, left, _) = under_file_size_limit(&tmp, 256 << 10, "14");
    assert_no_panic_text(&stderr);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("file too large"), "{stderr}");
    assert!(stderr.contains("no readable profile data"), "{stderr}");
    assert!(left.is_empty(), "{left:?}");

    let (code, stderr, left, kept) = under_file_size_limit(&tmp, 100 << 10, "10");
    assert_no_panic_text(&stderr);
    assert_eq!(code, Some(1), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].starts_with("heapledger: cannot write the profile to ")
            && lines[0].contains("the raw data is kept"),
        "{stderr}"
    );
    assert!(left.is_empty(), "files left: {left:?}");
    assert_eq!(kept, 1, "the raw data");
}

fn assert_no_panic_text(stderr: &str) {
    assert!(
        !stderr.contains("panicked") && !stderr.contains("internal error"),
        "{stderr}"
    );
}

/// A heapledger killed while it writes (SIGKILL, the OOM killer: no
/// handler runs) leaves its temporary file, `.NAME.PID.tmp`, hidden beside
/// the profile and as large as it: the next run that writes there removes
/// those of processes that are gone, and keeps one whose process runs.
#[test]
fn a_killed_writers_temporary_file_is_removed_by_the_next_run() {
    let tmp = TempDir::new("stale-tmp");
    let mut gone = Command::new("true").spawn().unwrap();
    let gone_pid = gone.id();
    gone.wait().unwrap();
    let stale = tmp.join(format!(".p.sqlite.{gone_pid}.tmp"));
    let live = tmp.join(format!(".p.sqlite.{}.tmp", std::process::id()));
    let other = tmp.join(format!(".q.sqlite.{gone_pid}.tmp"));
    for f in [&stale, &live, &other] {
        std::fs::write(f, b"partial").unwrap();
    }
    let out = tmp.join("p.sqlite");
    let o = Command::new(heapledger())
        .args(["run", "-q", "-o"])
        .arg(&out)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    assert!(out.exists());
    assert!(!stale.exists(), "the stale temporary file is still there");
    assert!(
        live.exists(),
        "a running process's temporary file was removed"
    );
    assert!(
        other.exists(),
        "another profile's temporary file was removed"
    );
}

/// Raw data that does not fit in `$TMPDIR` (a small tmpfs): the recorder
/// says so, and heapledger calls the cut dump what it is, truncated, not a
/// "bad record" (the file does not end with its last record's tag); no
/// profile, the program's run to its end, and exit 1 for its 0.
#[test]
fn raw_data_that_does_not_fit_is_called_truncated() {
    let tmp = TempDir::new("full-tmpdir");
    let exe = compile("many_stacks.c", tmp.path(), &["-O0"]);
    let raw = tmp.join("raw");
    std::fs::create_dir(&raw).unwrap();
    let out = tmp.join("p.json");
    let script = format!(
        "mount -t tmpfs -o size=256k tmpfs '{raw}' || exit 99; \
         TMPDIR='{raw}' '{hl}' run -q -o '{out}' -- '{exe}' 14",
        raw = raw.display(),
        hl = heapledger().display(),
        out = out.display(),
        exe = exe.display(),
    );
    let Some(o) = with_small_tmpfs(&script) else {
        return;
    };
    assert_no_panic(&o, "heapledger run with a full TMPDIR");
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    let lines = o.stderr_lines();
    assert_eq!(lines.len(), 3, "{}", o.stderr);
    assert!(lines[0].contains("no space left"), "{}", o.stderr);
    assert!(lines[1].contains("dump is truncated"), "{}", o.stderr);
    assert!(
        lines[2].contains("no readable profile data"),
        "{}",
        o.stderr
    );
    assert!(!out.exists());
}

/// heapledger's stderr a pipe whose reader is gone (`heapledger run --
/// prog 2>&1 | head` once `head` has its lines): the report is lost, not
/// the run. The profile is written, the raw data removed, and the exit
/// code is the program's. Before, the first message panicked: exit 134,
/// and the raw data left in `$TMPDIR`.
#[test]
fn a_closed_stderr_keeps_the_exit_code_and_the_profile() {
    let tmp = TempDir::new("closed-stderr");
    let exe = compile("many_stacks.c", tmp.path(), &["-O0"]);
    let raw = tmp.join("tmpdir");
    std::fs::create_dir(&raw).unwrap();
    let out = tmp.join("p.json");
    let script = format!("'{}' 8; exit 3", exe.display());
    let mut child = Command::new(heapledger())
        .args(["run", "-o"])
        .arg(&out)
        .args(["--", "sh", "-c", &script])
        .env("TMPDIR", &raw)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stderr.take());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(3), "{status:?}");
    assert_profile_with_allocations(&out, "a run with its stderr closed");
    let left: Vec<_> = std::fs::read_dir(&raw).unwrap().flatten().collect();
    assert!(left.is_empty(), "raw data left: {left:?}");
}

/// A relative `$TMPDIR` (`TMPDIR=tmp heapledger run ...`): a process that
/// changed its working directory still leaves its raw data in the run's
/// directory. Before, the forked child of a program that went to `/` could
/// not find `tmp/heapledger-...` and its profile was lost, with a line on
/// stderr.
#[test]
fn a_relative_tmpdir_reaches_a_process_that_changed_directory() {
    let tmp = TempDir::new("relative-tmpdir");
    let exe = compile("chdir_fork.c", tmp.path(), &[]);
    std::fs::create_dir(tmp.join("raw")).unwrap();
    let out = tmp.join("p.sqlite");
    let o = Command::new(heapledger())
        .args(["run", "-q", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&exe)
        .env("TMPDIR", "raw")
        .current_dir(tmp.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{stderr}");
    assert_eq!(stderr, "");
    let processes = Command::new(heapledger())
        .arg("report")
        .arg(&out)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&processes.stderr);
    assert!(
        said.contains("1 other process"),
        "the child's profile is missing: {said}"
    );
    assert_eq!(std::fs::read_dir(tmp.join("raw")).unwrap().count(), 0);
}

/// `HEAPLEDGER_PRELOAD` given relative: a program that changes its working
/// directory and then runs another keeps the recorder in it. Before, the
/// loader could not find the library there ("cannot be preloaded"), and
/// the run had no profile.
#[test]
fn a_relative_preload_path_reaches_a_program_run_from_elsewhere() {
    let tmp = TempDir::new("relative-preload");
    std::fs::copy(
        heapledger::preload::find_preload().unwrap(),
        tmp.join("recorder.so"),
    )
    .unwrap();
    let out = tmp.join("p.sqlite");
    let o = Command::new(heapledger())
        .args(["run", "-q", "-o"])
        .arg(&out)
        .args(["--", "sh", "-c", "cd / && exec sh -c 'exit 4'"])
        .env("HEAPLEDGER_PRELOAD", "recorder.so")
        .current_dir(tmp.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(4), "{stderr}");
    assert_eq!(stderr, "");
    assert!(out.exists());
}
