//! The raw data of a run: the directory its processes leave their dumps
//! in, and reading them back.

use anyhow::{bail, Result};
use std::path::{Path, PathBuf};

/// The directories `run` makes its raw data directories in (see [`temp_dir`]).
pub(crate) fn temp_bases() -> Vec<PathBuf> {
    // Absolute: a relative `$TMPDIR` (`TMPDIR=tmp`) named a directory that a
    // process which changed its working directory could no longer find,
    // and its data was lost.
    let tmp = std::env::temp_dir();
    let mut bases = vec![std::path::absolute(&tmp).unwrap_or(tmp)];
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
    /// Snapshots the processes took while they ran (`P.snap.SEQ`), each a
    /// checkpoint with its label, in the order taken.
    pub snapshots: Vec<heapledger_wire::Dump>,
    /// The files read: removed by the caller once the profiles are
    /// written, so that a run that cannot make them (out of memory) leaves
    /// its raw data for `heapledger recover`.
    pub consumed: Vec<PathBuf>,
}

/// Bytes of dumps from which they are decoded without what the symbolizer
/// parsed of the binaries beside them (about 100 000 stacks; see
/// `run::run`).
pub(crate) const FORGET_PARSED_BYTES: u64 = 8 << 20;

/// The bytes of the files in `dir` (the run's dumps and checkpoints).
pub(crate) fn bytes_in(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok()?.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// Every dump left in `dir` (the started process and its children),
/// decoded: [`plan_dumps`], each process then loaded in turn. The files
/// read are listed in `Dumps::consumed`, for the caller to remove once its
/// profiles are written (a second interrupt removes them too:
/// `output::raw_files`); files that hold nothing to read are removed here.
/// `running`: the processes still running when heapledger stopped waiting.
pub(crate) fn read_dumps(dir: &Path, running: &[u32]) -> Result<Dumps> {
    let plan = plan_dumps(dir, running)?;
    let mut dumps = Vec::new();
    let mut unreadable = false;
    for p in &plan.pending {
        let l = p.load()?;
        dumps.extend(l.dump);
        unreadable |= l.unreadable;
    }
    Ok(Dumps {
        dumps,
        unreadable,
        snapshots: plan.snapshots,
        consumed: plan.consumed,
    })
}

/// What a run's raw data holds, before its processes' dumps are decoded
/// (a build's hundreds of them: `run` decodes each when its profile is
/// made, holding one at a time).
pub(crate) struct Plan {
    /// The processes' dumps (each with its checkpoint and series), in the
    /// order of their files.
    pub pending: Vec<Pending>,
    /// Snapshots the processes took while they ran (`P.snap.SEQ`),
    /// decoded, in the order taken.
    pub snapshots: Vec<heapledger_wire::Dump>,
    /// Every file of the raw data (see `Dumps::consumed`).
    pub consumed: Vec<PathBuf>,
}

/// One process image's raw data, not yet read (`Pending::load`).
pub(crate) struct Pending {
    path: PathBuf,
    /// Its last checkpoint (`P.ckpt`), written whole while it ran.
    checkpoint: Option<PathBuf>,
    /// Its checkpoints' series (`P.series`).
    series: Option<PathBuf>,
    /// Whether it is the last image of its process (a checkpoint of an
    /// image the process replaced with `exec` is left out, as that image's
    /// dump would be).
    last_image: bool,
    /// Its process still ran when heapledger stopped waiting.
    running: bool,
}

/// What loading a [`Pending`] gave.
pub(crate) struct Loaded {
    pub dump: Option<heapledger_wire::Dump>,
    /// It could not be read (said on stderr).
    pub unreadable: bool,
    /// Its file stayed empty: this process replaced itself with `exec`, was
    /// killed by SIGKILL, or still runs.
    pub empty: Option<u32>,
}

/// Lists the raw data in `dir` (see [`read_dumps`]), decoding only the
/// snapshots; files that are neither dumps nor checkpoints (a checkpoint
/// cut short, `heapledger ctl`'s page) are removed.
pub(crate) fn plan_dumps(dir: &Path, running: &[u32]) -> Result<Plan> {
    let mut consumed = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .collect();
    entries.sort();
    let mut checkpoints: std::collections::HashMap<PathBuf, PathBuf> = Default::default();
    let mut files = Vec::new();
    let mut snapshot_files = Vec::new();
    // Each dump's checkpoint series (`P.series`), by the dump's path.
    let mut series: std::collections::HashMap<PathBuf, PathBuf> = Default::default();
    for path in entries {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let name = name.unwrap_or_default();
        if name.ends_with(".tmp") || name.ends_with(".ctl") {
            // A checkpoint cut short (the one before it, if any, stands),
            // or `heapledger ctl`'s page.
            let _ = std::fs::remove_file(&path);
        } else if let Some(dump) = name.strip_suffix(heapledger_wire::SERIES_SUFFIX) {
            series.insert(path.with_file_name(dump), path);
        } else if name.contains(".snap.") {
            snapshot_files.push(path);
        } else if let Some(dump) = name.strip_suffix(".ckpt") {
            checkpoints.insert(path.with_file_name(dump), path);
        } else {
            files.push(path);
        }
    }
    // The dump files a checkpoint stands for even where the dump file is
    // gone, and the latest image of each process.
    for base in checkpoints.keys() {
        if !files.contains(base) {
            files.push(base.clone());
        }
    }
    files.sort();
    let image = |p: &Path| -> u32 {
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
        let name = name.unwrap_or_default();
        let mut parts = name.split('.');
        parts.next();
        parts.next().and_then(|n| n.parse().ok()).unwrap_or(0)
    };
    let mut latest: std::collections::HashMap<u32, u32> = Default::default();
    for f in &files {
        if let Some(pid) = dump_pid(f) {
            let e = latest.entry(pid).or_insert(0);
            *e = (*e).max(image(f));
        }
    }
    let mut pending = Vec::new();
    for path in files {
        let checkpoint = checkpoints.remove(&path);
        let series = series.remove(&path);
        consumed.extend(checkpoint.iter().cloned());
        consumed.extend(series.iter().cloned());
        if path.exists() {
            consumed.push(path.clone());
        }
        let pid = dump_pid(&path);
        pending.push(Pending {
            last_image: pid.is_none_or(|pid| latest.get(&pid) == Some(&image(&path))),
            running: pid.is_some_and(|p| running.contains(&p)),
            path,
            checkpoint,
            series,
        });
    }
    consumed.extend(series.into_values());
    let mut snapshots = Vec::new();
    for path in snapshot_files {
        let regular = std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_file());
        let read = if regular {
            decode_file(&path)
        } else {
            heapledger_wire::decode(&[])
        };
        match read {
            Ok(d) if d.snapshot.is_some() => snapshots.push(d),
            Ok(_) => say!("heapledger: skipping {}: not a snapshot", path.display()),
            Err(e) => say!("heapledger: skipping {}: {e}", path.display()),
        }
        consumed.push(path);
    }
    snapshots.sort_by_key(|d| (d.pid, d.checkpoint.map_or(0, |c| c.seq)));
    Ok(Plan {
        pending,
        snapshots,
        consumed,
    })
}

impl Pending {
    /// The pid its file name carries.
    pub(crate) fn pid(&self) -> Option<u32> {
        dump_pid(&self.path)
    }

    /// Its dump file's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Decodes its dump, or, where the process could not write it at its
    /// end (killed by SIGKILL or the OOM killer, or still running), its
    /// last checkpoint, which says so (`Dump::checkpoint`); with its
    /// checkpoints' series.
    pub(crate) fn load(&self) -> Result<Loaded> {
        let mut l = Loaded {
            dump: None,
            unreadable: false,
            empty: None,
        };
        let read_checkpoint = |l: &mut Loaded| -> bool {
            let Some(c) = &self.checkpoint else {
                return false;
            };
            match decode_file(c) {
                Ok(d) if self.last_image => {
                    l.dump = Some(d);
                    true
                }
                Ok(_) => false,
                Err(e) => {
                    say!("heapledger: skipping {}: {e}", c.display());
                    false
                }
            }
        };
        let path = &self.path;
        if !path.exists() {
            read_checkpoint(&mut l);
        } else if !std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_file()) {
            // The program can write in this directory: a FIFO or a device
            // there would hang the read, and a link lead elsewhere.
            say!(
                "heapledger: skipping {}: not a regular file",
                path.display()
            );
            let _ = std::fs::remove_file(path);
            if let Some(c) = &self.checkpoint {
                let _ = std::fs::remove_file(c);
            }
        } else {
            let file = std::fs::File::open(path)?;
            let len = file.metadata()?.len();
            if len == 0 {
                // Created as the process started recording, never written:
                // it replaced itself with exec (its new image has a file
                // of its own), was killed by SIGKILL, or still runs.
                l.empty = dump_pid(path);
                read_checkpoint(&mut l);
            } else {
                // Read a window at a time, never held whole (see
                // `decode_read`).
                match decode_whole(file, len) {
                    Ok(d) => l.dump = Some(d),
                    Err(heapledger_wire::DecodeError::Truncated) if self.running => {
                        if !read_checkpoint(&mut l) {
                            // Caught at the deadline, writing its dump as
                            // it ends.
                            say!(
                                "heapledger: skipping {}: the process was still writing it",
                                path.display()
                            )
                        }
                    }
                    Err(e) => {
                        if !read_checkpoint(&mut l) {
                            l.unreadable = true;
                            say!("heapledger: skipping {}: {e}", path.display())
                        }
                    }
                }
            }
        }
        // The series of the process's checkpoints, up to the one read.
        // Read as the profile is built, a record at a time: a long run's
        // series is hundreds of MB.
        if let (Some(s), Some(d)) = (&self.series, l.dump.as_mut()) {
            d.series_file = match std::fs::symlink_metadata(s) {
                Ok(m) if m.file_type().is_file() => Some(s.clone()),
                _ => None,
            };
        }
        Ok(l)
    }
}

/// Removes the files `read_dumps` read, once their profiles are written.
pub(crate) fn remove_consumed(files: &[PathBuf]) {
    for f in files {
        let _ = std::fs::remove_file(f);
    }
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

/// The dump in the file at `path`, read a window at a time (an unreadable
/// file reads as an empty one).
fn decode_file(path: &Path) -> Result<heapledger_wire::Dump, heapledger_wire::DecodeError> {
    match std::fs::File::open(path).and_then(|f| Ok((f.metadata()?.len(), f))) {
        Ok((len, f)) => decode_whole(f, len),
        Err(_) => heapledger_wire::decode(&[]),
    }
}

/// `decode_read` of the `len` bytes of `file`, where an error
/// in a file that does not end with the last record's tag (`End`, which
/// every complete dump and checkpoint ends with) is its truncation: a
/// process that died or ran out of room while writing it (a full
/// `$TMPDIR`), whose last record is cut, not bad.
fn decode_whole(
    file: std::fs::File,
    len: u64,
) -> Result<heapledger_wire::Dump, heapledger_wire::DecodeError> {
    use std::os::unix::fs::FileExt;
    let mut last = [0u8];
    let whole = len > 0
        && file.read_at(&mut last, len - 1).is_ok()
        && last[0] == heapledger_wire::Tag::End as u8;
    heapledger_wire::decode_read(file, len).map_err(|e| {
        if whole {
            e
        } else {
            heapledger_wire::DecodeError::Truncated
        }
    })
}
