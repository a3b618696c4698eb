//! The program's standard streams, arguments and exit status pass through
//! `heapledger run -q` unchanged: compared with running the same program
//! (`tests/programs/passthrough.c`) without heapledger.

mod common;

use common::*;
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

const STDIN: &str = "line one\nline two\n";

fn feed(mut cmd: Command) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(STDIN.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn direct(exe: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(exe);
    cmd.args(args);
    feed(cmd)
}

fn under_heapledger(exe: &Path, out: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_heapledger"));
    cmd.args(["run", "-q", "-o"])
        .arg(out)
        .arg("--")
        .arg(exe)
        .args(args);
    feed(cmd)
}

fn setup() -> (Scratch, std::path::PathBuf) {
    let dir = Scratch::new("passthrough");
    let exe = dir.join("passthrough");
    compile("cc", &["passthrough.c"], SITE_FLAGS, &exe);
    (dir, exe)
}

#[test]
fn streams_arguments_and_exit_code_pass_through() {
    let (dir, exe) = setup();
    // Exit code 0 passes through in every other test.
    let args = ["42", "two words", "", "--stack", "-o"];
    let plain = direct(&exe, &args);
    let out = dir.join("p.json");
    let traced = under_heapledger(&exe, &out, &args);
    assert_eq!(plain.status.code(), Some(42));
    assert_eq!(traced.status.code(), Some(42), "exit code");
    assert_eq!(
        String::from_utf8_lossy(&traced.stdout),
        String::from_utf8_lossy(&plain.stdout),
        "stdout"
    );
    assert_eq!(
        String::from_utf8_lossy(&traced.stderr),
        String::from_utf8_lossy(&plain.stderr),
        "stderr (heapledger -q adds nothing)"
    );
    let p = heapledger_profile::Profile::from_path(&out).unwrap();
    let ext = p.heapledger.as_ref().unwrap();
    assert_eq!((ext.exit.code, ext.exit.signal), (Some(42), None));
    assert_eq!(p.mem_stats.size_map.get(&40), Some(&1));
}

/// A program killed by a signal: heapledger exits with 128 + the signal, as a
/// shell reports it, and the profile records the signal.
#[test]
fn death_by_signal_is_reported_as_a_shell_does() {
    let (dir, exe) = setup();
    let args = ["abort"];
    let plain = direct(&exe, &args);
    assert_eq!(plain.status.signal(), Some(libc::SIGABRT));
    let out = dir.join("p.json");
    let traced = under_heapledger(&exe, &out, &args);
    assert_eq!(traced.status.code(), Some(128 + libc::SIGABRT));
    assert_eq!(traced.stdout, plain.stdout, "stdout");
    assert_eq!(traced.stderr, plain.stderr, "stderr");
    let p = heapledger_profile::Profile::from_path(&out).unwrap();
    let ext = p.heapledger.as_ref().unwrap();
    assert_eq!(
        (ext.exit.code, ext.exit.signal),
        (None, Some(libc::SIGABRT))
    );
    // The one malloc(40) of the program, freed.
    assert_eq!(p.mem_stats.size_map.get(&40), Some(&1));
}

fn hostile(dir: &Scratch) -> std::path::PathBuf {
    let exe = dir.join("hostile_end");
    compile("cc", &["hostile_end.c"], SITE_FLAGS, &exe);
    exe
}

/// A program that clears its environment before it ends (daemons,
/// sandboxes, Python's `os.environ.clear()`) still has its profile, and so
/// does the child it forks afterwards: the recorder keeps the dump directory
/// it was given at start-up.
#[test]
fn a_program_that_clears_its_environment_keeps_its_profile() {
    let dir = Scratch::new("clearenv");
    let (p, children, _) = hostile_run(&dir, &["clearenv"]);
    assert_eq!(p.mem_stats.size_map.get(&123), Some(&1));
    assert_eq!(children.len(), 1);
    assert_eq!(children[0].mem_stats.size_map.get(&77), Some(&1));
}

/// A program that ends with every descriptor its soft limit allows open (one
/// that leaks them) still has its profile: the recorder raises the soft
/// limit by one, within the hard limit, to create its dump.
#[test]
fn a_program_that_ends_with_no_descriptor_left_keeps_its_profile() {
    use std::os::unix::process::CommandExt;
    const SOFT: u64 = 256;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: lim is writable.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    if lim.rlim_max <= SOFT {
        eprintln!("skipped: the hard limit on open files is {}", lim.rlim_max);
        return;
    }
    let dir = Scratch::new("fdleak");
    let exe = hostile(&dir);
    let out = dir.join("p.json");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_heapledger"));
    cmd.args(["run", "-q", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&exe)
        .arg("fdleak");
    // SAFETY: setrlimit is async-signal-safe; only the soft limit moves.
    unsafe {
        cmd.pre_exec(move || {
            let l = libc::rlimit {
                rlim_cur: SOFT,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &l) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
    let o = cmd.output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let p = heapledger_profile::Profile::from_path(&out).unwrap();
    assert_eq!(p.mem_stats.size_map.get(&123), Some(&1));
}

/// Runs `hostile_end MODE [ARGS]` under heapledger, which must exit 0 and add
/// nothing to stderr; returns the profile, the child profiles in
/// `p.children/`, and stdout.
fn hostile_run(
    dir: &Scratch,
    args: &[&str],
) -> (
    heapledger_profile::Profile,
    Vec<heapledger_profile::Profile>,
    String,
) {
    let exe = hostile(dir);
    let out = dir.join("p.json");
    let o = heapledger_run("dwarf", &out, &exe, args);
    assert_eq!(
        (o.status.code(), String::from_utf8_lossy(&o.stderr).as_ref()),
        (Some(0), ""),
        "hostile_end {args:?}: exit code and stderr"
    );
    let p = heapledger_profile::Profile::from_path(&out).unwrap();
    let children = match std::fs::read_dir(dir.join("p.children")) {
        Ok(d) => d
            .map(|e| heapledger_profile::Profile::from_path(e.unwrap().path()).unwrap())
            .collect(),
        Err(_) => Vec::new(),
    };
    (p, children, String::from_utf8_lossy(&o.stdout).into_owned())
}

/// The recorder keeps its dump file open from the start. A program whose
/// hard limit then leaves it no descriptor at all still has its profile.
#[test]
fn a_program_that_lowers_its_hard_descriptor_limit_keeps_its_profile() {
    let dir = Scratch::new("fdlimit");
    let (p, _, _) = hostile_run(&dir, &["fdlimit"]);
    assert_eq!(p.mem_stats.size_map.get(&123), Some(&1));
}

/// A program that puts its own files on every descriptor, the recorder's
/// included, neither gets the dump written into them (its stderr stays
/// clean) nor loses its profile: the recorder sees the descriptor is no
/// longer its file and opens the file again. Its forked child too.
#[test]
fn a_program_that_takes_every_descriptor_keeps_its_profile_and_its_files() {
    let dir = Scratch::new("dup2all");
    let (p, children, _) = hostile_run(&dir, &["dup2all"]);
    assert_eq!(p.mem_stats.size_map.get(&123), Some(&1));
    assert_eq!(children.len(), 1);
    assert_eq!(children[0].mem_stats.size_map.get(&77), Some(&1));
}

/// A program that enters a `chroot` (a daemon's jail) still has its
/// profile, written through the descriptor kept from the start. Needs root;
/// elsewhere the program runs without the jail.
#[test]
fn a_program_in_a_chroot_keeps_its_profile() {
    let dir = Scratch::new("chroot");
    let jail = dir.join("jail");
    std::fs::create_dir(&jail).unwrap();
    let (p, _, stdout) = hostile_run(&dir, &["chroot", jail.to_str().unwrap()]);
    if stdout.contains("no chroot") {
        eprintln!("skipped the jail: chroot is not permitted here");
    }
    assert_eq!(p.mem_stats.size_map.get(&123), Some(&1));
}

/// A daemon started as root that becomes another user, who cannot write
/// heapledger's directory, still has its profile. Needs root; elsewhere the
/// program keeps its user.
#[test]
fn a_program_that_drops_root_keeps_its_profile() {
    let dir = Scratch::new("dropuid");
    let (p, _, stdout) = hostile_run(&dir, &["dropuid"]);
    if stdout.contains("not root") {
        eprintln!("skipped the change of user: not run as root");
    }
    assert_eq!(p.mem_stats.size_map.get(&123), Some(&1));
}
