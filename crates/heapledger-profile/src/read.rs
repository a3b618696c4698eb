//! Reading a profile, with an error that says exactly what is wrong.
//!
//! The fast path parses straight into [`Profile`]. Only when that fails does
//! the reader look closer, to tell a truncated file from a non-JSON file, a
//! JSON file that is no profile, a profile of another version, and a damaged
//! profile. serde_json's recursion limit stays on, so deeply nested input is
//! an error, never a stack overflow; nothing here panics on any input.

use std::io::{self, Read};
use std::path::Path;

use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::error::Category;

use crate::error::ProfileError;
use crate::ext::EXT_VERSION;
use crate::model::{Profile, SUPPORTED_FORMAT_VERSIONS};

/// The name used in errors for input that did not come from a file.
const UNNAMED: &str = "<input>";

impl Profile {
    /// Reads the profile at `path`.
    pub fn from_path(path: impl AsRef<Path>) -> Result<Profile, ProfileError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| match source.kind() {
            io::ErrorKind::NotFound => ProfileError::NotFound {
                path: path.to_owned(),
            },
            _ => ProfileError::Unreadable {
                path: path.to_owned(),
                source,
            },
        })?;
        parse(&bytes, path)
    }

    /// Reads a profile from `reader` (read to the end first: parsing from
    /// memory is several times faster than from a stream).
    pub fn from_reader(mut reader: impl Read) -> Result<Profile, ProfileError> {
        let mut bytes = Vec::new();
        reader
            .read_to_end(&mut bytes)
            .map_err(|source| ProfileError::Unreadable {
                path: UNNAMED.into(),
                source,
            })?;
        parse(&bytes, Path::new(UNNAMED))
    }

    /// Reads a profile from bytes; errors name it `<input>`.
    pub fn from_slice(bytes: &[u8]) -> Result<Profile, ProfileError> {
        parse(bytes, Path::new(UNNAMED))
    }

    /// Reads a profile from bytes; errors name it `name`.
    pub fn from_slice_named(bytes: &[u8], name: impl AsRef<Path>) -> Result<Profile, ProfileError> {
        parse(bytes, name.as_ref())
    }
}

fn parse(bytes: &[u8], path: &Path) -> Result<Profile, ProfileError> {
    let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    let Some(&first) = bytes.iter().find(|b| !b.is_ascii_whitespace()) else {
        return Err(ProfileError::Empty {
            path: path.to_owned(),
        });
    };
    if first != b'{' {
        // Valid JSON of another shape, or not JSON at all?
        return Err(match serde_json::from_slice::<IgnoredAny>(bytes) {
            Ok(_) => not_a_profile(
                path,
                format!("the top level is {}, not an object", kind_of(first)),
            ),
            Err(e) => syntax_error(path, &e),
        });
    }
    match serde_json::from_slice::<Profile>(bytes) {
        Ok(profile) => {
            check_format_version(path, &profile.run.format_version)?;
            if let Some(ext) = &profile.heapledger {
                check_ext_version(path, u64::from(ext.version), || ext.version.to_string())?;
            }
            Ok(profile)
        }
        Err(e) if e.classify() == Category::Data => Err(diagnose(bytes, path, &e)),
        Err(e) => Err(syntax_error(path, &e)),
    }
}

/// Maps an error found before the data was complete (EOF, syntax, I/O).
fn syntax_error(path: &Path, e: &serde_json::Error) -> ProfileError {
    match e.classify() {
        Category::Eof => ProfileError::Truncated {
            path: path.to_owned(),
            detail: format!("at line {} column {}", e.line(), e.column()),
        },
        Category::Io => ProfileError::Unreadable {
            path: path.to_owned(),
            source: io::Error::other(e.to_string()),
        },
        Category::Syntax | Category::Data => ProfileError::NotJson {
            path: path.to_owned(),
            detail: e.to_string(),
        },
    }
}

fn not_a_profile(path: &Path, reason: impl Into<String>) -> ProfileError {
    ProfileError::NotAProfile {
        path: path.to_owned(),
        reason: reason.into(),
    }
}

fn kind_of(first: u8) -> &'static str {
    match first {
        b'[' => "an array",
        b'"' => "a string",
        b't' | b'f' => "a boolean",
        b'n' => "null",
        _ => "a number",
    }
}

/// Just enough of a profile to say what kind of file this is.
#[derive(Deserialize)]
struct Probe {
    run: Option<serde_json::Value>,
    heapledger: Option<ProbeExt>,
}

#[derive(Deserialize)]
struct ProbeExt {
    version: Option<serde_json::Value>,
}

/// The full parse failed on the data: find out why, reading the file again
/// with a lenient shape (only on the error path).
fn diagnose(bytes: &[u8], path: &Path, original: &serde_json::Error) -> ProfileError {
    let probe = match serde_json::from_slice::<Probe>(bytes) {
        Ok(probe) => probe,
        Err(e) if e.classify() == Category::Data => return not_a_profile(path, e.to_string()),
        Err(e) => return syntax_error(path, &e),
    };
    let Some(run) = probe.run else {
        return not_a_profile(path, "it has no `run` section");
    };
    let Some(version) = run.get("formatVersion") else {
        return not_a_profile(path, "it has no `run.formatVersion`");
    };
    let Some(version) = version.as_str() else {
        return not_a_profile(
            path,
            format!("`run.formatVersion` is {version}, not a string"),
        );
    };
    if let Err(e) = check_format_version(path, version) {
        return e;
    }
    if let Some(v) = probe.heapledger.and_then(|m| m.version) {
        let number = v.as_u64().unwrap_or(u64::MAX);
        if let Err(e) = check_ext_version(path, number, || v.to_string()) {
            return e;
        }
    }
    ProfileError::Malformed {
        path: path.to_owned(),
        detail: original.to_string(),
    }
}

fn check_format_version(path: &Path, found: &str) -> Result<(), ProfileError> {
    if SUPPORTED_FORMAT_VERSIONS.contains(&found) {
        return Ok(());
    }
    Err(ProfileError::UnsupportedVersion {
        path: path.to_owned(),
        found: format!("{found:?}"),
        supported: SUPPORTED_FORMAT_VERSIONS.join(", "),
    })
}

fn check_ext_version(
    path: &Path,
    found: u64,
    shown: impl FnOnce() -> String,
) -> Result<(), ProfileError> {
    if (1..=u64::from(EXT_VERSION)).contains(&found) {
        return Ok(());
    }
    Err(ProfileError::UnsupportedExtension {
        path: path.to_owned(),
        found: shown(),
        supported: EXT_VERSION,
    })
}
