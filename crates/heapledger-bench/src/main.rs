//! heapledger-bench: heapledger's overhead against the plain program and heaptrack.
//!
//! Run after `cargo build --release --workspace`:
//!
//! ```text
//! cargo run --release -p heapledger-bench -- [--runs N] [--only NAME[,NAME]] [--out DIR] [--quick] [--threads-max T] [--threads-weak]
//! ```
//!
//! It builds the C workloads (`workloads/*.c`) with `cc -O2 -fomit-frame-pointer`,
//! runs every workload N times under each tool, interleaved, and prints the
//! median and min wall times, the time each tool adds, and the targets with
//! PASS/MISS. See `crates/heapledger-bench/README.md`.

mod measure;
mod report;
mod waits;
mod workloads;

use anyhow::{Context, Result};
use clap::Parser;
use measure::Tools;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;
use workloads::{Sizes, Workload};

#[derive(Parser, Debug)]
#[command(
    name = "heapledger-bench",
    about = "Measure heapledger against the plain program and heaptrack"
)]
struct Args {
    /// Timed runs of each program under each tool (the median and min are reported).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    runs: u32,
    /// Run only these workloads (comma-separated or repeated).
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Workload>,
    /// Also write results.json, times.csv (every run) and report.txt here.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Shrink every workload 10x, for a quick look.
    #[arg(long)]
    quick: bool,
    /// Largest thread count of the threads workload (1, 2, 4, 8, 16 up to it).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    threads_max: u32,
    /// Threads workload: every thread makes the full churn (total work grows
    /// with T), instead of splitting it, so that `run`'s fixed costs weigh
    /// alike at every T. For machines with many cores.
    #[arg(long)]
    threads_weak: bool,
    /// Leave heaptrack out even where it is installed.
    #[arg(long)]
    no_heaptrack: bool,
}

/// A folder removed with everything in it when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<TempDir> {
        let base = std::env::temp_dir();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = base.join(format!("heapledger-bench-{}-{nanos:x}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create a temporary folder {}", dir.display()))?;
        Ok(TempDir(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn write_out(dir: &Path, r: &report::Report) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let json = serde_json::to_string_pretty(&r.json).context("cannot encode the results")?;
    for (name, text) in [
        ("results.json", json.as_str()),
        ("times.csv", r.csv.as_str()),
        ("report.txt", r.text.as_str()),
    ] {
        let p = dir.join(name);
        std::fs::write(&p, text).with_context(|| format!("cannot write {}", p.display()))?;
    }
    Ok(())
}

fn run(args: &Args) -> Result<bool> {
    let started = Instant::now();
    let heapledger = measure::find_heapledger()?;
    let selected: Vec<Workload> = Workload::ALL
        .into_iter()
        .filter(|w| args.only.is_empty() || args.only.contains(w))
        .collect();
    let mut notes = Vec::new();

    let heaptrack = if args.no_heaptrack {
        notes.push("heaptrack left out (--no-heaptrack)".to_string());
        None
    } else {
        let h = measure::find_in_path("heaptrack");
        if h.is_none() {
            notes.push("heaptrack is not installed (not in PATH): its rows and the targets that need it are skipped".into());
        }
        h
    };
    if args.quick {
        notes.push("--quick: fixed costs (start-up, symbolization, writing) weigh 10x more per pair than in a full run".into());
    }
    let python = if selected.contains(&Workload::Python) || selected.contains(&Workload::Compileall)
    {
        match workloads::find_python() {
            Ok(p) => Some(p),
            Err(why) => {
                notes.push(format!(
                    "{why}: the python and compileall workloads are skipped"
                ));
                None
            }
        }
    } else {
        None
    };
    let heaptrack_print = heaptrack
        .as_ref()
        .filter(|_| selected.iter().any(|w| w.at_scale()))
        .and_then(|_| {
            let p = measure::find_in_path("heaptrack_print");
            if p.is_none() {
                notes.push(
                    "heaptrack_print is not installed: heaptrack's file is not read after the runs"
                        .into(),
                );
            }
            p
        });
    for w in &selected {
        if let Some(max) = w.max_runs().filter(|&m| m < args.runs) {
            notes.push(format!(
                "{}: {max} runs (at most {max}: its rounds are slow)",
                w.name()
            ));
        }
    }

    let tmp = TempDir::new()?;
    let scratch = tmp.0.join("scratch");
    let bin = tmp.0.join("bin");
    let data = tmp.0.join("data");
    let kept_dir = tmp.0.join("kept");
    for d in [&scratch, &bin, &data, &kept_dir] {
        std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
    }
    let floors = if selected.contains(&Workload::Python) {
        match workloads::build_floors(&bin) {
            Ok(p) => Some(p),
            Err(e) => {
                notes.push(format!("{e:#}: the preloads of the floors are left out"));
                None
            }
        }
    } else {
        None
    };
    let tools = Tools {
        heapledger: heapledger.clone(),
        recorder: heapledger.with_file_name("libheapledger_preload.so"),
        heaptrack: heaptrack.clone(),
        floors: floors.clone(),
        heaptrack_print,
        scratch,
    };
    let sizes = Sizes::new(args.quick);
    let load_start = load_average();

    let mut cases = Vec::new();
    let mut series = Vec::new();
    let mut built = Vec::new();
    let mut analyses = Vec::new();
    for w in selected {
        let cs = workloads::cases(
            w,
            sizes,
            workloads::Threads {
                max: args.threads_max,
                weak: args.threads_weak,
            },
            workloads::Have {
                heaptrack: heaptrack.is_some(),
                floors: floors.is_some(),
                python: python.as_deref(),
                data: &data,
            },
            &bin,
            &mut built,
        )?;
        if cs.is_empty() {
            continue;
        }
        let runs = w.max_runs().map_or(args.runs, |m| args.runs.min(m));
        eprintln!(
            "heapledger-bench: {}: {} ({} runs each)",
            w.name(),
            cs[0].program.display(),
            runs
        );
        let first = cases.len();
        let keep = w.at_scale().then_some(kept_dir.as_path());
        let (s, kept) = measure::rounds(&tools, &cs, first, runs, keep);
        series.extend(s);
        // The profiles of the last round, read by report, tree and
        // heaptrack_print, then removed (they take hundreds of MB).
        analyses.extend(measure::analyses(&tools, &kept, runs));
        for k in &kept {
            let _ = std::fs::remove_file(&k.path);
        }
        cases.extend(cs);
    }

    // With `locks`: how exactly a contended wait is measured.
    let wait_accuracy = match args.only.is_empty() || args.only.contains(&Workload::Locks) {
        true => {
            let r = workloads::build_contended(&bin)
                .and_then(|exe| waits::measure(&heapledger, &exe, &tools.scratch));
            if let Err(e) = &r {
                notes.push(format!("{e:#}: the contended wait is not measured"));
            }
            r.ok()
        }
        false => None,
    };

    let meta = report::Meta {
        wait_accuracy,
        runs: args.runs,
        quick: args.quick,
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_start,
        load_end: load_average(),
        heapledger: heapledger.display().to_string(),
        heaptrack: heaptrack.map(|p| p.display().to_string()),
        python: python.map(|p| p.display().to_string()),
        notes,
        cflags: workloads::CFLAGS.join(" "),
        elapsed_s: started.elapsed().as_secs_f64(),
    };
    let r = report::build(&cases, &series, &analyses, &meta);
    println!();
    print!("{}", r.text);
    if let Some(dir) = &args.out {
        write_out(dir, &r)?;
        eprintln!("heapledger-bench: results written to {}", dir.display());
    }
    Ok(series.iter().all(|s| s.error.is_none()) && analyses.iter().all(|a| a.error.is_none()))
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("heapledger-bench: some runs failed (see above)");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("heapledger-bench: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
