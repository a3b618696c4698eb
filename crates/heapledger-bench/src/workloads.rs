//! The workloads: C programs built with `cc`, a Python one-liner and Python
//! compiling its standard library, each with the tools it is measured under.

use crate::measure::{Stack, Tool};
use anyhow::{bail, Context, Result};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const CHURN_C: &str = include_str!("../workloads/churn.c");
const PAIRS_C: &str = include_str!("../workloads/pairs.c");
const HELD_C: &str = include_str!("../workloads/held.c");
const STACKS_C: &str = include_str!("../workloads/stacks.c");
const VARIED_C: &str = include_str!("../workloads/varied.c");
const LOCKS_C: &str = include_str!("../workloads/locks.c");
const FORWARD_C: &str = include_str!("../workloads/forward.c");
const CONTENDED_C: &str = include_str!("../workloads/contended.c");

/// The compiler flags of every workload: optimized, no frame pointers, like
/// most distribution code.
pub const CFLAGS: &[&str] = &["-O2", "-fomit-frame-pointer"];

/// What `--only` can pick.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    /// C allocation churn, 20 frames deep, single-threaded.
    Churn,
    /// The simplest malloc(32)+free loop: the fixed cost per pair.
    Pairs,
    /// CPython building 3 M strings with PYTHONMALLOC=malloc.
    Python,
    /// The churn split over T threads, same total work.
    Threads,
    /// 4 M small blocks alive at once: the table of live blocks under load.
    Held,
    /// C: 1 M allocations from 500 000 distinct stacks 21 frames deep.
    Stacks,
    /// `stacks` in 4 threads, each 500 000 allocations over the same
    /// 500 000 stacks: threads that run the same code.
    StacksThreads,
    /// `python3 -m compileall -f -q` over a copy of the standard library.
    Compileall,
    /// `--stack none` on a churn that keeps 4096 blocks of varied sizes alive.
    Varied,
    /// Uncontended pthread_mutex_lock+unlock pairs: what recording lock
    /// waits costs a lock never waited for.
    Locks,
}

impl Workload {
    pub const ALL: [Workload; 10] = [
        Workload::Churn,
        Workload::Pairs,
        Workload::Python,
        Workload::Threads,
        Workload::Held,
        Workload::Stacks,
        Workload::StacksThreads,
        Workload::Compileall,
        Workload::Varied,
        Workload::Locks,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Churn => "churn",
            Workload::Pairs => "pairs",
            Workload::Python => "python",
            Workload::Threads => "threads",
            Workload::Held => "held",
            Workload::Stacks => "stacks",
            Workload::StacksThreads => "stacks-threads",
            Workload::Compileall => "compileall",
            Workload::Varied => "varied",
            Workload::Locks => "locks",
        }
    }

    /// The most timed runs of a slow workload, whatever `--runs` says.
    pub fn max_runs(self) -> Option<u32> {
        match self {
            Workload::Stacks | Workload::StacksThreads | Workload::Compileall => {
                Some(MAX_RUNS_AT_SCALE)
            }
            _ => None,
        }
    }

    /// Profiles at scale: their profiles are kept after the runs and read by
    /// `heapledger report`, `heapledger tree` and `heaptrack_print`, and the
    /// file size and largest RSS of each tool are reported.
    pub fn at_scale(self) -> bool {
        matches!(
            self,
            Workload::Stacks | Workload::StacksThreads | Workload::Compileall
        )
    }
}

/// Threads of `stacks-threads`.
pub const STACKS_THREADS: u32 = 4;

/// `stacks` and `compileall` run at most this many times (each round takes
/// tens of seconds under heaptrack on a 2-core machine).
pub const MAX_RUNS_AT_SCALE: u32 = 3;

/// How big each workload is.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    /// malloc+free pairs of `churn` (and of `threads`, in total).
    pub churn_pairs: u64,
    /// malloc+free pairs of `pairs`.
    pub pairs_pairs: u64,
    /// Strings Python builds.
    pub python_strings: u64,
    /// Blocks `held` keeps alive at once.
    pub held_blocks: u64,
    /// Allocations of `stacks`.
    pub stacks_allocs: u64,
    /// Distinct allocation stacks of `stacks` (at most 2^19).
    pub stacks_distinct: u64,
    /// malloc+free pairs of `varied`.
    pub varied_pairs: u64,
    /// lock+unlock pairs of `locks`.
    pub lock_pairs: u64,
    /// `compileall` copies one module of the standard library in this many.
    pub stdlib_one_in: usize,
}

impl Sizes {
    pub fn new(quick: bool) -> Sizes {
        let s = Sizes {
            churn_pairs: 5_000_000,
            pairs_pairs: 20_000_000,
            python_strings: 3_000_000,
            held_blocks: 4_000_000,
            stacks_allocs: 1_000_000,
            stacks_distinct: 500_000,
            varied_pairs: 5_000_000,
            lock_pairs: 50_000_000,
            stdlib_one_in: 1,
        };
        if quick {
            Sizes {
                churn_pairs: s.churn_pairs / 10,
                pairs_pairs: s.pairs_pairs / 10,
                python_strings: s.python_strings / 10,
                held_blocks: s.held_blocks / 10,
                stacks_allocs: s.stacks_allocs / 10,
                stacks_distinct: s.stacks_distinct / 10,
                varied_pairs: s.varied_pairs / 10,
                lock_pairs: s.lock_pairs / 10,
                stdlib_one_in: 10,
            }
        } else {
            s
        }
    }
}

/// A program to run: executable, arguments, extra environment.
#[derive(Clone, Debug)]
pub struct Program {
    pub exe: PathBuf,
    /// How `exe` is shown (the C workloads live in a temporary folder).
    pub shown: String,
    pub args: Vec<OsString>,
    pub env: Vec<(String, String)>,
}

impl Program {
    /// The command line, for messages and the JSON.
    pub fn display(&self) -> String {
        let mut s = String::new();
        for (k, v) in &self.env {
            s.push_str(&format!("{k}={v} "));
        }
        s.push_str(&self.shown);
        for a in &self.args {
            let a = a.to_string_lossy();
            if a.contains(' ') || a.contains('"') {
                s.push_str(&format!(" '{a}'"));
            } else {
                s.push(' ');
                s.push_str(&a);
            }
        }
        s
    }
}

/// One measured program of a workload, and the tools it runs under. The plain
/// program is always the first tool.
#[derive(Clone, Debug)]
pub struct Case {
    pub workload: Workload,
    /// Unique label: "churn", "pairs", "python", "threads T=4".
    pub label: String,
    /// Threads of the `threads` workload.
    pub threads: Option<u32>,
    /// malloc+free pairs the program makes, where known.
    pub pairs: Option<u64>,
    pub program: Program,
    pub tools: Vec<Tool>,
}

/// The `threads` workload's thread counts, and how its work is split.
#[derive(Clone, Copy, Debug)]
pub struct Threads {
    /// Largest thread count (see `thread_counts`).
    pub max: u32,
    /// Every thread makes the whole churn, instead of a T-th of it.
    pub weak: bool,
}

/// Thread counts of the `threads` workload: 1, 2, 4, 8, 16 up to `max`, and
/// `max` itself.
pub fn thread_counts(max: u32) -> Vec<u32> {
    let mut v: Vec<u32> = [1, 2, 4, 8, 16].into_iter().filter(|&t| t <= max).collect();
    if !v.contains(&max) {
        v.push(max);
    }
    v
}

/// The C compiler: `$CC`, or `cc`.
fn cc() -> String {
    std::env::var("CC")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "cc".into())
}

/// The floors of interposing the allocator (`workloads/forward.c`).
#[derive(Clone, Debug)]
pub struct Floors {
    /// A preload that only forwards the allocator's calls to glibc.
    pub forward: PathBuf,
    /// A preload that also does, in C, the bookkeeping of `--sample-every`'s
    /// lean paths on a call that is not sampled.
    pub count: PathBuf,
}

/// Builds both preloads of `workloads/forward.c` into `dir`.
pub fn build_floors(dir: &Path) -> Result<Floors> {
    let cc = cc();
    Ok(Floors {
        forward: compile(&cc, "forward.so", FORWARD_C, dir, &["-shared", "-fPIC"])?,
        count: compile(
            &cc,
            "count.so",
            FORWARD_C,
            dir,
            &["-shared", "-fPIC", "-DCOUNT"],
        )?,
    })
}

/// `contended.c` built into `dir` (`waits.rs`).
pub fn build_contended(dir: &Path) -> Result<PathBuf> {
    compile(&cc(), "contended", CONTENDED_C, dir, &[])
}

/// Compiles one embedded C source into `dir`; returns the executable.
fn compile(cc: &str, name: &str, source: &str, dir: &Path, extra: &[&str]) -> Result<PathBuf> {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).with_context(|| format!("cannot write {}", src.display()))?;
    let exe = dir.join(name);
    let out = Command::new(cc)
        .args(CFLAGS)
        .args(extra)
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .arg("-pthread")
        .stdin(Stdio::null())
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!(
                "cannot build the workloads: no C compiler `{cc}` in PATH (set CC or install gcc)"
            )
        }
        Err(e) => bail!("cannot build the workloads: cannot run `{cc}`: {e}"),
    };
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let line = err
            .lines()
            .find(|l| l.contains("error"))
            .or_else(|| err.lines().next())
            .unwrap_or("");
        bail!("cannot build {name}.c with {cc}: {}", line.trim());
    }
    Ok(exe)
}

/// The real Python interpreter (`python3` may be a shim that execs it), or a
/// one-line reason why there is none.
pub fn find_python() -> Result<PathBuf, String> {
    let out = Command::new("python3")
        .args(["-c", "import sys;print(sys.executable)"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => {
            let p = String::from_utf8_lossy(&o.stdout).trim().to_string();
            if p.is_empty() || !Path::new(&p).is_file() {
                Err(format!("python3 reports no usable sys.executable ({p:?})"))
            } else {
                Ok(PathBuf::from(p))
            }
        }
        Ok(o) => Err(format!("python3 failed ({})", o.status)),
        Err(_) => Err("python3 not found in PATH".into()),
    }
}

/// The tools a workload runs under; heaptrack only where it is installed,
/// the preloads of the floors only where they were built.
fn tools_for(w: Workload, heaptrack: bool, floors: bool) -> Vec<Tool> {
    let mut v = vec![Tool::Plain, Tool::Heapledger(Stack::Dwarf)];
    match w {
        Workload::Churn => v.push(Tool::Heapledger(Stack::Fp)),
        Workload::Pairs => {
            v.push(Tool::Heapledger(Stack::None));
            v.push(Tool::HeapledgerOtherLib);
        }
        Workload::Varied => v.push(Tool::Heapledger(Stack::None)),
        Workload::Python => {
            v.push(Tool::HeapledgerSampled);
            if floors {
                v.push(Tool::Forward);
                v.push(Tool::Count);
            }
        }
        Workload::Threads => v.push(Tool::Recorder),
        Workload::Held
        | Workload::Stacks
        | Workload::StacksThreads
        | Workload::Compileall
        | Workload::Locks => {}
    }
    // The threads table compares heapledger with the plain program only.
    if heaptrack && w != Workload::Threads {
        v.push(Tool::Heaptrack);
    }
    v
}

/// What this machine has of the tools and programs a workload may use.
#[derive(Clone, Copy, Debug)]
pub struct Have<'a> {
    pub heaptrack: bool,
    /// The preloads of the floors were built.
    pub floors: bool,
    pub python: Option<&'a Path>,
    /// A folder for the data a workload needs (the copy of Python's
    /// standard library), kept for the whole bench run.
    pub data: &'a Path,
}

/// Builds what `w` needs into `dir` and returns its cases. `cache` keeps the
/// executables already built.
pub fn cases(
    w: Workload,
    sizes: Sizes,
    threads: Threads,
    have: Have,
    dir: &Path,
    cache: &mut Vec<(&'static str, PathBuf)>,
) -> Result<Vec<Case>> {
    let mut build = |name: &'static str, src: &str| -> Result<PathBuf> {
        if let Some((_, p)) = cache.iter().find(|(n, _)| *n == name) {
            return Ok(p.clone());
        }
        let p = compile(&cc(), name, src, dir, &[])?;
        cache.push((name, p.clone()));
        Ok(p)
    };
    let tools = tools_for(w, have.heaptrack, have.floors);
    let case = |label: String, threads, pairs, program| Case {
        workload: w,
        label,
        threads,
        pairs,
        program,
        tools: tools.clone(),
    };
    // A C workload run as `NAME COUNT`: one case, COUNT pairs (or blocks).
    let one = |build: &mut dyn FnMut(&'static str, &str) -> Result<PathBuf>,
               name: &'static str,
               src: &str,
               count: u64|
     -> Result<Vec<Case>> {
        let p = Program {
            exe: build(name, src)?,
            shown: name.into(),
            args: vec![count.to_string().into()],
            env: vec![],
        };
        Ok(vec![case(name.into(), None, Some(count), p)])
    };
    Ok(match w {
        Workload::Churn => one(&mut build, "churn", CHURN_C, sizes.churn_pairs)?,
        Workload::Pairs => one(&mut build, "pairs", PAIRS_C, sizes.pairs_pairs)?,
        Workload::Held => one(&mut build, "held", HELD_C, sizes.held_blocks)?,
        Workload::Varied => one(&mut build, "varied", VARIED_C, sizes.varied_pairs)?,
        Workload::Locks => one(&mut build, "locks", LOCKS_C, sizes.lock_pairs)?,
        Workload::Stacks => {
            let p = Program {
                exe: build("stacks", STACKS_C)?,
                shown: "stacks".into(),
                args: vec![
                    sizes.stacks_allocs.to_string().into(),
                    sizes.stacks_distinct.to_string().into(),
                ],
                env: vec![],
            };
            vec![case("stacks".into(), None, None, p)]
        }
        Workload::StacksThreads => {
            let p = Program {
                exe: build("stacks", STACKS_C)?,
                shown: "stacks".into(),
                args: vec![
                    sizes.stacks_distinct.to_string().into(),
                    sizes.stacks_distinct.to_string().into(),
                    "0".into(),
                    STACKS_THREADS.to_string().into(),
                ],
                env: vec![],
            };
            vec![case("stacks-threads".into(), None, None, p)]
        }
        Workload::Compileall => {
            let Some(py) = have.python else {
                return Ok(vec![]);
            };
            let dir = have.data.join("stdlib");
            let files = copy_stdlib(py, &dir, sizes.stdlib_one_in)?;
            let p = Program {
                exe: py.to_path_buf(),
                shown: py.display().to_string(),
                args: vec![
                    "-m".into(),
                    "compileall".into(),
                    "-f".into(),
                    "-q".into(),
                    dir.into_os_string(),
                ],
                env: vec![("PYTHONMALLOC".into(), "malloc".into())],
            };
            eprintln!(
                "heapledger-bench: compileall: {files} modules of the standard library copied"
            );
            vec![case("compileall".into(), None, None, p)]
        }
        Workload::Python => {
            let Some(py) = have.python else {
                return Ok(vec![]);
            };
            let code = format!("x=[str(i) for i in range({})]", sizes.python_strings);
            let p = Program {
                exe: py.to_path_buf(),
                shown: py.display().to_string(),
                args: vec!["-c".into(), code.into()],
                env: vec![("PYTHONMALLOC".into(), "malloc".into())],
            };
            vec![case("python".into(), None, None, p)]
        }
        Workload::Threads => {
            let exe = build("churn", CHURN_C)?;
            thread_counts(threads.max)
                .into_iter()
                .map(|t| {
                    // The churn splits its pair count over its threads.
                    let total = if threads.weak {
                        sizes.churn_pairs * u64::from(t)
                    } else {
                        sizes.churn_pairs
                    };
                    let p = Program {
                        exe: exe.clone(),
                        shown: "churn".into(),
                        args: vec![
                            total.to_string().into(),
                            "--threads".into(),
                            t.to_string().into(),
                        ],
                        env: vec![],
                    };
                    case(format!("threads T={t}"), Some(t), Some(total), p)
                })
                .collect()
        }
    })
}

/// Folders of the standard library that `compileall` leaves out: installed
/// packages (not the standard library) and the test packages, which
/// distributions ship apart (Debian's python3.11 has 668 modules, 13 MB,
/// without them; the copy with them is 2.5 times as big). Without them,
/// compiling the copy makes 7.9 M allocations with Python 3.11, near the
/// 7.15 M of issue 30's measure.
const LEFT_OUT: &[&str] = &[
    "site-packages",
    "dist-packages",
    "__pycache__",
    "test",
    "tests",
    "idle_test",
];

/// Copies the `*.py` files of `python`'s standard library into `dst` (made
/// once per bench run; `compileall` writes its `__pycache__` there), leaving
/// out the folders of `LEFT_OUT`, and keeping one file in `one_in` (sorted
/// by path) for `--quick`. The files that do not compile on purpose (Python
/// 2 syntax in lib2to3's test data) are then removed, so that `compileall`
/// exits 0. Returns the number of files.
fn copy_stdlib(python: &Path, dst: &Path, one_in: usize) -> Result<usize> {
    let out = Command::new(python)
        .args([
            "-c",
            "import sysconfig;print(sysconfig.get_paths()[\"stdlib\"])",
        ])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {}", python.display()))?;
    let src = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if !out.status.success() || !src.is_dir() {
        bail!(
            "{} names no standard library folder ({})",
            python.display(),
            src.display()
        );
    }
    let mut found = Vec::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        let from = src.join(&rel);
        let rd =
            std::fs::read_dir(&from).with_context(|| format!("cannot read {}", from.display()))?;
        for e in rd.flatten() {
            let name = e.file_name();
            let name_s = name.to_string_lossy();
            // No symbolic links: no loops, nothing outside the library.
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                if !LEFT_OUT.contains(&name_s.as_ref()) {
                    todo.push(rel.join(&name));
                }
            } else if ft.is_file() && name_s.ends_with(".py") {
                found.push(rel.join(&name));
            }
        }
    }
    found.sort();
    let mut files = 0;
    for rel in found.iter().step_by(one_in.max(1)) {
        let to = dst.join(rel);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        let from = src.join(rel);
        std::fs::copy(&from, &to).with_context(|| format!("cannot copy {}", from.display()))?;
        files += 1;
    }
    if files == 0 {
        bail!("no *.py files in {}", src.display());
    }
    // One compileall run finds the files that do not compile; a second
    // checks that none is left.
    for attempt in 0..2 {
        let out = Command::new(python)
            .args(["-m", "compileall", "-f", "-q"])
            .arg(dst)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .with_context(|| format!("cannot run {} -m compileall", python.display()))?;
        if out.status.success() {
            return Ok(files);
        }
        let failed = failed_compiles(&String::from_utf8_lossy(&out.stdout));
        if attempt == 1 || failed.is_empty() {
            bail!(
                "{} -m compileall fails on the copy of its standard library in {} ({} files do not compile)",
                python.display(),
                dst.display(),
                failed.len()
            );
        }
        for f in &failed {
            std::fs::remove_file(f).with_context(|| format!("cannot remove {}", f.display()))?;
            files -= 1;
        }
    }
    Ok(files)
}

/// The files named by compileall's "*** Error compiling 'PATH'..." lines.
fn failed_compiles(stdout: &str) -> Vec<PathBuf> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("*** Error compiling '"))
        .filter_map(|l| l.strip_suffix("'..."))
        .map(PathBuf::from)
        .filter(|p| p.is_file())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_compiles_reads_compileall_errors() {
        let dir = std::env::temp_dir().join(format!("hlb-failed-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bad = dir.join("bad.py");
        std::fs::write(&bad, "print 'x'\n").unwrap();
        let out = format!(
            "*** Error compiling '{}'...\n  File \"x\", line 1\nSyntaxError: bad\n*** Error compiling '/nonexistent/x.py'...\n",
            bad.display()
        );
        assert_eq!(failed_compiles(&out), vec![bad]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn quick_scales_the_new_workloads_down() {
        let (full, quick) = (Sizes::new(false), Sizes::new(true));
        assert_eq!(full.stacks_distinct, 500_000);
        assert!(full.stacks_distinct <= 1 << 19);
        assert_eq!(quick.stacks_allocs * 10, full.stacks_allocs);
        assert_eq!(quick.varied_pairs * 10, full.varied_pairs);
        assert_eq!((full.stdlib_one_in, quick.stdlib_one_in), (1, 10));
    }

    #[test]
    fn slow_workloads_are_capped() {
        for w in Workload::ALL {
            assert_eq!(w.max_runs().is_some(), w.at_scale(), "{}", w.name());
        }
    }
}
