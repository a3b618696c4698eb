//! Command-line parsing into plain option structs, and dispatch.

use crate::run::{self, RunOptions};
use anyhow::Result;
use clap::{Parser, Subcommand, ValueEnum};
use std::ffi::OsString;
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "memtrail",
    version,
    about = "Memory profiler for native Linux programs"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum StackArg {
    /// DWARF CFI unwinding: right on code built without frame pointers.
    Dwarf,
    /// Frame-pointer walk: fast, right only on code built with frame pointers.
    Fp,
    /// No stacks: counts, sizes and live blocks only.
    None,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a program under the recorder and write its profile.
    Run {
        /// Where to write the profile (default: memtrail-<exe>-<pid>.json).
        #[arg(short, long)]
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
        /// How to collapse recursion: none, direct (a routine calling itself),
        /// conservative (unless a routine name would be lost), full.
        #[arg(long, default_value = "none", value_parser = parse_collapse)]
        collapse: memtrail_analysis::calltree::CollapseMode,
        /// What weighs each stack.
        #[arg(long, value_enum, default_value = "bytes")]
        metric: crate::tree::Metric,
        /// Hide nodes under this percentage of the total (0 shows all).
        #[arg(long, default_value_t = 1.0, value_parser = parse_percent)]
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
        /// Print the tree as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Write a profile as a callgrind file (for KCachegrind, callgrind_annotate).
    Callgrind {
        file: PathBuf,
        /// Where to write it (default: callgrind.out.<profile stem>).
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Print the summary of a profile.
    Report {
        file: PathBuf,
        /// Number of rows in each table.
        #[arg(long, default_value_t = 10)]
        top: usize,
    },
}

/// Parses the process's arguments and runs the command; returns the exit code.
pub fn main() -> Result<u8> {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if !e.use_stderr() => {
            // --help and --version: clap prints them to stdout.
            let _ = e.print();
            return Ok(0);
        }
        Err(e) => {
            // A usage error is one line: the first paragraph of clap's
            // message (the tip and usage lines after it are left out).
            let text = e.render().to_string();
            let line: Vec<&str> = text
                .lines()
                .take_while(|l| !l.trim().is_empty())
                .map(str::trim)
                .collect();
            eprintln!("{}", line.join(" "));
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
            if program.to_string_lossy().starts_with('-') && !after_dashes {
                eprintln!(
                    "error: unexpected argument '{}' for `memtrail run` (put the program after `--`)",
                    program.to_string_lossy()
                );
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
            })
        }
        Command::Tree {
            file,
            collapse,
            metric,
            limit,
            max_level,
            bottom_up,
            by_line,
            json,
        } => {
            let profile = memtrail_profile::Profile::from_path(&file)?;
            let opts = crate::tree::TreeOptions {
                collapse,
                metric,
                limit_percent: limit,
                max_level,
                bottom_up,
                json,
                by_line,
            };
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            crate::tree::print(&profile, &opts, &mut out)?;
            std::io::Write::flush(&mut out)?;
            Ok(0)
        }
        Command::Callgrind { file, output } => {
            let profile = memtrail_profile::Profile::from_path(&file)?;
            let out = output.unwrap_or_else(|| {
                let stem = file
                    .file_stem()
                    .map_or_else(|| "profile".into(), |s| s.to_string_lossy().into_owned());
                PathBuf::from(format!("callgrind.out.{stem}"))
            });
            let f = std::fs::File::create(&out)
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", out.display()))?;
            let mut w = std::io::BufWriter::new(f);
            memtrail_profile::callgrind::write(&profile, &mut w)
                .and_then(|()| std::io::Write::flush(&mut w))
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", out.display()))?;
            eprintln!("memtrail: callgrind file written to {}", out.display());
            Ok(0)
        }
        Command::Report { file, top } => {
            let profile = memtrail_profile::Profile::from_path(&file)?;
            let summary = memtrail_analysis::summary::Summary::from_profile(
                &profile,
                &memtrail_analysis::summary::SummaryOptions { top },
            );
            std::io::Write::write_all(
                &mut std::io::stdout().lock(),
                summary.to_string().as_bytes(),
            )?;
            Ok(0)
        }
    }
}

fn parse_collapse(s: &str) -> Result<memtrail_analysis::calltree::CollapseMode, String> {
    s.parse()
        .map_err(|e: memtrail_analysis::calltree::ParseModeError| e.to_string())
}

fn parse_percent(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=100.0).contains(&v) => Ok(v),
        _ => Err(format!("`{s}` is not a percentage between 0 and 100")),
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

/// A byte count: digits, optionally followed by K, M or G (powers of 1024,
/// also written KiB/KB, MiB/MB, GiB/GB, in either case), at least 1.
fn parse_bytes(s: &str) -> Result<u64, String> {
    let bad = || format!("`{s}` is not a byte count (such as 4096, 512K, 1M, 1G)");
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => return Err(bad()),
    };
    let n: u64 = digits.parse().map_err(|_| bad())?;
    match n.checked_mul(1 << shift) {
        Some(v) if v >= 1 => Ok(v),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

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
        for bad in [
            "",
            "0",
            "0K",
            "K",
            "1.5M",
            "-4",
            "12X",
            "1T",
            "99999999999999999999G",
        ] {
            let e = parse_bytes(bad).unwrap_err();
            assert!(e.contains("not a byte count"), "{bad}: {e}");
        }
    }
}
