//! Allocators heapledger cannot see: the allocator functions the program
//! resolves to a definition of its own, found at start-up and named in the
//! dump.

use core::ffi::{c_char, c_void};
use core::sync::atomic::Ordering;

/// The allocator functions a program's own definition can hide from
/// heapledger, in the order of the bits of [`UNHOOKED`].
const HOOKED: [&core::ffi::CStr; 10] = [
    c"malloc",
    c"free",
    c"calloc",
    c"realloc",
    c"reallocarray",
    c"posix_memalign",
    c"aligned_alloc",
    c"memalign",
    c"valloc",
    c"pvalloc",
];

/// Bit i set: the program's calls of `HOOKED[i]` resolve to another
/// definition than heapledger's, one the executable itself exports (an
/// allocator linked into it, as rustc's jemalloc is): the dynamic linker
/// looks in the executable before any preloaded library, so those calls
/// never reach heapledger.
static UNHOOKED: core::sync::atomic::AtomicU32 = core::sync::atomic::AtomicU32::new(0);
/// The path of the object that defines them, as the loader names it (a
/// string it keeps while the object is loaded; empty for the executable).
static UNHOOKED_BY: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);

/// Finds the allocator functions the program resolves elsewhere (at
/// start-up: `dlsym` takes the loader's lock, which a dump from a signal
/// handler must not).
pub fn find_unhooked() {
    // The object a definition lies in and the symbol entry found for it.
    let object = |p: *const c_void| {
        // SAFETY: Dl_info is plain data; dladdr1 only fills it and `sym`.
        let mut info: libc::Dl_info = unsafe { core::mem::zeroed() };
        let mut sym: *mut c_void = core::ptr::null_mut();
        // SAFETY: any address may be asked about; RTLD_DL_SYMENT (1) asks
        // for a pointer to the matching ElfW(Sym).
        let found = unsafe { libc::dladdr1(p, &mut info, &mut sym, 1) } != 0;
        found.then_some((info, sym as *const libc::Elf64_Sym))
    };
    // heapledger's code reaches its own exported functions through the same
    // lookup, so their addresses cannot tell: the object does.
    let Some((mine, _)) = object(find_unhooked as *const c_void) else {
        return;
    };
    let mut mask = 0u32;
    for (i, name) in HOOKED.iter().enumerate() {
        // SAFETY: a NUL-terminated name; RTLD_DEFAULT searches the global scope.
        let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
        if p.is_null() {
            continue;
        }
        let Some((info, sym)) = object(p) else {
            continue;
        };
        // A definition, not a non-PIE executable's PLT entry for the
        // function: an executable that takes its address gets one (an
        // undefined symbol with a value), which every lookup then gives
        // (node's malloc), while its calls still reach heapledger's.
        // SAFETY: dladdr1 points `sym` at the object's symbol table entry.
        let defined = !sym.is_null() && unsafe { (*sym).st_shndx } != 0;
        if info.dli_fbase == mine.dli_fbase || !defined {
            continue;
        }
        mask |= 1 << i;
        if !info.dli_fname.is_null() {
            UNHOOKED_BY.store(info.dli_fname as usize, Ordering::Relaxed);
        }
    }
    UNHOOKED.store(mask, Ordering::Relaxed);
}

/// The names of the functions found by [`find_unhooked`] and the object
/// that defines them; None when there are none.
pub fn unhooked() -> Option<(impl Iterator<Item = &'static [u8]>, &'static [u8])> {
    let mask = UNHOOKED.load(Ordering::Relaxed);
    if mask == 0 {
        return None;
    }
    let names = HOOKED
        .iter()
        .enumerate()
        .filter(move |(i, _)| mask & (1 << i) != 0)
        .map(|(_, n)| n.to_bytes());
    let by = UNHOOKED_BY.load(Ordering::Relaxed);
    let by: &[u8] = if by == 0 {
        b""
    } else {
        // SAFETY: a NUL-terminated string of the loader's, kept while the
        // object that holds the definition is loaded.
        unsafe { core::ffi::CStr::from_ptr(by as *const c_char) }.to_bytes()
    };
    Some((names, by))
}
