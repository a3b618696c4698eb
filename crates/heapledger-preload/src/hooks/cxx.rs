//! C++'s `operator new` and `operator delete`, for programs whose C++
//! allocations do not go through `malloc`.
//!
//! libstdc++'s and libc++'s `operator new` call `malloc` (and `delete`,
//! `free`), which the hooks record. An allocator that replaces them (a
//! preloaded jemalloc, tcmalloc or mimalloc, or a program linked with one)
//! defines its own, which reach its allocator without a call heapledger
//! sees: every `new` of the program went unrecorded, and heaptrack misses
//! them the same way. So heapledger defines the 20 replaceable global
//! allocation functions too. Each entry is one indirect jump through
//! `NEXT`, which its first call fills (`resolve`):
//!
//! - where the next definition is the C++ runtime's, or an object's that is
//!   not the allocator `malloc` forwards to (a library's own pool), `NEXT`
//!   holds it: the entry is a tail jump to what the program called
//!   before, and nothing else changes (`malloc`'s hook records what it
//!   calls, as before);
//! - where it is the object that also defines the `malloc` heapledger
//!   forwards to (the allocator's own `operator new`), `NEXT` holds a route
//!   through heapledger's own `malloc` (or `memalign` for an aligned `new`)
//!   and `free`, to that same allocator: what it allocates is what its `new`
//!   would have, and is recorded. A request it cannot meet goes to its own
//!   `new` after all, which calls the program's new-handler and throws
//!   `std::bad_alloc` (or, for `nothrow`, returns null) as before.
//!
//! The next definition is the loader's next after heapledger's, or, for
//! a C++ library opened by `dlopen` into a scope of its own (a C program's
//! plugin), which the program's lookups of these names now reach
//! heapledger's first, the definition that library's scope holds (the
//! library is then kept loaded, as the entries jump into it).

use crate::base::real;
use core::ffi::{c_char, c_int, c_void, CStr};
use core::sync::atomic::{AtomicPtr, Ordering};

/// The entries, in the order of `NEXT`'s slots: new (8), then delete (12).
const NAMES: [&CStr; 20] = [
    c"_Znwm",
    c"_Znam",
    c"_ZnwmRKSt9nothrow_t",
    c"_ZnamRKSt9nothrow_t",
    c"_ZnwmSt11align_val_t",
    c"_ZnamSt11align_val_t",
    c"_ZnwmSt11align_val_tRKSt9nothrow_t",
    c"_ZnamSt11align_val_tRKSt9nothrow_t",
    c"_ZdlPv",
    c"_ZdaPv",
    c"_ZdlPvm",
    c"_ZdaPvm",
    c"_ZdlPvRKSt9nothrow_t",
    c"_ZdaPvRKSt9nothrow_t",
    c"_ZdlPvSt11align_val_t",
    c"_ZdaPvSt11align_val_t",
    c"_ZdlPvmSt11align_val_t",
    c"_ZdaPvmSt11align_val_t",
    c"_ZdlPvSt11align_val_tRKSt9nothrow_t",
    c"_ZdaPvSt11align_val_tRKSt9nothrow_t",
];

/// For a name the next object does not define (an older runtime), the
/// slot whose function does the same (an array's form, a sized or
/// nothrow `delete`, reaches the plain one, as the standard's defaults do);
/// the slot itself where there is none.
const FALLBACK: [usize; 20] = [
    0, 0, 2, 2, 4, 4, 6, 6, 8, 8, 8, 9, 8, 9, 8, 14, 14, 15, 14, 15,
];

/// Where each entry jumps: its resolver until the first call, then the
/// next definition or the route (see the top).
static NEXT: [AtomicPtr<c_void>; 20] = [
    AtomicPtr::new(resolve_0 as *mut c_void),
    AtomicPtr::new(resolve_1 as *mut c_void),
    AtomicPtr::new(resolve_2 as *mut c_void),
    AtomicPtr::new(resolve_3 as *mut c_void),
    AtomicPtr::new(resolve_4 as *mut c_void),
    AtomicPtr::new(resolve_5 as *mut c_void),
    AtomicPtr::new(resolve_6 as *mut c_void),
    AtomicPtr::new(resolve_7 as *mut c_void),
    AtomicPtr::new(resolve_8 as *mut c_void),
    AtomicPtr::new(resolve_9 as *mut c_void),
    AtomicPtr::new(resolve_10 as *mut c_void),
    AtomicPtr::new(resolve_11 as *mut c_void),
    AtomicPtr::new(resolve_12 as *mut c_void),
    AtomicPtr::new(resolve_13 as *mut c_void),
    AtomicPtr::new(resolve_14 as *mut c_void),
    AtomicPtr::new(resolve_15 as *mut c_void),
    AtomicPtr::new(resolve_16 as *mut c_void),
    AtomicPtr::new(resolve_17 as *mut c_void),
    AtomicPtr::new(resolve_18 as *mut c_void),
    AtomicPtr::new(resolve_19 as *mut c_void),
];

/// The next definitions themselves, for a routed `new` whose request
/// failed.
static OWN: [AtomicPtr<c_void>; 20] = [const { AtomicPtr::new(core::ptr::null_mut()) }; 20];

/// An entry: one jump through its slot. No frame of its own, so the stack
/// a hook captures, an exception's unwinding and a debugger see what they
/// saw without heapledger.
macro_rules! entry {
    ($name:ident, $slot:literal) => {
        /// # Safety
        /// Called as the C++ function of this mangled name.
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name() {
            core::arch::naked_asm!(
                "jmp qword ptr [rip + {next} + {off}]",
                next = sym NEXT,
                off = const 8 * $slot,
            )
        }
    };
}

/// A slot's first jump: resolves every slot (the arguments kept: at most
/// three registers), then takes the slot's jump again.
macro_rules! resolver {
    ($name:ident, $slot:literal) => {
        #[unsafe(naked)]
        unsafe extern "C" fn $name() {
            core::arch::naked_asm!(
                ".cfi_startproc",
                push_cfi!("rdi", "rsi", "rdx"),
                "call {resolve}",
                pop_cfi!("rdx", "rsi", "rdi"),
                "jmp qword ptr [rip + {next} + {off}]",
                ".cfi_endproc",
                resolve = sym resolve,
                next = sym NEXT,
                off = const 8 * $slot,
            )
        }
    };
}

entry!(_Znwm, 0);
entry!(_Znam, 1);
entry!(_ZnwmRKSt9nothrow_t, 2);
entry!(_ZnamRKSt9nothrow_t, 3);
entry!(_ZnwmSt11align_val_t, 4);
entry!(_ZnamSt11align_val_t, 5);
entry!(_ZnwmSt11align_val_tRKSt9nothrow_t, 6);
entry!(_ZnamSt11align_val_tRKSt9nothrow_t, 7);
entry!(_ZdlPv, 8);
entry!(_ZdaPv, 9);
entry!(_ZdlPvm, 10);
entry!(_ZdaPvm, 11);
entry!(_ZdlPvRKSt9nothrow_t, 12);
entry!(_ZdaPvRKSt9nothrow_t, 13);
entry!(_ZdlPvSt11align_val_t, 14);
entry!(_ZdaPvSt11align_val_t, 15);
entry!(_ZdlPvmSt11align_val_t, 16);
entry!(_ZdaPvmSt11align_val_t, 17);
entry!(_ZdlPvSt11align_val_tRKSt9nothrow_t, 18);
entry!(_ZdaPvSt11align_val_tRKSt9nothrow_t, 19);

resolver!(resolve_0, 0);
resolver!(resolve_1, 1);
resolver!(resolve_2, 2);
resolver!(resolve_3, 3);
resolver!(resolve_4, 4);
resolver!(resolve_5, 5);
resolver!(resolve_6, 6);
resolver!(resolve_7, 7);
resolver!(resolve_8, 8);
resolver!(resolve_9, 9);
resolver!(resolve_10, 10);
resolver!(resolve_11, 11);
resolver!(resolve_12, 12);
resolver!(resolve_13, 13);
resolver!(resolve_14, 14);
resolver!(resolve_15, 15);
resolver!(resolve_16, 16);
resolver!(resolve_17, 17);
resolver!(resolve_18, 18);
resolver!(resolve_19, 19);

/// A routed `new`: heapledger's `malloc` (size in rdi), whose hook records
/// the block, or for an aligned `new` (alignment in rsi) its `memalign`
/// (alignment, size: the two swapped first); on null, the allocator's own
/// `new` of slot `$slot`, with the arguments it was given (three registers
/// kept: at most three arguments, and the call aligned). The frame's
/// unwind rules let a capture step out of it; its address, in heapledger's
/// own code, is dropped from stacks when the profile is made.
macro_rules! route_new {
    ($name:ident, $slot:literal, $prepare:literal, $alloc:path) => {
        #[unsafe(naked)]
        unsafe extern "C" fn $name() {
            core::arch::naked_asm!(
                ".cfi_startproc",
                push_cfi!("rdi", "rsi", "rdx"),
                $prepare,
                "call {alloc}",
                pop_cfi!("rdx", "rsi", "rdi"),
                "test rax, rax",
                "jz 2f",
                "ret",
                "2:",
                "jmp qword ptr [rip + {own} + {off}]",
                ".cfi_endproc",
                alloc = sym $alloc,
                own = sym OWN,
                off = const 8 * $slot,
            )
        }
    };
}

route_new!(route_0, 0, "", super::lean::malloc);
route_new!(route_1, 1, "", super::lean::malloc);
route_new!(route_2, 2, "", super::lean::malloc);
route_new!(route_3, 3, "", super::lean::malloc);
route_new!(route_4, 4, "xchg rdi, rsi", super::alloc::memalign);
route_new!(route_5, 5, "xchg rdi, rsi", super::alloc::memalign);
route_new!(route_6, 6, "xchg rdi, rsi", super::alloc::memalign);
route_new!(route_7, 7, "xchg rdi, rsi", super::alloc::memalign);

/// A routed `delete` of any form: heapledger's `free`, which takes the
/// pointer in rdi and ignores the size and alignment.
#[unsafe(naked)]
unsafe extern "C" fn route_delete() {
    core::arch::naked_asm!("jmp {free}", free = sym super::lean::free)
}

/// A slot no loaded object defines a function for (a call to a name
/// nothing defines, which the loader would otherwise have refused).
unsafe extern "C" fn missing() {
    let msg = b"heapledger: no definition of this C++ operator new or delete was found\n";
    // SAFETY: a write of our own bytes to stderr, then abort (no
    // preconditions).
    unsafe {
        libc::write(2, msg.as_ptr() as *const c_void, msg.len());
        libc::abort()
    }
}

/// Fills `NEXT` (see the top): every slot's next definition, and the
/// route where the allocator's `new` is routed. Safe to run twice at once
/// (both find the same); runs once per process in practice.
extern "C" fn resolve() {
    real::resolve();
    let mut found = [core::ptr::null_mut::<c_void>(); 20];
    for (f, name) in found.iter_mut().zip(NAMES) {
        // SAFETY: a NUL-terminated name.
        *f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    }
    if found[0].is_null() && found[8].is_null() {
        if let Some(h) = scope_defining(NAMES[0]) {
            for (f, name) in found.iter_mut().zip(NAMES) {
                // SAFETY: a handle the loader gave; a NUL-terminated name.
                *f = unsafe { libc::dlsym(h, name.as_ptr()) };
            }
        }
    }
    for i in 0..20 {
        if found[i].is_null() {
            found[i] = found[FALLBACK[i]];
        }
        if found[i].is_null() {
            found[i] = missing as *mut c_void;
        }
    }
    let route = routed(found[0]);
    for i in 0..20 {
        OWN[i].store(found[i], Ordering::Relaxed);
    }
    let routes: [unsafe extern "C" fn(); 8] = [
        route_0, route_1, route_2, route_3, route_4, route_5, route_6, route_7,
    ];
    for i in 0..20 {
        let to = match (route, i) {
            (false, _) => found[i],
            (true, 0..8) => routes[i] as *mut c_void,
            (true, _) => route_delete as *mut c_void,
        };
        NEXT[i].store(to, Ordering::Release);
    }
}

/// The object holding `p`: its base and path (null where unnamed).
fn object_of(p: *const c_void) -> Option<(usize, *const c_char)> {
    // SAFETY: a zeroed Dl_info is valid; dladdr only fills it.
    let mut info: libc::Dl_info = unsafe { core::mem::zeroed() };
    // SAFETY: any address may be asked about.
    (unsafe { libc::dladdr(p, &mut info) } != 0)
        .then_some((info.dli_fbase as usize, info.dli_fname))
}

/// Whether `new` (the next definition of `operator new(size_t)`) is to be
/// routed: it lies in the object whose `malloc` heapledger forwards to,
/// and that object is not a C++ runtime (whose `new` calls `malloc`).
fn routed(new: *mut c_void) -> bool {
    let malloc = real::REAL.malloc.load(Ordering::Acquire);
    if new.is_null() || malloc == 0 || new == missing as *mut c_void {
        return false;
    }
    let (Some((new_base, name)), Some((malloc_base, _))) =
        (object_of(new), object_of(malloc as *const c_void))
    else {
        return false;
    };
    if new_base != malloc_base || name.is_null() {
        return false;
    }
    // SAFETY: a NUL-terminated path the loader keeps.
    let name = unsafe { CStr::from_ptr(name) }.to_bytes();
    !is_runtime(name)
}

/// Whether `path` is a C++ runtime's, whose `new` calls `malloc`.
fn is_runtime(path: &[u8]) -> bool {
    let runtime = [&b"libstdc++.so"[..], b"libc++.so"];
    runtime
        .iter()
        .any(|r| path.windows(r.len()).any(|w| w == *r))
}

/// A loaded object whose own scope (itself and what it needs) defines
/// `name` other than heapledger, kept loaded: a library `dlopen` loaded
/// into a local scope, which `RTLD_NEXT` does not search. A C++ runtime
/// first (whose `new` calls `malloc`, as every other runtime's), so that a
/// plugin's own pool, where one defines `new`, serves only where nothing
/// else could.
fn scope_defining(name: &CStr) -> Option<*mut c_void> {
    let mut paths: alloc::vec::Vec<alloc::vec::Vec<u8>> = alloc::vec::Vec::new();
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: the loader's info for one object, and our vector.
        let (info, paths) = unsafe {
            (
                &*info,
                &mut *(data as *mut alloc::vec::Vec<alloc::vec::Vec<u8>>),
            )
        };
        if !info.dlpi_name.is_null() {
            // SAFETY: a NUL-terminated path the loader keeps.
            let n = unsafe { CStr::from_ptr(info.dlpi_name) }.to_bytes_with_nul();
            if n.len() > 1 {
                paths.push(n.to_vec());
            }
        }
        0
    }
    // SAFETY: the callback only reads the info and pushes to `paths`.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut paths as *mut _ as *mut c_void) };
    let mine = object_of(resolve as *const c_void).map(|o| o.0);
    paths.sort_by_key(|p| !is_runtime(p));
    let open = real::dlopen()?;
    for p in &paths {
        // SAFETY: a NUL-terminated path of a loaded object; RTLD_NOLOAD
        // loads nothing and changes no scope.
        let h = unsafe {
            open(
                p.as_ptr() as *const c_char,
                libc::RTLD_NOLOAD | libc::RTLD_LAZY,
            )
        };
        if h.is_null() {
            continue;
        }
        // SAFETY: a handle the loader gave; a NUL-terminated name.
        let f = unsafe { libc::dlsym(h, name.as_ptr()) };
        if !f.is_null() && object_of(f).map(|o| o.0) != mine {
            return Some(h);
        }
        if let Some(close) = real::dlclose() {
            // SAFETY: the handle opened above.
            unsafe { close(h) };
        }
    }
    None
}
