//! Helpers shared by the `stress_*` integration tests (included with
//! `#[path]`): scratch directories, compiling the programs of
//! `tests/stress_programs`, running them under `heapledger run`.

#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use heapledger_profile::Profile;

/// Scratch directories are the ones of the other integration tests.
pub use crate::common::Scratch;

pub fn programs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/stress_programs")
}

/// Compiles `source` (in `tests/stress_programs`) with `compiler` and
/// `flags` into `out`; panics with the compiler's messages on failure.
pub fn compile(compiler: &str, source: &str, flags: &[&str], out: &Path) {
    let output = Command::new(compiler)
        .args(flags)
        .arg("-o")
        .arg(out)
        .arg(programs_dir().join(source))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {compiler}: {e}"));
    assert!(
        output.status.success(),
        "{compiler} {source} {flags:?} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `heapledger run -q <options> -o <out> -- <program> <args>`, with `envs`
/// added to heapledger's environment (the program inherits them; heapledger
/// puts its recorder before any `LD_PRELOAD` given here).
pub fn heapledger_run<S: AsRef<OsStr>>(
    options: &[&str],
    envs: &[(&str, &OsStr)],
    out: &Path,
    program: &Path,
    args: &[S],
) -> Output {
    Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["run", "-q"])
        .args(options)
        .arg("-o")
        .arg(out)
        .arg("--")
        .arg(program)
        .args(args)
        .envs(envs.iter().copied())
        .output()
        .expect("cannot run heapledger")
}

/// Runs `program` under heapledger with `options` and `envs`, the profile
/// written to `dir/p.json`; asserts that it exited 0 and returns the
/// profile and stdout.
pub fn profile_of<S: AsRef<OsStr>>(
    options: &[&str],
    envs: &[(&str, &OsStr)],
    dir: &Scratch,
    program: &Path,
    args: &[S],
) -> (Profile, String) {
    let out = dir.join("p.json");
    let o = heapledger_run(options, envs, &out, program, args);
    assert!(
        o.status.success(),
        "heapledger run {options:?} {} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        program.display(),
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let profile = Profile::from_path(&out).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
    (profile, String::from_utf8_lossy(&o.stdout).into_owned())
}

/// The `key=value` counters of the line of `stdout` that starts with
/// `prefix`.
pub fn counters(stdout: &str, prefix: &str) -> std::collections::BTreeMap<String, i64> {
    let line = stdout
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line {prefix:?} in {stdout:?}"));
    parse_counters(&line[prefix.len()..])
}

/// `key=value ...` as a map.
pub fn parse_counters(line: &str) -> std::collections::BTreeMap<String, i64> {
    line.split_whitespace()
        .map(|kv| {
            let (k, v) = kv
                .split_once('=')
                .unwrap_or_else(|| panic!("bad counter {kv:?}"));
            (k.to_owned(), v.parse().unwrap())
        })
        .collect()
}
