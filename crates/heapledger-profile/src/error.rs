//! Why a profile could not be read or written: one variant per cause, each
//! printing one line that names the file and says what to do.

use std::io;
use std::path::PathBuf;

/// An error reading or writing a profile.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The file does not exist.
    #[error(
        "profile `{path}` does not exist; check the path, or record one with `heapledger run`"
    )]
    NotFound {
        /// The file.
        path: PathBuf,
    },
    /// The file exists but could not be read.
    #[error("cannot read profile `{path}`: {source}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// The OS reason.
        #[source]
        source: io::Error,
    },
    /// The path names something that is not a regular file (a device such
    /// as `/dev/zero`, a FIFO, a socket): refused before it is opened or read.
    #[error(
        "`{path}` is {what}, not a profile file; heapledger reads profiles from regular files only"
    )]
    NotAFile {
        /// The path.
        path: PathBuf,
        /// What it is instead (`a character device`...).
        what: &'static str,
    },
    /// The file is empty (or only whitespace).
    #[error("profile `{path}` is empty; the recording was probably stopped before it was written, record again")]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// The file is not JSON (or nests deeper than the reader allows).
    #[error("`{path}` is not a JSON profile ({detail})")]
    NotJson {
        /// The file.
        path: PathBuf,
        /// The parser's reason, with line and column.
        detail: String,
    },
    /// The JSON ends early.
    #[error("profile `{path}` is truncated (the JSON ends early, {detail}); the recording was probably cut short, record again")]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Where it ends.
        detail: String,
    },
    /// A file of a kind told by its first bytes: compressed, an
    /// executable, another tool's profile.
    #[error("`{path}` is {what}")]
    Foreign {
        /// The file.
        path: PathBuf,
        /// What it is, and what to do with it.
        what: &'static str,
    },
    /// Valid JSON, but not a MALT or heapledger profile.
    #[error("`{path}` is JSON but not a MALT/heapledger profile: {reason}")]
    NotAProfile {
        /// The file.
        path: PathBuf,
        /// What is missing.
        reason: String,
    },
    /// A profile in a format version this crate does not read.
    #[error(
        "profile `{path}` has format version {found}, but this heapledger reads only {supported}"
    )]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// `run.formatVersion` as found.
        found: String,
        /// The versions this crate reads.
        supported: String,
    },
    /// heapledger data newer than this crate.
    #[error("profile `{path}` has heapledger data version {found}, newer than this heapledger reads ({supported}); use a newer heapledger")]
    UnsupportedExtension {
        /// The file.
        path: PathBuf,
        /// `heapledger.version` as found.
        found: String,
        /// The newest version this crate reads.
        supported: u32,
    },
    /// A profile of a supported version whose content does not fit the
    /// format, or holds a value no real profile can have (a count near
    /// `u64::MAX`, more bytes alive than any machine has).
    #[error("profile `{path}` is damaged: {detail}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What does not fit, with line and column.
        detail: String,
    },
    /// Writing the profile failed.
    #[error("cannot write profile `{path}`: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The OS reason.
        #[source]
        source: io::Error,
    },
}

impl ProfileError {
    /// The file the error is about.
    pub fn path(&self) -> &std::path::Path {
        match self {
            ProfileError::NotFound { path }
            | ProfileError::Unreadable { path, .. }
            | ProfileError::NotAFile { path, .. }
            | ProfileError::Empty { path }
            | ProfileError::NotJson { path, .. }
            | ProfileError::Truncated { path, .. }
            | ProfileError::NotAProfile { path, .. }
            | ProfileError::Foreign { path, .. }
            | ProfileError::UnsupportedVersion { path, .. }
            | ProfileError::UnsupportedExtension { path, .. }
            | ProfileError::Malformed { path, .. }
            | ProfileError::Write { path, .. } => path,
        }
    }
}
