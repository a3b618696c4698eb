//! `--only-lib`: recording only the allocations made by chosen shared
//! libraries (`HEAPLEDGER_ONLY_LIB`, patterns separated by `:`), as
//! SoHook hooks only the libraries it is given.
//!
//! An allocation is the chosen libraries' when its first caller outside
//! the allocator and the C/C++ runtime is in one of them (a `strdup` or an
//! `operator new` called by the library counts for it). Two tables of
//! executable ranges, rebuilt when the modules change (start, `dlopen`,
//! `dlclose`): the chosen libraries', and the runtime's. `malloc`'s lean
//! path (`hooks::lean`) sends a call to the full hook only where its
//! return address lies in either (`GATE`); every other call goes straight
//! to the real `malloc`, counted per function but not recorded, and its
//! block is never marked in the sampler's filter, so its `free` takes the
//! lean path too. The full hook then decides: a caller in a chosen library
//! is recorded; a caller in the runtime is decided by the stack.

use crate::base::sync::SpinLock;
use crate::data::stacks;
use alloc::string::String;
use alloc::vec::Vec;
use core::ffi::{c_int, c_void, CStr};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// Most ranges of each table (a library has one executable range, or a
/// few).
pub const MAX: usize = 32;

/// The ranges a call is sent to the full hook for: [start, end) pairs,
/// `GATE_N` of them (the chosen libraries' and the runtime's). Read by
/// `malloc`'s lean path.
pub static GATE: [AtomicU64; 2 * MAX] = [const { AtomicU64::new(0) }; 2 * MAX];
pub static GATE_N: AtomicU32 = AtomicU32::new(0);

static CHOSEN: [AtomicU64; 2 * MAX] = [const { AtomicU64::new(0) }; 2 * MAX];
static CHOSEN_N: AtomicU32 = AtomicU32::new(0);
static RUNTIME: [AtomicU64; 2 * MAX] = [const { AtomicU64::new(0) }; 2 * MAX];
static RUNTIME_N: AtomicU32 = AtomicU32::new(0);

static ACTIVE: AtomicBool = AtomicBool::new(false);
pub(crate) static PATTERNS: SpinLock<Vec<String>> = SpinLock::new(Vec::new());

/// The runtime's libraries: the C library and loader, the C++ runtime, and
/// heapledger itself (whose C++ entries call `malloc` for an allocator's
/// own `operator new`, `hooks::cxx`).
const RUNTIME_NAMES: [&str; 7] = [
    "libc.so",
    "ld-linux",
    "libstdc++.so",
    "libgcc_s.so",
    "libc++.so",
    "libc++abi.so",
    "libheapledger_preload.so",
];

/// Whether `--only-lib` is in force.
#[inline(always)]
pub fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// At start-up: the patterns, and the tables (none where no pattern).
pub fn init(patterns: Option<&CStr>) {
    let Some(p) = patterns else { return };
    let list: Vec<String> = String::from_utf8_lossy(p.to_bytes())
        .split(':')
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    if list.is_empty() {
        return;
    }
    *PATTERNS.lock() = list;
    ACTIVE.store(true, Ordering::Release);
    refresh();
}

/// `*` (any run) and `?` (any one byte) over `name`.
fn glob(p: &[u8], name: &[u8]) -> bool {
    match p.split_first() {
        None => name.is_empty(),
        Some((b'*', rest)) => (0..=name.len()).any(|i| glob(rest, &name[i..])),
        Some((&c, rest)) => match name.split_first() {
            Some((&n, tail)) if c == b'?' || c == n => glob(rest, tail),
            _ => false,
        },
    }
}

/// Whether the library at `path` is chosen: a pattern with a `/` is
/// matched against the path, one without against the file name, which
/// may also carry a version after it (`libfoo.so` chooses `libfoo.so.1`).
pub fn chosen_path(patterns: &[String], path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    patterns.iter().any(|p| {
        if p.contains('/') {
            glob(p.as_bytes(), path.as_bytes())
        } else {
            glob(p.as_bytes(), name.as_bytes())
                || name
                    .strip_prefix(p.as_str())
                    .is_some_and(|rest| rest.starts_with('.'))
        }
    })
}

fn is_runtime(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    RUNTIME_NAMES.iter().any(|r| name.starts_with(r))
}

struct Collected {
    chosen: Vec<(u64, u64)>,
    runtime: Vec<(u64, u64)>,
    patterns: Vec<String>,
}

unsafe extern "C" fn collect(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: valid info from the loader; data is our Collected.
    unsafe {
        let c = &mut *(data as *mut Collected);
        let i = &*info;
        if i.dlpi_name.is_null() {
            return 0;
        }
        let name = String::from_utf8_lossy(CStr::from_ptr(i.dlpi_name).to_bytes()).into_owned();
        if name.is_empty() {
            return 0; // the executable or the vDSO: neither is a library
        }
        let (chosen, runtime) = (chosen_path(&c.patterns, &name), is_runtime(&name));
        if !chosen && !runtime {
            return 0;
        }
        for k in 0..i.dlpi_phnum as usize {
            let ph = &*i.dlpi_phdr.add(k);
            if ph.p_type == libc::PT_LOAD && ph.p_flags & libc::PF_X != 0 {
                let lo = i.dlpi_addr + ph.p_vaddr;
                let r = (lo, lo + ph.p_memsz);
                if chosen {
                    c.chosen.push(r);
                } else {
                    c.runtime.push(r);
                }
            }
        }
    }
    0
}

fn publish(table: &[AtomicU64; 2 * MAX], n: &AtomicU32, ranges: &[(u64, u64)]) {
    let k = ranges.len().min(MAX);
    // Fewer first, so that no reader walks a pair being rewritten.
    n.store(n.load(Ordering::Relaxed).min(k as u32), Ordering::Release);
    for (i, &(lo, hi)) in ranges.iter().take(k).enumerate() {
        table[2 * i].store(lo, Ordering::Relaxed);
        table[2 * i + 1].store(hi, Ordering::Relaxed);
    }
    n.store(k as u32, Ordering::Release);
}

/// Rebuilds the tables from the loader's modules (start, after `dlopen`
/// and `dlclose`).
pub fn refresh() {
    if !active() {
        return;
    }
    let mut c = Collected {
        chosen: Vec::new(),
        runtime: Vec::new(),
        patterns: PATTERNS.lock().clone(),
    };
    // SAFETY: the callback only pushes to `c`.
    unsafe { libc::dl_iterate_phdr(Some(collect), &mut c as *mut Collected as *mut c_void) };
    publish(&CHOSEN, &CHOSEN_N, &c.chosen);
    publish(&RUNTIME, &RUNTIME_N, &c.runtime);
    let mut gate = c.chosen;
    gate.extend_from_slice(&c.runtime);
    publish(&GATE, &GATE_N, &gate);
}

#[inline(always)]
fn within(table: &[AtomicU64; 2 * MAX], n: &AtomicU32, a: u64) -> bool {
    let n = n.load(Ordering::Acquire) as usize;
    (0..n).any(|i| {
        a >= table[2 * i].load(Ordering::Relaxed) && a < table[2 * i + 1].load(Ordering::Relaxed)
    })
}

/// What the caller's return address `ret` says: Some(recorded or not), or
/// None where it lies in the runtime and the stack must decide.
#[inline(always)]
pub fn by_caller(ret: u64) -> Option<bool> {
    if within(&CHOSEN, &CHOSEN_N, ret) {
        Some(true)
    } else if within(&RUNTIME, &RUNTIME_N, ret) {
        None
    } else {
        Some(false)
    }
}

/// Whether the first frame of stack `id` outside the runtime is in a
/// chosen library (false for the empty stack).
pub fn by_stack(id: u32) -> bool {
    if id == 0 || id >= stacks::count() {
        return false;
    }
    stacks::frames(stacks::entry(id))
        .iter()
        .find(|&f| !within(&RUNTIME, &RUNTIME_N, f))
        .is_some_and(|f| within(&CHOSEN, &CHOSEN_N, f))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_paths_and_globs_choose_libraries() {
        let p = |v: &[&str]| v.iter().map(|s| String::from(*s)).collect::<Vec<_>>();
        assert!(chosen_path(&p(&["libfoo.so"]), "/opt/x/libfoo.so"));
        assert!(chosen_path(&p(&["libfoo.so"]), "/opt/x/libfoo.so.1.2"));
        assert!(!chosen_path(&p(&["libfoo.so"]), "/opt/x/libfoobar.so"));
        assert!(chosen_path(&p(&["libfoo*"]), "/opt/x/libfoobar.so"));
        assert!(chosen_path(&p(&["/opt/*/libfoo.so"]), "/opt/x/libfoo.so"));
        assert!(!chosen_path(&p(&["/usr/*/libfoo.so"]), "/opt/x/libfoo.so"));
        assert!(chosen_path(&p(&["lib?oo.so"]), "libgoo.so"));
        assert!(is_runtime("/lib/x86_64-linux-gnu/libc.so.6"));
        assert!(is_runtime("/lib64/ld-linux-x86-64.so.2"));
        assert!(!is_runtime("/usr/lib/libcrypto.so.3"));
        assert!(is_runtime("/opt/h/lib/libheapledger_preload.so"));
    }
}
