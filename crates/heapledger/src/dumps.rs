//! The raw data of a run: the directory its processes leave their dumps
//! in, and reading them back.

use anyhow::{bail, Result};
use std::path::{Path, PathBuf};

/// The directories `run` makes its raw data directories in (see [`temp_dir`]).
pub(crate) fn temp_bases() -> Vec<PathBuf> {
    let mut bases = vec![std::env::temp_dir()];
    for b in ["/tmp", "/var/tmp", "/dev/shm"] {
        let b = PathBuf::from(b);
        if !bases.contains(&b) {
            bases.push(b);
        }
    }
    bases
}

/// The directory the program's processes leave their dumps in: under
/// `$TMPDIR`, or where that cannot be, under /tmp, /var/tmp or /dev/shm.
pub(crate) fn temp_dir() -> Result<PathBuf> {
    let mut tried = Vec::new();
    for base in temp_bases() {
        for i in 0..100u32 {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let d = base.join(format!("heapledger-{}-{nanos}-{i}", std::process::id()));
            match std::fs::create_dir(&d) {
                Ok(()) => return Ok(d),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(_) => break,
            }
        }
        tried.push(base);
    }
    let names: Vec<String> = tried.iter().map(|p| p.display().to_string()).collect();
    bail!(
        "cannot create a temporary directory for the profile data (tried {})",
        names.join(", ")
    )
}

/// What the processes left in the raw data's directory.
#[derive(Default)]
pub(crate) struct Dumps {
    pub dumps: Vec<heapledger_wire::Dump>,
    /// One could not be read (said on stderr).
    pub unreadable: bool,
    /// The processes whose file stayed empty: each replaced itself with
    /// `exec` (the new image writes a file of its own if it records), or was
    /// killed by SIGKILL.
    pub empty: Vec<u32>,
}

/// Every dump left in `dir` (the started process and its children),
/// decoded; each file is removed once read, so that an interrupt leaves
/// nothing behind. `running`: the processes still running when heapledger
/// stopped waiting.
pub(crate) fn read_dumps(dir: &Path, running: &[u32]) -> Result<Dumps> {
    let mut dumps = Vec::new();
    let mut unreadable = false;
    let mut empty = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .collect();
    entries.sort();
    for path in entries {
        // The program can write in this directory: a FIFO or a device
        // there would hang the read, and a link lead elsewhere.
        let regular = std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_file());
        if !regular {
            eprintln!(
                "heapledger: skipping {}: not a regular file",
                path.display()
            );
            let _ = std::fs::remove_file(&path);
            continue;
        }
        let bytes = std::fs::read(&path)?;
        let _ = std::fs::remove_file(&path);
        if bytes.is_empty() {
            // Created as the process started recording, never written: it
            // replaced itself with exec (its new image has a file of its
            // own), was killed by SIGKILL, or still runs.
            empty.extend(dump_pid(&path));
            continue;
        }
        match heapledger_wire::decode(&bytes) {
            Ok(d) => dumps.push(d),
            Err(heapledger_wire::DecodeError::Truncated)
                if dump_pid(&path).is_some_and(|p| running.contains(&p)) =>
            {
                // Caught at the deadline, writing its dump as it ends.
                eprintln!(
                    "heapledger: skipping {}: the process was still writing it",
                    path.display()
                )
            }
            Err(e) => {
                unreadable = true;
                eprintln!("heapledger: skipping {}: {e}", path.display())
            }
        }
    }
    Ok(Dumps {
        dumps,
        unreadable,
        empty,
    })
}

/// The pid a dump's file name (`PID.hlraw`, `PID.N.hlraw`) carries.
pub(crate) fn dump_pid(path: &Path) -> Option<u32> {
    path.file_name()?.to_str()?.split('.').next()?.parse().ok()
}

pub(crate) fn exe_name(d: &heapledger_wire::Dump) -> String {
    let base = d.exe.rsplit('/').next().unwrap_or("");
    let base: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-+".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if base.is_empty() {
        "program".into()
    } else {
        base
    }
}
