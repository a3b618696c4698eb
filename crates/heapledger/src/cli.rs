//! Command-line parsing into plain option structs, and dispatch.

use crate::options::{RunOptions, StackArg};
use crate::run;
use anyhow::Result;
use clap::{Parser, Subcommand};
use std::ffi::OsString;
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "heapledger",
    version,
    about = "Memory profiler for native Linux programs",
    arg_required_else_help = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a program under the recorder and write its profile.
    Run {
        /// Where to write the profile (default: heapledger-<exe>-<pid>.sqlite):
        /// a profile store holding every process of the run; a name ending
        /// in .json writes MALT's JSON instead (`export --format malt`),
        /// with child processes in <stem>.children/.
        #[arg(short, long, value_parser = crate::output::output_path)]
        output: Option<PathBuf>,
        /// How to capture stacks.
        #[arg(long, value_enum, default_value = "dwarf")]
        stack: StackArg,
        /// Deepest stack recorded; deeper stacks keep their innermost frames.
        #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=4096))]
        max_depth: u32,
        /// Do not profile child processes (forks and the programs they run).
        #[arg(long)]
        no_follow: bool,
        /// Sample instead of recording every allocation: on average one
        /// sample per BYTES allocated (Poisson sampling by bytes); counts and
        /// bytes in the profile are then estimates. BYTES may end in K, M or G
        /// (KiB, MiB, GiB): 512K is 524288.
        #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
        sample_every: Option<u64>,
        /// Time every block for its lifetime. By default a call stack's
        /// first 64 blocks in each thread are timed, then one in 16 at
        /// random, which stands for 16: lifetime counts stay exact, sums
        /// are estimates, minima and maxima those of the timed blocks.
        /// (`--sample-every` times every sampled block; `--stack none`
        /// times none.)
        #[arg(long)]
        exact_lifetimes: bool,
        /// Once the program has ended, how long to wait for the processes
        /// it started that still run (they write their profile data as they
        /// end); 0 does not wait.
        #[arg(long, value_name = "SECONDS", default_value_t = 2.0, value_parser = parse_seconds)]
        wait_children: f64,
        /// Every SECONDS, each process writes a checkpoint of its profile
        /// while it runs (only when something changed), so that a process
        /// killed by SIGKILL or the OOM killer still has a profile, up to
        /// its last checkpoint; 0 writes none.
        #[arg(long, value_name = "SECONDS", default_value_t = 2.0, value_parser = parse_seconds)]
        checkpoint_every: f64,
        /// Start with stack capture on or off. While off, allocations are
        /// still counted with their sizes and blocks (leaks included), with
        /// no stack; the program (`heapledger.h`) or `heapledger ctl PID
        /// backtrace on` switches it on.
        #[arg(long, value_enum, default_value = "on", value_name = "on|off")]
        backtrace: OnOff,
        /// Record only the allocations made by code in this shared library
        /// (a file name, which also chooses its versions, `libfoo.so` for
        /// `libfoo.so.1`; a path; or a glob with `*` and `?`): the first
        /// caller outside the allocator and the C/C++ runtime, so that a
        /// `strdup` or `operator new` called by the library counts for it;
        /// libraries loaded later with dlopen included. May be given more
        /// than once. Everything else passes through unrecorded, counted
        /// only per allocator function.
        #[arg(long, value_name = "NAME", conflicts_with = "sample_every")]
        only_lib: Vec<String>,
        /// Every SECONDS, each process stores a snapshot of its counters in
        /// the profile (labelled every-1, every-2, ...; `report
        /// --snapshot LABEL` shows one).
        #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
        snapshot_every: Option<f64>,
        /// Each time the bytes a process has allocated and not freed rise
        /// above SIZE (K, M, G suffixes), it stores a snapshot (labelled
        /// above-1, above-2, ...): the moments before an out-of-memory
        /// kill.
        #[arg(long, value_name = "SIZE", value_parser = parse_budget)]
        snapshot_when_above: Option<u64>,
        /// Do not record lock waits (time lost: mutexes, rwlocks,
        /// condition variables, joins, semaphores).
        #[arg(long)]
        no_waits: bool,
        /// Leave Python's small-object allocator (pymalloc) in place. By
        /// default the program gets PYTHONMALLOC=malloc (unless it is set),
        /// since pymalloc serves Python's objects from arenas that no malloc
        /// hook sees (a script that makes 200 000 objects: 3 500 allocations
        /// recorded instead of 1.5 million).
        #[arg(long)]
        pymalloc: bool,
        /// Leave Python's own functions out of the stacks. By default a
        /// CPython 3.12 or later gets PYTHONPERFSUPPORT=1 (unless it is
        /// set), which calls each Python function through a small
        /// trampoline that the recorder steps through and names from the
        /// perf map CPython writes (/tmp/perf-PID.map, removed once read).
        /// Earlier versions ignore it. Not set with --no-follow (unrecorded
        /// children would leave their maps behind) or a --stack other than
        /// dwarf (which alone steps through the trampolines).
        #[arg(long)]
        no_python_frames: bool,
        /// Entries each thread keeps of its time lost, the longest (1 to
        /// 64).
        #[arg(long, value_name = "N", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=64))]
        waits_top: u32,
        /// Number of rows in each table of the summary.
        #[arg(long, default_value_t = 10)]
        top: usize,
        /// Print no summary.
        #[arg(short, long)]
        quiet: bool,
        /// The program and its arguments.
        #[arg(
            required = true,
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "PROGRAM"
        )]
        program: Vec<OsString>,
    },
    /// Print the call tree of a profile, with recursion collapsing.
    Tree {
        file: PathBuf,
        #[command(flatten)]
        which: Which,
        /// How to collapse recursion: none, direct (a routine calling itself),
        /// conservative (unless a routine name would be lost), full.
        #[arg(long, default_value = "none", value_parser = parse_collapse)]
        collapse: heapledger_analysis::calltree::CollapseMode,
        /// What weighs each stack.
        #[arg(long, value_enum, default_value = "bytes")]
        metric: crate::tree::Metric,
        /// Hide nodes under this percentage of the total (0 shows all).
        #[arg(long, default_value_t = 1.0, value_parser = parse_percent, allow_negative_numbers = true)]
        limit: f64,
        /// Cut the tree below this level.
        #[arg(long, default_value_t = 64)]
        max_level: u32,
        /// The callers tree (leaf functions at the roots).
        #[arg(long)]
        bottom_up: bool,
        /// One routine per source line instead of per function.
        #[arg(long)]
        by_line: bool,
        /// Only the frames of Python functions (CPython 3.12 and later) and
        /// other JIT code, and each stack's allocating function: the
        /// interpreter's own frames between them left out.
        #[arg(long)]
        jit_only: bool,
        /// Print the tree as JSON.
        #[arg(long)]
        json: bool,
        /// Only what the run allocated from this time on (seconds after
        /// the process started), at the resolution of its checkpoints
        /// (`--metric bytes` or `count`).
        #[arg(long, value_name = "SECONDS", requires = "to")]
        from: Option<f64>,
        /// ... up to this time.
        #[arg(long, value_name = "SECONDS", requires = "from")]
        to: Option<f64>,
        /// Only what this thread allocated (1 for the first, as `report`
        /// and the viewer number them; `--metric bytes` or `count`).
        #[arg(long, value_name = "N")]
        thread: Option<u32>,
    },
    /// Write a profile in another tool's format: MALT's JSON (its reader
    /// and web viewer), callgrind (KCachegrind, callgrind_annotate), folded
    /// stacks (flamegraph.pl, inferno), an SVG flame graph.
    Export {
        file: PathBuf,
        /// The format to write.
        #[arg(long, value_enum)]
        format: crate::export::Format,
        /// What weighs each stack, for the formats with one weight (folded,
        /// flamegraph).
        #[arg(long, value_enum, default_value = "bytes")]
        metric: crate::tree::Metric,
        /// The flame graph of the callers: leaf functions at the top,
        /// drawn downwards (an icicle graph).
        #[arg(long)]
        inverted: bool,
        /// Collapse recursion in folded stacks and the flame graph, as
        /// `tree --collapse` does: none, direct, conservative, full.
        #[arg(long, default_value = "none", value_parser = parse_collapse)]
        collapse: heapledger_analysis::calltree::CollapseMode,
        /// Folded stacks, flame graph and speedscope: only the frames of
        /// Python functions (CPython 3.12 and later) and other JIT code,
        /// and each stack's allocating function.
        #[arg(long)]
        jit_only: bool,
        /// Where to write it (default: <profile stem>.malt.json for malt,
        /// callgrind.out.<profile stem> for callgrind).
        #[arg(short, long, value_parser = crate::output::output_path)]
        output: Option<PathBuf>,
        #[command(flatten)]
        which: Which,
    },
    /// Turn the raw data that interrupted runs left behind into profiles,
    /// and remove it.
    Recover {
        /// The directory to write the profiles in.
        #[arg(short, long, value_name = "DIR", default_value = ".")]
        output: PathBuf,
        /// Look for raw data only in this directory (again for more); by
        /// default in $TMPDIR, /tmp, /var/tmp and /dev/shm, where `run`
        /// leaves it.
        #[arg(long = "in", value_name = "DIR")]
        within: Vec<PathBuf>,
    },
    /// Check a profile against memory budgets, for CI: exit 0 within every
    /// budget, 1 with one line per budget exceeded.
    Check {
        file: PathBuf,
        #[command(flatten)]
        which: Which,
        /// Most bytes the program may have asked for and not yet freed at
        /// one moment (the requested peak); K, M, G suffixes.
        #[arg(long, value_name = "SIZE", value_parser = parse_budget)]
        max_peak: Option<u64>,
        /// Most bytes the program may leave allocated at exit (the C/C++
        /// runtime's own blocks apart); 0 allows no leak.
        #[arg(long, value_name = "SIZE", value_parser = parse_budget)]
        max_leaked: Option<u64>,
        /// Most allocation calls.
        #[arg(long, value_name = "N")]
        max_allocations: Option<u64>,
        /// Most temporary allocations (blocks freed by the thread that
        /// made them before it allocated again).
        #[arg(long, value_name = "N")]
        max_temporary: Option<u64>,
        /// Print the verdicts as JSON (`within_budget`, and per budget
        /// `name`, `limit`, `value`, `exceeded`).
        #[arg(long)]
        json: bool,
    },
    /// Which allocation sites grew or shrank between two profiles (by
    /// allocations, bytes, bytes at the peak, bytes leaked), largest change
    /// first; sites matched by function and source line, not by address.
    Diff {
        base: PathBuf,
        new: PathBuf,
        /// Number of sites shown.
        #[arg(long, default_value_t = 20)]
        top: usize,
        /// Print every changed site as JSON.
        #[arg(long)]
        json: bool,
        /// Write a differential flame graph (SVG: red grew, blue shrank),
        /// weighed by --metric, to this file.
        #[arg(long, value_name = "SVG")]
        flamegraph: Option<PathBuf>,
        /// What weighs the differential flame graph.
        #[arg(long, value_enum, default_value = "bytes")]
        metric: crate::tree::Metric,
        /// text (the default), json (as --json), or flamegraph: the
        /// differential flame graph alone, to -o (default diff.svg).
        #[arg(long, value_enum, default_value = "text")]
        format: DiffFormat,
        /// Where `--format flamegraph` writes.
        #[arg(short, long, value_name = "SVG", value_parser = crate::output::output_path)]
        output: Option<PathBuf>,
        /// Only what BASE allocated between these times (`FROM:TO`,
        /// seconds after its process started, at its checkpoints): with
        /// --range and the same file twice, the start of a run against
        /// its end (allocations and bytes).
        #[arg(long, value_name = "FROM:TO", value_parser = parse_range)]
        base_range: Option<(f64, f64)>,
        /// Only what NEW allocated between these times (`FROM:TO`).
        #[arg(long, value_name = "FROM:TO", value_parser = parse_range)]
        range: Option<(f64, f64)>,
    },
    /// The blocks still allocated at exit, in SoHook's leak report layout:
    /// totals, then each leak with its pointer, size, library and
    /// backtrace; the C/C++ runtime's own blocks and LeakSanitizer
    /// suppressions left out.
    Leaks {
        /// The profile (not needed with --print-suppressions).
        #[arg(required_unless_present = "print_suppressions")]
        file: Option<PathBuf>,
        #[command(flatten)]
        which: Which,
        /// One entry per block (its pointer and size) instead of one per
        /// stack.
        #[arg(long)]
        each: bool,
        /// A LeakSanitizer suppressions file (`leak:PATTERN` lines: a
        /// pattern found in a frame's function, file or library takes the
        /// leak out; `*`, `^` and `$` as LeakSanitizer reads them); may be
        /// given more than once.
        #[arg(long, value_name = "FILE")]
        suppressions: Vec<PathBuf>,
        /// Print the built-in suppressions (the C/C++ runtime's own
        /// blocks) and exit.
        #[arg(long)]
        print_suppressions: bool,
        /// Show the C/C++ runtime's own blocks too.
        #[arg(long)]
        no_builtin_suppressions: bool,
        /// Frames shown per backtrace (0: all).
        #[arg(long, default_value_t = 16)]
        frames: usize,
        /// Entries shown (0: all).
        #[arg(long, default_value_t = 0)]
        top: usize,
    },
    /// Time lost waiting: every entry of the threads' logs (mutexes,
    /// rwlocks, condition variables, joins, semaphores), longest first,
    /// with the waiter's stack and the holder's where known.
    Waits {
        file: PathBuf,
        #[command(flatten)]
        which: Which,
        /// Frames shown per stack (0: all).
        #[arg(long, default_value_t = 12)]
        frames: usize,
        /// Print them as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Look at a profile in the browser: serves the viewer on 127.0.0.1
    /// until Ctrl-C, its URL (with a random token) the first line on
    /// standard output.
    View {
        file: PathBuf,
        /// A profile to compare it with (the Diff page).
        base: Option<PathBuf>,
        #[command(flatten)]
        which: Which,
        /// The port (0: any free one).
        #[arg(long, default_value_t = 0)]
        port: u16,
        /// Do not open a browser.
        #[arg(long)]
        no_browser: bool,
    },
    /// Steer a program recording under `heapledger run`, without signals:
    /// `backtrace on|off`, `snapshot [LABEL]`, `reset`, `stats`.
    Ctl {
        /// The process (a pid of the run: the program or a child it started).
        pid: u32,
        /// backtrace on|off, snapshot [LABEL], reset, stats.
        #[arg(required = true, num_args = 1..=2, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// Print heapledger.h, the C header a program steers the recorder with
    /// (`heapledger header > heapledger.h`; docs/control.md).
    Header,
    /// Print the summary of a profile.
    Report {
        file: PathBuf,
        #[command(flatten)]
        which: Which,
        /// Print it as JSON, with stable keys (docs/running.md), for
        /// scripts and CI.
        #[arg(long)]
        json: bool,
        /// Number of rows in each table.
        #[arg(long, default_value_t = 10)]
        top: usize,
    },
}

/// A switch's two positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

/// What `heapledger diff` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DiffFormat {
    Text,
    Json,
    Flamegraph,
}

/// Which process of a profile store a reader shows.
#[derive(clap::Args, Debug)]
struct Which {
    /// Show this process of the run (default: the one `run` started).
    #[arg(long, value_name = "PID", conflicts_with = "all")]
    pid: Option<u32>,
    /// Show every process of the run, merged into one profile.
    #[arg(long)]
    all: bool,
    /// Show the process's snapshot of this label (the last one so
    /// labelled) or number, taken while it ran (`heapledger_snapshot`,
    /// `heapledger ctl PID snapshot`); `PROFILE:LABEL` does the same.
    #[arg(long, value_name = "LABEL", conflicts_with = "all")]
    snapshot: Option<String>,
}

impl Which {
    fn pick(&self) -> crate::profiles::Pick {
        match (self.pid, self.all) {
            (_, true) => crate::profiles::Pick::All,
            (Some(p), false) => crate::profiles::Pick::Pid(p),
            (None, false) => crate::profiles::Pick::Main,
        }
    }
}

/// Opens a profile for a reader; says on stderr, after the reader's
/// output, which other processes the store holds, and where the profile
/// stops at a checkpoint.
fn opened(
    file: &std::path::Path,
    which: &Which,
    load: crate::profiles::Load,
) -> Result<crate::profiles::Opened> {
    match &which.snapshot {
        Some(label) => crate::profiles::open_snapshot(file, which.pick(), Some(label), load),
        None => crate::profiles::open(file, which.pick(), load),
    }
}

/// The summary of an opened profile, its stacks summed as they are read.
fn summary_of(
    o: &crate::profiles::Opened,
    top: usize,
) -> Result<heapledger_analysis::summary::Summary> {
    let mut sites = heapledger_analysis::summary::SiteSums::new();
    o.each_stack(|stack, infos| sites.add(&o.profile, stack, infos))?;
    Ok(heapledger_analysis::summary::Summary::with_sites(
        &o.profile,
        sites,
        &heapledger_analysis::summary::SummaryOptions { top },
    ))
}

/// `--jit-only` on a profile without a frame in JIT code: each stack is
/// its allocating function alone, which says so.
fn no_jit_frames(o: &crate::profiles::Opened, jit_only: bool) {
    let jit = heapledger_profile::JIT_BINARY;
    if jit_only && !o.profile.sites.strings.iter().any(|s| s == jit) {
        say!(
            "heapledger: no Python or JIT function in this profile (CPython 3.12 or later, or a perf map): --jit-only leaves each stack its allocating function"
        );
    }
}

fn after(file: &std::path::Path, o: &crate::profiles::Opened) {
    if let Some((seq, secs)) = o.checkpoint {
        say!(
            "heapledger: this process was killed; its profile stops at its checkpoint {seq}, {secs:.1} s after it started"
        );
    }
    if let Some(line) = crate::profiles::others_line(file, &o.others) {
        say!("heapledger: {line}");
    }
    if let Some(line) = crate::profiles::snapshots_line(file, &o.snapshots) {
        say!("heapledger: {line}");
    }
}

/// Parses the process's arguments and runs the command; returns the exit code.
pub fn main() -> Result<u8> {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            // `heapledger` alone: the list of commands, as cargo and git
            // print it, on stderr, and the exit code of a usage error.
            say_part!("{}", e.render());
            return Ok(2);
        }
        Err(e) if !e.use_stderr() => {
            // --help and --version: clap prints them to stdout.
            let _ = e.print();
            return Ok(0);
        }
        Err(e) => {
            let mut line = usage_error_line(&e.render().to_string());
            if !line.contains("did you mean") {
                // clap suggests only what is near by its own measure, and
                // offers `-- --tpo` instead where a positional argument is
                // still to come: name the option or command meant.
                let typed = match e.get(clap::error::ContextKind::InvalidArg) {
                    Some(clap::error::ContextValue::String(t)) => Some(t.clone()),
                    _ => match e.get(clap::error::ContextKind::InvalidSubcommand) {
                        Some(clap::error::ContextValue::String(t)) => Some(t.clone()),
                        _ => None,
                    },
                };
                let sub = std::env::args().skip(1).find(|a| !a.starts_with('-'));
                let meant = match (e.kind(), &typed) {
                    (clap::error::ErrorKind::UnknownArgument, Some(t)) => {
                        sub.and_then(|sub| similar_option(&sub, t))
                    }
                    (clap::error::ErrorKind::InvalidSubcommand, Some(t)) => similar_command(t),
                    _ => None,
                };
                if let Some(meant) = meant {
                    line.push_str(&format!(" (did you mean '{meant}'?)"));
                }
            }
            say!("{line}");
            return Ok(2);
        }
    };
    match cli.command {
        Command::Run {
            output,
            stack,
            max_depth,
            no_follow,
            sample_every,
            exact_lifetimes,
            wait_children,
            checkpoint_every,
            backtrace,
            snapshot_every,
            snapshot_when_above,
            only_lib,
            no_waits,
            pymalloc,
            no_python_frames,
            waits_top,
            top,
            quiet,
            program,
        } => {
            let mut it = program.into_iter();
            let program = it.next().expect("clap requires a program");
            // clap takes an unknown option standing where the program goes
            // as the program; a program whose name starts with `-` must come
            // after `--`.
            let raw: Vec<OsString> = std::env::args_os().collect();
            let dashes = raw.iter().position(|a| a == "--");
            let at = raw.iter().position(|a| *a == program);
            let after_dashes = matches!((dashes, at), (Some(d), Some(p)) if d < p);
            let name = program.to_string_lossy();
            if name.starts_with('-') && !after_dashes {
                let tip = similar_option("run", &name)
                    .map(|o| format!(" (did you mean '{o}'?)"))
                    .unwrap_or_else(|| " (put the program after `--`)".into());
                say!("error: unexpected argument '{name}' for `heapledger run`{tip}");
                return Ok(2);
            }
            run::run(&RunOptions {
                program,
                args: it.collect(),
                output,
                stack,
                max_depth,
                follow: !no_follow,
                sample_every,
                exact_lifetimes,
                top,
                quiet,
                wait_children: std::time::Duration::from_secs_f64(wait_children),
                checkpoint_every: std::time::Duration::from_secs_f64(checkpoint_every),
                backtrace_off: backtrace == OnOff::Off,
                snapshot_every: snapshot_every.map(std::time::Duration::from_secs_f64),
                snapshot_when_above,
                only_lib,
                waits: !no_waits,
                waits_top,
                pymalloc,
                python_frames: !no_python_frames,
            })
        }
        Command::Ctl { pid, command } => crate::ctl::ctl(pid, &command.join(" ")),
        Command::Header => {
            let _ =
                std::io::Write::write_all(&mut std::io::stdout(), crate::ctl::HEADER.as_bytes());
            Ok(0)
        }
        Command::Tree {
            file,
            which,
            collapse,
            metric,
            limit,
            max_level,
            bottom_up,
            by_line,
            jit_only,
            json,
            from,
            to,
            thread,
        } => {
            let o = opened(&file, &which, crate::profiles::Load::Streamed)?;
            no_jit_frames(&o, jit_only);
            let opts = crate::tree::TreeOptions {
                collapse,
                range: from.zip(to),
                thread,
                metric,
                limit_percent: limit,
                max_level,
                bottom_up,
                json,
                naming: crate::tree::Naming { by_line, jit_only },
            };
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            crate::tree::print(&o, &opts, &mut out)?;
            std::io::Write::flush(&mut out)?;
            after(&file, &o);
            Ok(0)
        }
        Command::Export {
            file,
            format,
            metric,
            inverted,
            collapse,
            jit_only,
            output,
            which,
        } => {
            use crate::export::Format;
            if jit_only
                && !matches!(
                    format,
                    Format::Folded | Format::Flamegraph | Format::Speedscope
                )
            {
                say!(
                    "error: --jit-only applies to --format folded, flamegraph and speedscope, not {}",
                    format!("{format:?}").to_lowercase()
                );
                return Ok(2);
            }
            let o = opened(&file, &which, crate::profiles::Load::Streamed)?;
            no_jit_frames(&o, jit_only);
            let out = output.unwrap_or_else(|| format.default_output(&file));
            let weights = crate::export::Weights {
                metric,
                inverted,
                collapse,
                naming: crate::tree::Naming {
                    by_line: false,
                    jit_only,
                },
            };
            crate::export::write(&o, format, weights, &out)?;
            say!("heapledger: {} written to {}", format.name(), out.display());
            after(&file, &o);
            Ok(0)
        }
        Command::Recover { output, within } => crate::recover::recover(&output, &within),
        Command::Diff {
            base,
            new,
            top,
            json,
            flamegraph,
            metric,
            format,
            output,
            base_range,
            range,
        } => {
            let load = crate::profiles::Load::Streamed;
            let b = crate::profiles::open(&base, crate::profiles::Pick::Main, load)?;
            let n = crate::profiles::open(&new, crate::profiles::Pick::Main, load)?;
            let in_range = |o: &crate::profiles::Opened,
                            r: Option<(f64, f64)>,
                            which: &std::path::Path| {
                r.map(|(a, b)| {
                    let r = crate::tree::range(o, a, b)
                        .map_err(|e| anyhow::anyhow!("`{}`: {e}", which.display()))?;
                    say!(
                        "heapledger: {}: what was allocated from {:.3} s to {:.3} s (the checkpoints around the times asked for)",
                        which.display(),
                        r.from_s,
                        r.to_s
                    );
                    Ok::<_, anyhow::Error>(r.rows)
                })
                .transpose()
            };
            let (br, nr) = (in_range(&b, base_range, &base)?, in_range(&n, range, &new)?);
            if format == DiffFormat::Flamegraph {
                let svg = output.unwrap_or_else(|| PathBuf::from("diff.svg"));
                crate::output::check_writable(Some(&svg))?;
                crate::export::differential(&b, br.as_deref(), &n, nr.as_deref(), metric, &svg)?;
                say!(
                    "heapledger: differential flame graph written to {}",
                    svg.display()
                );
                return Ok(0);
            }
            let rows = crate::diff::rows_in(&b, br.as_deref(), &n, nr.as_deref())?;
            let text = if json || format == DiffFormat::Json {
                format!("{:#}\n", crate::diff::to_json(&rows))
            } else {
                crate::diff::to_text(&rows, top)
            };
            std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes())?;
            if let Some(svg) = flamegraph {
                crate::export::differential(&b, br.as_deref(), &n, nr.as_deref(), metric, &svg)?;
                say!(
                    "heapledger: differential flame graph written to {}",
                    svg.display()
                );
            }
            Ok(0)
        }
        Command::Check {
            file,
            which,
            max_peak,
            max_leaked,
            max_allocations,
            max_temporary,
            json,
        } => {
            let budgets = crate::check::Budgets {
                peak: max_peak,
                leaked: max_leaked,
                allocations: max_allocations,
                temporary: max_temporary,
            };
            if budgets.peak.is_none()
                && budgets.leaked.is_none()
                && budgets.allocations.is_none()
                && budgets.temporary.is_none()
            {
                say!("error: `heapledger check` needs a budget: --max-peak, --max-leaked, --max-allocations or --max-temporary");
                return Ok(2);
            }
            let o = opened(&file, &which, crate::profiles::Load::Streamed)?;
            let summary = summary_of(&o, 0)?;
            if budgets.temporary.is_some() && summary.temporary.total.is_none() {
                say!(
                    "error: {}: this profile does not count temporary allocations (recorded with --sample-every, or not by heapledger): --max-temporary cannot be checked",
                    file.display()
                );
                return Ok(2);
            }
            let verdicts = crate::check::verdicts(&summary, &budgets);
            let over = verdicts.iter().any(|v| v.exceeded());
            if json {
                tell!("{:#}", crate::check::to_json(&verdicts));
            } else {
                for v in verdicts.iter().filter(|v| v.exceeded()) {
                    tell!("{}", v.line());
                }
            }
            after(&file, &o);
            Ok(u8::from(over))
        }
        Command::Leaks {
            file,
            which,
            each,
            suppressions,
            print_suppressions,
            no_builtin_suppressions,
            frames,
            top,
        } => {
            if print_suppressions {
                let _ = std::io::Write::write_all(
                    &mut std::io::stdout(),
                    crate::leaks::builtin_suppressions().as_bytes(),
                );
                return Ok(0);
            }
            let file = file.expect("required by clap");
            let sups = crate::leaks::read_suppressions(&suppressions)?;
            let o = opened(&file, &which, crate::profiles::Load::Streamed)?;
            let opts = crate::leaks::LeakOptions {
                each,
                frames,
                top,
                no_builtin: no_builtin_suppressions,
            };
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            crate::leaks::report(&o, &sups, &opts, &mut out)?;
            std::io::Write::flush(&mut out)?;
            after(&file, &o);
            Ok(0)
        }
        Command::Waits {
            file,
            which,
            frames,
            json,
        } => {
            let o = opened(&file, &which, crate::profiles::Load::Streamed)?;
            let text = crate::waits::report(&o.profile, frames, json);
            std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes())?;
            after(&file, &o);
            Ok(0)
        }
        Command::View {
            file,
            base,
            which,
            port,
            no_browser,
        } => {
            let o = opened(&file, &which, crate::profiles::Load::Streamed)?;
            after(&file, &o);
            let base = match &base {
                Some(b) => Some(crate::profiles::open(
                    b,
                    crate::profiles::Pick::Main,
                    crate::profiles::Load::Streamed,
                )?),
                None => None,
            };
            crate::view::serve(crate::view::Viewer::new(o, base), port, !no_browser)?;
            Ok(0)
        }
        Command::Report {
            file,
            which,
            json,
            top,
        } => {
            let o = opened(&file, &which, crate::profiles::Load::Streamed)?;
            let summary = summary_of(&o, top)?;
            let text = if json {
                let mut v = summary.to_json();
                // When each checkpoint was taken: the times `tree --from
                // --to` and the viewer's time ranges stand on.
                v["checkpoints"] = o.series_times()?.into();
                format!("{v:#}\n")
            } else {
                summary.to_string()
            };
            std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes())?;
            after(&file, &o);
            Ok(0)
        }
    }
}

/// A usage error as one line: clap's first paragraph, with its tip ("a
/// similar argument exists: '--top'") kept in parentheses; the usage lines
/// after them are left out.
fn usage_error_line(text: &str) -> String {
    let mut paragraphs = text
        .split("\n\n")
        .map(|p| p.lines().map(str::trim).collect::<Vec<_>>().join(" "));
    let mut line = paragraphs.next().unwrap_or_default();
    for p in paragraphs {
        let Some(tip) = p.strip_prefix("tip: ") else {
            continue;
        };
        for similar in [
            "a similar argument exists: ",
            "a similar subcommand exists: ",
            "a similar value exists: ",
        ] {
            if let Some(what) = tip.strip_prefix(similar) {
                line.push_str(&format!(" (did you mean {what}?)"));
            }
        }
    }
    line
}

/// The long option of `command` nearest to a mistyped `arg` (`--stak`,
/// `--tpo`), where one is near enough to be what was meant.
fn similar_option(command: &str, arg: &str) -> Option<String> {
    let typed = arg.trim_start_matches('-');
    let typed = typed.split('=').next().unwrap_or(typed);
    let cmd = <Cli as clap::CommandFactory>::command();
    let sub = cmd.find_subcommand(command)?;
    nearest(typed, sub.get_arguments().filter_map(|a| a.get_long())).map(|o| format!("--{o}"))
}

/// The command nearest to a mistyped one (`rnu`).
fn similar_command(typed: &str) -> Option<String> {
    // Formats that were commands, or that users name first.
    if ["callgrind", "malt", "json"].contains(&typed) {
        let format = if typed == "callgrind" {
            "callgrind"
        } else {
            "malt"
        };
        return Some(format!("export PROFILE --format {format}"));
    }
    let cmd = <Cli as clap::CommandFactory>::command();
    nearest(typed, cmd.get_subcommands().map(|c| c.get_name())).map(str::to_owned)
}

/// The candidate fewest edits away from `typed` (a swap of two neighbours
/// being one edit: `tpo` is one from `top`), if that is at most a third of
/// its length (at least one).
fn nearest<'a>(typed: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .map(|c| (strsim::damerau_levenshtein(typed, c), c))
        .filter(|(d, c)| *d <= (c.len() / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn parse_collapse(s: &str) -> Result<heapledger_analysis::calltree::CollapseMode, String> {
    s.parse()
        .map_err(|e: heapledger_analysis::calltree::ParseModeError| e.to_string())
}

fn parse_percent(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=100.0).contains(&v) => Ok(v),
        _ => Err(format!("`{s}` is not a percentage between 0 and 100")),
    }
}

/// `FROM:TO`, two times in seconds.
fn parse_range(s: &str) -> Result<(f64, f64), String> {
    let err = || format!("`{s}` is not a time range FROM:TO in seconds");
    let (a, b) = s.split_once(':').ok_or_else(err)?;
    match (a.trim().parse::<f64>(), b.trim().parse::<f64>()) {
        (Ok(a), Ok(b)) if a.is_finite() && b.is_finite() => Ok((a, b)),
        _ => Err(err()),
    }
}

fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=86_400.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "`{s}` is not a number of seconds between 0 and 86400"
        )),
    }
}

/// A budget in bytes: a byte count, or 0.
fn parse_budget(s: &str) -> Result<u64, String> {
    if s.trim() == "0" {
        return Ok(0);
    }
    parse_bytes(s)
}

/// A byte count: a number, with a fraction where a unit follows (`1.5G`),
/// optionally followed by K, M, G or T (powers of 1024, also written
/// KiB/KB, MiB/MB, ..., in either case, after a space or not), at least 1.
fn parse_bytes(s: &str) -> Result<u64, String> {
    let bad = || format!("`{s}` is not a byte count (such as 4096, 512K, 1.5M, 1G)");
    let t = s.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let shift: u32 = match unit.trim_start().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(bad()),
    };
    let digits = |d: &str| !d.is_empty() && d.len() <= 19 && d.bytes().all(|b| b.is_ascii_digit());
    let (whole, fraction) = match number.split_once('.') {
        None => (number, None),
        Some((w, f)) if digits(f) && shift > 0 => (w, Some(f)),
        Some(_) => return Err(bad()),
    };
    if !digits(whole) {
        return Err(bad());
    }
    let whole: u128 = whole.parse().map_err(|_| bad())?;
    let scaled = match fraction {
        None => whole << shift,
        Some(f) => {
            let n: u128 = f.parse().map_err(|_| bad())?;
            (whole << shift) + (n << shift) / 10u128.pow(f.len() as u32)
        }
    };
    match u64::try_from(scaled) {
        Ok(v) if v >= 1 => Ok(v),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::{parse_bytes, similar_option, usage_error_line};

    #[test]
    fn usage_errors_keep_the_tip_on_one_line() {
        let text = "error: unexpected argument '--tpo' found\n\n  tip: a similar argument exists: '--top'\n\nUsage: heapledger report --top <TOP> <FILE>\n\nFor more information, try '--help'.\n";
        assert_eq!(
            usage_error_line(text),
            "error: unexpected argument '--tpo' found (did you mean '--top'?)"
        );
    }

    #[test]
    fn a_mistyped_run_option_is_named() {
        assert_eq!(similar_option("run", "--stak").as_deref(), Some("--stack"));
        assert_eq!(
            similar_option("run", "--sample-evry=4K").as_deref(),
            Some("--sample-every")
        );
        assert_eq!(similar_option("report", "--tpo").as_deref(), Some("--top"));
        assert_eq!(similar_option("run", "--zzzzzz"), None);
        assert_eq!(super::similar_command("rnu").as_deref(), Some("run"));
        assert_eq!(super::similar_command("xyz"), None);
    }

    #[test]
    fn byte_counts_take_binary_suffixes() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("512K"), Ok(524_288));
        assert_eq!(parse_bytes("512k"), Ok(524_288));
        assert_eq!(parse_bytes("512KiB"), Ok(524_288));
        assert_eq!(parse_bytes("1M"), Ok(1 << 20));
        assert_eq!(parse_bytes("2mb"), Ok(2 << 20));
        assert_eq!(parse_bytes("1G"), Ok(1 << 30));
        assert_eq!(parse_bytes("7B"), Ok(7));
        assert_eq!(parse_bytes("1.5M"), Ok(3 << 19));
        assert_eq!(parse_bytes("0.5 GiB"), Ok(1 << 29));
        assert_eq!(parse_bytes("10 MB"), Ok(10 << 20));
        assert_eq!(parse_bytes("1T"), Ok(1 << 40));
        assert_eq!(parse_bytes("1.001K"), Ok(1025));
        for bad in [
            "",
            "0",
            "0K",
            "K",
            "1.5",
            ".5M",
            "1.M",
            "1.2.3M",
            "-4",
            "12X",
            "1e3",
            "99999999999999999999G",
            "20000000T",
        ] {
            let e = parse_bytes(bad).unwrap_err();
            assert!(e.contains("not a byte count"), "{bad}: {e}");
        }
    }
}
