//! `sites`: the process's mappings and the symbol of every address in the file.
//!
//! Symbols are stored as indexes into `strings` so that a function called from
//! a thousand places costs its name once. [`SiteRef`] is the resolved view.

use std::fmt;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use crate::addr::Addr;
use crate::strings::{StringId, UNKNOWN};

/// The binary of a frame in code a JIT compiled (or CPython's trampoline
/// for a Python function), named from the runtime's perf map
/// (`heapledger_symbols::perfmap`, which writes the same).
pub const JIT_BINARY: &str = "[jit]";

/// `sites`: mappings, interned strings and per-address symbols.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Sites {
    /// The mappings of the process (from `/proc/self/maps`).
    pub map: Vec<MapEntry>,
    /// Interned names; index 0 is `"??"`.
    pub strings: Vec<String>,
    /// The symbol of each address, in file order.
    pub instr: IndexMap<Addr, InstrEntry>,
}

impl Sites {
    /// No mappings, no symbols, `strings == ["??"]`.
    pub fn empty() -> Sites {
        Sites {
            map: Vec::new(),
            strings: vec![UNKNOWN.to_owned()],
            instr: IndexMap::new(),
        }
    }

    /// The string of `id`, or `"??"` if the index is out of range.
    pub fn string(&self, id: StringId) -> &str {
        self.strings
            .get(id.index())
            .map(String::as_str)
            .unwrap_or(UNKNOWN)
    }

    /// The mapping holding `addr`, for naming the binary of an address that
    /// has no symbol.
    pub fn mapping_of(&self, addr: Addr) -> Option<&MapEntry> {
        self.map.iter().find(|m| m.lower <= addr && addr < m.upper)
    }

    /// The symbol of `addr`, if the file has one.
    pub fn resolve(&self, addr: Addr) -> Option<SiteRef<'_>> {
        let entry = self.instr.get(&addr)?;
        Some(SiteRef {
            addr,
            function: self.string(entry.function),
            file: self.string(entry.file),
            line: entry.line,
            binary: self.string(entry.binary),
        })
    }
}

/// `sites.map[]`: one mapping of the process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MapEntry {
    /// First address.
    pub lower: Addr,
    /// End address (exclusive).
    pub upper: Addr,
    /// Offset of the mapping in its file.
    pub offset: Addr,
    /// Load bias of the file; MALT writes `u64::MAX` when it did not compute it.
    pub aslr_offset: u64,
    /// The mapped file.
    pub file: String,
}

/// `sites.instr["0x..."]`: the symbol of one address, as string indexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstrEntry {
    /// Source file (`"??"` when unknown).
    pub file: StringId,
    /// Function name.
    pub function: StringId,
    /// Source line; omitted when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// The binary (executable or library path) holding the address.
    pub binary: StringId,
}

/// A resolved address: names borrowed from the profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SiteRef<'a> {
    /// The address resolved.
    pub addr: Addr,
    /// Function name (`"??"` when unknown).
    pub function: &'a str,
    /// Source file (`"??"` when unknown).
    pub file: &'a str,
    /// Source line, when known.
    pub line: Option<u32>,
    /// Path of the binary.
    pub binary: &'a str,
}

impl<'a> SiteRef<'a> {
    /// The binary's file name without its directory (`libc.so.6`).
    pub fn binary_name(&self) -> &'a str {
        basename(self.binary)
    }

    /// The source file's name without its directory.
    pub fn file_name(&self) -> &'a str {
        basename(self.file)
    }

    /// `file:line`, `file`, or `??`.
    pub fn location(&self) -> String {
        match self.line {
            Some(line) => format!("{}:{}", self.file, line),
            None => self.file.to_owned(),
        }
    }
}

impl fmt::Display for SiteRef<'_> {
    /// `function  file:line  (library)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}  {}  ({})",
            self.function,
            self.location(),
            self.binary_name()
        )
    }
}

/// The last component of a `/`-separated path (the whole string if none).
pub fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}
