//! Steer heapledger's recorder from inside a Rust program: the calls of
//! `heapledger.h` (docs/control.md). Each looks its function up in the
//! running process (`dlsym`), so a program using this crate needs no
//! library to link and runs the same without heapledger: every call then
//! says so (`false`, `None`, or a report saying it is not running under
//! heapledger).
//!
//! ```no_run
//! if heapledger_api::is_running() {
//!     heapledger_api::set_backtrace_enabled(true);
//!     let stats = heapledger_api::stats().unwrap();
//!     println!("{} bytes alive", stats.bytes_alive);
//!     print!("{}", heapledger_api::leak_report());
//!     heapledger_api::snapshot("after-load");
//! }
//! ```

use std::ffi::{c_char, c_int, c_void, CStr, CString};

// The C library's dlsym, declared here so that the crate needs nothing
// else (glibc's RTLD_DEFAULT is the null handle).
extern "C" {
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

/// The counters now (`struct heapledger_stats`): each thread's as of its
/// last allocation or free; sizes are the bytes the program asked for.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Blocks allocated and not yet freed.
    pub blocks_alive: u64,
    /// Their bytes.
    pub bytes_alive: u64,
    /// The most bytes alive at once so far.
    pub peak_bytes: u64,
    /// Allocations since the start (or the last reset).
    pub allocations: u64,
    /// Their bytes.
    pub allocated_bytes: u64,
    /// Frees since the start (or the last reset).
    pub frees: u64,
    /// Their bytes.
    pub freed_bytes: u64,
    /// Frees of blocks allocated before the last reset.
    pub older_frees: u64,
    /// Their bytes.
    pub older_freed_bytes: u64,
}

/// The recorder's function `name` (NUL-terminated), if the process has it.
fn find(name: &CStr) -> Option<*mut c_void> {
    // SAFETY: a NUL-terminated name; RTLD_DEFAULT searches every object.
    let f = unsafe { dlsym(std::ptr::null_mut(), name.as_ptr()) };
    (!f.is_null()).then_some(f)
}

macro_rules! call {
    ($name:literal, $ty:ty, |$f:ident| $body:expr, $none:expr) => {
        match find($name) {
            // SAFETY: heapledger's recorder defines the function with this
            // signature (heapledger.h).
            Some(p) => {
                let $f = unsafe { std::mem::transmute::<*mut c_void, $ty>(p) };
                $body
            }
            None => $none,
        }
    };
}

/// Whether the program runs under `heapledger run` and is recorded.
pub fn is_running() -> bool {
    call!(
        c"heapledger_api_version",
        extern "C" fn() -> c_int,
        |f| f() > 0,
        false
    )
}

/// Switches stack capture on or off for every thread, from now on; false
/// where stacks cannot be taken (not running under heapledger, `--stack
/// none`).
pub fn set_backtrace_enabled(on: bool) -> bool {
    call!(
        c"heapledger_set_backtrace_enabled",
        extern "C" fn(c_int) -> c_int,
        |f| f(c_int::from(on)) == 0,
        false
    )
}

/// Whether allocations get their stacks now.
pub fn is_backtrace_enabled() -> bool {
    call!(
        c"heapledger_is_backtrace_enabled",
        extern "C" fn() -> c_int,
        |f| f() == 1,
        false
    )
}

/// The counters now; None without heapledger.
pub fn stats() -> Option<Stats> {
    call!(
        c"heapledger_get_stats",
        unsafe extern "C" fn(*mut Stats) -> c_int,
        |f| {
            let mut s = Stats::default();
            // SAFETY: a writable struct of the C layout.
            (unsafe { f(&mut s) } == 0).then_some(s)
        },
        None
    )
}

/// The leak report (heapledger.h's `heapledger_get_leak_report`).
pub fn leak_report() -> String {
    const NONE: &str = "=== Memory Leak Report ===\nnot running under heapledger\n";
    call!(
        c"heapledger_get_leak_report",
        extern "C" fn() -> *mut c_char,
        |f| {
            let p = f();
            if p.is_null() {
                return String::new();
            }
            // SAFETY: a NUL-terminated report, released once, below.
            let text = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
            call!(
                c"heapledger_free_leak_report",
                unsafe extern "C" fn(*mut c_char),
                // SAFETY: the report just read.
                |free| unsafe { free(p) },
                ()
            );
            text
        },
        NONE.to_owned()
    )
}

/// Recording off for the calling thread (as MALT's `malt_disable`): its
/// allocations are not recorded until [`enable`]; false without
/// heapledger.
pub fn disable() -> bool {
    call!(
        c"heapledger_disable",
        extern "C" fn() -> c_int,
        |f| f() == 0,
        false
    )
}

/// Recording on again for the calling thread; false without heapledger.
pub fn enable() -> bool {
    call!(
        c"heapledger_enable",
        extern "C" fn() -> c_int,
        |f| f() == 0,
        false
    )
}

/// Resets the counters: from now on they hold what is allocated after
/// the call; false without heapledger.
pub fn reset_stats() -> bool {
    call!(
        c"heapledger_reset_stats",
        extern "C" fn() -> c_int,
        |f| f() == 0,
        false
    )
}

/// Stores a labelled snapshot of every counter in the profile; its number,
/// or None.
pub fn snapshot(label: &str) -> Option<u32> {
    let label = CString::new(label.replace('\0', "_")).ok()?;
    call!(
        c"heapledger_snapshot",
        unsafe extern "C" fn(*const c_char) -> c_int,
        // SAFETY: a NUL-terminated label.
        |f| u32::try_from(unsafe { f(label.as_ptr()) }).ok(),
        None
    )
}

/// Records `ns` nanoseconds lost, of the kind named `kind`, at the
/// caller's stack (docs/time-lost.md); false without heapledger.
pub fn time_lost(kind: &str, ns: u64) -> bool {
    let Ok(kind) = CString::new(kind.replace('\0', "_")) else {
        return false;
    };
    call!(
        c"heapledger_time_lost",
        unsafe extern "C" fn(*const c_char, u64) -> c_int,
        // SAFETY: a NUL-terminated name.
        |f| unsafe { f(kind.as_ptr(), ns) } == 0,
        false
    )
}

/// A wait of the kind named `kind` begins here (one open on this thread
/// ends first); false without heapledger.
pub fn wait_begin(kind: &str) -> bool {
    let Ok(kind) = CString::new(kind.replace('\0', "_")) else {
        return false;
    };
    call!(
        c"heapledger_wait_begin",
        unsafe extern "C" fn(*const c_char) -> c_int,
        // SAFETY: a NUL-terminated name.
        |f| unsafe { f(kind.as_ptr()) } == 0,
        false
    )
}

/// The thread's open wait ends; false without heapledger, or where none
/// was open.
pub fn wait_end() -> bool {
    call!(
        c"heapledger_wait_end",
        extern "C" fn() -> c_int,
        |f| f() == 0,
        false
    )
}

/// A name as C wants it (NULs replaced).
fn c_name(s: &str) -> CString {
    CString::new(s.replace('\0', "_")).unwrap_or_default()
}

/// Pushes a frame of the program's own on the calling thread: a code
/// address. While frames are pushed, the thread's allocations and waits
/// are charged to them; false without heapledger.
pub fn push_frame(code: *const c_void) -> bool {
    call!(
        c"heapledger_push_frame",
        extern "C" fn(*const c_void) -> c_int,
        |f| f(code) == 0,
        false
    )
}

/// Pushes a labelled frame ("file.py:12 in f" is read as file, line and
/// function); false without heapledger.
pub fn push_label(label: &str) -> bool {
    let label = c_name(label);
    call!(
        c"heapledger_push_label",
        unsafe extern "C" fn(*const c_char) -> c_int,
        // SAFETY: a NUL-terminated label.
        |f| unsafe { f(label.as_ptr()) } == 0,
        false
    )
}

/// Pops the frame pushed last; false where none was (or without
/// heapledger).
pub fn pop_frame() -> bool {
    call!(
        c"heapledger_pop_frame",
        extern "C" fn() -> c_int,
        |f| f() == 0,
        false
    )
}

/// Frames alive in the process (pushed, or held by a traceback or a
/// log's entry); 0 without heapledger.
pub fn frames_alive() -> u64 {
    call!(
        c"heapledger_traceback_frames_alive",
        extern "C" fn() -> u64,
        |f| f(),
        0
    )
}

/// One frame of a traceback.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// A code address.
    Code(usize),
    /// A label.
    Label(String),
}

/// A reference on a thread's pushed frames as they were (shared, read
/// only); released when dropped, retained when cloned. It may be sent to
/// another thread and outlives the thread that took it.
#[derive(Debug)]
pub struct Traceback(*mut c_void);

// SAFETY: a traceback is a process-wide, reference-counted handle.
unsafe impl Send for Traceback {}
unsafe impl Sync for Traceback {}

impl Traceback {
    /// The calling thread's frames now; None where none is pushed (or
    /// without heapledger).
    pub fn snapshot() -> Option<Traceback> {
        let p = call!(
            c"heapledger_traceback_snapshot",
            extern "C" fn() -> *mut c_void,
            |f| f(),
            std::ptr::null_mut()
        );
        (!p.is_null()).then_some(Traceback(p))
    }

    /// Its frames, innermost first.
    pub fn frames(&self) -> Vec<Frame> {
        let mut v = Vec::new();
        let mut at = self.0 as *const c_void;
        while !at.is_null() {
            let mut code: *const c_void = std::ptr::null();
            let mut label = [0 as c_char; 257];
            let k = call!(
                c"heapledger_traceback_frame",
                unsafe extern "C" fn(
                    *const c_void,
                    *mut *const c_void,
                    *mut c_char,
                    usize,
                ) -> c_int,
                // SAFETY: a frame's handle and buffers of the sizes given.
                |f| unsafe { f(at, &mut code, label.as_mut_ptr(), label.len()) },
                -1
            );
            match k {
                0 => v.push(Frame::Code(code as usize)),
                // SAFETY: NUL-terminated by the recorder.
                1 => v.push(Frame::Label(
                    unsafe { CStr::from_ptr(label.as_ptr()) }
                        .to_string_lossy()
                        .into_owned(),
                )),
                _ => break,
            }
            at = call!(
                c"heapledger_traceback_parent",
                extern "C" fn(*const c_void) -> *mut c_void,
                |f| f(at),
                std::ptr::null_mut()
            );
        }
        v
    }

    /// A new reference on the handle `p`, borrowed from an entry.
    fn retained(p: *mut c_void) -> Option<Traceback> {
        if p.is_null() {
            return None;
        }
        call!(
            c"heapledger_traceback_retain",
            extern "C" fn(*mut c_void) -> *mut c_void,
            |f| Some(Traceback(f(p))),
            None
        )
    }
}

impl Clone for Traceback {
    fn clone(&self) -> Traceback {
        Traceback::retained(self.0).unwrap_or(Traceback(self.0))
    }
}

impl Drop for Traceback {
    fn drop(&mut self) {
        call!(
            c"heapledger_traceback_release",
            extern "C" fn(*mut c_void),
            |f| f(self.0),
            ()
        )
    }
}

/// Records `ns` lost, of the kind named `kind`, at the calling thread's
/// stack and frames, with another thread's traceback; false without
/// heapledger.
pub fn time_lost_at(kind: &str, ns: u64, other: Option<&Traceback>) -> bool {
    let kind = c_name(kind);
    let other = other.map_or(std::ptr::null(), |t| t.0 as *const c_void);
    call!(
        c"heapledger_time_lost_at",
        unsafe extern "C" fn(*const c_char, u64, *const c_void) -> c_int,
        // SAFETY: a NUL-terminated name and a traceback's handle.
        |f| unsafe { f(kind.as_ptr(), ns, other) } == 0,
        false
    )
}

/// An entry of a [`TimeLog`].
#[derive(Clone, Debug)]
pub struct Entry {
    pub kind: String,
    pub count: u64,
    pub total_ns: u64,
    pub max_ns: u64,
    /// The thread's frames at the events.
    pub traceback: Option<Traceback>,
    /// Another thread's, where given.
    pub other: Option<Traceback>,
}

#[repr(C)]
struct RawEntry {
    kind: [c_char; 64],
    count: u64,
    total_ns: u64,
    max_ns: u64,
    traceback: *mut c_void,
    other: *mut c_void,
}

/// A time log of the calling thread (timelog.md): every time-lost event
/// of the thread goes to each of its logs, regrouped, its top entries
/// kept. Destroyed when dropped; used by its own thread only.
#[derive(Debug)]
pub struct TimeLog {
    handle: *mut c_void,
    _thread: std::marker::PhantomData<*const ()>,
}

impl TimeLog {
    /// A log keeping `top` entries (1 to 64; 0: `run --waits-top`'s);
    /// None without heapledger.
    pub fn new(top: u32) -> Option<TimeLog> {
        let h = call!(
            c"heapledger_timelog_create",
            extern "C" fn(u32) -> *mut c_void,
            |f| f(top),
            std::ptr::null_mut()
        );
        (!h.is_null()).then_some(TimeLog {
            handle: h,
            _thread: std::marker::PhantomData,
        })
    }

    /// Empties it.
    pub fn clear(&self) -> bool {
        call!(
            c"heapledger_timelog_clear",
            extern "C" fn(*mut c_void) -> c_int,
            |f| f(self.handle) == 0,
            false
        )
    }

    /// Its entries, most time first.
    pub fn entries(&self) -> Vec<Entry> {
        let mut raw: Vec<RawEntry> = Vec::with_capacity(64);
        let n = call!(
            c"heapledger_timelog_entries",
            unsafe extern "C" fn(*mut c_void, *mut RawEntry, usize) -> std::ffi::c_long,
            // SAFETY: room for 64 entries, the most a log keeps.
            |f| unsafe { f(self.handle, raw.as_mut_ptr(), 64) },
            -1
        );
        // SAFETY: the recorder wrote min(n, 64) entries.
        unsafe { raw.set_len(n.clamp(0, 64) as usize) };
        raw.iter()
            .map(|e| Entry {
                // SAFETY: NUL-terminated within its 64 bytes.
                kind: unsafe { CStr::from_ptr(e.kind.as_ptr()) }
                    .to_string_lossy()
                    .into_owned(),
                count: e.count,
                total_ns: e.total_ns,
                max_ns: e.max_ns,
                traceback: Traceback::retained(e.traceback),
                other: Traceback::retained(e.other),
            })
            .collect()
    }
}

impl Drop for TimeLog {
    fn drop(&mut self) {
        call!(
            c"heapledger_timelog_destroy",
            extern "C" fn(*mut c_void) -> c_int,
            |f| f(self.handle),
            0
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_heapledger_every_call_says_so() {
        assert!(!is_running());
        assert!(!set_backtrace_enabled(true));
        assert!(!is_backtrace_enabled());
        assert_eq!(stats(), None);
        assert!(leak_report().contains("not running under heapledger"));
        assert!(!reset_stats());
        assert!(!disable() && !enable());
        assert!(!time_lost("x", 1) && !wait_begin("x") && !wait_end());
        assert_eq!(snapshot("x"), None);
        assert!(!push_label("x") && !pop_frame() && frames_alive() == 0);
        assert!(Traceback::snapshot().is_none() && TimeLog::new(1).is_none());
        assert!(!time_lost_at("x", 1, None));
    }
}
