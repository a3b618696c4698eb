//! Where a profile goes, and how it gets there whole or not at all.
//!
//! The output path is checked before the program starts (a run of an hour
//! must not learn at its end that its profile has nowhere to go). A profile
//! is written under a temporary name in its own directory and renamed into
//! place only when complete, so that a full disk, a crash or an interrupt
//! never leaves a truncated file where a profile should be. Once the program
//! has ended, a first Ctrl-C (or SIGTERM, SIGHUP, SIGQUIT) lets the writing
//! finish, and says so; a second one stops at once, removes the partial
//! file and the raw data, and says that no profile was written.

use anyhow::{bail, Context, Result};
use std::ffi::CString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;

/// Checks, before the program runs, that a profile can be written at
/// `path`: creates its missing directories, refuses a directory, a
/// read-only file or a directory where no file can be created, naming the
/// problem in one line. `path` None: the default name, in the current
/// directory.
pub fn check_writable(path: Option<&Path>) -> Result<()> {
    let shown = path.map_or_else(
        || "the current directory".into(),
        |p| p.display().to_string(),
    );
    let dir = match path {
        Some(p) => {
            let meta = std::fs::metadata(p);
            if meta.as_ref().is_ok_and(|m| m.is_dir()) {
                bail!("cannot write the profile to {shown}: it is a directory");
            }
            if is_special(p) {
                // A device or a pipe is written into, not replaced; opening
                // a FIFO would wait for its reader: asked, not opened.
                let c = CString::new(p.as_os_str().as_bytes())?;
                // SAFETY: a NUL-terminated path.
                if unsafe { libc::access(c.as_ptr(), libc::W_OK) } != 0 {
                    return Err(std::io::Error::last_os_error())
                        .with_context(|| format!("cannot write the profile to {shown}"));
                }
            } else if meta.is_ok() {
                // An earlier file (or a link to one) is replaced: it must
                // be writable, as it would be written over.
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(p)
                    .with_context(|| format!("cannot write the profile to {shown}"))?;
            }
            place(p).1
        }
        None => PathBuf::from("."),
    };
    create_dir(&dir, &shown)?;
    // Whether a file can be made there: the directory may be read-only,
    // on a read-only file system, or not ours.
    let probe = dir.join(format!(".heapledger-probe-{}", std::process::id()));
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
    {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) => bail!(
            "cannot write the profile to {shown}: cannot create a file in {}: {e}",
            dir.display()
        ),
    }
}

/// Creates `dir` and its parents; the error says which one is in the way.
fn create_dir(dir: &Path, shown: &str) -> Result<()> {
    if let Err(e) = std::fs::create_dir_all(dir) {
        // A parent that is a file gives EEXIST; say what is wrong.
        match dir.ancestors().find(|a| a.is_file()) {
            Some(f) => bail!(
                "cannot write the profile to {shown}: {} is a file, not a directory",
                f.display()
            ),
            None => bail!(
                "cannot write the profile to {shown}: cannot create {}: {e}",
                dir.display()
            ),
        }
    }
    Ok(())
}

/// The file a profile at `path` lands in: `path` itself, or where it is a
/// symbolic link, the file it names (a link is written through, not
/// replaced).
fn resolve(path: &Path) -> PathBuf {
    let mut p = path.to_owned();
    for _ in 0..40 {
        let Ok(target) = std::fs::read_link(&p) else {
            break;
        };
        p = match p.parent() {
            Some(dir) => dir.join(target),
            None => target,
        };
    }
    p
}

/// Where a profile for `path` goes: the file written (a link followed to
/// the file it names), the directory its temporary file is made in, and
/// whether it is a device or a pipe, written into rather than replaced. A
/// device's or pipe's temporary file is made in the system's temporary
/// directory: `/dev/stdout` names a pipe through `/proc/self/fd`, where
/// following the link leads nowhere (`pipe:[N]`) and no file can be made.
fn place(path: &Path) -> (PathBuf, PathBuf, bool) {
    if is_special(path) {
        return (path.to_owned(), std::env::temp_dir(), true);
    }
    let target = resolve(path);
    let dir = target
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), Path::to_owned);
    (target, dir, false)
}

/// An output path as typed: `-` is standard output (`/dev/stdout`), as
/// for most tools (`export --format folded -o - | flamegraph.pl`).
pub fn output_path(typed: &str) -> Result<PathBuf, String> {
    Ok(PathBuf::from(if typed == "-" {
        "/dev/stdout"
    } else {
        typed
    }))
}

/// Writes a file whole or not at all: `write` fills a temporary file beside
/// `path`, which is renamed to `path` once `write` succeeded and removed
/// otherwise. The error names `path`.
pub fn write_whole(path: &Path, write: impl FnOnce(std::fs::File) -> Result<()>) -> Result<()> {
    write_whole_with(path, |f, _| write(f))
}

/// [`write_whole`] for a writer that opens the temporary file by its path
/// (SQLite): it is given the file, created empty, and its path.
pub fn write_whole_with(
    path: &Path,
    write: impl FnOnce(std::fs::File, &Path) -> Result<()>,
) -> Result<()> {
    let shown = path.display().to_string();
    let (target, dir, special) = place(path);
    let dir = dir.as_path();
    create_dir(dir, &shown)?;
    let name = target
        .file_name()
        .map_or_else(|| "profile".into(), |n| n.to_string_lossy().into_owned());
    if !special {
        remove_stale_temporaries(dir, &name);
    }
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    // Named before it exists, so that a second interrupt removes it
    // whenever it comes.
    let tmp_c = CString::new(tmp.as_os_str().as_bytes()).ok();
    // Never freed: a handler on another thread may be reading it (a few
    // hundred bytes for each file written).
    let tmp_c = tmp_c.map_or(std::ptr::null_mut(), CString::into_raw);
    WRITING.store(tmp_c, Ordering::SeqCst);
    crate::fatal::writing(tmp_c);
    let result = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .with_context(|| format!("cannot write the profile to {shown}"))
        .and_then(|f| {
            write(f, &tmp).with_context(|| format!("cannot write the profile to {shown}"))
        })
        .and_then(|()| {
            if special || has_other_names(&target) {
                // A file with a second name is written in place, so that
                // both names show the new profile; so is a device or a
                // pipe (`-o /dev/null`, `-o /dev/stdout`, a FIFO), which a
                // rename would replace with a plain file. Only the copy of
                // a whole profile can fail there.
                copy_into(&tmp, &target)
            } else {
                std::fs::rename(&tmp, &target)
            }
            .with_context(|| format!("cannot write the profile to {shown}"))
        });
    // Copied or failed: the temporary file goes.
    let _ = std::fs::remove_file(&tmp);
    WRITING.store(std::ptr::null_mut(), Ordering::SeqCst);
    crate::fatal::writing(std::ptr::null_mut());
    result
}

/// Removes the temporary files (`.NAME.PID.tmp`) that a heapledger killed
/// while it wrote `dir/NAME` left (by SIGKILL, the OOM killer: no handler
/// runs), hundreds of MB for a large profile, hidden, and never removed
/// otherwise. Only those of a process that is gone: a pid in use (another
/// heapledger writing there now, or a pid used again) keeps its file.
fn remove_stale_temporaries(dir: &Path, name: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let prefix = format!(".{name}.");
    for e in entries.flatten() {
        let file = e.file_name();
        let pid = file
            .to_str()
            .and_then(|f| f.strip_prefix(&prefix))
            .and_then(|r| r.strip_suffix(".tmp"))
            .and_then(|p| p.parse::<libc::pid_t>().ok());
        let Some(pid) = pid.filter(|&p| p > 0) else {
            continue;
        };
        // SAFETY: signal 0 only asks whether the process exists.
        let gone = unsafe { libc::kill(pid, 0) } == -1
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone && e.file_type().is_ok_and(|t| t.is_file()) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Writes the profile store of a run (the main process first), whole or
/// not at all; the error names the path.
pub fn write_store(profiles: &[heapledger_profile::Profile], path: &Path) -> Result<()> {
    let Some((main, rest)) = profiles.split_first() else {
        bail!("internal error: no profile to write");
    };
    write_store_each(path, main, rest.iter().map(Ok))
}

/// [`write_store`] of the main process's profile `main` and the others
/// (children, then snapshots) as `rest` gives them, each written into the
/// store and dropped before the next is asked for: a run of many processes
/// (a build) holds one of them at a time, not all. An error from `rest`
/// (its maker failed) writes nothing.
pub fn write_store_each<P: std::borrow::Borrow<heapledger_profile::Profile>>(
    path: &Path,
    main: &heapledger_profile::Profile,
    rest: impl Iterator<Item = Result<P>>,
) -> Result<()> {
    write_whole_with(path, |file, tmp| {
        drop(file);
        let mut w = heapledger_store::Writer::create(tmp).map_err(|e| anyhow::anyhow!("{e}"))?;
        add_to_store(&mut w, main, true)?;
        for p in rest {
            add_to_store(&mut w, p?.borrow(), false)?;
        }
        w.finish().map_err(|e| anyhow::anyhow!("{e}"))
    })
}

/// Adds one profile to the store: a snapshot (taken while a process ran)
/// or a process, with its binaries' variables (each binary's once).
fn add_to_store(
    w: &mut heapledger_store::Writer,
    p: &heapledger_profile::Profile,
    main: bool,
) -> Result<()> {
    // The variables' rows made ahead (`convert::Variables`), for the very
    // lists the profile holds.
    for (binary, vars) in &p.mem_stats.global_variables {
        if let Some(made) = crate::convert::variables_made(binary) {
            if let (true, Some(row)) = (Arc::ptr_eq(&made.list, vars), &made.row) {
                w.add_variables(binary, vars, row)
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
            }
        }
    }
    let tps = p.globals.ticks_per_second.max(1) as f64;
    let ext = p.heapledger.as_ref();
    let checkpoint = ext
        .and_then(|e| e.checkpoint)
        .map(|c| (c.seq, c.time as f64 / tps));
    if let (Some(label), Some((seq, seconds))) = (ext.and_then(|e| e.snapshot.clone()), checkpoint)
    {
        let meta = heapledger_store::SnapshotMeta {
            seq,
            label,
            seconds,
        };
        return w.add_snapshot(p, meta).map_err(|e| anyhow::anyhow!("{e}"));
    }
    let meta = heapledger_store::ProcessMeta {
        is_main: main,
        checkpoint,
    };
    w.add_process(p, meta).map_err(|e| anyhow::anyhow!("{e}"))
}

/// Whether `path` exists and is neither a plain file nor a directory (a
/// device, a FIFO, a socket).
fn is_special(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir())
}

/// Writes the bytes of `from` into the existing `to`, which keeps its
/// inode, kind and permissions.
fn copy_into(from: &Path, to: &Path) -> std::io::Result<()> {
    let mut src = std::fs::File::open(from)?;
    let mut dst = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(to)?;
    std::io::copy(&mut src, &mut dst)?;
    dst.flush()
}

/// Whether `path` is a plain file with more than one name (a hard link).
fn has_other_names(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.nlink() > 1)
}

/// The temporary file being written now (a C string), for the handler.
static WRITING: AtomicPtr<libc::c_char> = AtomicPtr::new(std::ptr::null_mut());
/// The raw data's directory, for the handler: emptied as the dumps are read.
static RAW_DIR: AtomicPtr<libc::c_char> = AtomicPtr::new(std::ptr::null_mut());
/// `raw_files`' paths (leaked), and how many.
static RAW_FILES: AtomicPtr<*mut libc::c_char> = AtomicPtr::new(std::ptr::null_mut());
static RAW_FILES_LEN: AtomicUsize = AtomicUsize::new(0);
/// What the handler says on a first and on a second interrupt.
static FIRST_WORD: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
static SECOND_WORD: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
static INTERRUPTS: AtomicU32 = AtomicU32::new(0);

/// A message for the handler, kept for the life of the process.
fn leak_c(text: String) -> *mut u8 {
    CString::new(text)
        .unwrap_or_default()
        .into_raw()
        .cast::<u8>()
}

/// From the program's end to heapledger's: a first interrupt lets the
/// profile at `out` (None: not yet known) be finished, a second stops without it (see the module
/// comment). `raw_dir`: the directory of the raw data, removed then.
pub fn finish_on_interrupt(out: Option<&Path>, raw_dir: &Path) {
    let (finishing, none) = match out {
        Some(p) => (
            format!("its profile {}", p.display()),
            format!("no profile was written to {}", p.display()),
        ),
        None => (
            "its profile".to_owned(),
            "no profile was written".to_owned(),
        ),
    };
    FIRST_WORD.store(
        leak_c(format!(
            "heapledger: the program has ended; finishing {finishing} (interrupt again to stop without it)\n"
        )),
        Ordering::SeqCst,
    );
    SECOND_WORD.store(
        leak_c(format!("heapledger: interrupted again: stopped; {none}\n")),
        Ordering::SeqCst,
    );
    if let Ok(dir) = CString::new(raw_dir.as_os_str().as_bytes()) {
        RAW_DIR.store(dir.into_raw(), Ordering::SeqCst);
    }
    let handler = while_writing as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only reads atomics and makes async-signal-safe
    // calls (write, unlink, rmdir, _exit).
    unsafe {
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
            libc::signal(sig, handler);
        }
    }
}

/// The raw data's files that were read (`dumps::read_dumps`), which a
/// second interrupt removes with their directory. Set once per run.
pub fn raw_files(files: &[PathBuf]) {
    let paths: Vec<*mut libc::c_char> = files
        .iter()
        .filter_map(|f| CString::new(f.as_os_str().as_bytes()).ok())
        .map(CString::into_raw)
        .collect();
    // Never freed, as the handler may read them at any time.
    let paths = paths.leak();
    RAW_FILES_LEN.store(0, Ordering::SeqCst);
    RAW_FILES.store(paths.as_mut_ptr(), Ordering::SeqCst);
    RAW_FILES_LEN.store(paths.len(), Ordering::SeqCst);
}

/// The main profile is in place: a second interrupt no longer loses it.
pub fn main_written(out: &Path) {
    crate::fatal::profile_written();
    SECOND_WORD.store(
        leak_c(format!(
            "heapledger: interrupted again: stopped; the profile {} is whole, child profiles may be missing\n",
            out.display()
        )),
        Ordering::SeqCst,
    );
}

/// Whether an interrupt came while the profile was being finished.
pub fn interrupted() -> bool {
    INTERRUPTS.load(Ordering::SeqCst) > 0
}

extern "C" fn while_writing(sig: libc::c_int) {
    let say = |msg: *mut u8| {
        if !msg.is_null() {
            // SAFETY: msg is a NUL-terminated string leaked by leak_c.
            unsafe {
                let len = libc::strlen(msg.cast());
                libc::write(2, msg.cast(), len);
            }
        }
    };
    if INTERRUPTS.fetch_add(1, Ordering::SeqCst) == 0 {
        say(FIRST_WORD.load(Ordering::SeqCst));
        return;
    }
    let tmp = WRITING.load(Ordering::SeqCst);
    let raw = RAW_DIR.load(Ordering::SeqCst);
    // SAFETY: both are null or NUL-terminated paths that are never freed;
    // unlink, rmdir and _exit are async-signal-safe.
    unsafe {
        if !tmp.is_null() {
            libc::unlink(tmp);
        }
        let files = RAW_FILES.load(Ordering::SeqCst);
        if !files.is_null() {
            for i in 0..RAW_FILES_LEN.load(Ordering::SeqCst) {
                libc::unlink(*files.add(i));
            }
        }
        if !raw.is_null() {
            libc::rmdir(raw);
        }
    }
    say(SECOND_WORD.load(Ordering::SeqCst));
    // SAFETY: ends the process without running anything else.
    unsafe { libc::_exit(128 + sig) };
}
