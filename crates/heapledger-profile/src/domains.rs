//! `domains`: totals split by memory domain (C, Python object/mem/raw, mmap).

use serde::{Deserialize, Serialize};

/// `domains`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Domains {
    /// Allocation calls.
    pub counters: DomainValues,
    /// Bytes allocated.
    pub mem: DomainValues,
    /// Each domain's own peak.
    pub local_peak: DomainValues,
    /// Each domain's bytes at the process's global peak.
    pub at_global_peak: DomainValues,
}

/// One value per domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DomainValues {
    /// C/C++ allocator.
    pub c: u64,
    /// Python object allocator.
    pub py_obj: u64,
    /// Python `PyMem_*`.
    pub py_mem: u64,
    /// Python `PyMem_Raw*`.
    pub py_raw: u64,
    /// Direct `mmap`.
    pub mmap: u64,
}
