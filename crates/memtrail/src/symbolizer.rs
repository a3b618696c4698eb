//! Symbolization off the critical path of `memtrail run`.
//!
//! Reading a binary's debug information (decompressing its sections, parsing
//! its line tables) is most of the cost of turning a dump into a profile, and
//! for a large library it is paid even when a handful of its addresses are
//! looked up: about 60 ms for Python's libpython. memtrail waits for the
//! program anyway, so a thread does that reading while the program runs. It
//! looks at the program's executable mappings in `/proc/PID/maps` every few
//! milliseconds and parses each new binary once; when the program has ended,
//! the same thread converts the dumps with the symbolizer it warmed (blazesym's
//! symbolizer cannot move between threads).

use crate::convert::{self, ProcessEnd};
use memtrail_profile::Profile;
use memtrail_symbols::Symbols;
use memtrail_wire::Dump;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the program's mappings are looked at while it runs: soon after
/// it starts (the loader maps its libraries within milliseconds), then less
/// and less often (reading the maps of a process with thousands of mappings
/// costs milliseconds, and takes its mapping lock).
const POLL_FIRST: Duration = Duration::from_millis(2);
const POLL_MAX: Duration = Duration::from_millis(640);

/// Offsets looked up in each binary while warming: enough to parse the
/// sections and indexes a later lookup needs, spread over its code.
const WARM_LOOKUPS: u64 = 16;

/// Dumps to convert, each with how its process ended.
type Job = Vec<(Dump, ProcessEnd)>;

pub struct Converter {
    jobs: Sender<Job>,
    thread: JoinHandle<Vec<Profile>>,
}

impl Converter {
    /// Starts warming up on the binaries that process `pid` maps.
    pub fn start(pid: u32) -> Converter {
        let (jobs, rx) = channel::<Job>();
        let thread = std::thread::spawn(move || {
            let symbols = Symbols::new();
            let mut warmed = HashSet::new();
            let mut poll = POLL_FIRST;
            loop {
                match rx.recv_timeout(poll) {
                    Ok(job) => {
                        return job
                            .iter()
                            .map(|(d, end)| convert::to_profile(d, end, &symbols))
                            .collect();
                    }
                    Err(RecvTimeoutError::Timeout) => {
                        warm(&symbols, pid, &mut warmed);
                        poll = (poll * 2).min(POLL_MAX);
                    }
                    Err(RecvTimeoutError::Disconnected) => return Vec::new(),
                }
            }
        });
        Converter { jobs, thread }
    }

    /// Converts the dumps, in order, into profiles.
    pub fn convert(self, job: Job) -> anyhow::Result<Vec<Profile>> {
        let n = job.len();
        let sent = self.jobs.send(job).is_ok();
        match self.thread.join() {
            Ok(p) if sent && p.len() == n => Ok(p),
            _ => anyhow::bail!("internal error: the symbolizing thread failed"),
        }
    }
}

/// Parses the binaries of `pid`'s executable mappings not seen before.
fn warm(symbols: &Symbols, pid: u32, warmed: &mut HashSet<PathBuf>) {
    let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return;
    };
    for line in maps.lines() {
        let mut it = line.split_whitespace();
        let (Some(range), Some(perms), Some(offset)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        let path = it.nth(2).unwrap_or("");
        // memtrail's own recorder never shows in a stack, and its debug
        // information is the largest of a small program's.
        if !perms.contains('x')
            || !path.starts_with('/')
            || path.ends_with(crate::run::PRELOAD_NAME)
            || warmed.contains(path.as_ref() as &std::path::Path)
        {
            continue;
        }
        let Some((lo, hi)) = range.split_once('-') else {
            continue;
        };
        let (Ok(lo), Ok(hi), Ok(offset)) = (
            u64::from_str_radix(lo, 16),
            u64::from_str_radix(hi, 16),
            u64::from_str_radix(offset, 16),
        ) else {
            continue;
        };
        let len = hi.saturating_sub(lo);
        let offsets: Vec<u64> = (0..WARM_LOOKUPS)
            .map(|i| offset + len * i / WARM_LOOKUPS)
            .collect();
        warmed.insert(PathBuf::from(path));
        symbols.warm(path.as_ref(), &offsets);
    }
}
