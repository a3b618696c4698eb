//! Helpers shared by the integration tests: build the C/C++ programs in
//! `tests/programs`, run them, and parse what they report.

#![allow(dead_code)]

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use heapledger_symbols::{Frame, MappedModule, Resolved};

pub fn programs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs")
}

/// A fresh scratch directory for one test.
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("heapledger-symbols")
        .join(name);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs a command, panicking with its stderr if it fails; returns stdout.
pub fn run(cmd: &mut Command) -> String {
    let output = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        output.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// Compiles `sources` (relative to `tests/programs`) with `compiler` into
/// `dir/out`.
pub fn compile(compiler: &str, sources: &[&str], flags: &[&str], dir: &Path, out: &str) -> PathBuf {
    let output = dir.join(out);
    let programs = programs_dir();
    run(Command::new(compiler)
        .args(flags)
        .arg("-I")
        .arg(&programs)
        .arg("-o")
        .arg(&output)
        .args(sources.iter().map(|s| programs.join(s)))
        .arg("-ldl"));
    output
}

/// A return address reported by a test program.
#[derive(Debug, Clone)]
pub struct ReturnAddress {
    /// Lookup address: the return address minus one.
    pub addr: u64,
    /// Expected source lines, innermost (inlined) frame first: the
    /// `__LINE__` of the call to `probe()`, then of the calls to the inlined
    /// functions containing it.
    pub lines: Vec<u32>,
}

/// What a test program printed.
#[derive(Debug, Default)]
pub struct Report {
    pub modules: Vec<MappedModule>,
    pub return_addresses: HashMap<String, ReturnAddress>,
    pub symbols: HashMap<String, u64>,
}

fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap()
}

/// Runs `program` with `args` and parses its report.
pub fn run_program(program: &Path, args: &[&Path]) -> Report {
    let stdout = run(Command::new(program).args(args));
    let mut report = Report::default();
    for line in stdout.lines() {
        // Split in at most 5 fields to keep spaces in MAP paths.
        let fields: Vec<&str> = line.splitn(5, ' ').collect();
        match fields[..] {
            ["RA", tag, addr, ref lines @ ..] => {
                let ra = ReturnAddress {
                    addr: hex(addr) - 1,
                    lines: lines
                        .iter()
                        .flat_map(|l| l.split(' '))
                        .map(|l| l.parse().unwrap())
                        .filter(|&l| l != 0)
                        .collect(),
                };
                report.return_addresses.insert(tag.to_owned(), ra);
            }
            ["SYM", name, addr] => {
                report.symbols.insert(name.to_owned(), hex(addr));
            }
            ["MAP", start, end, offset, path] => report.modules.push(MappedModule {
                path: path.into(),
                start: hex(start),
                end: hex(end),
                file_offset: hex(offset),
                build_id: None,
            }),
            _ => panic!("unexpected output line {line:?}"),
        }
    }
    report
}

/// Parses `/proc/PID/maps` text into executable file mappings.
pub fn parse_maps(maps: &str) -> Vec<MappedModule> {
    maps.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (range, perms, offset) = (fields.next()?, fields.next()?, fields.next()?);
            let path = fields.nth(2)?;
            let (start, end) = range.split_once('-')?;
            (perms.as_bytes().get(2) == Some(&b'x') && path.starts_with('/')).then(|| {
                MappedModule {
                    path: path.into(),
                    start: hex(start),
                    end: hex(end),
                    file_offset: hex(offset),
                    build_id: None,
                }
            })
        })
        .collect()
}

/// The single symbolization of `addr`, which must be in a known module.
pub fn resolve_one(modules: &[MappedModule], addr: u64) -> Resolved {
    let mut resolved = heapledger_symbols::symbolize(modules, &[addr]);
    assert_eq!(resolved.len(), 1);
    resolved.pop().unwrap().expect("address in a known module")
}

pub fn basename(frame: &Frame) -> Option<&str> {
    let file = frame.file.as_deref()?;
    Some(file.rsplit('/').next().unwrap())
}

/// Asserts `frames` are `functions` at `file`:`lines`, with absolute paths.
#[track_caller]
pub fn assert_frames(frames: &[Frame], functions: &[&str], file: &str, lines: &[u32]) {
    assert_eq!(frames.len(), functions.len(), "{frames:#?}");
    assert_eq!(frames.len(), lines.len(), "{frames:#?}");
    for ((frame, function), &line) in frames.iter().zip(functions).zip(lines) {
        assert_frame(frame, function, file, line);
    }
}

/// Asserts `frame` is `function` at `file`:`line` with an absolute path.
#[track_caller]
pub fn assert_frame(frame: &Frame, function: &str, file: &str, line: u32) {
    assert_eq!(frame.function.as_deref(), Some(function), "{frame:?}");
    assert_eq!(basename(frame), Some(file), "{frame:?}");
    assert!(frame.file.as_deref().unwrap().starts_with('/'), "{frame:?}");
    assert_eq!(frame.line, Some(line), "{frame:?}");
}
