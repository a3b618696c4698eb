//! Helpers shared by the `exact_*` integration tests: compile a C/C++
//! program from `tests/programs` into a scratch directory, run it under
//! `heapledger run`, and look things up in the profile it writes.

#![allow(dead_code)]

// Also `support`'s: the two sets of helpers share this one.
#[allow(clippy::duplicate_mod)]
#[path = "../support/peak.rs"]
pub mod peak;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

use heapledger_profile::{Addr, Leak, MinMaxSum, Profile, StackStat};

/// A fresh directory under the system's temp dir, removed on drop.
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("heapledger-exact-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn programs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs")
}

/// The line of `tests/programs/<source>` that holds the marker comment
/// `SITE:<name>` (exactly one line must).
pub fn site_line(source: &str, name: &str) -> u32 {
    let text = std::fs::read_to_string(programs_dir().join(source)).unwrap();
    let marker_name = |line: &str| -> Option<String> {
        let rest = line.split("SITE:").nth(1)?;
        Some(
            rest.chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect(),
        )
    };
    let lines: Vec<u32> = (1..)
        .zip(text.lines())
        .filter(|(_, l)| marker_name(l).as_deref() == Some(name))
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "marker SITE:{name} in {source}: lines {lines:?}"
    );
    lines[0]
}

/// Compiles `sources` (in `tests/programs`; an absolute path, such as a
/// library built by the test, is taken as is) with `compiler` ("cc", "c++")
/// and `flags` into `out`; panics with the compiler's messages on failure.
pub fn compile(compiler: &str, sources: &[&str], flags: &[&str], out: &Path) {
    let dir = programs_dir();
    let output = Command::new(compiler)
        .args(flags)
        .arg("-I")
        .arg(&dir)
        .arg("-o")
        .arg(out)
        .args(sources.iter().map(|s| dir.join(s)))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {compiler}: {e}"));
    assert!(
        output.status.success(),
        "{compiler} {sources:?} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The flags of the call-site tests: line tables, light optimization, and
/// no builtin malloc/free (gcc removes pairs it can see through otherwise).
pub const SITE_FLAGS: &[&str] = &["-g", "-O1", "-fno-builtin", "-fno-omit-frame-pointer"];

/// `heapledger report --json STORE`, which must succeed.
pub fn report_json(store: &Path) -> serde_json::Value {
    let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["report", "--json"])
        .arg(store)
        .output()
        .expect("cannot run heapledger");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("report --json")
}

/// `-I` of the folder of `heapledger.h`, for programs that steer the
/// recorder.
pub fn header_include() -> String {
    format!(
        "-I{}",
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../heapledger-preload/include")
            .display()
    )
}

/// Builds a C test program that uses threads, with `SITE_FLAGS`, as
/// `dir/<name>` where the source is `<name>.c`; returns its path.
#[allow(dead_code)]
pub fn compile_threaded(name: &str, dir: &Scratch) -> PathBuf {
    let exe = dir.join(name);
    let mut flags = SITE_FLAGS.to_vec();
    flags.push("-pthread");
    compile("cc", &[&format!("{name}.c")], &flags, &exe);
    exe
}

/// `heapledger run -q --stack <stack> -o <out> -- <program> <args>`.
pub fn heapledger_run<S: AsRef<OsStr>>(
    stack: &str,
    out: &Path,
    program: &Path,
    args: &[S],
) -> Output {
    Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["run", "-q", "--stack", stack, "-o"])
        .arg(out)
        .arg("--")
        .arg(program)
        .args(args)
        .output()
        .expect("cannot run heapledger")
}

/// `heapledger_run`, for a program that might hang under the recorder (see
/// `output_within`).
pub fn heapledger_run_within<S: AsRef<OsStr>>(
    stack: &str,
    out: &Path,
    program: &Path,
    args: &[S],
    limit: std::time::Duration,
) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_heapledger"));
    cmd.args(["run", "-q", "--stack", stack, "-o"])
        .arg(out)
        .arg("--")
        .arg(program)
        .args(args);
    output_within(cmd, limit)
}

/// The output of `cmd` (a `heapledger run` of a program that might hang under
/// the recorder), run in a process group of its own, which is killed
/// (heapledger and the program) when it has not ended after `limit`; the
/// test then fails saying so.
pub fn output_within(mut cmd: Command, limit: std::time::Duration) -> Output {
    use std::os::unix::process::CommandExt;
    let what = format!("{cmd:?}");
    let mut child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("cannot run heapledger");
    let start = std::time::Instant::now();
    while child.try_wait().expect("waiting for heapledger").is_none() {
        if start.elapsed() > limit {
            // SAFETY: signalling the test's own process group.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            panic!(
                "{what} still ran after {} s: it hangs (killed)",
                limit.as_secs()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    child
        .wait_with_output()
        .expect("cannot read heapledger's output")
}

/// `heapledger run` of `program` into `out`, which must exit 0.
fn run_ok<S: AsRef<OsStr>>(stack: &str, out: &Path, program: &Path, args: &[S]) -> Output {
    let o = heapledger_run(stack, out, program, args);
    assert!(
        o.status.success(),
        "heapledger run {} failed ({}):\n{}",
        program.display(),
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// `heapledger export --format malt [--pid PID] -o out store`, which must
/// exit 0.
pub fn export_malt(store: &Path, pid: Option<u32>, out: &Path) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_heapledger"));
    c.args(["export", "--format", "malt"]);
    if let Some(pid) = pid {
        c.args(["--pid", &pid.to_string()]);
    }
    let e = c
        .arg("-o")
        .arg(out)
        .arg(store)
        .output()
        .expect("cannot run heapledger");
    assert!(
        e.status.success(),
        "heapledger export {} (pid {pid:?}) failed:\n{}",
        store.display(),
        String::from_utf8_lossy(&e.stderr)
    );
}

pub fn read_profile(out: &Path) -> Profile {
    Profile::from_path(out).unwrap_or_else(|e| panic!("{}: {e}", out.display()))
}

/// Runs `program` under heapledger in `stack` mode with the profile store
/// written to `dir/p.sqlite`, exported to `dir/p.json` (MALT's JSON, of the
/// process `run` started); asserts that both exited 0 and returns the
/// profile and stdout. Every test that reads a profile this way reads it
/// through the store.
pub fn profile_of<S: AsRef<OsStr>>(
    stack: &str,
    dir: &Scratch,
    program: &Path,
    args: &[S],
) -> (Profile, String) {
    let store = dir.join("p.sqlite");
    let out = dir.join("p.json");
    let o = run_ok(stack, &store, program, args);
    export_malt(&store, None, &out);
    export_children(dir, &store);
    (
        read_profile(&out),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    )
}

/// The store's other processes, each exported to
/// `dir/p.children/heapledger-<exe>-<pid>.json` (where `run -o p.json` puts
/// them), so that tests of child processes read them through the store.
pub fn export_children(dir: &Scratch, store: &Path) {
    let children = dir.join("p.children");
    let _ = std::fs::remove_dir_all(&children);
    let c = rusqlite::Connection::open(store).expect("the profile store");
    let others: Vec<(u32, String)> = c
        .prepare("SELECT pid, exe FROM process WHERE NOT is_main ORDER BY pid")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    drop(c);
    for (pid, exe) in others {
        std::fs::create_dir_all(&children).unwrap();
        export_malt(
            store,
            Some(pid),
            &children.join(format!("heapledger-{exe}-{pid}.json")),
        );
    }
}

/// `profile_of` with `run -o p.json`: MALT's JSON written by `run` itself,
/// the children's in `p.children/`.
pub fn profile_of_json<S: AsRef<OsStr>>(
    stack: &str,
    dir: &Scratch,
    program: &Path,
    args: &[S],
) -> (Profile, String) {
    let out = dir.join("p.json");
    let o = run_ok(stack, &out, program, args);
    (
        read_profile(&out),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    )
}

/// Whether a symbolized function name is `name`: C names match exactly,
/// demangled C++ names up to their parameter list.
pub fn is_fn(actual: &str, name: &str) -> bool {
    actual == name || (actual.starts_with(name) && actual[name.len()..].starts_with('('))
}

/// One frame as (function, line); "??" when the profile cannot name it.
pub fn frame(p: &Profile, addr: Addr) -> (String, Option<u32>) {
    match p.resolve_addr(addr) {
        Some(s) => (s.function.to_owned(), s.line),
        None => ("??".to_owned(), None),
    }
}

/// A stack in words, for failure messages.
pub fn describe(p: &Profile, stack: &[Addr]) -> String {
    let names: Vec<String> = stack
        .iter()
        .map(|&a| match p.resolve_addr(a) {
            Some(s) => format!("{}:{}", s.function, s.line.unwrap_or(0)),
            None => format!("{a}"),
        })
        .collect();
    format!("[{}]", names.join(" <- "))
}

/// Whether `stack` starts with the frames `want` (function, line), leaf first.
pub fn starts_with(p: &Profile, stack: &[Addr], want: &[(&str, u32)]) -> bool {
    stack.len() >= want.len()
        && stack.iter().zip(want).all(|(&a, &(f, l))| {
            let (func, line) = frame(p, a);
            is_fn(&func, f) && line == Some(l)
        })
}

/// Every stack whose first frame (the caller of the allocator) is
/// `function` at `line`.
pub fn stacks_at<'a>(p: &'a Profile, function: &str, line: u32) -> Vec<&'a StackStat> {
    p.stacks
        .iter()
        .filter(|s| starts_with(p, &s.stack, &[(function, line)]))
        .collect()
}

/// The counters of one call site, summed over its stacks (the compiler may
/// copy a call site, e.g. when it unrolls a loop, giving several addresses
/// for one source line).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Site {
    pub stacks: usize,
    pub alloc: MinMaxSum,
    pub free: MinMaxSum,
    pub count_zeros: i64,
    pub alive_req: i64,
    pub global_peak: i64,
    pub realloc_count: u64,
    pub realloc_sum_delta: i64,
    pub temporary: u64,
}

pub fn site(p: &Profile, function: &str, line: u32) -> Site {
    let mut s = Site::default();
    for st in stacks_at(p, function, line) {
        let i = &st.infos;
        s.stacks += 1;
        s.alloc.merge(&i.alloc);
        s.free.merge(&i.free);
        s.count_zeros += i.count_zeros;
        s.alive_req += i.alive_req;
        s.global_peak += i.global_peak;
        s.realloc_count += i.realloc_count;
        s.realloc_sum_delta += i.realloc_sum_delta;
        s.temporary += i.temporary;
    }
    s
}

pub fn mms(count: u64, min: u64, max: u64, sum: u64) -> MinMaxSum {
    MinMaxSum {
        count,
        min,
        max,
        sum,
    }
}

/// The leaks that `heapledger.runtimeLeaks` does not mark as the runtime's.
pub fn program_leaks(p: &Profile) -> Vec<&Leak> {
    let runtime = p.runtime_leaks();
    p.leaks
        .iter()
        .enumerate()
        .filter(|(i, _)| !runtime.contains(i))
        .map(|(_, l)| l)
        .collect()
}

/// Program leaks in words, for failure messages.
pub fn describe_leaks(p: &Profile, leaks: &[&Leak]) -> String {
    leaks
        .iter()
        .map(|l| {
            format!(
                "\n  {} blocks, {} bytes at {}",
                l.count,
                l.memory,
                describe(p, &l.stack)
            )
        })
        .collect()
}

/// programs/grow.c built and recorded twice, `grow 10` to `dir/a.sqlite`
/// and `grow 30` to `dir/b.sqlite`: one site makes 20 more blocks of
/// 100 bytes (the diff tests).
pub fn grow_runs(dir: &Scratch) -> (PathBuf, PathBuf) {
    let exe = dir.join("grow");
    compile("cc", &["grow.c"], SITE_FLAGS, &exe);
    let (a, b) = (dir.join("a.sqlite"), dir.join("b.sqlite"));
    for (out, n) in [(&a, "10"), (&b, "30")] {
        let o = heapledger_run("dwarf", out, &exe, &[n]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    (a, b)
}

/// `tests/programs/phases.c` (three sites allocating 600 ms apart, then
/// SIGKILL with `kill`) recorded by `heapledger run --checkpoint-every
/// EVERY`; its store.
pub fn phases_recorded(dir: &Scratch, every: &str, args: &[&str]) -> PathBuf {
    let exe = dir.join("phases");
    compile("cc", &["phases.c"], SITE_FLAGS, &exe);
    let store = dir.join("p.sqlite");
    let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["run", "-q", "--checkpoint-every", every, "-o"])
        .arg(&store)
        .arg("--")
        .arg(&exe)
        .args(args)
        .output()
        .expect("cannot run heapledger");
    assert!(store.is_file(), "{}", String::from_utf8_lossy(&o.stderr));
    store
}

/// Each routine's own weight ("In only", summed over its nodes) in
/// `heapledger tree --json --limit 0 ARGS STORE`; the error line where
/// the command fails.
pub fn tree_own_weights(
    store: &Path,
    args: &[&str],
) -> Result<std::collections::HashMap<String, u64>, String> {
    let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["tree", "--json", "--limit", "0"])
        .args(args)
        .arg(store)
        .output()
        .expect("cannot run heapledger");
    if !o.status.success() {
        return Err(String::from_utf8_lossy(&o.stderr).into_owned());
    }
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("tree --json");
    fn walk(n: &serde_json::Value, out: &mut std::collections::HashMap<String, u64>) {
        let name = n["routine"].as_str().unwrap_or("").to_owned();
        *out.entry(name).or_default() += n["excl"].as_u64().unwrap_or(0);
        for c in n["children"].as_array().into_iter().flatten() {
            walk(c, out);
        }
    }
    let mut out = std::collections::HashMap::new();
    for r in v["roots"].as_array().into_iter().flatten() {
        walk(r, &mut out);
    }
    Ok(out)
}
