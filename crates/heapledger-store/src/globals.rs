//! Global variables (MALT's `memStats.globalVariables`), kept once per
//! binary in the `variables` table (version 3) rather than in each process's
//! `memStats` section: a build's compilers each load the same large
//! libraries (every `rustc` of a `cargo build` lists the same 127 000
//! variables of LLVM and its driver, 35 MB of JSON), and a reader that
//! does not show them (`report`, `tree`) no longer reads them.
//!
//! A row's `data` is a zstd-compressed JSON array, one array per variable:
//! `[symbol, name, size, offset, secOffset, tls, usedSize, binaryFile,
//! sourceFile, line]`, where `name` is null when it is the symbol,
//! `usedSize` when it is the size, and `binaryFile` when it is the row's
//! binary (what the recorder writes).

use crate::StoreError;
use heapledger_profile::{GlobalVariable, MemStats, ReallocJump};
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;

/// One binary's variables, shared by the processes that load it.
pub(crate) type Shared = Arc<Vec<GlobalVariable>>;
/// The rows a writer has written, by binary: their lists and row ids.
pub(crate) type Written = HashMap<String, Vec<(Shared, i64)>>;
/// The rows a reader has read, by row id: their binary and list.
pub(crate) type Read = HashMap<i64, (String, Shared)>;

type Row<'a> = (
    &'a str,
    Option<&'a str>,
    u64,
    u64,
    u64,
    u8,
    Option<u64>,
    Option<&'a str>,
    Option<&'a str>,
    Option<u32>,
);

type OwnedRow = (
    String,
    Option<String>,
    u64,
    u64,
    u64,
    u8,
    Option<u64>,
    Option<String>,
    Option<String>,
    Option<u32>,
);

/// `binary`'s variables as a row's `data` of the `variables` table (see
/// `Writer::add_variables`).
pub fn encode(binary: &str, vars: &[GlobalVariable]) -> Result<Vec<u8>, StoreError> {
    let rows: Vec<Row> = vars
        .iter()
        .map(|v| {
            (
                v.symbol.as_str(),
                (v.name != v.symbol).then_some(v.name.as_str()),
                v.size,
                v.offset,
                v.sec_offset,
                u8::from(v.tls),
                (v.used_size != v.size).then_some(v.used_size),
                (v.binary_file != binary).then_some(v.binary_file.as_str()),
                v.source_file.as_deref(),
                v.line,
            )
        })
        .collect();
    let json = serde_json::to_vec(&rows).map_err(|e| StoreError::Io(e.to_string()))?;
    zstd::bulk::compress(&json, 3).map_err(|e| StoreError::Io(e.to_string()))
}

/// A row's variables, from its decompressed `data`.
pub(crate) fn decode(binary: &str, json: &[u8]) -> Result<Vec<GlobalVariable>, StoreError> {
    let rows: Vec<OwnedRow> = serde_json::from_slice(json)
        .map_err(|e| crate::read::corrupt(format!("the variables of {binary}: {e}")))?;
    Ok(rows
        .into_iter()
        .map(
            |(symbol, name, size, offset, sec_offset, tls, used, bin, source_file, line)| {
                GlobalVariable {
                    name: name.unwrap_or_else(|| symbol.clone()),
                    symbol,
                    size,
                    offset,
                    sec_offset,
                    tls: tls != 0,
                    used_size: used.unwrap_or(size),
                    binary_file: bin.unwrap_or_else(|| binary.to_owned()),
                    source_file,
                    line,
                }
            },
        )
        .collect())
}

/// A process's `memStats` section as written from version 3: without its
/// variables (the `variables` table and the `variablesOf` section hold them).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MemStatsOwn<'a> {
    size_map: &'a IndexMap<u64, u64>,
    realloc_jump: &'a [ReallocJump],
}

impl<'a> MemStatsOwn<'a> {
    pub(crate) fn of(m: &'a MemStats) -> Self {
        MemStatsOwn {
            size_map: &m.size_map,
            realloc_jump: &m.realloc_jump,
        }
    }
}

/// A `memStats` section read without its variables, which a section of
/// version 1 or 2 holds: they are skipped, not kept (see `Store::globals`).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MemStatsHead {
    size_map: IndexMap<u64, u64>,
    realloc_jump: Vec<ReallocJump>,
}

impl From<MemStatsHead> for MemStats {
    fn from(h: MemStatsHead) -> MemStats {
        MemStats {
            size_map: h.size_map,
            realloc_jump: h.realloc_jump,
            global_variables: Default::default(),
        }
    }
}

/// Only the variables of a `memStats` section of version 1 or 2.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MemStatsGlobals {
    #[serde(default)]
    pub(crate) global_variables: IndexMap<String, Vec<GlobalVariable>>,
}
