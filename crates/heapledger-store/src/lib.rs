//! heapledger's profile store: one SQLite file per run, holding every
//! process the run started.
//!
//! Per process:
//! - `process`: one row (command, parent, exit, whether the profile is
//!   complete or stops at a checkpoint, headline totals), readable with any
//!   SQLite tool;
//! - `string` and `frame`: the strings and the distinct code addresses,
//!   each with its function, file, line and binary (the `frames` view joins
//!   them);
//! - `block`: the stacks as a prefix tree (`node` blocks: each node's frame
//!   and its parent, in depth-first order), each stack's counters (`stack`
//!   blocks) and the blocks alive at the end (`leak` blocks), as column
//!   blocks of varints compressed with zstd (see `codec`), indexed by their
//!   first row;
//! - `section`: the smaller parts of the profile (run, config, threads,
//!   memory statistics, timeline, heapledger's own key...) as compressed
//!   JSON in MALT's layout.
//!
//! The file is written in one transaction to a temporary name by the
//! caller and renamed whole, so a profile is never seen half written.

mod codec;
mod globals;
mod read;
mod schema;
mod tree;
mod write;

pub use codec::BLOCK_ROWS;
pub use globals::encode as encode_variables;
pub use read::{ProcessInfo, SnapshotInfo, StackStream, Store};
pub use schema::{FORMAT, VERSION};
pub use write::{ProcessMeta, SnapshotMeta, Writer, SNAPSHOT_KEYS};

/// Why a store could not be written or read. The messages are one line,
/// meant to follow the file's name.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0}")]
    Io(String),
    #[error("is not a heapledger profile ({0})")]
    Foreign(String),
    #[error("is a heapledger profile of version {found}; this heapledger reads version {VERSION}: re-record it with `heapledger run`")]
    Version { found: String },
    #[error("is damaged: {0}")]
    Corrupt(String),
    #[error("holds no process {0}")]
    NoProcess(u32),
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> StoreError {
        match e {
            rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::NotADatabase => {
                StoreError::Foreign("not an SQLite database".into())
            }
            rusqlite::Error::SqliteFailure(f, _)
                if f.code == rusqlite::ErrorCode::DatabaseCorrupt =>
            {
                StoreError::Corrupt("the database is malformed".into())
            }
            e => StoreError::Io(e.to_string()),
        }
    }
}

/// Whether these first bytes of a file are an SQLite database's.
pub fn is_sqlite(head: &[u8]) -> bool {
    head.starts_with(b"SQLite format 3\0")
}
