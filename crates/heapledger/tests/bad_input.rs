//! Acceptance point 6, bad input: `heapledger report` on a truncated file, a
//! non-JSON file, JSON of another kind, an empty or missing file prints one
//! clear line and exits non-zero; `heapledger run -- no-such-program` says so;
//! an unknown option is refused; an output path where no profile can be
//! written is refused before the program starts, in one line naming it.
//! Never a panic.

mod support;

use std::path::Path;
use std::process::{Command, Stdio};

use support::*;

/// `heapledger report FILE` fails with exactly one line on stderr that names
/// the file and contains each of `words` (case-insensitive); returns it.
fn report_fails(file: &Path, words: &[&str]) -> String {
    let o = heapledger_cmd([Path::new("report"), file]);
    let what = format!("heapledger report {}", file.display());
    assert_no_panic(&o, &what);
    assert_ne!(
        o.code,
        Some(0),
        "{what}: exit code 0; stdout:\n{}",
        o.stdout
    );
    assert!(o.code.is_some(), "{what}: killed by signal {:?}", o.signal);
    assert_eq!(o.stdout, "", "{what}: printed on stdout");
    let lines = o.stderr_lines();
    assert_eq!(
        lines.len(),
        1,
        "{what}: expected one line on stderr, got:\n{}",
        o.stderr
    );
    let line = lines[0];
    let name = file.file_name().unwrap().to_string_lossy();
    assert!(
        line.contains(name.as_ref()),
        "{what}: the message does not name the file: {line}"
    );
    let lower = line.to_lowercase();
    for w in words {
        assert!(
            lower.contains(&w.to_lowercase()),
            "{what}: the message does not say `{w}`: {line}"
        );
    }
    line.to_owned()
}

/// A real profile, recorded from `true`, to damage.
fn recorded_profile(tmp: &TempDir) -> Vec<u8> {
    let out = tmp.join("good.json");
    let o = heapledger_cmd([
        "run".as_ref(),
        "-q".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
        "--".as_ref(),
        "true".as_ref(),
    ]);
    assert_eq!(o.code, Some(0), "heapledger run -- true: {}", o.stderr);
    let bytes = std::fs::read(&out).unwrap();
    // The untouched profile reports fine.
    let r = heapledger_cmd([Path::new("report"), &out]);
    assert_eq!(r.code, Some(0), "report of a good profile: {}", r.stderr);
    assert_no_panic(&r, "report of a good profile");
    bytes
}

#[test]
fn report_on_a_truncated_profile() {
    let tmp = TempDir::new("bad-truncated");
    let good = recorded_profile(&tmp);
    for (name, len) in [
        ("half.json", good.len() / 2),
        ("one-byte-short.json", good.len() - 2),
        ("first-brace.json", 1),
    ] {
        let f = tmp.join(name);
        std::fs::write(&f, &good[..len]).unwrap();
        report_fails(&f, &["truncated"]);
    }
}

#[test]
fn report_on_a_file_that_is_not_json() {
    let tmp = TempDir::new("bad-notjson");
    let cases: [(&str, &[u8]); 4] = [
        ("text.txt", b"hello world\nthis is not a profile\n"),
        (
            "binary.bin",
            &[0x7f, b'E', b'L', b'F', 2, 1, 1, 0, 0, 0xff, 0xfe],
        ),
        ("trailing.json", b"{\"run\": {}} garbage"),
        ("csv.json", b"a,b,c\n1,2,3\n"),
    ];
    for (name, bytes) in cases {
        let f = tmp.join(name);
        std::fs::write(&f, bytes).unwrap();
        report_fails(&f, &["not", "JSON"]);
    }
}

#[test]
fn report_on_json_of_another_kind() {
    let tmp = TempDir::new("bad-otherjson");
    let cases = [
        ("object.json", r#"{"name": "x", "values": [1, 2, 3]}"#),
        ("array.json", "[1, 2, 3]"),
        ("string.json", r#""a string""#),
        ("number.json", "42"),
        (
            "package.json",
            r#"{"name": "pkg", "version": "1.0.0", "dependencies": {}}"#,
        ),
    ];
    for (name, text) in cases {
        let f = tmp.join(name);
        std::fs::write(&f, text).unwrap();
        report_fails(&f, &["not a", "profile"]);
    }
    // DHAT's JSON is a memory profile too, but not this kind.
    let f = tmp.join("dhat.json");
    std::fs::write(
        &f,
        r#"{"dhatFileVersion":2,"mode":"heap","verb":"Allocated","bklt":true,"bkacc":true,"tu":"instrs","Mtu":"Minstr","tuth":500,"cmd":"./a","pid":1,"te":10,"tg":5,"pps":[],"ftbl":["[root]"]}"#,
    )
    .unwrap();
    report_fails(&f, &["not a", "profile"]);
}

#[test]
fn report_on_an_empty_file() {
    let tmp = TempDir::new("bad-empty");
    for (name, text) in [("empty.json", ""), ("blank.json", " \n\t\n")] {
        let f = tmp.join(name);
        std::fs::write(&f, text).unwrap();
        report_fails(&f, &["empty"]);
    }
}

#[test]
fn report_on_a_missing_file() {
    let tmp = TempDir::new("bad-missing");
    report_fails(&tmp.join("no-such-profile.json"), &["does not exist"]);
    report_fails(
        &tmp.join("no-dir/no-such-profile.json"),
        &["does not exist"],
    );
}

#[test]
fn report_on_a_directory() {
    let tmp = TempDir::new("bad-dir");
    let d = tmp.join("a-directory.json");
    std::fs::create_dir(&d).unwrap();
    let line = report_fails(&d, &["directory"]);
    // One clear line: the reason is said once.
    assert_eq!(
        line.matches("Is a directory").count(),
        1,
        "the reason is repeated: {line}"
    );
}

#[test]
fn report_into_a_closed_pipe_does_not_panic() {
    // `heapledger report FILE | head -0`: stdout is closed before heapledger
    // writes. It may stop early, but without a panic.
    let tmp = TempDir::new("bad-pipe");
    recorded_profile(&tmp);
    let mut child = Command::new(heapledger())
        .arg("report")
        .arg(tmp.join("good.json"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        !stderr.contains("panicked"),
        "heapledger report into a closed pipe panicked:\n{stderr}"
    );
    assert!(
        stderr.lines().count() <= 1,
        "heapledger report into a closed pipe printed more than one line:\n{stderr}"
    );
}

#[test]
fn run_no_such_program() {
    let tmp = TempDir::new("bad-noprog");
    let out = tmp.join("p.json");
    for quiet in [false, true] {
        let mut args = vec!["run"];
        if quiet {
            args.push("-q");
        }
        args.extend([
            "-o",
            out.to_str().unwrap(),
            "--",
            "no-such-program-heapledger",
        ]);
        let mut c = Command::new(heapledger());
        c.args(&args).current_dir(tmp.path());
        let o = run(c, DEFAULT_LIMIT);
        let what = format!("heapledger {}", args.join(" "));
        assert_no_panic(&o, &what);
        // 127, as `env`, `timeout` and a shell give for no such program.
        assert_eq!(
            o.code,
            Some(127),
            "{what}: exit status {:?}/{:?}",
            o.code,
            o.signal
        );
        let lines = o.stderr_lines();
        assert_eq!(lines.len(), 1, "{what}: expected one line:\n{}", o.stderr);
        assert!(
            lines[0].contains("no-such-program-heapledger"),
            "{what}: the message does not name the program: {}",
            lines[0]
        );
        assert!(
            lines[0].to_lowercase().contains("no such program"),
            "{what}: the message does not say there is no such program: {}",
            lines[0]
        );
        assert!(!out.exists(), "{what}: wrote a profile anyway");
    }
    // Nothing was left in the working directory either.
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert!(left.is_empty(), "files left behind: {left:?}");
}

/// A file of commands without `#!` runs under /bin/sh, as a shell and
/// `execvp` run it (heapledger said "Exec format error" and ran nothing),
/// found by path or in `$PATH`; a directory is named as one, and so is a
/// file that may not be run, each with exit code 126.
#[test]
fn run_a_script_without_a_shebang_and_a_directory() {
    let tmp = TempDir::new("bad-script");
    let script = tmp.join("commands");
    std::fs::write(&script, "echo \"from the script: $1\"\nexit 4\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = tmp.join("p.sqlite");
    let path = format!(
        "{}:{}",
        tmp.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for program in [script.to_str().unwrap(), "commands"] {
        let mut c = Command::new(heapledger());
        c.args(["run", "-q", "-o", out.to_str().unwrap(), "--", program, "x"])
            .env("PATH", &path);
        let o = run(c, DEFAULT_LIMIT);
        assert_no_panic(&o, program);
        assert_eq!(o.code, Some(4), "{program}: {}", o.stderr);
        assert_eq!(o.stdout, "from the script: x\n", "{program}");
        assert_eq!(o.stderr, "", "{program}");
        assert!(out.exists(), "{program}: no profile");
        std::fs::remove_file(&out).unwrap();
    }
    let mut c = Command::new(heapledger());
    c.args(["run", "-q", "-o", out.to_str().unwrap(), "--"])
        .arg(tmp.path());
    let o = run(c, DEFAULT_LIMIT);
    // 126, as `env`, `timeout` and a shell give for what cannot be run.
    assert_eq!(o.code, Some(126), "{}", o.stderr);
    assert_eq!(
        o.stderr,
        format!(
            "heapledger: cannot run {}: it is a directory\n",
            tmp.path().display()
        )
    );
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let mut c = Command::new(heapledger());
    c.args(["run", "-q", "-o", out.to_str().unwrap(), "--"])
        .arg(&script);
    let o = run(c, DEFAULT_LIMIT);
    assert_eq!(o.code, Some(126), "{}", o.stderr);
    let lines = o.stderr_lines();
    assert_eq!(lines.len(), 1, "{}", o.stderr);
    assert!(
        lines[0].starts_with(&format!("heapledger: cannot run {}: ", script.display()))
            && lines[0].contains("Permission denied"),
        "{}",
        lines[0]
    );
    assert!(!out.exists());
}

/// A program the recorder cannot reach (statically linked), or that dies
/// by SIGKILL, or of a fault that no handler may catch, before it can write
/// anything: it runs as it would alone, its
/// output and exit code pass through (1 in place of 0, as no profile was
/// made), and heapledger says in one line why there is no profile.
#[test]
fn run_a_program_that_leaves_no_data() {
    let tmp = TempDir::new("bad-nodata");
    let stat = compile("exit_with.c", tmp.path(), &["-static"]);
    std::fs::create_dir(tmp.join("dyn")).unwrap();
    let dynamic = compile("exit_with.c", &tmp.join("dyn"), &[]);
    let out = tmp.join("p.json");
    // (program, its argument, heapledger's exit code, the plain run's
    // signal, what heapledger's line says)
    type Case<'a> = (&'a Path, &'a str, Option<i32>, Option<i32>, &'a str);
    let cases: [Case; 6] = [
        (&stat, "0", Some(1), None, "it is statically linked"),
        (&stat, "3", Some(3), None, "it is statically linked"),
        (&stat, "kill", Some(137), Some(9), "killed by SIGKILL"),
        (&dynamic, "kill", Some(137), Some(9), "killed by SIGKILL"),
        (
            &stat,
            "blocked-segv",
            Some(139),
            Some(11),
            "it is statically linked",
        ),
        (
            &dynamic,
            "blocked-segv",
            Some(139),
            Some(11),
            "killed by signal 11 (SIGSEGV) before it could write it",
        ),
    ];
    for (exe, arg, code, plain_signal, why) in cases {
        let mut c = Command::new(heapledger());
        c.arg("run").arg("-o").arg(&out).arg("--").arg(exe).arg(arg);
        let o = run(c, DEFAULT_LIMIT);
        let what = format!("heapledger run -- {} {arg}", exe.display());
        assert_no_panic(&o, &what);
        assert_eq!(o.code, code, "{what}: {}", o.stderr);
        assert_eq!(o.stdout, "ran\n", "{what}");
        let lines = o.stderr_lines();
        assert_eq!(lines.len(), 1, "{what}: expected one line:\n{}", o.stderr);
        assert!(
            lines[0].contains(&exe.display().to_string()) && lines[0].contains(why),
            "{what}: the message does not name the program and say `{why}`: {}",
            lines[0]
        );
        assert!(!out.exists(), "{what}: wrote a profile anyway");
        let mut plain = Command::new(exe);
        plain.arg(arg);
        let plain = run(plain, DEFAULT_LIMIT);
        assert_eq!(plain.signal, plain_signal, "{what}: the plain run");
    }
}

/// `heapledger ARGS` (with `{touch}` replaced by a command that creates a
/// marker file) is refused: non-zero exit, a message naming `bad` and saying
/// what is wrong with it, and the program does not run.
fn refused(args: &[&str], bad: &str) {
    let tmp = TempDir::new("bad-option");
    let marker = tmp.join("marker");
    let touch = format!("touch '{}'", marker.display());
    let args: Vec<String> = args.iter().map(|a| a.replace("{touch}", &touch)).collect();
    let o = heapledger_cmd(&args);
    let what = format!("heapledger {}", args.join(" "));
    assert_no_panic(&o, &what);
    assert!(
        matches!(o.code, Some(c) if c != 0),
        "{what}: exit status {:?}/{:?}",
        o.code,
        o.signal
    );
    assert!(
        !marker.exists(),
        "{what}: the program ran despite the bad option"
    );
    assert!(
        o.stderr.contains(bad),
        "{what}: the message does not name `{bad}`:\n{}",
        o.stderr
    );
    let lower = o.stderr.to_lowercase();
    assert!(
        [
            "unexpected argument",
            "unknown",
            "unrecognized",
            "invalid value"
        ]
        .iter()
        .any(|w| lower.contains(w)),
        "{what}: the message does not say that `{bad}` is not an option heapledger knows:\n{}",
        o.stderr
    );
}

#[test]
fn unknown_top_level_option_is_refused() {
    refused(&["--frobnicate"], "--frobnicate");
}

#[test]
fn unknown_run_option_is_refused() {
    // Before `--`, an unknown option is an unknown option, not a program.
    refused(
        &["run", "--frobnicate", "--", "sh", "-c", "{touch}"],
        "--frobnicate",
    );
    refused(&["run", "-Z", "--", "sh", "-c", "{touch}"], "-Z");
}

#[test]
fn bad_run_option_value_is_refused() {
    refused(
        &["run", "--stack", "sideways", "--", "sh", "-c", "{touch}"],
        "sideways",
    );
    refused(
        &["run", "--max-depth", "0", "--", "sh", "-c", "{touch}"],
        "0",
    );
    refused(
        &["run", "--sample-every", "12X", "--", "sh", "-c", "{touch}"],
        "12X",
    );
}

#[test]
fn unknown_report_option_is_refused() {
    refused(&["report", "--bogus", "x.json"], "--bogus");
}

/// One line on stderr, exit 2, saying what was meant.
fn suggests(args: &[&str], meant: &str) {
    let o = heapledger_cmd(args);
    let what = format!("heapledger {}", args.join(" "));
    assert_no_panic(&o, &what);
    assert_eq!(o.code, Some(2), "{what}: {}", o.stderr);
    assert_eq!(o.stderr.trim().lines().count(), 1, "{what}:\n{}", o.stderr);
    assert!(
        o.stderr.contains(&format!("did you mean '{meant}'?")),
        "{what}: no suggestion of {meant}:\n{}",
        o.stderr
    );
}

#[test]
fn a_mistyped_option_or_command_gets_a_suggestion() {
    suggests(&["run", "--stak", "fp", "--", "true"], "--stack");
    suggests(&["report", "--tpo", "3", "x.json"], "--top");
    suggests(&["tree", "--metirc", "bytes", "x.json"], "--metric");
    suggests(&["rnu", "--", "true"], "run");
}

#[test]
fn no_arguments_lists_the_commands() {
    let o = heapledger_cmd(std::iter::empty::<&str>());
    assert_no_panic(&o, "heapledger");
    assert_eq!(o.code, Some(2), "{}", o.stderr);
    for command in ["run", "report", "tree", "export"] {
        assert!(
            o.stderr
                .lines()
                .any(|l| l.trim_start().starts_with(command)),
            "`heapledger` alone does not list {command}:\n{}",
            o.stderr
        );
    }
}

#[test]
fn a_negative_limit_is_an_invalid_value() {
    let o = heapledger_cmd(["tree", "--limit", "-1", "x.json"]);
    assert_no_panic(&o, "tree --limit -1");
    assert_eq!(o.code, Some(2));
    assert!(
        o.stderr.contains("invalid value '-1'") && o.stderr.contains("percentage"),
        "{}",
        o.stderr
    );
}

/// `heapledger run -o OUT -- sh -c '...'` where OUT cannot be written: found
/// before the program starts (it does not run: no marker file, no output),
/// heapledger exits 2 and names OUT in one line.
fn unwritable_output(tmp: &TempDir, out: &Path) {
    let marker = tmp.join("marker");
    let _ = std::fs::remove_file(&marker);
    let script = format!(
        "x=$(echo ran to the end); echo \"$x\" > '{}'; echo program output",
        marker.display()
    );
    for quiet in [true, false] {
        let mut args: Vec<&std::ffi::OsStr> = vec!["run".as_ref()];
        if quiet {
            args.push("-q".as_ref());
        }
        args.extend([
            "-o".as_ref(),
            out.as_os_str(),
            "--".as_ref(),
            "sh".as_ref(),
            "-c".as_ref(),
            script.as_ref(),
        ]);
        let o = heapledger_cmd(&args);
        let what = format!("heapledger run -o {} (quiet: {quiet})", out.display());
        assert_no_panic(&o, &what);
        assert!(!marker.exists(), "{what}: the program ran");
        assert_eq!(o.stdout, "", "{what}: the program's output");
        assert_eq!(o.code, Some(2), "{what}: {}", o.stderr);
        assert_eq!(o.stderr_lines().len(), 1, "{what}:\n{}", o.stderr);
        let out_s = out.display().to_string();
        assert!(
            o.stderr.lines().any(|l| l.contains(&out_s)),
            "{what}: stderr does not name {out_s}:\n{}",
            o.stderr
        );
        assert!(!out.exists(), "{what}: a profile is there after all");
    }
}

#[test]
fn run_with_an_output_directory_under_a_regular_file() {
    let tmp = TempDir::new("bad-out-file");
    std::fs::write(tmp.join("file.txt"), "a regular file\n").unwrap();
    unwritable_output(&tmp, &tmp.join("file.txt/sub/p.json"));
    unwritable_output(&tmp, &tmp.join("file.txt/p.json"));
}

#[test]
fn run_with_an_output_directory_that_cannot_be_created() {
    let tmp = TempDir::new("bad-out-proc");
    unwritable_output(&tmp, Path::new("/proc/nonexistent/x/p.json"));
}

#[test]
fn run_with_an_output_path_that_is_a_directory() {
    let tmp = TempDir::new("bad-out-dir");
    let d = tmp.join("already-a-dir.json");
    std::fs::create_dir(&d).unwrap();
    let marker = tmp.join("marker");
    let o = heapledger_cmd([
        "run".as_ref(),
        "-q".as_ref(),
        "-o".as_ref(),
        d.as_os_str(),
        "--".as_ref(),
        "sh".as_ref(),
        "-c".as_ref(),
        format!("touch '{}'", marker.display()).as_ref(),
    ]);
    assert_no_panic(&o, "heapledger run -o DIR");
    assert!(!marker.exists(), "the program ran");
    assert_eq!(o.code, Some(2), "exit {:?}", o.code);
    assert!(
        o.stderr.contains(&d.display().to_string()),
        "stderr does not name {}:\n{}",
        d.display(),
        o.stderr
    );
}

/// An earlier profile at the output path is replaced (a new file: see
/// `clear_old_output`); an output path that is a symbolic link is written
/// through, the link stays; a file with a second name is written in place,
/// so both names show the new profile.
#[test]
fn run_over_an_earlier_output() {
    use std::os::unix::fs::MetadataExt;
    let tmp = TempDir::new("out-again");
    let run = |out: &Path| {
        let o = Cmd::new("sh")
            .args(["-c", "echo program output"])
            .run_heapledger(out, &[]);
        assert_no_panic(&o, "heapledger run over an earlier output");
        assert_eq!(o.code, Some(0), "{}", o.stderr);
        assert_eq!(o.stdout, "program output\n");
    };
    let is_profile = |p: &Path| heapledger_profile::Profile::from_path(p).is_ok();

    let plain = tmp.join("p.json");
    std::fs::write(&plain, "an earlier profile").unwrap();
    run(&plain);
    assert!(is_profile(&plain), "{} was not replaced", plain.display());
    run(&plain);
    assert!(
        is_profile(&plain),
        "the second run over {}",
        plain.display()
    );

    let target = tmp.join("target.json");
    let link = tmp.join("link.json");
    std::fs::write(&target, "an earlier profile").unwrap();
    std::os::unix::fs::symlink(&target, &link).unwrap();
    run(&link);
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(is_profile(&target), "not written through the link");

    let first = tmp.join("first.json");
    let second = tmp.join("second.json");
    std::fs::write(&first, "an earlier profile").unwrap();
    std::fs::hard_link(&first, &second).unwrap();
    run(&first);
    assert!(is_profile(&first) && is_profile(&second));
    assert_eq!(
        std::fs::metadata(&first).unwrap().ino(),
        std::fs::metadata(&second).unwrap().ino()
    );
}

/// An output that is a pipe (a FIFO, as `/dev/stdout` or `/dev/null`
/// may be a device) is written into, never replaced by a plain file: `run
/// -o FIFO` and `export -o FIFO` send the profile to its reader, and the
/// FIFO stays one. (Renaming a finished profile over `/dev/null`, as root,
/// once replaced the device with a file.)
#[test]
fn outputs_that_are_pipes_are_written_into_not_replaced() {
    use std::io::Read;
    use std::os::unix::fs::FileTypeExt;
    let tmp = TempDir::new("out-fifo");
    let fifo = tmp.join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let reader = || {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            std::fs::File::open(&fifo)
                .unwrap()
                .read_to_end(&mut bytes)
                .unwrap();
            bytes
        })
    };
    // run -o FIFO: the profile store's bytes reach the reader.
    let r = reader();
    let o = Cmd::new("sh")
        .args(["-c", "echo program output"])
        .run_heapledger(&fifo, &[]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let bytes = r.join().unwrap();
    assert!(
        bytes.starts_with(b"SQLite format 3\0"),
        "{} bytes",
        bytes.len()
    );
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
    // export -o FIFO: folded stacks.
    let store = tmp.join("p.sqlite");
    std::fs::write(&store, &bytes).unwrap();
    let r = reader();
    let e = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["export", "--format", "folded", "-o"])
        .arg(&fifo)
        .arg(&store)
        .output()
        .unwrap();
    assert_eq!(
        e.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&e.stderr)
    );
    let text = String::from_utf8(r.join().unwrap()).unwrap();
    assert!(
        !text.is_empty() && text.lines().all(|l| l.rsplit_once(' ').is_some()),
        "{text}"
    );
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
}

/// `$TMPDIR` names a directory that does not exist: the program's dumps go
/// to /tmp instead, the program runs and its profile is written.
#[test]
fn run_with_a_temporary_directory_that_does_not_exist() {
    let tmp = TempDir::new("bad-tmpdir");
    let out = tmp.join("p.json");
    let cmd = Cmd::new("sh")
        .args(["-c", "echo program output; exit 3"])
        .env("TMPDIR", tmp.join("no/such/dir"));
    let o = cmd.run_heapledger(&out, &[]);
    assert_no_panic(&o, "heapledger run with TMPDIR missing");
    assert_eq!(o.stdout, "program output\n");
    assert_eq!(o.code, Some(3), "{}", o.stderr);
    assert_eq!(o.stderr, "");
    assert!(out.exists(), "no profile");
}

/// What a reader command did, with what it cost.
struct Measured {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    wall: std::time::Duration,
    /// Peak resident memory, KiB.
    max_rss_kib: i64,
}

/// Runs `heapledger ARGS` in `dir` and measures its time and peak memory
/// (`support::peak`); kills it after 10 s, or as soon as it holds more
/// than 1 GiB, and fails the test then.
fn measured(dir: &Path, args: &[&std::ffi::OsStr]) -> Measured {
    let out = dir.join(".stdout");
    let err = dir.join(".stderr");
    let mut cmd = Command::new(heapledger());
    cmd.args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap());
    let (ended, _) = peak::heapledger_with_peak(cmd, std::time::Duration::from_secs(10));
    Measured {
        code: libc::WIFEXITED(ended.status).then(|| libc::WEXITSTATUS(ended.status)),
        stdout: std::fs::read_to_string(&out).unwrap(),
        stderr: std::fs::read_to_string(&err).unwrap(),
        wall: ended.wall,
        max_rss_kib: ended.peak_kib,
    }
}

/// Peak resident memory a refusal may take: the program itself (a debug
/// build holds about 6 MiB) and a few MiB more.
const REFUSAL_RSS_KIB: i64 = 24 << 10;

/// `report`, `tree`, `leaks` and `export` (both formats) on `file` each fail within
/// a second and [`REFUSAL_RSS_KIB`], with one line on stderr that names the
/// file and says each of `words`; export writes nothing.
pub(crate) fn every_reader_refuses(tmp: &TempDir, file: &Path, words: &[&str]) {
    let commands: [&[&str]; 5] = [
        &["report"],
        &["tree"],
        &["leaks"],
        &["export", "--format", "callgrind"],
        &["export", "--format", "malt"],
    ];
    for command in commands {
        let what = format!("heapledger {} {}", command.join(" "), file.display());
        let mut args: Vec<&std::ffi::OsStr> = command.iter().map(|c| c.as_ref()).collect();
        args.push(file.as_os_str());
        // Once more if the machine was too busy to start it in a second.
        let mut m = measured(tmp.path(), &args);
        if m.wall >= std::time::Duration::from_secs(1) {
            m = measured(tmp.path(), &args);
        }
        assert!(!m.stderr.contains("panicked"), "{what}: {}", m.stderr);
        assert!(
            matches!(m.code, Some(c) if c != 0),
            "{what}: exit {:?}",
            m.code
        );
        assert_eq!(m.stdout, "", "{what}");
        assert!(
            m.wall < std::time::Duration::from_secs(1),
            "{what}: took {:?}",
            m.wall
        );
        assert!(
            m.max_rss_kib <= REFUSAL_RSS_KIB,
            "{what}: took {} KiB",
            m.max_rss_kib
        );
        let lines: Vec<&str> = m.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{what}: {}", m.stderr);
        let line = lines[0];
        assert!(line.chars().count() < 300, "{what}: {line}");
        let name = file.file_name().unwrap().to_string_lossy();
        assert!(line.contains(name.as_ref()), "{what}: {line}");
        for w in words {
            assert!(line.contains(w), "{what}: does not say `{w}`: {line}");
        }
        let left: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                // What export would have written, beside the file read.
                n.starts_with("callgrind.out") || n.ends_with(".malt.json")
            })
            .collect();
        assert!(left.is_empty(), "{what}: wrote {left:?}");
    }
}

/// Issue 29, item 7: `report /dev/zero` grew to 5 GB, `callgrind
/// /dev/zero` to 24 GB, and `/dev/urandom` never returned.
#[test]
fn readers_refuse_devices_at_once() {
    let tmp = TempDir::new("bad-dev");
    for dev in ["/dev/zero", "/dev/urandom", "/dev/null"] {
        every_reader_refuses(&tmp, Path::new(dev), &["character device", "not a profile"]);
    }
}

#[test]
fn readers_refuse_a_fifo_without_opening_it() {
    let tmp = TempDir::new("bad-fifo");
    let fifo = tmp.join("profile.json");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    every_reader_refuses(&tmp, &fifo, &["FIFO"]);
}

/// A big file that is no profile is judged from its first bytes (sparse
/// files: no disk is used).
/// A file of `len` bytes that starts with `start`, the rest never written
/// (sparse: it takes no room).
fn sparse_file(path: &Path, start: &[u8], len: u64) {
    std::fs::write(path, start).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

#[test]
fn readers_judge_a_big_file_by_its_head() {
    let tmp = TempDir::new("bad-big");
    for (name, start, says) in [
        ("zeros.json", &b""[..], "zero byte"),
        ("brace.json", b"{", "not a JSON profile"),
    ] {
        let f = tmp.join(name);
        sparse_file(&f, start, 8 << 30);
        every_reader_refuses(&tmp, &f, &[says]);
    }
}

/// Files a user may take for a profile, told by their first bytes, even
/// where the rest is huge: each reader names what it is and what reads it,
/// rather than "not a JSON profile (expected value at line 1 column 1)".
#[test]
fn readers_name_files_that_are_not_profiles() {
    let tmp = TempDir::new("bad-foreign");
    let elf = std::fs::read("/bin/true").unwrap();
    for (name, start, says) in [
        (
            "p.sqlite.gz",
            &b"\x1f\x8b\x08\x00"[..],
            &["gzip", "decompress"][..],
        ),
        (
            "heaptrack.prog.1.zst",
            b"\x28\xb5\x2f\xfd\x00",
            &["zstd", "heaptrack_print"],
        ),
        ("p.xz", b"\xfd7zXZ\x00\x00", &["xz"]),
        ("prog", &elf[..64], &["executable", "heapledger run"]),
        (
            "1234.hlraw",
            b"HLEDGR\0\x01",
            &["raw data", "heapledger recover"],
        ),
        (
            "p.callgrind",
            b"# callgrind format\nversion: 1\n",
            &["callgrind file", "KCachegrind"],
        ),
        (
            "p.speedscope.json",
            b"{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\"",
            &["speedscope"],
        ),
    ] {
        let f = tmp.join(name);
        sparse_file(&f, start, 1 << 30);
        every_reader_refuses(&tmp, &f, says);
        std::fs::remove_file(&f).unwrap();
    }
}

/// Issue 29, item 8: values no real profile can have are damage, not
/// `16.0 EiB`; a quoted value of 10 000 characters is cut in the message.
#[test]
fn readers_report_impossible_values_as_damage_in_one_short_line() {
    let tmp = TempDir::new("bad-values");
    let good = String::from_utf8(recorded_profile(&tmp)).unwrap();
    let set_first = |key: &str, value: &str| {
        let mut at = good.find(key).unwrap_or_else(|| panic!("no {key}")) + key.len();
        at += good[at..].len() - good[at..].trim_start().len();
        let end = at + good[at..].find(|c: char| !c.is_ascii_digit()).unwrap();
        format!("{}{value}{}", &good[..at], &good[end..])
    };
    let max = u64::MAX.to_string();
    for (name, text, words) in [
        (
            "peak.json",
            set_first("\"peakRequested\":", &max),
            vec!["damaged", "heapledger.peakRequested", max.as_str()],
        ),
        (
            "runtime.json",
            set_first("\"runtime\":", &max),
            vec!["damaged", "run.runtime"],
        ),
        (
            "long.json",
            set_first("\"runtime\":", &format!("\"{}\"", "x".repeat(10_000))),
            vec!["damaged"],
        ),
    ] {
        let f = tmp.join(name);
        std::fs::write(&f, text).unwrap();
        every_reader_refuses(&tmp, &f, &words);
    }
}

/// Every command that reads profiles (issue 32), given a missing file, a
/// device, random bytes or a truncated store, as each of its profiles,
/// says so in one line naming the file and exits non-zero; given an
/// unknown option, one line too.
#[test]
fn every_command_refuses_bad_profiles_in_one_line() {
    let tmp = TempDir::new("every-command");
    let good = tmp.join("good.sqlite");
    let o = heapledger_cmd([
        "run".as_ref(),
        "-q".as_ref(),
        "-o".as_ref(),
        good.as_os_str(),
        "--".as_ref(),
        "true".as_ref(),
    ]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let random = tmp.join("random.bin");
    std::fs::write(
        &random,
        (0..4096u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect::<Vec<u8>>(),
    )
    .unwrap();
    let truncated = tmp.join("truncated.sqlite");
    let bytes = std::fs::read(&good).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let missing = tmp.join("missing.sqlite");
    let out = tmp.join("out");
    let o = |s: &str| -> std::ffi::OsString { s.into() };
    for bad in [
        missing.as_path(),
        Path::new("/dev/zero"),
        &random,
        &truncated,
    ] {
        let b = bad.as_os_str().to_owned();
        let g = good.as_os_str().to_owned();
        let runs: Vec<Vec<std::ffi::OsString>> = vec![
            vec![o("report"), b.clone()],
            vec![o("tree"), b.clone()],
            vec![o("leaks"), b.clone()],
            vec![o("check"), b.clone(), o("--max-peak"), o("1")],
            vec![o("diff"), b.clone(), g.clone()],
            vec![o("diff"), g.clone(), b.clone()],
            vec![o("waits"), b.clone()],
            vec![o("report"), b.clone(), o("--snapshot"), o("x")],
            vec![o("report"), {
                let mut l = b.clone();
                l.push(":label");
                l
            }],
            vec![o("view"), b.clone(), o("--no-browser")],
            vec![o("view"), g.clone(), b.clone(), o("--no-browser")],
            vec![
                o("export"),
                b.clone(),
                o("--format"),
                o("pprof"),
                o("-o"),
                out.clone().into(),
            ],
            vec![
                o("export"),
                b.clone(),
                o("--format"),
                o("speedscope"),
                o("-o"),
                out.clone().into(),
            ],
            vec![
                o("export"),
                b.clone(),
                o("--format"),
                o("flamegraph"),
                o("-o"),
                out.clone().into(),
            ],
            vec![
                o("export"),
                b.clone(),
                o("--format"),
                o("folded"),
                o("-o"),
                out.clone().into(),
            ],
        ];
        for args in runs {
            let what = format!("heapledger {args:?}");
            let r = heapledger_cmd(&args);
            assert_no_panic(&r, &what);
            assert!(
                matches!(r.code, Some(c) if c != 0),
                "{what}: exit {:?}",
                r.code
            );
            assert_eq!(r.stderr_lines().len(), 1, "{what}: {}", r.stderr);
            let name = bad.file_name().unwrap().to_string_lossy();
            assert!(r.stderr.contains(name.as_ref()), "{what}: {}", r.stderr);
            assert!(!out.exists(), "{what}: wrote {}", out.display());
        }
    }
    for command in ["leaks", "check", "diff", "export", "recover", "view"] {
        let r = heapledger_cmd([command, "--no-such-option"]);
        assert_no_panic(&r, command);
        assert_eq!(r.code, Some(2), "{command}: {}", r.stderr);
        assert_eq!(r.stderr_lines().len(), 1, "{command}: {}", r.stderr);
    }
}
