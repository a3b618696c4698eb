//! The series of checkpoints (`P.series` beside the dump `P`): each time
//! the recorder writes a checkpoint (or a snapshot) it also appends one
//! record here, holding the counters of every stack that changed since the
//! record before, as they stand then (totals from the start, not
//! differences). The counters of a stack at checkpoint `k` are those of
//! its last record at or before `k`, so that what happened between two
//! checkpoints is the difference of two such readings, whatever the run's
//! length: the viewer's time range and a diff within one run stand on it.
//!
//! A record: [`SERIES_MAGIC`], the payload's length (4 bytes, little
//! endian), then the payload's varints: the checkpoint's number (as
//! [`crate::Checkpoint::seq`]), its clock ticks (the dump header's
//! clock), then per stack in order of id: the id (the difference from the
//! one before, zigzagged; the first from 0) and its [`SERIES_FIELDS`]
//! counters. A record cut short (the process killed while appending it)
//! is the file's last, and is left out by the reader.

/// First bytes of each record.
pub const SERIES_MAGIC: [u8; 4] = *b"HLS1";

/// Each stack's counters in a record: allocations, bytes allocated, frees,
/// bytes freed.
pub const SERIES_FIELDS: usize = 4;

/// The file of the series beside the dump named `dump`.
pub const SERIES_SUFFIX: &str = ".series";
