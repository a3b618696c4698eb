//! Code a JIT compiler made, named from the perf map the runtime wrote.
//!
//! JIT-compiled code lies in anonymous memory: no binary holds its names.
//! Runtimes that know them write them, one line per piece of code, to
//! `/tmp/perf-PID.map`, the format Linux `perf` reads
//! (`tools/perf/Documentation/jit-interface.txt`): `START SIZE NAME`,
//! START and SIZE in hex without `0x`. Node and V8
//! (`--perf-basic-prof`), CPython 3.12 and later (`-X perf`), Java with
//! perf-map-agent or `-XX:+DumpPerfMapAtExit` (JDK 17), .NET
//! (`DOTNET_PerfMapEnabled=1`), LuaJIT and Julia
//! write it. Where pieces of code overlap (code freed and its memory used
//! again), the later line wins, as `perf` takes it.
//!
//! Written by hand: it is a line format with one rule; no crate reads it.

use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};

use crate::{Frame, Resolved};

/// The most of a perf map read: a long-running JIT writes lines for as
/// long as it runs, and a reader must not grow without bound. Lines past
/// it name nothing.
const MAX_BYTES: u64 = 256 << 20;

/// The binary a JIT frame is reported in.
pub const JIT_BINARY: &str = "[jit]";

/// The perf map of process `pid`, where its runtime wrote one.
pub fn path_of(pid: u32) -> PathBuf {
    PathBuf::from(format!("/tmp/perf-{pid}.map"))
}

/// Removes process `pid`'s perf map where CPython wrote it for heapledger
/// (`PYTHONPERFSUPPORT`, which `heapledger run` sets): a regular file,
/// last written at or after `not_before_unix_ns` (the run's start), whose
/// first line names a Python function (`py::`). Any other map (another
/// runtime's, or one from before the run) stays. Whether it was removed.
pub fn remove_python_map(pid: u32, not_before_unix_ns: u64) -> bool {
    let path = path_of(pid);
    let Ok(meta) = std::fs::symlink_metadata(&path) else {
        return false;
    };
    let written_ns = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as u64);
    if !meta.is_file() || written_ns < not_before_unix_ns {
        return false;
    }
    let Ok(file) = std::fs::File::open(&path) else {
        return false;
    };
    let mut first = Vec::new();
    let _ = std::io::BufReader::new(file.take(4096)).read_until(b'\n', &mut first);
    let python = first
        .split(|&b| b == b' ')
        .nth(2)
        .is_some_and(|name| name.starts_with(b"py::"));
    python && std::fs::remove_file(&path).is_ok()
}

/// Names the addresses of `sorted` (lookup addresses, sorted, distinct)
/// that the perf map at `path` covers: (address, frame) pairs. A file last
/// written before `not_before` (the process's start, Unix time in ns) is
/// an earlier process's of the same pid, and names nothing; so does a
/// file that cannot be read.
pub fn resolve(path: &Path, not_before_unix_ns: u64, sorted: &[u64]) -> Vec<(u64, Resolved)> {
    if sorted.is_empty() {
        return Vec::new();
    }
    // Asked of the path first: opening a FIFO would wait for a writer.
    let Ok(meta) = std::fs::metadata(path) else {
        return Vec::new();
    };
    let written_ns = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as u64);
    // A second of slack for file systems with coarse times.
    if !meta.is_file() || written_ns.saturating_add(1_000_000_000) < not_before_unix_ns {
        return Vec::new();
    }
    let Ok(file) = std::fs::File::open(path) else {
        return Vec::new();
    };
    // For each address, the last line that covers it.
    let mut names: Vec<String> = Vec::new();
    let mut which: Vec<Option<usize>> = vec![None; sorted.len()];
    let reader = std::io::BufReader::new(file.take(MAX_BYTES));
    for line in reader.split(b'\n') {
        let Ok(line) = line else { break };
        let Some((start, size, name)) = parse_line(&line) else {
            continue;
        };
        let end = start.saturating_add(size);
        let first = sorted.partition_point(|&a| a < start);
        let last = sorted.partition_point(|&a| a < end);
        if first == last {
            continue;
        }
        names.push(name);
        for w in &mut which[first..last] {
            *w = Some(names.len() - 1);
        }
    }
    sorted
        .iter()
        .zip(which)
        .filter_map(|(&a, w)| Some((a, frame_of(&names[w?]))))
        .collect()
}

/// `START SIZE NAME` (hex, hex, the rest of the line).
fn parse_line(line: &[u8]) -> Option<(u64, u64, String)> {
    let line = std::str::from_utf8(line).ok()?.trim_end_matches('\r');
    let (start, rest) = line.split_once(' ')?;
    let (size, name) = rest.split_once(' ')?;
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
    let name = name.trim();
    if name.is_empty() {
        return None;
    }
    Some((hex(start)?, hex(size)?, name.to_owned()))
}

/// A frame for a perf map's name. V8 ends its names with where the
/// function is defined (`JS:*render /app/view.js:12:5`): that becomes the
/// frame's file and line, and the rest its function, without V8's `JS:`
/// and the mark of the tier that compiled it (`~` interpreted, `^`
/// Sparkplug, `+` Maglev, `*` TurboFan), so that one function is one
/// whichever tier ran it: `render`, or `(anonymous)`. CPython's
/// (`py::render:/app/view.py`) are its function and file. Other names
/// stay whole.
fn frame_of(name: &str) -> Resolved {
    if let Some((function, file)) = name
        .strip_prefix("py::")
        .and_then(|rest| rest.split_once(':'))
        .filter(|(f, file)| !f.is_empty() && !file.is_empty())
    {
        return Resolved {
            binary: PathBuf::from(JIT_BINARY),
            frames: vec![Frame {
                function: Some(function.to_owned()),
                file: Some(file.to_owned()),
                line: None,
            }],
        };
    }
    let at = name.rsplit_once(' ').and_then(|(function, place)| {
        let function = match function.strip_prefix("JS:") {
            Some(js) => match js.trim_start_matches(['~', '^', '+', '*']) {
                "" => "(anonymous)",
                f => f,
            },
            None => function,
        };
        let (file_line, last) = place.rsplit_once(':')?;
        let last: u32 = last.parse().ok()?;
        // `file:line:column` or `file:line`.
        let (file, line) = match file_line.rsplit_once(':') {
            Some((file, line)) if line.parse::<u32>().is_ok() => (file, line.parse().ok()?),
            _ => (file_line, last),
        };
        (!file.is_empty()).then(|| Frame {
            function: Some(function.to_owned()),
            file: Some(file.to_owned()),
            line: Some(line),
        })
    });
    Resolved {
        binary: PathBuf::from(JIT_BINARY),
        frames: vec![at.unwrap_or_else(|| Frame {
            function: Some(name.to_owned()),
            file: None,
            line: None,
        })],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(text: &str) -> (PathBuf, impl Drop) {
        struct Gone(PathBuf);
        impl Drop for Gone {
            fn drop(&mut self) {
                let _ = std::fs::remove_file(&self.0);
            }
        }
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "heapledger-perfmap-test-{}-{}.map",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        std::fs::write(&path, text).unwrap();
        (path.clone(), Gone(path))
    }

    fn names(found: &[(u64, Resolved)]) -> Vec<(u64, String, Option<String>, Option<u32>)> {
        found
            .iter()
            .map(|(a, r)| {
                let f = &r.frames[0];
                (*a, f.function.clone().unwrap(), f.file.clone(), f.line)
            })
            .collect()
    }

    #[test]
    fn names_the_addresses_a_line_covers_the_later_line_winning() {
        let (path, _gone) = map("1000 100 Builtin:ArgumentsAdaptor\n\
             2000 40 JS:*render /app/view.js:12:5\n\
             garbage line\n\
             2000 40 py::handle:/srv/app.py\n\
             3000 10 LuaJIT trace #7 app.lua:40\n\
             0x4000 10 stub\n");
        let found = resolve(
            &path,
            0,
            &[0x0fff, 0x1000, 0x10ff, 0x1100, 0x2010, 0x3005, 0x4001],
        );
        assert_eq!(
            names(&found),
            [
                (0x1000, "Builtin:ArgumentsAdaptor".into(), None, None),
                (0x10ff, "Builtin:ArgumentsAdaptor".into(), None, None),
                (0x2010, "handle".into(), Some("/srv/app.py".into()), None),
                (
                    0x3005,
                    "LuaJIT trace #7".into(),
                    Some("app.lua".into()),
                    Some(40)
                ),
                (0x4001, "stub".into(), None, None),
            ]
        );
        assert_eq!(found[0].1.binary, Path::new(JIT_BINARY));
        let (path, _gone) = map("2000 40 JS:*render /app/view.js:12:5\n");
        assert_eq!(
            names(&resolve(&path, 0, &[0x2000])),
            [(
                0x2000,
                "render".into(),
                Some("/app/view.js".into()),
                Some(12)
            )]
        );
    }

    #[test]
    fn an_earlier_processs_map_or_none_names_nothing() {
        let (path, _gone) = map("1000 100 old\n");
        let future = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
            + 60_000_000_000;
        assert!(resolve(&path, future, &[0x1000]).is_empty());
        assert_eq!(resolve(&path, 0, &[0x1000]).len(), 1);
        assert!(resolve(Path::new("/nonexistent/perf-1.map"), 0, &[0x1000]).is_empty());
        assert!(resolve(Path::new("/dev"), 0, &[0x1000]).is_empty());
    }
}
