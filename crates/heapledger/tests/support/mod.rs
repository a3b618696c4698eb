//! Shared helpers of the `real_*` and `bad_input` integration tests: temporary
//! directories, running a command plainly and under `heapledger run` with a
//! time limit, compiling the C/C++ programs of `tests/real_programs/`, and
//! reading what the profile says.
//!
//! Each test file includes it with `mod support;`; not every file uses every
//! helper.

#![allow(dead_code)]

pub mod peak;

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use heapledger_profile::{Addr, Profile};

/// The `heapledger` binary under test (the recorder library lies beside it).
pub fn heapledger() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_heapledger"))
}

/// `crates/heapledger/tests/real_programs/`.
pub fn programs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/real_programs")
}

/// How long one command may run before the test calls it hung.
pub const DEFAULT_LIMIT: Duration = Duration::from_secs(180);

/// A fresh directory under the system's temporary directory, removed (with
/// everything in it) when dropped. Set `HEAPLEDGER_TEST_KEEP=1` to keep it.
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let base = std::env::temp_dir();
        for _ in 0..1000 {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let path = base.join(format!(
                "heapledger-test-{tag}-{}-{n}-{nanos}",
                std::process::id()
            ));
            if std::fs::create_dir(&path).is_ok() {
                return TempDir { path };
            }
        }
        panic!("cannot create a temporary directory in {}", base.display());
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn join(&self, p: impl AsRef<Path>) -> PathBuf {
        self.path.join(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::env::var_os("HEAPLEDGER_TEST_KEEP").is_some() {
            eprintln!("keeping {}", self.path.display());
            return;
        }
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// What a finished command did.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Exit code when it exited.
    pub code: Option<i32>,
    /// Signal when a signal killed it.
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Outcome {
    /// The exit status the way a shell reports it: the code, or 128 + signal.
    pub fn shell_code(&self) -> i32 {
        match (self.code, self.signal) {
            (Some(c), _) => c,
            (None, Some(s)) => 128 + s,
            _ => -1,
        }
    }

    /// The lines of stderr (without empty trailing ones).
    pub fn stderr_lines(&self) -> Vec<&str> {
        self.stderr.lines().collect()
    }
}

/// A command to run, plainly or under heapledger, always the same way.
#[derive(Debug, Clone)]
pub struct Cmd {
    pub program: OsString,
    pub args: Vec<OsString>,
    pub env: Vec<(OsString, OsString)>,
    pub cwd: Option<PathBuf>,
}

impl Cmd {
    pub fn new(program: impl AsRef<OsStr>) -> Cmd {
        Cmd {
            program: program.as_ref().to_owned(),
            args: Vec::new(),
            env: Vec::new(),
            cwd: None,
        }
    }

    pub fn arg(mut self, a: impl AsRef<OsStr>) -> Cmd {
        self.args.push(a.as_ref().to_owned());
        self
    }

    pub fn args<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(mut self, args: I) -> Cmd {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    pub fn env(mut self, k: impl AsRef<OsStr>, v: impl AsRef<OsStr>) -> Cmd {
        self.env
            .push((k.as_ref().to_owned(), v.as_ref().to_owned()));
        self
    }

    pub fn cwd(mut self, dir: impl AsRef<Path>) -> Cmd {
        self.cwd = Some(dir.as_ref().to_owned());
        self
    }

    /// The same command with its working directory changed.
    pub fn in_dir(&self, dir: impl AsRef<Path>) -> Cmd {
        self.clone().cwd(dir)
    }

    fn command(&self, program: &OsStr, pre: &[OsString]) -> Command {
        let mut c = Command::new(program);
        c.args(pre).args(&self.args);
        for (k, v) in &self.env {
            c.env(k, v);
        }
        if let Some(d) = &self.cwd {
            c.current_dir(d);
        }
        c
    }

    /// Runs it as is.
    pub fn run_plain(&self) -> Outcome {
        run(self.command(&self.program, &[]), DEFAULT_LIMIT)
    }

    /// Runs `heapledger run -q -o OUT -- PROGRAM ARGS` (plus `extra` options
    /// before `--`).
    pub fn run_heapledger(&self, out: &Path, extra: &[&str]) -> Outcome {
        let mut pre: Vec<OsString> = vec!["run".into(), "-q".into(), "-o".into()];
        pre.push(out.as_os_str().to_owned());
        pre.extend(extra.iter().map(OsString::from));
        pre.push("--".into());
        pre.push(self.program.clone());
        run(self.command(heapledger().as_os_str(), &pre), DEFAULT_LIMIT)
    }

    /// Shown in assertion messages.
    pub fn describe(&self) -> String {
        let mut s = self.program.to_string_lossy().into_owned();
        for a in &self.args {
            s.push(' ');
            s.push_str(&a.to_string_lossy());
        }
        s
    }
}

/// Runs `heapledger ARGS` (no program environment changes).
pub fn heapledger_cmd<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(args: I) -> Outcome {
    let mut c = Command::new(heapledger());
    c.args(args);
    run(c, DEFAULT_LIMIT)
}

/// Runs `cmd` with stdin from /dev/null and both outputs captured; panics
/// if it runs longer than `limit` (a hang), killing it.
pub fn run(mut cmd: Command, limit: Duration) -> Outcome {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let shown = format!("{cmd:?}");
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {shown}: {e}"));
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let err_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) => {}
            Err(e) => panic!("waiting for {shown}: {e}"),
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{shown} still ran after {} s: it hangs (killed)",
                limit.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let stdout = out_t.join().unwrap();
    let stderr = err_t.join().unwrap();
    Outcome {
        code: status.code(),
        signal: status.signal(),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

/// Runs `cmd` plainly and under heapledger (profile at `out`) and asserts that
/// both runs give the same stdout and exit status, and, when
/// `compare_stderr`, the same stderr. Returns both outcomes.
pub fn assert_same_run(
    plain_cmd: &Cmd,
    heapledger_cmd: &Cmd,
    out: &Path,
    compare_stderr: bool,
) -> (Outcome, Outcome) {
    let plain = plain_cmd.run_plain();
    let traced = heapledger_cmd.run_heapledger(out, &[]);
    let what = heapledger_cmd.describe();
    assert_no_panic(&traced, &what);
    assert_eq!(
        traced.stdout, plain.stdout,
        "{what}: stdout differs under heapledger (left: under heapledger, right: plain)\nstderr under heapledger:\n{}",
        traced.stderr
    );
    assert_eq!(
        (traced.code, traced.signal),
        (plain.code, plain.signal),
        "{what}: exit status differs under heapledger (left: under heapledger, right: plain)\nstderr under heapledger:\n{}",
        traced.stderr
    );
    if compare_stderr {
        assert_eq!(
            traced.stderr, plain.stderr,
            "{what}: stderr differs under heapledger -q (left: under heapledger, right: plain)"
        );
    }
    (plain, traced)
}

/// heapledger never panics, whatever happens.
pub fn assert_no_panic(o: &Outcome, what: &str) {
    assert!(
        !o.stderr.contains("panicked"),
        "{what}: heapledger panicked:\n{}",
        o.stderr
    );
}

/// Whether `name` is an executable on `PATH`.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The path of tool `name`; fails the test with a clear message when the
/// machine lacks it.
pub fn require_tool(name: &str, package: &str) -> PathBuf {
    find_on_path(name).unwrap_or_else(|| {
        panic!(
            "this test needs `{name}`, which is not on PATH; install it (Debian/Ubuntu: `apt-get install {package}`)"
        )
    })
}

/// The real interpreter behind `python3` (not a pyenv shim): its
/// `sys.executable`.
pub fn real_python() -> PathBuf {
    require_tool("python3", "python3");
    let o = run(
        {
            let mut c = Command::new("python3");
            c.args(["-c", "import sys; print(sys.executable)"]);
            c
        },
        Duration::from_secs(60),
    );
    assert_eq!(o.code, Some(0), "python3 fails: {}", o.stderr);
    let p = PathBuf::from(o.stdout.trim());
    assert!(
        p.is_file(),
        "python3's sys.executable `{}` is no file",
        p.display()
    );
    p
}

/// Compiles `tests/real_programs/<src>` into `dir` with `cc` (C) or `c++`
/// (C++, by extension), with `-g -O1` and `flags`; returns the executable.
pub fn compile(src: &str, dir: &Path, flags: &[&str]) -> PathBuf {
    let cxx = src.ends_with(".cpp") || src.ends_with(".cc");
    let compiler = if cxx {
        std::env::var("CXX").unwrap_or_else(|_| "c++".into())
    } else {
        std::env::var("CC").unwrap_or_else(|_| "cc".into())
    };
    let stem = Path::new(src).file_stem().unwrap().to_string_lossy();
    let exe = dir.join(stem.as_ref());
    let mut c = Command::new(&compiler);
    c.arg("-g")
        .arg("-O1")
        .arg("-Wall")
        .args(flags)
        .arg("-o")
        .arg(&exe)
        .arg(programs_dir().join(src));
    let o = run(c, Duration::from_secs(120));
    assert_eq!(
        o.code,
        Some(0),
        "cannot compile {src} with {compiler}:\n{}",
        o.stderr
    );
    exe
}

/// Reads the profile at `path`, failing the test with the reader's message.
pub fn load_profile(path: &Path) -> Profile {
    assert!(
        path.is_file(),
        "heapledger left no profile at {}",
        path.display()
    );
    Profile::from_path(path)
        .unwrap_or_else(|e| panic!("the profile {} does not read: {e}", path.display()))
}

/// Calls to the allocation functions (all but `free`), over all threads.
pub fn alloc_calls(p: &Profile) -> u64 {
    let t = p.call_totals();
    [
        t.malloc,
        t.calloc,
        t.realloc,
        t.posix_memalign,
        t.aligned_alloc,
        t.memalign,
        t.valloc,
        t.pvalloc,
    ]
    .iter()
    .map(|c| c.count)
    .sum()
}

/// The functions at `addr`: the innermost one, then those it was inlined
/// into.
pub fn functions_at(p: &Profile, addr: Addr) -> Vec<String> {
    let mut v: Vec<String> = p
        .resolve_addr(addr)
        .map(|s| s.function.to_owned())
        .into_iter()
        .collect();
    v.extend(p.inline_chain(addr).iter().map(|s| s.function.to_owned()));
    v
}

/// Whether some frame of `stack` (inlined frames included) is one of `names`.
pub fn stack_has_function(p: &Profile, stack: &[Addr], names: &[&str]) -> bool {
    stack.iter().any(|&a| {
        functions_at(p, a)
            .iter()
            .any(|f| names.contains(&f.as_str()))
    })
}

/// The names of a stack's frames, innermost first, for messages.
pub fn describe_stack(p: &Profile, stack: &[Addr]) -> String {
    stack
        .iter()
        .map(|&a| {
            let f = functions_at(p, a);
            if f.is_empty() {
                format!("{a}")
            } else {
                f.join("/")
            }
        })
        .collect::<Vec<_>>()
        .join(" <- ")
}

/// Asserts the profile at `out` exists, reads, and recorded allocations;
/// returns it.
pub fn assert_profile_with_allocations(out: &Path, what: &str) -> Profile {
    let p = load_profile(out);
    let n = alloc_calls(&p);
    assert!(
        n > 0,
        "{what}: the profile {} has no allocations",
        out.display()
    );
    assert!(
        p.stacks.allocating().next().is_some(),
        "{what}: the profile {} has no allocating stack",
        out.display()
    );
    p
}

/// `node`, Chromium, and the npm packages of `tests/web` (speedscope,
/// playwright-core, ajv), installed there with `npm ci` from its lock file
/// when missing: the tests that judge pages and exports in a real browser
/// need them. Returns the web directory and Chromium's path.
pub fn web_tools() -> (PathBuf, PathBuf) {
    require_tool("node", "nodejs");
    require_tool("npm", "npm");
    let chromium = require_tool("chromium", "chromium");
    let web = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/web");
    // One installer at a time (tests run in parallel): a lock directory.
    let lock = web.join(".npm-ci.lock");
    let started = std::time::Instant::now();
    while std::fs::create_dir(&lock).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "{} stayed locked for 10 minutes; remove it",
            lock.display()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let ready = web.join("node_modules/.package-lock.json").is_file();
    let outcome = (!ready).then(|| {
        let mut c = Command::new("npm");
        c.args(["ci", "--no-audit", "--no-fund"]).current_dir(&web);
        run(c, Duration::from_secs(600))
    });
    let _ = std::fs::remove_dir(&lock);
    if let Some(o) = outcome {
        assert_eq!(
            o.code,
            Some(0),
            "`npm ci` in {} failed (the tests need the npm registry once):\n{}",
            web.display(),
            o.stderr
        );
    }
    (web, chromium)
}
