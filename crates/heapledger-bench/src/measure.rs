//! Running the programs: one timed run of a case under a tool, and the
//! interleaved rounds (plain, heapledger, heaptrack, plain, heapledger, ...).

use crate::workloads::Case;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stack {
    Dwarf,
    Fp,
    None,
}

impl Stack {
    pub fn arg(self) -> &'static str {
        match self {
            Stack::Dwarf => "dwarf",
            Stack::Fp => "fp",
            Stack::None => "none",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tool {
    Plain,
    Heapledger(Stack),
    /// `--sample-every SAMPLE_EVERY` (dwarf stacks for the samples).
    HeapledgerSampled,
    /// The recorder alone (`LD_PRELOAD`, dwarf stacks, its raw dump written
    /// at exit), without `heapledger run`: no symbolization, no profile. Only
    /// for the threads table, to tell the recorder's scaling from that of
    /// `run`'s own work beside the program.
    Recorder,
    /// A preload that only forwards the allocator's calls
    /// (`workloads/forward.c`): the floor of any `LD_PRELOAD` tool.
    Forward,
    /// The same with, in C, the bookkeeping that the lean paths of
    /// `--sample-every` do on a call that is not sampled: the floor of
    /// sampling by bytes from a preload.
    Count,
    Heaptrack,
}

/// The mean gap of the sampling mode measured (the 512 KiB).
pub const SAMPLE_EVERY: u64 = 512 * 1024;

impl Tool {
    pub fn name(self) -> &'static str {
        match self {
            Tool::Plain => "plain",
            Tool::Heapledger(Stack::Dwarf) => "heapledger dwarf",
            Tool::Heapledger(Stack::Fp) => "heapledger fp",
            Tool::Heapledger(Stack::None) => "heapledger none",
            Tool::HeapledgerSampled => "heapledger 512K",
            Tool::Recorder => "recorder alone",
            Tool::Forward => "forward only",
            Tool::Count => "count only",
            Tool::Heaptrack => "heaptrack",
        }
    }
}

/// The tools' executables and a scratch folder for their output.
pub struct Tools {
    pub heapledger: PathBuf,
    /// `libheapledger_preload.so`, beside `heapledger`.
    pub recorder: PathBuf,
    pub heaptrack: Option<PathBuf>,
    /// The preloads of the floors, where they could be built.
    pub floors: Option<crate::workloads::Floors>,
    /// Emptied after every run.
    pub scratch: PathBuf,
}

/// `heapledger` and its recorder beside this executable, or one line saying
/// which is missing.
pub fn find_heapledger() -> Result<PathBuf> {
    let me = std::env::current_exe().context("cannot locate heapledger-bench's own executable")?;
    let dir = me.parent().map(Path::to_path_buf).unwrap_or_default();
    let hint = "build it first with `cargo build --release --workspace`";
    let heapledger = dir.join("heapledger");
    if !heapledger.is_file() {
        bail!("heapledger not found at {} ({hint})", heapledger.display());
    }
    let preload = dir.join("libheapledger_preload.so");
    if !preload.is_file() {
        bail!("the recorder is missing: no {} ({hint})", preload.display());
    }
    Ok(heapledger)
}

/// An executable named `name` in PATH.
pub fn find_in_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| {
            p.metadata()
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

fn clear_dir(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            let _ = if p.is_dir() {
                std::fs::remove_dir_all(&p)
            } else {
                std::fs::remove_file(&p)
            };
        }
    }
}

/// Runs `case` once under `tool`; returns its wall time in seconds (spawn to
/// exit, so the tool's start-up, symbolization and writing are included).
pub fn run_once(tools: &Tools, case: &Case, tool: Tool) -> Result<f64> {
    let p = &case.program;
    let mut cmd;
    match tool {
        Tool::Plain => {
            cmd = Command::new(&p.exe);
        }
        Tool::Heapledger(stack) => {
            cmd = Command::new(&tools.heapledger);
            cmd.args(["run", "-q", "-o"])
                .arg(tools.scratch.join("hl.json"))
                .args(["--stack", stack.arg(), "--"])
                .arg(&p.exe);
        }
        Tool::HeapledgerSampled => {
            cmd = Command::new(&tools.heapledger);
            cmd.args(["run", "-q", "-o"])
                .arg(tools.scratch.join("hl.json"))
                .arg("--sample-every")
                .arg(SAMPLE_EVERY.to_string())
                .arg("--")
                .arg(&p.exe);
        }
        Tool::Recorder => {
            cmd = Command::new(&p.exe);
            cmd.env("LD_PRELOAD", &tools.recorder)
                .env("HEAPLEDGER_DIR", &tools.scratch)
                .env("HEAPLEDGER_OPTS", "stack=dwarf");
        }
        Tool::Forward | Tool::Count => {
            let Some(floors) = &tools.floors else {
                bail!("the preloads of the floors were not built")
            };
            let so = if tool == Tool::Forward {
                &floors.forward
            } else {
                &floors.count
            };
            cmd = Command::new(&p.exe);
            cmd.env("LD_PRELOAD", so);
        }
        Tool::Heaptrack => {
            let Some(ht) = &tools.heaptrack else {
                bail!("heaptrack is not installed")
            };
            cmd = Command::new(ht);
            cmd.arg("-o").arg(tools.scratch.join("ht")).arg(&p.exe);
        }
    }
    cmd.args(&p.args).envs(p.env.iter().map(|(k, v)| (k, v)));
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());

    let start = Instant::now();
    let out = cmd.output();
    let secs = start.elapsed().as_secs_f64();

    let result = match out {
        Err(e) => Err(anyhow::anyhow!("cannot start it: {e}")),
        Ok(o) if !o.status.success() => {
            let err = String::from_utf8_lossy(&o.stderr);
            let last = err
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("no message");
            Err(anyhow::anyhow!("it failed ({}): {}", o.status, last.trim()))
        }
        Ok(_) => {
            // The tool must have written its output: a run that silently
            // recorded nothing would look fast.
            let want = match tool {
                Tool::Plain | Tool::Forward | Tool::Count => None,
                Tool::Heapledger(_) | Tool::HeapledgerSampled => Some("hl.json"),
                Tool::Recorder => Some(""),
                Tool::Heaptrack => Some("ht."),
            };
            match want {
                Some(prefix) if !wrote_output(&tools.scratch, prefix) => Err(anyhow::anyhow!(
                    "it wrote no output file ({prefix}*) in {}",
                    tools.scratch.display()
                )),
                _ => Ok(secs),
            }
        }
    };
    clear_dir(&tools.scratch);
    settle();
    result
}

/// Untimed, after each run: the file system's work left by the run (its
/// output's metadata, the journal) is done now, not in the next run, and
/// the memory its tool gave back has been freed. Without it, the run after
/// `heapledger --stack dwarf` (a 28 MB profile, written and removed) took
/// 0.40 to 0.48 s where the same program alone took 0.39 to 0.41.
fn settle() {
    let _ = Command::new("sync").status();
    std::thread::sleep(std::time::Duration::from_millis(SETTLE_MS));
}

/// How long `settle` waits after the file system is synced.
const SETTLE_MS: u64 = 50;

fn wrote_output(dir: &Path, prefix: &str) -> bool {
    std::fs::read_dir(dir).is_ok_and(|rd| {
        rd.flatten().any(|e| {
            e.file_name().to_string_lossy().starts_with(prefix)
                && e.metadata().is_ok_and(|m| m.is_file() && m.len() > 0)
        })
    })
}

/// The times of one case under one tool.
#[derive(Clone, Debug)]
pub struct Series {
    /// Index into the cases.
    pub case: usize,
    pub tool: Tool,
    pub times: Vec<f64>,
    /// Why the tool was dropped for this case, if it failed.
    pub error: Option<String>,
}

/// The median of `v` (the mean of the middle two for an even count).
pub fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut t = v.to_vec();
    t.sort_by(f64::total_cmp);
    let n = t.len();
    Some(if n % 2 == 1 {
        t[n / 2]
    } else {
        (t[n / 2 - 1] + t[n / 2]) / 2.0
    })
}

impl Series {
    pub fn median(&self) -> Option<f64> {
        median(&self.times)
    }

    pub fn min(&self) -> Option<f64> {
        self.times.iter().copied().min_by(f64::total_cmp)
    }
}

/// Runs every case of one workload `runs` times under each of its tools,
/// interleaved: round 1 runs each case under each tool once, then round 2, ...
/// A tool that fails on a case is reported in one line and dropped for that
/// case; the others go on. `first` is the index of cases[0] in the whole run.
pub fn rounds(tools: &Tools, cases: &[Case], first: usize, runs: u32) -> Vec<Series> {
    let mut series: Vec<Series> = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        for &tool in &c.tools {
            series.push(Series {
                case: first + i,
                tool,
                times: Vec::new(),
                error: None,
            });
        }
    }
    // One untimed run of each plain program: page cache, dynamic loader.
    for c in cases {
        let _ = run_once(tools, c, Tool::Plain);
    }
    let name = cases.first().map_or("", |c| c.workload.name());
    for round in 0..runs {
        let started = Instant::now();
        for s in series.iter_mut() {
            if s.error.is_some() {
                continue;
            }
            let c = &cases[s.case - first];
            match run_once(tools, c, s.tool) {
                Ok(t) => s.times.push(t),
                Err(e) => {
                    eprintln!(
                        "heapledger-bench: {} on {} ({}): {e:#}; dropping it",
                        s.tool.name(),
                        c.label,
                        c.program.display()
                    );
                    s.error = Some(format!("{e:#}"));
                }
            }
        }
        eprintln!(
            "heapledger-bench: {name}: round {}/{runs} took {:.1} s",
            round + 1,
            started.elapsed().as_secs_f64()
        );
    }
    series
}
