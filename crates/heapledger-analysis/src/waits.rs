//! Time lost waiting (issue 35, seed 004): the threads' logs of lock
//! waits, condition variables, joins and semaphores, each entry charged to
//! the waiter's site (its first frame outside the C and C++ runtime,
//! where `std::mutex::lock` or `pthread_join` leads), with the holder's
//! site where the recorder knew it.

use crate::summary::{site_of, Site};
use heapledger_profile::{Addr, Profile, TimeLost};
use serde_json::{json, Value};
use std::fmt;

/// Libraries a wait's site looks past: the C library, the loader, the
/// C++ runtime.
const RUNTIME: [&str; 6] = [
    "libc.so",
    "ld-linux",
    "libstdc++.so",
    "libgcc_s.so",
    "libc++.so",
    "libpthread.so",
];

fn is_runtime(library: &str) -> bool {
    RUNTIME.iter().any(|r| library.starts_with(r))
}

/// A stack's site: its first frame outside the runtime and outside
/// heapledger.h's own calls (inlined where the program calls
/// `heapledger_wait_begin`), inline frames included; the innermost frame
/// where every one is theirs.
pub fn site_of_wait(profile: &Profile, stack: &[Addr]) -> Option<Site> {
    let first = stack.first().map(|&a| site_of(profile, a));
    for &addr in stack {
        let Some(inner) = profile.resolve_addr(addr) else {
            let s = site_of(profile, addr);
            if !is_runtime(&s.library) {
                return Some(s);
            }
            continue;
        };
        if is_runtime(inner.binary_name()) {
            continue;
        }
        let chain = std::iter::once(inner).chain(profile.inline_chain(addr));
        for f in chain {
            if f.function.starts_with("heapledger_") || f.file.ends_with("heapledger.h") {
                continue;
            }
            if f.function == heapledger_profile::UNKNOWN {
                return Some(site_of(profile, addr));
            }
            return Some(Site {
                function: f.function.to_owned(),
                location: f.location(),
                library: f.binary_name().to_owned(),
            });
        }
    }
    first
}

/// One entry, as reports show it.
#[derive(Debug, Clone, PartialEq)]
pub struct WaitReport {
    pub kind: String,
    /// The thread's number (None: the row of threads that ended first).
    pub thread: Option<u64>,
    pub count: u64,
    pub total_seconds: f64,
    pub max_seconds: f64,
    pub site: Option<Site>,
    pub holder: Option<Site>,
}

/// The time lost of a profile: every entry, longest first, and the total.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Waits {
    pub entries: Vec<WaitReport>,
    pub total_seconds: f64,
}

impl Waits {
    pub fn of(profile: &Profile) -> Waits {
        let list: &[TimeLost] = profile
            .heapledger
            .as_ref()
            .map_or(&[], |e| &e.time_lost[..]);
        let mut entries: Vec<WaitReport> = list
            .iter()
            .map(|t| WaitReport {
                kind: t.kind_name().to_owned(),
                thread: t.thread,
                count: t.count,
                total_seconds: t.total_ns as f64 / 1e9,
                max_seconds: t.max_ns as f64 / 1e9,
                site: site_of_wait(profile, &t.stack),
                holder: site_of_wait(profile, &t.holder),
            })
            .collect();
        entries.sort_by(|a, b| b.total_seconds.total_cmp(&a.total_seconds));
        let total_seconds = entries.iter().map(|e| e.total_seconds).sum();
        Waits {
            entries,
            total_seconds,
        }
    }

    /// The JSON of `report --json`'s `time_lost`, the first `top` entries.
    pub fn to_json(&self, top: usize) -> Value {
        let site = |s: &Option<Site>| {
            s.as_ref().map(
                |s| json!({"function": s.function, "location": s.location, "library": s.library}),
            )
        };
        json!({
            "total_seconds": self.total_seconds,
            "entries": self.entries.iter().take(top).map(|e| json!({
                "kind": e.kind,
                "thread": e.thread,
                "count": e.count,
                "total_seconds": e.total_seconds,
                "max_seconds": e.max_seconds,
                "site": site(&e.site),
                "holder": site(&e.holder),
            })).collect::<Vec<_>>(),
        })
    }

    /// The summary's section, the first `top` entries.
    pub fn write(&self, f: &mut fmt::Formatter<'_>, top: usize) -> fmt::Result {
        if self.entries.is_empty() {
            return Ok(());
        }
        writeln!(
            f,
            "\nTime lost waiting ({} in {}; each thread keeps its longest)",
            seconds(self.total_seconds),
            if self.entries.len() == 1 {
                "1 entry".to_owned()
            } else {
                format!("{} entries", self.entries.len())
            }
        )?;
        writeln!(f, "     total  waits   longest  kind          site")?;
        for e in self.entries.iter().take(top) {
            let site = e.site.as_ref().map_or("??".to_owned(), |s| s.to_string());
            writeln!(
                f,
                "  {:>8}  {:>5}  {:>8}  {:<12}  {site}",
                seconds(e.total_seconds),
                e.count,
                seconds(e.max_seconds),
                e.kind
            )?;
            if let Some(h) = &e.holder {
                writeln!(f, "  {:>38}held by  {h}", "")?;
            }
        }
        Ok(())
    }
}

/// Seconds, shortly: `1.20 s`, `45.3 ms`, `812 µs`.
pub fn seconds(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.2} s")
    } else if s >= 1e-3 {
        format!("{:.1} ms", s * 1e3)
    } else {
        format!("{:.0} µs", s * 1e6)
    }
}
