//! Offline symbolization for heapledger.
//!
//! The profiled program has exited by the time heapledger reports, so we cannot
//! ask its address space (`/proc/PID`) for anything. What we have is the list
//! of executable mappings it had ([`MappedModule`]) and the code addresses it
//! recorded. Each address is turned into a file offset inside the mapped
//! binary, and the binary on disk (plus any separate debug file found through
//! `.gnu_debuglink`, e.g. under `/usr/lib/debug`) is symbolized with
//! [blazesym].
//!
//! Symbolization never fails as a whole: a binary that vanished, changed (its
//! build id differs from the recorded one), is not ELF or has no symbols
//! simply yields a [`Frame`] with no function name.
//!
//! ```
//! use heapledger_symbols::{symbolize, MappedModule};
//!
//! let modules = [MappedModule {
//!     path: "/gone/libfoo.so".into(),
//!     start: 0x7f00_0000_1000,
//!     end: 0x7f00_0000_9000,
//!     file_offset: 0x1000,
//!     build_id: None,
//! }];
//! let resolved = symbolize(&modules, &[0x7f00_0000_1234, 0x42]);
//! // The binary is known but cannot be read: one frame, function unknown.
//! let first = resolved[0].as_ref().unwrap();
//! assert_eq!(first.binary.to_str(), Some("/gone/libfoo.so"));
//! assert_eq!(first.frames[0].function, None);
//! // No module contains 0x42.
//! assert!(resolved[1].is_none());
//! ```
//!
//! [blazesym]: https://docs.rs/blazesym

// One mapping of a file is the only unsafe code (`globals.rs`).
#![deny(unsafe_code)]

pub mod globals;
pub mod perfmap;

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use blazesym::helper::read_elf_build_id;
use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{CodeInfo, Input, Symbolized, Symbolizer};

/// One executable mapping of the profiled process, as seen in
/// `/proc/PID/maps` (or from `dl_iterate_phdr`) while it was alive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MappedModule {
    /// Path of the mapped file.
    pub path: PathBuf,
    /// First address of the mapping.
    pub start: u64,
    /// One past the last address of the mapping.
    pub end: u64,
    /// Offset in the file that is mapped at `start`.
    pub file_offset: u64,
    /// GNU build id recorded while the process was alive, if known. When
    /// present, the file on disk must carry the same id or it is considered
    /// to be a different binary (e.g. upgraded since) and is not used.
    pub build_id: Option<Vec<u8>>,
}

/// One source-level frame of a code address.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Frame {
    /// Demangled function name.
    pub function: Option<String>,
    /// Source file, as a full path when the debug info records the
    /// compilation directory.
    pub file: Option<String>,
    /// 1-based source line.
    pub line: Option<u32>,
}

/// Symbolization result for one address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// The binary containing the address, as recorded in its [`MappedModule`].
    pub binary: PathBuf,
    /// Innermost first: inlined callees first, the containing (out-of-line)
    /// function last. Never empty.
    pub frames: Vec<Frame>,
}

/// Symbolizes `addrs` (lookup addresses, i.e. return addresses already minus
/// one) of a process whose executable mappings were `modules`.
///
/// The result has the same length and order as `addrs`; an entry is `None`
/// when no module contains the address.
///
/// Addresses are grouped per binary so that each binary is opened and its
/// debug info parsed once, and looked up in a single batch. Nothing is cached
/// across calls; use [`Symbols`] to keep parsed binaries and results between
/// calls.
pub fn symbolize(modules: &[MappedModule], addrs: &[u64]) -> Vec<Option<Resolved>> {
    Symbols::new().symbolize(modules, addrs)
}

/// A symbolizer that keeps what it parsed (ELF and DWARF of each binary)
/// between calls: symbolizing the profiles of many processes of one run
/// (a shell and its children) parses each binary once.
///
/// It also remembers the frames of every file offset it looked up, per binary
/// (path and build id), so that addresses symbolized while the program ran
/// cost nothing when its profile is built.
pub struct Symbols {
    symbolizer: RefCell<Symbolizer>,
    /// The `.debug` directories beside the binaries seen so far that have
    /// one (see [`DEBUG_DIRS`]), and the binaries' directories looked at.
    beside: RefCell<(Vec<PathBuf>, std::collections::HashSet<PathBuf>)>,
    memo: RefCell<Memo>,
}

/// Where a separate debug file named by `.gnu_debuglink` is looked for,
/// after the binary's own directory (blazesym's defaults, and what it
/// also searches under them). GDB also looks in the `.debug` subdirectory
/// of the binary's directory, where Yocto and other embedded builds put
/// them; blazesym does not, so those directories are added to the list
/// as binaries that have one are seen.
const DEBUG_DIRS: [&str; 2] = ["/usr/lib/debug", "/lib/debug"];

/// Frames per file offset, per binary (path and recorded build id).
type Memo = HashMap<(PathBuf, Option<Vec<u8>>), HashMap<u64, Vec<Frame>>>;

impl Default for Symbols {
    fn default() -> Self {
        Self::new()
    }
}

impl Symbols {
    pub fn new() -> Symbols {
        // blazesym's own demangling tries C++ demangling on names of unknown
        // language, which turns the C function `a` into `signed char`; names
        // are demangled here instead, only when they carry a mangling prefix.
        Symbols {
            symbolizer: RefCell::new(Self::parser(&[])),
            beside: RefCell::new(Default::default()),
            memo: RefCell::new(HashMap::new()),
        }
    }

    fn parser(beside: &[PathBuf]) -> Symbolizer {
        let dirs = DEBUG_DIRS
            .iter()
            .map(PathBuf::from)
            .chain(beside.iter().cloned());
        Symbolizer::builder()
            .enable_demangling(false)
            .set_debug_dirs(Some(dirs))
            .build()
    }

    /// Adds the `.debug` directories beside `paths` that exist and are not
    /// searched yet (see [`DEBUG_DIRS`]); the symbolizer is made again,
    /// which happens once for each such directory.
    fn look_beside<'p>(&self, paths: impl Iterator<Item = &'p Path>) {
        let mut guard = self.beside.borrow_mut();
        let (beside, looked_at) = &mut *guard;
        let mut added = false;
        for path in paths {
            let Some(dir) = path.parent() else {
                continue;
            };
            if looked_at.contains(dir) {
                continue;
            }
            looked_at.insert(dir.to_owned());
            let debug = dir.join(".debug");
            if debug.is_dir() {
                beside.push(debug);
                added = true;
            }
        }
        if added {
            *self.symbolizer.borrow_mut() = Self::parser(beside);
        }
    }

    /// Drops what was parsed of each binary (its debug sections,
    /// decompressed, and their indexes), keeping the answers given: a
    /// later lookup of a new address parses its binary again. libc's
    /// compressed debug information alone takes 10 MB once parsed.
    pub fn forget_parsed(&self) {
        *self.symbolizer.borrow_mut() = Self::parser(&self.beside.borrow().0);
    }

    /// As [`symbolize`], reusing this symbolizer's caches: only file offsets
    /// never looked up before in the same binary are looked up.
    pub fn symbolize(&self, modules: &[MappedModule], addrs: &[u64]) -> Vec<Option<Resolved>> {
        self.look_beside(modules.iter().map(|m| m.path.as_path()));
        symbolize_with(
            &self.symbolizer.borrow(),
            &mut self.memo.borrow_mut(),
            modules,
            addrs,
        )
    }

    /// The address (`st_value`) of the symbol `name` in the ELF file at
    /// `path`, from its symbol tables, if it has one.
    pub fn symbol_address(path: &Path, name: &str) -> Option<u64> {
        let inspector = blazesym::inspect::Inspector::new();
        let mut elf = blazesym::inspect::source::Elf::new(path);
        elf.debug_syms = false;
        let found = inspector
            .lookup(&blazesym::inspect::source::Source::Elf(elf), &[name])
            .ok()?;
        found.first()?.first().map(|sym| sym.addr)
    }

    /// The GNU build id of the ELF file at `path`, if it has one.
    pub fn build_id(path: &Path) -> Option<Vec<u8>> {
        read_elf_build_id(path).ok().flatten().map(|id| id.to_vec())
    }

    /// Opens `path` and parses its symbols and debug information ahead of
    /// use, by looking up `file_offsets` in it (offsets into its code; the
    /// results are dropped). For work done while the profiled program still
    /// runs; a file that cannot be read is skipped.
    pub fn warm(&self, path: &Path, file_offsets: &[u64]) {
        if !file_offsets.is_empty() {
            self.look_beside(std::iter::once(path));
            let _ = lookup(&self.symbolizer.borrow(), path, true, file_offsets);
        }
    }
}

fn symbolize_with(
    symbolizer: &Symbolizer,
    memo: &mut Memo,
    modules: &[MappedModule],
    addrs: &[u64],
) -> Vec<Option<Resolved>> {
    let mut sorted: Vec<&MappedModule> = modules.iter().filter(|m| m.start < m.end).collect();
    sorted.sort_by_key(|m| m.start);

    // Key on the build id too: the same path may have been mapped from two
    // different files over the process lifetime.
    let mut batches: HashMap<(&Path, Option<&[u8]>), Batch> = HashMap::new();
    for (index, &addr) in addrs.iter().enumerate() {
        let Some(module) = containing_module(&sorted, addr) else {
            continue;
        };
        let batch = batches
            .entry((&module.path, module.build_id.as_deref()))
            .or_default();
        batch.indices.push(index);
        batch
            .offsets
            .push((addr - module.start).wrapping_add(module.file_offset));
    }

    let mut resolved = vec![None; addrs.len()];
    for ((path, build_id), batch) in batches {
        let known = memo
            .entry((path.to_path_buf(), build_id.map(<[u8]>::to_vec)))
            .or_default();
        let mut missing: Vec<u64> = batch
            .offsets
            .iter()
            .copied()
            .filter(|o| !known.contains_key(o))
            .collect();
        if !missing.is_empty() {
            missing.sort_unstable();
            missing.dedup();
            let frames = symbolize_binary(symbolizer, path, build_id, &missing);
            known.extend(missing.into_iter().zip(frames));
        }
        for (index, offset) in batch.indices.into_iter().zip(batch.offsets) {
            resolved[index] = known.get(&offset).map(|frames| Resolved {
                binary: path.to_path_buf(),
                frames: frames.clone(),
            });
        }
    }
    resolved
}

/// The addresses of one binary: their positions in the input and their file
/// offsets.
#[derive(Default)]
struct Batch {
    indices: Vec<usize>,
    offsets: Vec<u64>,
}

/// Finds the mapping containing `addr` in mappings sorted by start address.
fn containing_module<'m>(sorted: &[&'m MappedModule], addr: u64) -> Option<&'m MappedModule> {
    let next = sorted.partition_point(|m| m.start <= addr);
    let module = sorted.get(next.checked_sub(1)?)?;
    (addr < module.end).then_some(*module)
}

/// Symbolizes file offsets of one binary; one non-empty frame list per offset.
fn symbolize_binary(
    symbolizer: &Symbolizer,
    recorded_path: &Path,
    build_id: Option<&[u8]>,
    offsets: &[u64],
) -> Vec<Vec<Frame>> {
    let mut frames = vec![Vec::new(); offsets.len()];
    if let Some(path) = usable_file(recorded_path, build_id) {
        // DWARF first: file, line and inline frames. blazesym itself falls
        // back to the ELF symbol table when DWARF has no function covering
        // the address.
        if let Some(syms) = lookup(symbolizer, path, true, offsets) {
            for (frames, sym) in frames.iter_mut().zip(&syms) {
                *frames = frames_of(sym);
            }
        }
        // The DWARF pass may fail as a whole (corrupt or unsupported debug
        // info, a stale debug-link target whose CRC differs) or leave the
        // function unnamed; the ELF symbol table can still name it.
        let unnamed: Vec<usize> = (0..offsets.len())
            .filter(|&i| frames[i].last().is_none_or(|f| f.function.is_none()))
            .collect();
        if !unnamed.is_empty() {
            let unnamed_offsets: Vec<u64> = unnamed.iter().map(|&i| offsets[i]).collect();
            if let Some(syms) = lookup(symbolizer, path, false, &unnamed_offsets) {
                for (&i, sym) in unnamed.iter().zip(&syms) {
                    let Some(function) = sym.as_sym().and_then(|sym| non_empty(&sym.name)) else {
                        continue;
                    };
                    match frames[i].last_mut() {
                        Some(frame) => frame.function = Some(function),
                        None => frames[i].push(Frame {
                            function: Some(function),
                            ..Frame::default()
                        }),
                    }
                }
            }
        }
    }
    for frames in &mut frames {
        if frames.is_empty() {
            frames.push(Frame::default());
        }
    }
    frames
}

/// Returns the file to read for a recorded mapping path, or `None` when the
/// file on disk cannot be the one that was mapped.
fn usable_file<'p>(recorded_path: &'p Path, build_id: Option<&[u8]>) -> Option<&'p Path> {
    // The kernel appends " (deleted)" to mappings whose file was unlinked
    // (typically replaced by a package upgrade). Whatever now lives at that
    // path is only trustworthy if its build id proves it.
    let (path, deleted) = match recorded_path
        .to_str()
        .and_then(|p| p.strip_suffix(" (deleted)"))
    {
        Some(path) => (Path::new(path), true),
        None => (recorded_path, false),
    };
    match build_id.filter(|id| !id.is_empty()) {
        Some(expected) => {
            let actual = read_elf_build_id(path).ok().flatten()?;
            (*actual == *expected).then_some(path)
        }
        None => (!deleted).then_some(path),
    }
}

/// Runs one blazesym batch lookup; `None` if the binary cannot be used at
/// all (missing, not ELF, unreadable debug info, ...).
fn lookup<'s>(
    symbolizer: &'s Symbolizer,
    path: &Path,
    debug_syms: bool,
    offsets: &[u64],
) -> Option<Vec<Symbolized<'s>>> {
    let mut elf = Elf::new(path);
    elf.debug_syms = debug_syms;
    let syms = symbolizer
        .symbolize(&Source::Elf(elf), Input::FileOffset(offsets))
        .ok()?;
    (syms.len() == offsets.len()).then_some(syms)
}

/// Converts a blazesym result into frames, innermost first.
fn frames_of(sym: &Symbolized<'_>) -> Vec<Frame> {
    let Some(sym) = sym.as_sym() else {
        return Vec::new();
    };
    // blazesym lists inlined functions outermost first, and each entry (and
    // the symbol itself) carries the location *within* that function.
    sym.inlined
        .iter()
        .rev()
        .map(|inlined| frame(&inlined.name, inlined.code_info.as_ref()))
        .chain([frame(&sym.name, sym.code_info.as_deref())])
        .collect()
}

fn frame(name: &str, code_info: Option<&CodeInfo<'_>>) -> Frame {
    Frame {
        function: non_empty(name),
        file: code_info.map(|info| info.to_path().to_string_lossy().into_owned()),
        // Line 0 means "no particular line" in DWARF.
        line: code_info
            .and_then(|info| info.line)
            .filter(|&line| line != 0),
    }
}

fn non_empty(name: &str) -> Option<String> {
    (!name.is_empty()).then(|| demangle(name))
}

/// Demangles Rust (legacy `_ZN...E` and v0 `_R`) and C++ (`_Z`) names;
/// anything else (C names) is returned as it is.
pub fn demangle(name: &str) -> String {
    if name.starts_with("_R") || name.starts_with("_ZN") {
        if let Ok(d) = rustc_demangle::try_demangle(name) {
            return format!("{d:#}");
        }
    }
    if name.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(name) {
            if let Ok(d) = sym.demangle() {
                return d;
            }
        }
    }
    name.to_owned()
}
