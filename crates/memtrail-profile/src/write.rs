//! Writing a profile: JSON with MALT's key order, through a large buffer.
//!
//! Key order comes from the field order of the model's structs. Compact JSON
//! is the default (smaller, and several times faster to write and read than
//! MALT's indented output); [`Profile::write_pretty_to`] indents like MALT.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use serde::Serialize;

use crate::error::ProfileError;
use crate::model::Profile;

/// Large enough that a big profile is written in few system calls.
const BUFFER: usize = 1 << 20;

impl Profile {
    /// Writes compact JSON to `writer` (buffered here; pass it unbuffered).
    pub fn write_to(&self, writer: impl Write) -> io::Result<()> {
        let mut out = BufWriter::with_capacity(BUFFER, writer);
        serde_json::to_writer(&mut out, self)?;
        out.flush()
    }

    /// Writes JSON indented by one space per level, as MALT does.
    pub fn write_pretty_to(&self, writer: impl Write) -> io::Result<()> {
        let mut out = BufWriter::with_capacity(BUFFER, writer);
        let formatter = serde_json::ser::PrettyFormatter::with_indent(b" ");
        let mut serializer = serde_json::Serializer::with_formatter(&mut out, formatter);
        self.serialize(&mut serializer)?;
        out.flush()
    }

    /// Writes compact JSON to `path`, through a temporary file renamed at the
    /// end, so that a recorder killed while writing never leaves a
    /// half-written profile under the final name.
    pub fn write_to_path(&self, path: impl AsRef<Path>) -> Result<(), ProfileError> {
        let path = path.as_ref();
        let err = |source| ProfileError::Write {
            path: path.to_owned(),
            source,
        };
        let mut tmp_name = path.as_os_str().to_owned();
        tmp_name.push(".tmp");
        let tmp = Path::new(&tmp_name);
        let result = File::create(tmp)
            .and_then(|file| self.write_to(file))
            .and_then(|()| std::fs::rename(tmp, path));
        if let Err(source) = result {
            let _ = std::fs::remove_file(tmp);
            return Err(err(source));
        }
        Ok(())
    }
}
