//! Running the programs: one timed run of a case under a tool, and the
//! interleaved rounds (plain, heapledger, heaptrack, plain, heapledger, ...).

use crate::workloads::Case;
use anyhow::{bail, Context, Result};
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
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
    /// `--only-lib` naming a library the program does not load: every
    /// call is another code's, which must pass at close to a forwarding
    /// preload's cost (issue 34).
    HeapledgerOtherLib,
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
            Tool::HeapledgerOtherLib => "only-lib, other",
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
    /// `heaptrack_print`, to read heaptrack's file after the runs.
    pub heaptrack_print: Option<PathBuf>,
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

/// What one run measured.
#[derive(Clone, Debug)]
pub struct Run {
    /// Wall time, spawn to exit.
    pub secs: f64,
    /// The largest RSS of any process of the run (the tool's, the program's,
    /// their helpers'), in KiB: `ru_maxrss` of `wait4`, which covers the child
    /// and the descendants it waited for.
    pub max_rss_kb: Option<u64>,
    /// The size of the tool's output file, where it writes one.
    pub out_bytes: Option<u64>,
    /// Where the output file was moved to, when asked to keep it.
    pub kept: Option<PathBuf>,
}

/// Waits for the child `pid`; returns its status and its `ru_maxrss` (the
/// largest RSS of it and of the descendants it waited for, in KiB).
fn wait4(pid: u32) -> std::io::Result<(ExitStatus, u64)> {
    use std::os::unix::process::ExitStatusExt;
    let pid = i32::try_from(pid).map_err(|_| std::io::Error::other("pid out of range"))?;
    let mut status = 0;
    // SAFETY: all zeroes is a valid rusage (plain integers).
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: valid pointers to a c_int and a rusage that outlive the call.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if r == pid {
            return Ok((
                ExitStatus::from_raw(status),
                u64::try_from(ru.ru_maxrss).unwrap_or(0),
            ));
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Runs `cmd` (stdin and stdout on /dev/null) to its end: its wall time and
/// largest RSS, or why it failed (its last line on stderr).
pub fn measured(cmd: &mut Command) -> Result<(f64, u64)> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| anyhow::anyhow!("cannot start it: {e}"))?;
    let mut err = Vec::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_end(&mut err);
    }
    // Reaped here, with its rusage; `child` is not waited for again.
    let waited = wait4(child.id());
    let secs = start.elapsed().as_secs_f64();
    let (status, rss) = match waited {
        Ok(w) => w,
        Err(e) => {
            let _ = child.wait();
            bail!("cannot wait for it: {e}");
        }
    };
    if !status.success() {
        let err = String::from_utf8_lossy(&err);
        let last = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no message");
        bail!("it failed ({status}): {}", last.trim());
    }
    Ok((secs, rss))
}

/// Runs `case` once under `tool`; returns its wall time in seconds (spawn to
/// exit, so the tool's start-up, symbolization and writing are included),
/// its largest process RSS and its output file's size. With `keep`, the
/// output file is moved there (named after the case and the tool) instead
/// of being removed.
pub fn run_once(
    tools: &Tools,
    case_index: usize,
    case: &Case,
    tool: Tool,
    keep: Option<&Path>,
) -> Result<Run> {
    let p = &case.program;
    let mut cmd;
    match tool {
        Tool::Plain => {
            cmd = Command::new(&p.exe);
        }
        Tool::Heapledger(stack) => {
            cmd = Command::new(&tools.heapledger);
            cmd.args(["run", "-q", "-o"])
                .arg(tools.scratch.join("hl.sqlite"))
                .args(["--stack", stack.arg(), "--"])
                .arg(&p.exe);
        }
        Tool::HeapledgerSampled => {
            cmd = Command::new(&tools.heapledger);
            cmd.args(["run", "-q", "-o"])
                .arg(tools.scratch.join("hl.sqlite"))
                .arg("--sample-every")
                .arg(SAMPLE_EVERY.to_string())
                .arg("--")
                .arg(&p.exe);
        }
        Tool::HeapledgerOtherLib => {
            cmd = Command::new(&tools.heapledger);
            cmd.args(["run", "-q", "-o"])
                .arg(tools.scratch.join("hl.sqlite"))
                .args(["--only-lib", "libheapledger-bench-unloaded.so", "--"])
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

    let result = measured(&mut cmd).and_then(|(secs, rss)| {
        // The tool must have written its output: a run that silently
        // recorded nothing would look fast.
        let want = match tool {
            Tool::Plain | Tool::Forward | Tool::Count => None,
            Tool::Heapledger(_) | Tool::HeapledgerSampled | Tool::HeapledgerOtherLib => {
                Some("hl.sqlite")
            }
            Tool::Recorder => Some(""),
            Tool::Heaptrack => Some("ht."),
        };
        let mut run = Run {
            secs,
            max_rss_kb: Some(rss),
            out_bytes: None,
            kept: None,
        };
        if let Some(prefix) = want {
            let Some((path, bytes)) = output_file(&tools.scratch, prefix) else {
                bail!(
                    "it wrote no output file ({prefix}*) in {}",
                    tools.scratch.display()
                );
            };
            run.out_bytes = Some(bytes);
            if let Some(dir) = keep {
                let name = path
                    .file_name()
                    .map_or_else(|| "output".into(), |n| n.to_string_lossy().into_owned());
                let to = dir.join(format!(
                    "{case_index}-{}-{name}",
                    tool.name().replace(' ', "-")
                ));
                std::fs::rename(&path, &to)
                    .with_context(|| format!("cannot keep its output as {}", to.display()))?;
                run.kept = Some(to);
            }
        }
        Ok(run)
    });
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

/// The largest non-empty file in `dir` whose name starts with `prefix`, and
/// its size.
fn output_file(dir: &Path, prefix: &str) -> Option<(PathBuf, u64)> {
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            (m.is_file() && m.len() > 0).then(|| (e.path(), m.len()))
        })
        .max_by_key(|(_, len)| *len)
}

/// The times of one case under one tool.
#[derive(Clone, Debug)]
pub struct Series {
    /// Index into the cases.
    pub case: usize,
    pub tool: Tool,
    pub times: Vec<f64>,
    /// The largest process RSS of each run, in KiB (see `Run`).
    pub rss_kb: Vec<u64>,
    /// The size of the output file of each run, where the tool writes one.
    pub out_bytes: Vec<u64>,
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

    /// The median of the runs' largest process RSS, in MB (10^6 bytes).
    pub fn rss_mb(&self) -> Option<f64> {
        median_u64(&self.rss_kb).map(kib_to_mb)
    }

    /// The median size of the output file, in MB (10^6 bytes).
    pub fn out_mb(&self) -> Option<f64> {
        median_u64(&self.out_bytes).map(|b| b / 1e6)
    }
}

/// `ru_maxrss` is in KiB.
fn kib_to_mb(kib: f64) -> f64 {
    kib * 1024.0 / 1e6
}

fn median_u64(v: &[u64]) -> Option<f64> {
    median(&v.iter().map(|&x| x as f64).collect::<Vec<_>>())
}

/// The output file of one tool's last run on one case, kept for `analyses`.
#[derive(Clone, Debug)]
pub struct Kept {
    pub case: usize,
    pub tool: Tool,
    pub path: PathBuf,
}

/// Runs every case of one workload `runs` times under each of its tools,
/// interleaved: round 1 runs each case under each tool once, then round 2, ...
/// A tool that fails on a case is reported in one line and dropped for that
/// case; the others go on. `first` is the index of cases[0] in the whole run.
/// With `keep`, the output files of the last round are moved there and
/// returned, for `analyses`.
pub fn rounds(
    tools: &Tools,
    cases: &[Case],
    first: usize,
    runs: u32,
    keep: Option<&Path>,
) -> (Vec<Series>, Vec<Kept>) {
    let mut series: Vec<Series> = Vec::new();
    let mut kept = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        for &tool in &c.tools {
            series.push(Series {
                case: first + i,
                tool,
                times: Vec::new(),
                rss_kb: Vec::new(),
                out_bytes: Vec::new(),
                error: None,
            });
        }
    }
    // One untimed run of each plain program: page cache, dynamic loader.
    for (i, c) in cases.iter().enumerate() {
        let _ = run_once(tools, first + i, c, Tool::Plain, None);
    }
    let name = cases.first().map_or("", |c| c.workload.name());
    for round in 0..runs {
        let started = Instant::now();
        let last = round + 1 == runs;
        for s in series.iter_mut() {
            if s.error.is_some() {
                continue;
            }
            let c = &cases[s.case - first];
            match run_once(tools, s.case, c, s.tool, keep.filter(|_| last)) {
                Ok(r) => {
                    s.times.push(r.secs);
                    s.rss_kb.extend(r.max_rss_kb);
                    s.out_bytes.extend(r.out_bytes);
                    if let Some(path) = r.kept {
                        kept.push(Kept {
                            case: s.case,
                            tool: s.tool,
                            path,
                        });
                    }
                }
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
    (series, kept)
}

/// A command run on a profile after the runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Analysis {
    /// `heapledger report PROFILE`
    Report,
    /// `heapledger tree --collapse full PROFILE`
    Tree,
    /// `heapledger tree PROFILE`: the default view, no collapsing.
    TreePlain,
    /// `heaptrack_print FILE`, for reference.
    HeaptrackPrint,
}

impl Analysis {
    pub fn name(self) -> &'static str {
        match self {
            Analysis::Report => "heapledger report",
            Analysis::Tree => "heapledger tree --collapse full",
            Analysis::TreePlain => "heapledger tree",
            Analysis::HeaptrackPrint => "heaptrack_print",
        }
    }
}

/// The times and largest RSS of one analysis of one case's profile.
#[derive(Clone, Debug)]
pub struct AnalysisSeries {
    pub case: usize,
    pub what: Analysis,
    /// The size of the file read.
    pub input_bytes: u64,
    pub times: Vec<f64>,
    pub rss_kb: Vec<u64>,
    pub error: Option<String>,
}

impl AnalysisSeries {
    pub fn median(&self) -> Option<f64> {
        median(&self.times)
    }

    /// The median of the runs' largest RSS, in MB (10^6 bytes).
    pub fn rss_mb(&self) -> Option<f64> {
        median_u64(&self.rss_kb).map(kib_to_mb)
    }
}

/// Runs `heapledger report`, `heapledger tree --collapse full` and
/// `heapledger tree` on each kept heapledger profile, and `heaptrack_print` on each kept heaptrack
/// file, `runs` times, interleaved; output to /dev/null.
pub fn analyses(tools: &Tools, kept: &[Kept], runs: u32) -> Vec<AnalysisSeries> {
    let mut jobs: Vec<(AnalysisSeries, &Path)> = Vec::new();
    for k in kept {
        let whats: &[Analysis] = match k.tool {
            Tool::Heapledger(_) => &[Analysis::Report, Analysis::Tree, Analysis::TreePlain],
            Tool::Heaptrack if tools.heaptrack_print.is_some() => &[Analysis::HeaptrackPrint],
            _ => &[],
        };
        let input_bytes = k.path.metadata().map_or(0, |m| m.len());
        for &what in whats {
            jobs.push((
                AnalysisSeries {
                    case: k.case,
                    what,
                    input_bytes,
                    times: Vec::new(),
                    rss_kb: Vec::new(),
                    error: None,
                },
                &k.path,
            ));
        }
    }
    for round in 0..runs {
        let started = Instant::now();
        for (s, path) in jobs.iter_mut() {
            if s.error.is_some() {
                continue;
            }
            let mut cmd = match s.what {
                Analysis::Report => {
                    let mut c = Command::new(&tools.heapledger);
                    c.arg("report").arg(*path);
                    c
                }
                Analysis::Tree => {
                    let mut c = Command::new(&tools.heapledger);
                    c.args(["tree", "--collapse", "full"]).arg(*path);
                    c
                }
                Analysis::TreePlain => {
                    let mut c = Command::new(&tools.heapledger);
                    c.arg("tree").arg(*path);
                    c
                }
                Analysis::HeaptrackPrint => {
                    let Some(hp) = &tools.heaptrack_print else {
                        continue;
                    };
                    let mut c = Command::new(hp);
                    c.arg(*path);
                    c
                }
            };
            match measured(&mut cmd) {
                Ok((secs, rss)) => {
                    s.times.push(secs);
                    s.rss_kb.push(rss);
                }
                Err(e) => {
                    eprintln!(
                        "heapledger-bench: {} {}: {e:#}; dropping it",
                        s.what.name(),
                        path.display()
                    );
                    s.error = Some(format!("{e:#}"));
                }
            }
            settle();
        }
        if !jobs.is_empty() {
            eprintln!(
                "heapledger-bench: reading the profiles: round {}/{runs} took {:.1} s",
                round + 1,
                started.elapsed().as_secs_f64()
            );
        }
    }
    jobs.into_iter().map(|(s, _)| s).collect()
}
