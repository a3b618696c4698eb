//! The workloads: two C programs built with `cc`, and a Python one-liner, each
//! with the tools it is measured under.

use crate::measure::{Stack, Tool};
use anyhow::{bail, Context, Result};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const CHURN_C: &str = include_str!("../workloads/churn.c");
const PAIRS_C: &str = include_str!("../workloads/pairs.c");
const HELD_C: &str = include_str!("../workloads/held.c");
const FORWARD_C: &str = include_str!("../workloads/forward.c");

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
}

impl Workload {
    pub const ALL: [Workload; 5] = [
        Workload::Churn,
        Workload::Pairs,
        Workload::Python,
        Workload::Threads,
        Workload::Held,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Churn => "churn",
            Workload::Pairs => "pairs",
            Workload::Python => "python",
            Workload::Threads => "threads",
            Workload::Held => "held",
        }
    }
}

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
}

impl Sizes {
    pub fn new(quick: bool) -> Sizes {
        let s = Sizes {
            churn_pairs: 5_000_000,
            pairs_pairs: 20_000_000,
            python_strings: 3_000_000,
            held_blocks: 4_000_000,
        };
        if quick {
            Sizes {
                churn_pairs: s.churn_pairs / 10,
                pairs_pairs: s.pairs_pairs / 10,
                python_strings: s.python_strings / 10,
                held_blocks: s.held_blocks / 10,
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
        Workload::Pairs => v.push(Tool::Heapledger(Stack::None)),
        Workload::Python => {
            v.push(Tool::HeapledgerSampled);
            if floors {
                v.push(Tool::Forward);
                v.push(Tool::Count);
            }
        }
        Workload::Threads => v.push(Tool::Recorder),
        Workload::Held => {}
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
