//! When heapledger itself cannot go on: out of memory, or a bug (a panic).
//!
//! Rust's own answer to a failed allocation is to print "memory allocation
//! of N bytes failed" with a backtrace and abort; to a panic, a few lines
//! and an abort (the release build aborts on panic). Either way `run` died
//! of SIGABRT with exit code 134: the program's own exit code was lost, a
//! run under a memory limit (`ulimit -v`, `prlimit --as`) ended in a crash
//! report instead of a line, and an abort while the program still ran left
//! it running without its heapledger.
//!
//! Here both end the same way, without allocating: one line on stderr; the
//! partial profile file, if one was being written, removed (never a
//! truncated file where a profile should be); and where `run` started a
//! program, its raw data kept for `heapledger recover` and heapledger's
//! exit code the program's, as when a profile cannot be written (1 where
//! the program exited 0). While the program still runs, heapledger waits
//! for it to end first. Other commands exit with 2, as for any error.
//!
//! The OOM killer's SIGKILL cannot be answered from inside; the raw data
//! stays behind then too, and the next `run` names it. A write past the
//! file size limit is an error like any other
//! (`file_size_limit_fails_writes`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, Ordering};

/// heapledger's allocator: the system's, with a failed allocation ending
/// the process as described above instead of aborting it.
pub struct Guarded;

// SAFETY: every call goes to the system allocator with the same arguments;
// a null answer (for a non-zero size) never returns from `out_of_memory`.
unsafe impl GlobalAlloc for Guarded {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is the system allocator's.
        let p = unsafe { System.alloc(layout) };
        if p.is_null() {
            out_of_memory(layout.size());
        }
        p
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if p.is_null() {
            out_of_memory(layout.size());
        }
        p
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as in `alloc`.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if p.is_null() {
            out_of_memory(new_size);
        }
        p
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as in `alloc`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// The program `run` started, while it runs (0: none, or it has ended).
static PROGRAM: AtomicI32 = AtomicI32::new(0);
/// The program's exit code once it has ended, as a shell gives it (-1: not
/// known yet, or no program).
static CODE: AtomicI32 = AtomicI32::new(-1);
/// Whether the main profile is in place (what fails after it, such as the
/// summary, loses nothing).
static WRITTEN: AtomicBool = AtomicBool::new(false);
/// Whether a program was started (the raw data is then worth keeping).
static STARTED: AtomicBool = AtomicBool::new(false);
/// The temporary file a profile is being written to (NUL-terminated, never
/// freed), removed on the way out.
static PARTIAL: AtomicPtr<libc::c_char> = AtomicPtr::new(std::ptr::null_mut());
/// The thread that is ending the process (0: none).
static ENDING: AtomicI32 = AtomicI32::new(0);

/// `run` started `pid`.
pub fn program_started(pid: u32) {
    STARTED.store(true, Ordering::SeqCst);
    PROGRAM.store(pid as i32, Ordering::SeqCst);
}

/// The program ended with `code` (as a shell gives it). Called before
/// anything is allocated after the wait.
pub fn program_ended(code: u8) {
    CODE.store(i32::from(code), Ordering::SeqCst);
    PROGRAM.store(0, Ordering::SeqCst);
}

/// The exit code `run` gives where the program exited with `code` and no
/// profile was made: the program's, or 1 where that was 0.
pub fn code_without_profile(code: u8) -> u8 {
    if code == 0 {
        1
    } else {
        code
    }
}

/// The main profile is in place.
pub fn profile_written() {
    WRITTEN.store(true, Ordering::SeqCst);
}

/// Whether the main profile is in place.
pub fn profile_was_written() -> bool {
    WRITTEN.load(Ordering::SeqCst)
}

/// A profile is being written to `tmp` (None: no longer). `tmp` must stay
/// valid until replaced.
pub fn writing(tmp: *mut libc::c_char) {
    PARTIAL.store(tmp, Ordering::SeqCst);
}

/// A write past the file size limit (`ulimit -f`) fails with `EFBIG`,
/// which is reported in one line with the partial file removed, instead of
/// SIGXFSZ ending heapledger (exit 153) and leaving the temporary profile
/// file behind. A handler that does nothing, rather than ignoring the
/// signal: the programs heapledger starts get the default action back with
/// `exec`, as they would alone.
pub fn file_size_limit_fails_writes() {
    extern "C" fn nothing(_: libc::c_int) {}
    // SAFETY: a handler that does nothing is async-signal-safe; the
    // sigaction struct is zeroed, then filled.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = nothing as extern "C" fn(libc::c_int) as libc::sighandler_t;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGXFSZ, &sa, std::ptr::null_mut());
    }
}

/// Prints the panic as one line, then ends as for a lack of memory.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let what = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".into());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        // A thread that cannot start (std's `thread::spawn` panics) is a
        // lack of memory or of threads, not a bug.
        let line = match what.strip_prefix("failed to spawn thread") {
            Some(why) => format!("cannot start a thread{}", os_message(why)),
            None => format!("internal error: {what}{at}"),
        }
        .replace(['\n', '\r'], " ");
        // For whoever debugs heapledger: the backtrace, before the line.
        if std::env::var_os("RUST_BACKTRACE").is_some_and(|v| v != "0") {
            say!("{}", std::backtrace::Backtrace::force_capture());
        }
        end(line.as_bytes());
    }));
}

/// ` (the system's message)` from the `Debug` of an `io::Error`, as
/// `expect` shows it (`: Os { code: 11, kind: WouldBlock, message: "..." }`).
fn os_message(debug: &str) -> String {
    debug
        .split_once("message: \"")
        .and_then(|(_, rest)| rest.split_once('"'))
        .map(|(m, _)| format!(" ({m})"))
        .unwrap_or_default()
}

/// A failed allocation of `size` bytes: ends the process (see the top).
#[cold]
#[inline(never)]
pub fn out_of_memory(size: usize) -> ! {
    let mut msg = Buf::new();
    msg.push(b"out of memory (an allocation of ");
    msg.number(size as u64);
    msg.push(b" bytes failed)");
    end(msg.as_bytes())
}

/// Says `what` in one line (after "heapledger: ", with what becomes of the
/// run), removes the partial profile, waits for the program, and exits.
/// Allocates nothing.
fn end(what: &[u8]) -> ! {
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::syscall(libc::SYS_gettid) } as i32;
    if let Err(other) = ENDING.compare_exchange(0, me, Ordering::SeqCst, Ordering::SeqCst) {
        if other != me {
            // Another thread is ending the process: wait for it.
            loop {
                sleep_ms(1000);
            }
        }
        // The same thread again (an allocation failed while the first
        // failure was reported): go on without a second line.
        finish(None)
    }
    finish(Some(what))
}

fn finish(what: Option<&[u8]>) -> ! {
    let tmp = PARTIAL.load(Ordering::SeqCst);
    if !tmp.is_null() {
        // SAFETY: a NUL-terminated path that is never freed.
        unsafe { libc::unlink(tmp) };
    }
    let started = STARTED.load(Ordering::SeqCst);
    let running = PROGRAM.load(Ordering::SeqCst);
    if let Some(what) = what {
        let mut line = Buf::new();
        line.push(b"heapledger: ");
        line.push(what);
        if started && running != 0 {
            line.push(b"; waiting for the program to end, its raw data kept: `heapledger recover` makes its profile");
        } else if WRITTEN.load(Ordering::SeqCst) {
            line.push(b"; the profile was written");
        } else if started {
            line.push(
                b"; no profile was written, the raw data is kept: `heapledger recover` makes it",
            );
        }
        line.push(b"\n");
        let b = line.as_bytes();
        // SAFETY: writes a buffer of ours to stderr.
        unsafe { libc::write(2, b.as_ptr().cast(), b.len()) };
    }
    let code = if !started {
        2
    } else {
        let program = wait_for_code(running);
        if WRITTEN.load(Ordering::SeqCst) {
            program
        } else {
            i32::from(code_without_profile(program as u8))
        }
    };
    // SAFETY: ends the process at once, running nothing else (no
    // destructor removes the raw data).
    unsafe { libc::_exit(code) }
}

/// The program's exit code: once it has ended (reaped here, or by
/// `run`'s own wait, which then publishes it; should that not come within
/// a few seconds, 1).
fn wait_for_code(pid: i32) -> i32 {
    let mut unknown_ms = 0;
    loop {
        let code = CODE.load(Ordering::SeqCst);
        if code >= 0 {
            return code;
        }
        let mut status = 0;
        // SAFETY: status is writable.
        let r = if pid != 0 {
            unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) }
        } else {
            -1
        };
        if r == pid && pid != 0 {
            let code = if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else if libc::WIFSIGNALED(status) {
                128 + libc::WTERMSIG(status)
            } else {
                1
            };
            return code;
        }
        if r < 0 {
            // Reaped by `run` itself, which says the code next.
            unknown_ms += 10;
            if unknown_ms >= 5000 {
                return 1;
            }
        }
        sleep_ms(10);
    }
}

fn sleep_ms(ms: u64) {
    let ts = libc::timespec {
        tv_sec: (ms / 1000) as libc::time_t,
        tv_nsec: ((ms % 1000) * 1_000_000) as libc::c_long,
    };
    // SAFETY: ts is valid; the remainder is not wanted.
    unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
}

/// A line built without allocating (longer text is cut).
struct Buf {
    bytes: [u8; 512],
    len: usize,
}

impl Buf {
    fn new() -> Buf {
        Buf {
            bytes: [0; 512],
            len: 0,
        }
    }

    fn push(&mut self, s: &[u8]) {
        let n = s.len().min(self.bytes.len() - self.len);
        self.bytes[self.len..self.len + n].copy_from_slice(&s[..n]);
        self.len += n;
    }

    fn number(&mut self, mut v: u64) {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        self.push(&digits[i..]);
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_cut_lines() {
        let mut b = Buf::new();
        b.push(b"n=");
        b.number(0);
        b.push(b",");
        b.number(19_740_046);
        b.push(b",");
        b.number(u64::MAX);
        assert_eq!(b.as_bytes(), b"n=0,19740046,18446744073709551615");
        let mut long = Buf::new();
        long.push(&[b'x'; 600]);
        assert_eq!(long.as_bytes().len(), 512);
    }

    #[test]
    fn a_thread_that_cannot_start_is_said_in_the_systems_words() {
        assert_eq!(
            os_message(
                r#": Os { code: 11, kind: WouldBlock, message: "Resource temporarily unavailable" }"#
            ),
            " (Resource temporarily unavailable)"
        );
        assert_eq!(os_message(""), "");
    }

    #[test]
    fn a_program_that_exited_0_gives_1_without_a_profile() {
        assert_eq!(code_without_profile(0), 1);
        assert_eq!(code_without_profile(3), 3);
        assert_eq!(code_without_profile(137), 137);
    }
}
