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
    }
}
