//! `heapledger export`: a profile written in another tool's format, one
//! writer per format.

use anyhow::{anyhow, Result};
use heapledger_profile::Profile;
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// MALT 1.6's JSON, which MALT's reader and web viewer open.
    Malt,
    /// callgrind's format, for KCachegrind and callgrind_annotate.
    Callgrind,
}

impl Format {
    /// The file written where `-o` is not given, from the profile's stem.
    pub fn default_output(self, profile: &Path) -> PathBuf {
        let stem = profile
            .file_stem()
            .map_or_else(|| "profile".into(), |s| s.to_string_lossy().into_owned());
        match self {
            // Never the profile's own name (an exported JSON profile
            // read again).
            Format::Malt => PathBuf::from(format!("{stem}.malt.json")),
            Format::Callgrind => PathBuf::from(format!("callgrind.out.{stem}")),
        }
    }
}

/// Writes `profile` to `out` in `format`, whole or not at all.
pub fn write(profile: &Profile, format: Format, out: &Path) -> Result<()> {
    crate::output::write_whole(out, |f| {
        match format {
            // `write_to` buffers (1 MiB) itself.
            Format::Malt => profile.write_to(f).map_err(|e| anyhow!("{e}"))?,
            Format::Callgrind => {
                let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
                heapledger_profile::callgrind::write(profile, &mut w)?;
                std::io::Write::flush(&mut w)?;
            }
        }
        Ok(())
    })
}
