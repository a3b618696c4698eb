//! `memStats`: size histogram, realloc jumps and global variables.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Global variables per binary path. Each binary's list is shared: the
/// processes of one run that load the same library (every `rustc` of a
/// build loads the same 127 000 variables of LLVM) hold it once.
pub type GlobalVariables = IndexMap<String, Arc<Vec<GlobalVariable>>>;

/// `memStats`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemStats {
    /// Requested size -> number of allocations of that size. JSON keys are the
    /// sizes as strings, as MALT writes them.
    pub size_map: IndexMap<u64, u64>,
    /// `realloc` calls grouped by (old size, new size).
    pub realloc_jump: Vec<ReallocJump>,
    /// Global variables per binary path (the recorder may leave this empty).
    #[serde(default)]
    pub global_variables: GlobalVariables,
}

/// `reallocJump[]`: `count` reallocs from `oldSize` to `newSize`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReallocJump {
    /// Size before.
    pub old_size: u64,
    /// Size after.
    pub new_size: u64,
    /// How many times.
    pub count: u64,
}

/// `globalVariables[binary][]`: one global or TLS variable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GlobalVariable {
    /// Raw symbol.
    pub symbol: String,
    /// Demangled name.
    pub name: String,
    /// Size in bytes.
    pub size: u64,
    /// Offset in the binary.
    pub offset: u64,
    /// Offset in its section.
    pub sec_offset: u64,
    /// Thread-local.
    pub tls: bool,
    /// Bytes actually used.
    pub used_size: u64,
    /// The binary it lives in.
    pub binary_file: String,
    /// The file that declares it, where the binary's DWARF says (MALT
    /// reads this key and `line` when they are there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_file: Option<String>,
    /// The line that declares it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
}
