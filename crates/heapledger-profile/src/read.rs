//! Reading a profile, with an error that says exactly what is wrong.
//!
//! Reading is bounded. A path that names no regular file (`/dev/zero`, a
//! FIFO, a socket) is refused before it is opened; a regular file is read
//! no further than the length it had when opened; and a file that is not a
//! profile is recognized from its first [`HEAD`] bytes without reading the
//! rest (it must start, after blank space, with `{`, and those bytes must be
//! the start of valid JSON).
//!
//! The fast path parses straight into [`Profile`]. Only when that fails does
//! the reader look closer, to tell a truncated file from a non-JSON file, a
//! JSON file that is no profile, a profile of another version, and a damaged
//! profile. serde_json's recursion limit stays on, so deeply nested input is
//! an error, never a stack overflow; nothing here panics on any input. A
//! profile that parses is then checked for values no real profile can have
//! (see [`check_values`]), so that every command reports damage instead of
//! printing it. Every message is one short line: details quoting the file
//! are cut to [`MAX_DETAIL`] characters.

use std::fs::{File, FileType};
use std::io::{self, Read};
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::error::Category;

use crate::error::ProfileError;
use crate::ext::EXT_VERSION;
use crate::model::{Profile, SUPPORTED_FORMAT_VERSIONS};
use crate::timeline::memory;

/// The name used in errors for input that did not come from a file.
const UNNAMED: &str = "<input>";

/// Bytes read first, to recognize a file that is not a profile without
/// reading all of it.
const HEAD: usize = 64 << 10;

/// The longest detail (a parser message, a quoted value) an error holds.
const MAX_DETAIL: usize = 160;

impl Profile {
    /// Reads the profile at `path`: a regular file (a device, a FIFO or a
    /// socket is refused without being opened), read no further than its
    /// length when opened.
    pub fn from_path(path: impl AsRef<Path>) -> Result<Profile, ProfileError> {
        let path = path.as_ref();
        let unreadable = |source: io::Error| match source.kind() {
            io::ErrorKind::NotFound => ProfileError::NotFound {
                path: path.to_owned(),
            },
            _ => ProfileError::Unreadable {
                path: path.to_owned(),
                source,
            },
        };
        let not_a_file = |what| ProfileError::NotAFile {
            path: path.to_owned(),
            what,
        };
        // Before opening: opening a FIFO waits for a writer, and a device
        // such as /dev/zero never ends.
        let meta = std::fs::metadata(path).map_err(unreadable)?;
        if let Some(what) = special_file(meta.file_type()) {
            return Err(not_a_file(what));
        }
        let mut file = File::open(path).map_err(unreadable)?;
        // What was opened (the path may name another file by now).
        let meta = file.metadata().map_err(unreadable)?;
        if let Some(what) = special_file(meta.file_type()) {
            return Err(not_a_file(what));
        }
        if meta.is_dir() {
            // Reading one says why, in the system's words.
            let why = file
                .read(&mut [0u8; 1])
                .err()
                .unwrap_or_else(|| io::Error::other("it is a directory"));
            return Err(unreadable(why));
        }
        read_bounded(&mut file, Some(meta.len()), path)
    }

    /// Reads a profile from `reader`. Input that is not a profile is refused
    /// from its first bytes; a profile is read to the end first (parsing
    /// from memory is several times faster than from a stream).
    pub fn from_reader(mut reader: impl Read) -> Result<Profile, ProfileError> {
        read_bounded(&mut reader, None, Path::new(UNNAMED))
    }

    /// Reads a profile from bytes; errors name it `<input>`.
    pub fn from_slice(bytes: &[u8]) -> Result<Profile, ProfileError> {
        parse(bytes, Path::new(UNNAMED))
    }

    /// Reads a profile from bytes; errors name it `name`.
    pub fn from_slice_named(bytes: &[u8], name: impl AsRef<Path>) -> Result<Profile, ProfileError> {
        parse(bytes, name.as_ref())
    }
}

/// What a file that is neither a regular file nor a directory is.
fn special_file(t: FileType) -> Option<&'static str> {
    Some(if t.is_file() || t.is_dir() {
        return None;
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_fifo() {
        "a FIFO (a pipe)"
    } else if t.is_socket() {
        "a socket"
    } else {
        "a special file"
    })
}

/// Reads a profile from `reader`, at most `len` bytes when known (a file's
/// length; 0, as files of /proc say, is taken as unknown): its head first,
/// and the rest only when the head is the start of a JSON object.
fn read_bounded(
    reader: &mut impl Read,
    len: Option<u64>,
    path: &Path,
) -> Result<Profile, ProfileError> {
    let unreadable = |source| ProfileError::Unreadable {
        path: path.to_owned(),
        source,
    };
    let len = len.filter(|&n| n > 0);
    let head_len = len.map_or(HEAD as u64, |n| n.min(HEAD as u64));
    let mut bytes = Vec::new();
    reader
        .take(head_len)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    let complete = (bytes.len() as u64) < head_len || len == Some(head_len);
    if !complete {
        refuse_by_head(&bytes, path)?;
        match len {
            Some(n) => reader.take(n - head_len).read_to_end(&mut bytes),
            None => reader.read_to_end(&mut bytes),
        }
        .map_err(unreadable)?;
    }
    parse(&bytes, path)
}

/// The first bytes of a longer input: an error unless they could start a
/// profile (blank space, then `{`, then valid JSON so far).
fn refuse_by_head(head: &[u8], path: &Path) -> Result<(), ProfileError> {
    refuse_foreign(head, path)?;
    let head = head.strip_prefix(b"\xef\xbb\xbf").unwrap_or(head);
    let Some(&first) = head.iter().find(|b| !b.is_ascii_whitespace()) else {
        return Err(not_json(path, "it starts with 64 KiB of blank space"));
    };
    if first == 0 {
        return Err(not_json(path, ZERO_BYTE));
    }
    match serde_json::from_slice::<IgnoredAny>(head) {
        // The head is all valid JSON so far, the rest is to come.
        Err(e) if e.classify() == Category::Eof => {
            if first == b'{' {
                Ok(())
            } else {
                Err(not_a_profile(path, top_level(first)))
            }
        }
        Err(e) => Err(syntax_error(path, &e)),
        // One whole value and blank space: not an object, as it goes on.
        Ok(_) => Err(not_a_profile(path, top_level(first))),
    }
}

/// Files a user may take for a profile, told by their first bytes: what
/// each is, and what reads it.
const FOREIGN: [(&[u8], &str); 9] = [
    (
        b"\x1f\x8b",
        "gzip-compressed data, not a profile (decompress a compressed profile first; \
         a pprof file is gzip too: `go tool pprof` reads it)",
    ),
    (
        b"\x28\xb5\x2f\xfd",
        "zstd-compressed data, not a profile (heaptrack's files are: \
         heaptrack_print reads them; decompress a compressed profile first)",
    ),
    (
        b"\xfd7zXZ\x00",
        "xz-compressed data, not a profile (decompress a compressed profile first)",
    ),
    (
        b"BZh",
        "bzip2-compressed data, not a profile (decompress a compressed profile first)",
    ),
    (
        b"\x7fELF",
        "an executable or library, not a profile (`heapledger run -- PROGRAM` profiles a program)",
    ),
    (
        // heapledger-wire's `MAGIC` without its version byte.
        b"HLEDGR\0",
        "raw data a process left, not a profile (`heapledger recover` turns it into one)",
    ),
    (
        b"# callgrind format",
        "a callgrind file, not a profile (KCachegrind and callgrind_annotate read it)",
    ),
    (
        b"version: 1\ncreator:",
        "a callgrind file, not a profile (KCachegrind and callgrind_annotate read it)",
    ),
    (
        b"{\"$schema\":\"https://www.speedscope.app",
        "a speedscope file, not a profile (speedscope reads it)",
    ),
];

/// Refuses a file of a kind in [`FOREIGN`].
fn refuse_foreign(head: &[u8], path: &Path) -> Result<(), ProfileError> {
    match FOREIGN.iter().find(|(magic, _)| head.starts_with(magic)) {
        Some(&(_, what)) => Err(ProfileError::Foreign {
            path: path.to_owned(),
            what,
        }),
        None => Ok(()),
    }
}

/// Said of input that starts with a zero byte.
const ZERO_BYTE: &str = "it starts with a zero byte: binary data, or space never written";

fn parse(bytes: &[u8], path: &Path) -> Result<Profile, ProfileError> {
    refuse_foreign(bytes, path)?;
    let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    let Some(&first) = bytes.iter().find(|b| !b.is_ascii_whitespace()) else {
        return Err(ProfileError::Empty {
            path: path.to_owned(),
        });
    };
    if first == 0 {
        return Err(not_json(path, ZERO_BYTE));
    }
    if first != b'{' {
        // Valid JSON of another shape, or not JSON at all?
        return Err(match serde_json::from_slice::<IgnoredAny>(bytes) {
            Ok(_) => not_a_profile(path, top_level(first)),
            Err(e) => syntax_error(path, &e),
        });
    }
    match serde_json::from_slice::<Profile>(bytes) {
        Ok(profile) => {
            check_format_version(path, &profile.run.format_version)?;
            if let Some(ext) = &profile.heapledger {
                check_ext_version(path, u64::from(ext.version), || ext.version.to_string())?;
            }
            check_values(&profile).map_err(|detail| ProfileError::Malformed {
                path: path.to_owned(),
                detail: clip(&detail),
            })?;
            Ok(profile)
        }
        Err(e) if e.classify() == Category::Data => Err(diagnose(bytes, path, &e)),
        Err(e) => Err(syntax_error(path, &e)),
    }
}

/// Maps an error found before the data was complete (EOF, syntax, I/O).
fn syntax_error(path: &Path, e: &serde_json::Error) -> ProfileError {
    match e.classify() {
        Category::Eof => ProfileError::Truncated {
            path: path.to_owned(),
            detail: format!("at line {} column {}", e.line(), e.column()),
        },
        Category::Io => ProfileError::Unreadable {
            path: path.to_owned(),
            source: io::Error::other(clip(&e.to_string())),
        },
        Category::Syntax | Category::Data => not_json(path, &e.to_string()),
    }
}

fn not_json(path: &Path, detail: &str) -> ProfileError {
    ProfileError::NotJson {
        path: path.to_owned(),
        detail: clip(detail),
    }
}

fn not_a_profile(path: &Path, reason: impl AsRef<str>) -> ProfileError {
    ProfileError::NotAProfile {
        path: path.to_owned(),
        reason: clip(reason.as_ref()),
    }
}

/// Why JSON whose first byte is `first` (not `{`) is no profile.
fn top_level(first: u8) -> String {
    let kind = match first {
        b'[' => "an array",
        b'"' => "a string",
        b't' | b'f' => "a boolean",
        b'n' => "null",
        _ => "a number",
    };
    format!("the top level is {kind}, not an object")
}

/// `text` made fit for a one-line message: control characters escaped, and
/// cut to [`MAX_DETAIL`] characters by leaving out its middle (a parser's
/// message quotes the bad value first and says where it is last).
pub(crate) fn clip(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len().min(4 * MAX_DETAIL));
    for c in text.chars() {
        if c.is_control() {
            escaped.extend(c.escape_default());
        } else {
            escaped.push(c);
        }
    }
    let count = escaped.chars().count();
    if count <= MAX_DETAIL {
        return escaped;
    }
    const TAIL: usize = 40;
    let head: String = escaped.chars().take(MAX_DETAIL - TAIL - 1).collect();
    let tail: String = escaped.chars().skip(count - TAIL).collect();
    format!("{head}…{tail}")
}

/// Just enough of a profile to say what kind of file this is.
#[derive(Deserialize)]
struct Probe {
    run: Option<serde_json::Value>,
    heapledger: Option<ProbeExt>,
}

#[derive(Deserialize)]
struct ProbeExt {
    version: Option<serde_json::Value>,
}

/// The full parse failed on the data: find out why, reading the file again
/// with a lenient shape (only on the error path).
fn diagnose(bytes: &[u8], path: &Path, original: &serde_json::Error) -> ProfileError {
    let probe = match serde_json::from_slice::<Probe>(bytes) {
        Ok(probe) => probe,
        Err(e) if e.classify() == Category::Data => return not_a_profile(path, e.to_string()),
        Err(e) => return syntax_error(path, &e),
    };
    let Some(run) = probe.run else {
        return not_a_profile(path, "it has no `run` section");
    };
    let Some(version) = run.get("formatVersion") else {
        return not_a_profile(path, "it has no `run.formatVersion`");
    };
    let Some(version) = version.as_str() else {
        return not_a_profile(
            path,
            format!("`run.formatVersion` is {version}, not a string"),
        );
    };
    if let Err(e) = check_format_version(path, version) {
        return e;
    }
    if let Some(v) = probe.heapledger.and_then(|m| m.version) {
        let number = v.as_u64().unwrap_or(u64::MAX);
        if let Err(e) = check_ext_version(path, number, || v.to_string()) {
            return e;
        }
    }
    ProfileError::Malformed {
        path: path.to_owned(),
        detail: clip(&original.to_string()),
    }
}

fn check_format_version(path: &Path, found: &str) -> Result<(), ProfileError> {
    if SUPPORTED_FORMAT_VERSIONS.contains(&found) {
        return Ok(());
    }
    Err(ProfileError::UnsupportedVersion {
        path: path.to_owned(),
        found: clip(&format!("{found:?}")),
        supported: SUPPORTED_FORMAT_VERSIONS.join(", "),
    })
}

fn check_ext_version(
    path: &Path,
    found: u64,
    shown: impl FnOnce() -> String,
) -> Result<(), ProfileError> {
    if (1..=u64::from(EXT_VERSION)).contains(&found) {
        return Ok(());
    }
    Err(ProfileError::UnsupportedExtension {
        path: path.to_owned(),
        found: clip(&shown()),
        supported: EXT_VERSION,
    })
}

/// What a checked value counts, with the most a real profile can hold.
#[derive(Clone, Copy)]
enum Measure {
    /// Bytes alive at once, or a machine's memory: 2^57 is all that the
    /// largest 64-bit address space (x86-64 with 5-level paging) holds.
    Held,
    /// Calls, blocks, threads: 2^60 is a billion a second for 36 years.
    Count,
    /// Clock ticks: 2^62 is 36 years at 4 GHz.
    Ticks,
    /// Bytes allocated over a whole run (by successful calls): 2^62 B is
    /// 4 EiB, 146 years at 1 GB/s.
    Total,
}

impl Measure {
    fn max(self) -> u64 {
        match self {
            Measure::Held => 1 << 57,
            Measure::Count => 1 << 60,
            Measure::Ticks | Measure::Total => 1 << 62,
        }
    }

    fn beyond(self) -> &'static str {
        match self {
            Measure::Held => "more bytes than any machine can address",
            Measure::Count => "more than any run can count",
            Measure::Ticks => "a time no run reaches",
            Measure::Total => "more bytes than any run allocates",
        }
    }
}

/// `Err` naming `field` when `value` is beyond what `measure` allows.
fn within(measure: Measure, value: u64, field: impl FnOnce() -> String) -> Result<(), String> {
    if value <= measure.max() {
        return Ok(());
    }
    Err(format!("`{}` is {value}, {}", field(), measure.beyond()))
}

/// A signed figure (MALT's `ssize_t`), either way from 0.
fn within_i(measure: Measure, value: i64, field: impl FnOnce() -> String) -> Result<(), String> {
    if value.unsigned_abs() <= measure.max() {
        return Ok(());
    }
    Err(format!("`{}` is {value}, {}", field(), measure.beyond()))
}

/// Finds values that no real profile can have, in the fields the commands
/// add up and print: a damaged file says so instead of `16.0 EiB`. Sums
/// of requested bytes per thread are not checked (failed requests of any
/// size count there), nor minima, maxima and sums of lifetimes.
pub fn check_values(p: &Profile) -> Result<(), String> {
    use Measure::*;
    within(Ticks, p.run.runtime, || "run.runtime".into())?;
    let g = &p.globals;
    within(Ticks, g.ticks_per_second, || {
        "globals.ticksPerSecond".into()
    })?;
    within(Held, g.total_memory, || "globals.totalMemory".into())?;
    within(Held, g.free_memory_at_start, || {
        "globals.freeMemoryAtStart".into()
    })?;
    within(Held, g.cached_memory_at_start, || {
        "globals.cachedMemoryAtStart".into()
    })?;
    within(Count, g.max_thread_count, || {
        "globals.maxThreadCount".into()
    })?;
    within(Count, p.stacks.count, || "stacks.count".into())?;
    let ours = p.heapledger.is_some();
    let mut at_peak = 0u64;
    for (i, s) in p.stacks.stats.iter().enumerate() {
        let f = |name: &str| format!("stacks.stats[{i}].infos.{name}");
        let n = &s.infos;
        within_i(Count, n.count_zeros, || f("countZeros"))?;
        within_i(Held, n.max_alive_req, || f("maxAliveReq"))?;
        within_i(Held, n.alive_req, || f("aliveReq"))?;
        within_i(Held, n.global_peak, || f("globalPeak"))?;
        at_peak = at_peak.saturating_add(n.global_peak.max(0) as u64);
        within(Count, n.realloc_count, || f("reallocCount"))?;
        within(Count, n.temporary, || f("temporary"))?;
        for (name, m) in [
            ("alloc", &n.alloc),
            ("free", &n.free),
            ("mmap", &n.mmap),
            ("munmap", &n.munmap),
            ("lifetime", &n.lifetime),
        ] {
            within(Count, m.count, || f(&format!("{name}.count")))?;
        }
        if ours {
            // heapledger counts successful allocations only here.
            within(Held, n.alloc.max, || f("alloc.max"))?;
            within(Total, n.alloc.sum, || f("alloc.sum"))?;
        }
    }
    within(Held, at_peak, || {
        "stacks.stats[].infos.globalPeak, added up,".into()
    })?;
    let mut leaked = 0u64;
    for (i, l) in p.leaks.iter().enumerate() {
        within(Count, l.count, || format!("leaks[{i}].count"))?;
        within(Held, l.memory, || format!("leaks[{i}].memory"))?;
        leaked = leaked.saturating_add(l.memory);
    }
    within(Held, leaked, || "leaks[].memory, added up,".into())?;
    let mut merged = 0u64;
    for (i, t) in p.threads.iter().enumerate() {
        within(Count, t.cnt_mem_ops, || format!("threads[{i}].cntMemOps"))?;
        within(Count, t.merged_threads, || {
            format!("threads[{i}].mergedThreads")
        })?;
        merged = merged.saturating_add(t.merged_threads.max(1));
        for (name, c) in t.stats.iter() {
            within(Count, c.count, || {
                format!("threads[{i}].stats.{name}.count")
            })?;
        }
    }
    within(Count, merged, || {
        "threads[].mergedThreads, added up,".into()
    })?;
    if let Some(&peak) = p.timeline.memory_timeline.peak.get(memory::REQUESTED) {
        within(Held, peak, || {
            "timeline.memoryTimeline.peak[0] (requested)".into()
        })?;
    }
    if let Some(e) = &p.heapledger {
        within(Held, e.peak_requested, || "heapledger.peakRequested".into())?;
        within(Ticks, e.peak_time, || "heapledger.peakTime".into())?;
        within(Held, e.internal_memory, || {
            "heapledger.internalMemory".into()
        })?;
        within(Held, e.internal_memory_peak, || {
            "heapledger.internalMemoryPeak".into()
        })?;
        within(Count, e.truncated_stacks, || {
            "heapledger.truncatedStacks".into()
        })?;
        within(Count, e.unrecorded_events, || {
            "heapledger.unrecordedEvents".into()
        })?;
        within(Count, e.unknown_frees, || "heapledger.unknownFrees".into())?;
    }
    Ok(())
}
