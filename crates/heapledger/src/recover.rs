//! Raw data that an interrupted run left behind.
//!
//! `heapledger run` keeps the program's raw dumps in a directory of its own
//! under the temporary directory, and removes it as it ends. Killed itself
//! (SIGKILL, a crash, a closed session) while the program ran, it leaves
//! that directory behind, and the program, which goes on, still writes its
//! dump there as it ends. The next `run` says so in one line, and
//! `heapledger recover` turns such data into profiles and removes it.

use crate::convert::ProcessEnd;
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// A raw data directory of a run whose heapledger is gone, with the bytes
/// of data it holds.
struct Leftover {
    dir: PathBuf,
    bytes: u64,
}

/// The raw data directories (`heapledger-PID-...`) whose heapledger process
/// no longer runs, holding files of processes that have all ended.
fn leftovers(bases: &[PathBuf]) -> Vec<Leftover> {
    let mut found = Vec::new();
    for base in bases {
        let Ok(entries) = std::fs::read_dir(base) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(pid) = name
                .to_str()
                .and_then(|n| n.strip_prefix("heapledger-"))
                .and_then(|rest| rest.split('-').next())
                .and_then(|p| p.parse::<i32>().ok())
            else {
                continue;
            };
            let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
            if !is_dir || alive(pid) {
                continue;
            }
            let files: Vec<_> = std::fs::read_dir(e.path())
                .into_iter()
                .flatten()
                .flatten()
                .collect();
            // A process of that run that still runs writes its dump there
            // as it ends: leave the directory to it until then.
            let writer_runs = files
                .iter()
                .any(|f| crate::dumps::dump_pid(&f.path()).is_some_and(|p| alive(p as i32)));
            if writer_runs || files.is_empty() {
                continue;
            }
            let bytes: u64 = files
                .iter()
                .filter_map(|f| f.metadata().ok())
                .map(|m| m.len())
                .sum();
            found.push(Leftover {
                dir: e.path(),
                bytes,
            });
        }
    }
    found.sort_by(|a, b| a.dir.cmp(&b.dir));
    found
}

/// Whether process `pid` runs (or exists and is not ours to signal).
fn alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 checks only that the process exists.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Says in one line, on stderr, where interrupted runs left raw data in
/// the temporary directory (`$TMPDIR` or /tmp; `recover` also looks in the
/// fallbacks).
pub fn mention_leftovers() {
    let found = leftovers(&[std::env::temp_dir()]);
    let Some(first) = found.first() else {
        return;
    };
    let bytes: u64 = found.iter().map(|l| l.bytes).sum();
    let size = heapledger_analysis::summary::format_bytes(bytes);
    let what = if found.len() == 1 {
        format!(
            "an interrupted run left its profile data ({size}) in {}",
            first.dir.display()
        )
    } else {
        format!(
            "{} interrupted runs left their profile data ({size}) in {} and {} more",
            found.len(),
            first.dir.display(),
            found.len() - 1
        )
    };
    say!("heapledger: {what}; `heapledger recover` turns it into profiles and removes it");
}

/// `heapledger recover`: turns the raw data of interrupted runs, found in
/// `within` (by default where `run` leaves it), into profiles in
/// `out_dir` (`heapledger-<exe>-<pid>.sqlite`), and removes it.
/// Returns the exit code: 0, or 1 where some data could not be read.
pub fn recover(out_dir: &Path, within: &[PathBuf]) -> Result<u8> {
    let bases = if within.is_empty() {
        crate::dumps::temp_bases()
    } else {
        within.to_vec()
    };
    let found = leftovers(&bases);
    if found.is_empty() {
        say!("heapledger: no profile data of an interrupted run was found");
        return Ok(0);
    }
    let symbols = heapledger_symbols::Symbols::new();
    let mut failed = false;
    for l in found {
        let mut read = crate::dumps::read_dumps(&l.dir, &[])
            .with_context(|| format!("cannot read {}", l.dir.display()))?;
        failed |= read.unreadable;
        // One store per interrupted run, named after its first process
        // (the one whose parent is none of the others).
        let pids: Vec<u32> = read.dumps.iter().map(|d| d.pid).collect();
        let root = read
            .dumps
            .iter()
            .position(|d| !pids.contains(&d.ppid))
            .unwrap_or(0);
        let mut profiles: Vec<heapledger_profile::Profile> = Vec::new();
        let mut order: Vec<usize> = (0..read.dumps.len()).collect();
        order.sort_by_key(|&i| i != root);
        for &i in &order {
            // How it ended is unknown: heapledger was not there to see it.
            profiles.push(crate::convert::to_compact_profile(
                &mut read.dumps[i],
                &ProcessEnd::default(),
                &symbols,
            ));
        }
        for d in &mut read.snapshots {
            profiles.push(crate::convert::to_compact_profile(
                d,
                &ProcessEnd::default(),
                &symbols,
            ));
        }
        if let Some(&first) = order.first() {
            let d = &read.dumps[first];
            let path = out_dir.join(format!(
                "heapledger-{}-{}.sqlite",
                crate::dumps::exe_name(d),
                d.pid
            ));
            crate::output::write_store(&profiles, &path)?;
            say!("heapledger: profile written to {}", path.display());
        }
        // Only now: a recovery that fails (out of memory) leaves the data
        // for the next one.
        crate::dumps::remove_consumed(&read.consumed);
        if std::fs::remove_dir(&l.dir).is_ok() {
            say!("heapledger: removed {}", l.dir.display());
        } else {
            say!(
                "heapledger: left {}: what it still holds could not be read",
                l.dir.display()
            );
        }
    }
    Ok(u8::from(failed))
}
