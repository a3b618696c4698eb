//! The dump's file: created when recording starts and kept open until the
//! process ends, and written through a buffer.

use super::stderr_line;
use crate::base::config;
use crate::base::sync;
use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicI32, AtomicPtr, AtomicU64, Ordering};
use heapledger_wire::Sink;

/// The dump file, written through a 64 KiB buffer as it is encoded (a
/// Python start-up alone makes a 9 MB dump; building it whole first cost
/// copies as the buffer grew). The first write error is kept and reported
/// once; a dump cut short is refused by the reader as truncated.
pub(super) struct FileSink {
    pub(super) fd: i32,
    pub(super) buf: Vec<u8>,
    pub(super) err: i32,
}

pub(super) const SINK_BUF: usize = 1 << 16;

impl FileSink {
    pub(super) fn flush(&mut self) {
        let buf = core::mem::take(&mut self.buf);
        self.write_all(&buf);
        self.buf = buf;
        self.buf.clear();
    }

    pub(super) fn write_all(&mut self, bytes: &[u8]) {
        let mut off = 0;
        while off < bytes.len() && self.err == 0 {
            // SAFETY: writing a buffer of ours to our own fd.
            let n = unsafe {
                libc::write(
                    self.fd,
                    bytes[off..].as_ptr() as *const _,
                    bytes.len() - off,
                )
            };
            if n <= 0 {
                // SAFETY: errno location is valid.
                let err = unsafe { *libc::__errno_location() };
                if n < 0 && err == libc::EINTR {
                    continue;
                }
                self.err = if n == 0 { libc::EIO } else { err };
                break;
            }
            off += n as usize;
        }
    }
}

impl Sink for FileSink {
    #[inline]
    fn put_small(&mut self, b: &[u8; 16], n: usize) {
        let len = self.buf.len();
        if self.buf.capacity() - len < b.len() {
            return self.put(&b[..n]);
        }
        // SAFETY: 16 bytes of spare capacity, checked above; n <= 16 of
        // them are kept.
        unsafe {
            self.buf
                .as_mut_ptr()
                .add(len)
                .cast::<[u8; 16]>()
                .write_unaligned(*b);
            self.buf.set_len(len + n.min(16));
        }
    }

    fn put(&mut self, b: &[u8]) {
        if self.buf.len() + b.len() > SINK_BUF {
            self.flush();
        }
        if b.len() > SINK_BUF {
            // Written from where it is, not copied into a buffer grown for
            // it (memory may have run out: see `base::degrade`).
            self.flush();
            self.write_all(b);
        } else {
            self.buf.extend_from_slice(b);
        }
    }
}

/// The dump file of this process, created when it starts recording and
/// kept open until it ends: by then the program may have changed to a user
/// that cannot write the directory (a daemon started as root), entered a
/// `chroot`, or used up its descriptors. -1 when there is none.
static RESERVED_FD: AtomicI32 = AtomicI32::new(-1);
/// Its device and inode, to tell it from a file the program put at that
/// descriptor after closing ours (a daemon's "close every fd").
static RESERVED_DEV: AtomicU64 = AtomicU64::new(0);
static RESERVED_INO: AtomicU64 = AtomicU64::new(0);
/// Its path (a leaked `String`), to open it again where the descriptor was
/// taken from us.
static RESERVED_PATH: AtomicPtr<String> = AtomicPtr::new(core::ptr::null_mut());

/// Where the reserved descriptor goes: above the ones a program uses, so it
/// does not shift the numbers the program's own files get, and not so high
/// that the kernel grows the process's descriptor table for it.
pub(super) const RESERVED_AT: u64 = 1023;

/// Creates this process's dump file and keeps it open (see `RESERVED_FD`):
/// when recording starts, and in a forked child, whose inherited copy of
/// its parent's descriptor is closed first. Silent: where it fails, the
/// dump is created at the end as before, which reports why.
pub fn reserve() {
    forget();
    let _e = sync::ErrnoGuard::new();
    let Some((fd, path)) = open_dump_quietly() else {
        return;
    };
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: lim is writable.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur
    } else {
        0
    };
    let at = RESERVED_AT.min(soft.saturating_sub(1));
    let fd = if (fd as u64) < at {
        // SAFETY: fd is ours; F_DUPFD_CLOEXEC takes the lowest free
        // descriptor at or above `at`.
        let high = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, at as libc::c_int) };
        if high >= 0 {
            // SAFETY: fd is ours, now duplicated.
            unsafe { libc::close(fd) };
            high
        } else {
            fd
        }
    } else {
        fd
    };
    // SAFETY: an all-zero stat is valid; fd is ours.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        // SAFETY: fd is ours.
        unsafe { libc::close(fd) };
        return;
    }
    RESERVED_DEV.store(st.st_dev, Ordering::Relaxed);
    RESERVED_INO.store(st.st_ino, Ordering::Relaxed);
    let old = RESERVED_PATH.swap(
        alloc::boxed::Box::into_raw(alloc::boxed::Box::new(path)),
        Ordering::AcqRel,
    );
    if !old.is_null() {
        // SAFETY: the parent's path, leaked by `Box::into_raw` above.
        drop(unsafe { alloc::boxed::Box::from_raw(old) });
    }
    RESERVED_FD.store(fd, Ordering::Release);
}

/// In a forked child that is not followed: the parent's dump file is not
/// its own.
pub fn forget() {
    let old = RESERVED_FD.swap(-1, Ordering::AcqRel);
    if old >= 0 {
        // SAFETY: the parent's dump file, inherited by this forked child.
        unsafe { libc::close(old) };
    }
}

pub(super) enum Reserved {
    /// Open and ready to be written.
    Ready(i32, String),
    /// Reserved, but it can no longer be opened (said on stderr).
    Lost,
    /// Never reserved.
    None,
}

/// The path of the reserved dump file (the final dump's; its checkpoint's
/// is beside it: `process::checkpoint`), if there is one.
pub(super) fn reserved_path() -> Option<String> {
    let path = RESERVED_PATH.load(Ordering::Acquire);
    // SAFETY: leaked in `reserve`, freed only there (in a forked child,
    // before its checkpoints start).
    (!path.is_null()).then(|| unsafe { &*path }.clone())
}

/// The reserved dump file, ready to be written: its descriptor if it still
/// is ours, else the same file opened again by its path.
pub(super) fn reserved() -> Reserved {
    let fd = RESERVED_FD.swap(-1, Ordering::AcqRel);
    let path = RESERVED_PATH.load(Ordering::Acquire);
    if path.is_null() {
        return Reserved::None;
    }
    // SAFETY: leaked in `reserve`, freed only there, before a new one is
    // stored, which the process that writes its dump does not do again.
    let path = unsafe { &*path }.clone();
    if fd >= 0 {
        // SAFETY: an all-zero stat is valid.
        let mut st: libc::stat = unsafe { core::mem::zeroed() };
        // SAFETY: fstat on any descriptor number is safe.
        if unsafe { libc::fstat(fd, &mut st) } == 0
            && st.st_dev == RESERVED_DEV.load(Ordering::Relaxed)
            && st.st_ino == RESERVED_INO.load(Ordering::Relaxed)
        {
            return Reserved::Ready(fd, path);
        }
    }
    // The program closed our descriptor (and maybe reused its number): open
    // the file again.
    let mut c = path.clone();
    c.push('\0');
    // SAFETY: c is NUL-terminated.
    let fd = unsafe {
        libc::open(
            c.as_ptr() as *const _,
            libc::O_WRONLY | libc::O_TRUNC | libc::O_CLOEXEC,
        )
    };
    if fd >= 0 {
        return Reserved::Ready(fd, path);
    }
    // SAFETY: errno location is valid.
    let err = unsafe { *libc::__errno_location() };
    stderr_line(&alloc::format!(
        "heapledger: cannot write profile data to {path}: {}\n",
        describe(err)
    ));
    Reserved::Lost
}

/// Creates `$HEAPLEDGER_DIR/PID.hlraw` (or PID.N.hlraw if taken); None when
/// there is no directory or the file cannot be created (said on stderr).
pub(super) fn open_dump() -> Option<(i32, String)> {
    create_dump(true)
}

/// `open_dump` that says nothing on failure.
fn open_dump_quietly() -> Option<(i32, String)> {
    create_dump(false)
}

fn create_dump(say: bool) -> Option<(i32, String)> {
    let dir = String::from_utf8_lossy(config::get().dir?.to_bytes()).into_owned();
    // SAFETY: no preconditions.
    let pid = unsafe { libc::getpid() };
    for attempt in 0..100 {
        let mut path = if attempt == 0 {
            alloc::format!("{dir}/{pid}.hlraw")
        } else {
            alloc::format!("{dir}/{pid}.{attempt}.hlraw")
        };
        path.push('\0');
        let created = create(&path);
        path.pop();
        match created {
            Ok(fd) => return Some((fd, path)),
            Err(libc::EEXIST) => {}
            Err(_) if !say => return None,
            Err(err) => {
                stderr_line(&alloc::format!(
                    "heapledger: cannot write profile data to {path}: {}\n",
                    describe(err)
                ));
                return None;
            }
        }
    }
    None
}

/// Creates the NUL-terminated `path` for writing: its fd, or errno.
///
/// A program that ends with all the files its limit allows open (one that
/// leaks descriptors) would leave no profile: then the soft limit is raised
/// by one, within the hard limit, for the time of the `open`.
fn create(path: &str) -> Result<i32, i32> {
    let open = || {
        // SAFETY: path is NUL-terminated.
        let fd = unsafe {
            libc::open(
                path.as_ptr() as *const _,
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
                0o644,
            )
        };
        // SAFETY: errno location is valid.
        (fd >= 0)
            .then_some(fd)
            .ok_or(unsafe { *libc::__errno_location() })
    };
    match open() {
        Err(libc::EMFILE) => {
            let mut lim = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: lim is writable.
            if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0
                || lim.rlim_cur >= lim.rlim_max
            {
                return Err(libc::EMFILE);
            }
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_cur + 1,
                rlim_max: lim.rlim_max,
            };
            // SAFETY: valid limits, within the hard one.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
                return Err(libc::EMFILE);
            }
            let r = open();
            // The program's limit again; the open fd outlives it, as any
            // fd opened under a higher limit does.
            // SAFETY: the limits read above.
            unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
            r
        }
        r => r,
    }
}

/// What `errno` means, for the one line on stderr: the usual reasons a file
/// cannot be written, by name (`strerror` is neither thread- nor
/// signal-safe, and may allocate to translate), and the number otherwise.
pub(super) fn describe(err: i32) -> String {
    let what = match err {
        libc::ENOENT => "no such directory",
        libc::EACCES | libc::EPERM => "permission denied",
        libc::EMFILE => "the program has as many files open as its limit allows",
        libc::ENFILE => "too many files open in the system",
        libc::ENOSPC => "no space left on the device",
        libc::EDQUOT => "disk quota exceeded",
        libc::EROFS => "read-only file system",
        libc::EFBIG => "file too large",
        libc::EIO => "input/output error",
        libc::ENOTDIR => "a part of the path is not a directory",
        _ => "",
    };
    if what.is_empty() {
        alloc::format!("os error {err}")
    } else {
        alloc::format!("{what} (os error {err})")
    }
}

/// A sink into memory that says when memory ran out.
pub(super) struct Bytes {
    pub(super) bytes: Vec<u8>,
    pub(super) failed: bool,
}

impl Bytes {
    pub(super) fn with_room(n: usize) -> Bytes {
        let mut bytes = Vec::new();
        let failed = bytes.try_reserve(n).is_err();
        Bytes { bytes, failed }
    }
}

impl heapledger_wire::Sink for Bytes {
    fn put(&mut self, b: &[u8]) {
        if self.failed || self.bytes.try_reserve(b.len()).is_err() {
            self.failed = true;
            return;
        }
        self.bytes.extend_from_slice(b);
    }
}
