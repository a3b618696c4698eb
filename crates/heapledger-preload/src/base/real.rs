//! The functions the hooks forward to: whatever comes next in the symbol
//! lookup order (glibc, or a jemalloc/mimalloc preloaded after heapledger), found
//! with `dlsym(RTLD_NEXT, ...)`.
//!
//! `dlsym` may itself call `malloc`/`calloc` while the pointers are still
//! unresolved; those calls are served from a small static buffer (`BOOT`),
//! whose blocks are recognized and never passed to the real `free`.

use core::ffi::{c_char, c_int, c_void};
use core::sync::atomic::{AtomicUsize, Ordering};

pub type MallocFn = unsafe extern "C" fn(usize) -> *mut c_void;
pub type FreeFn = unsafe extern "C" fn(*mut c_void);
pub type CallocFn = unsafe extern "C" fn(usize, usize) -> *mut c_void;
pub type ReallocFn = unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void;
pub type PosixMemalignFn = unsafe extern "C" fn(*mut *mut c_void, usize, usize) -> c_int;
pub type AlignFn = unsafe extern "C" fn(usize, usize) -> *mut c_void;
pub type MmapFn =
    unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, c_int, libc::off_t) -> *mut c_void;
pub type MunmapFn = unsafe extern "C" fn(*mut c_void, usize) -> c_int;
pub type MremapFn =
    unsafe extern "C" fn(*mut c_void, usize, usize, c_int, *mut c_void) -> *mut c_void;
pub type DlopenFn = unsafe extern "C" fn(*const c_char, c_int) -> *mut c_void;
pub type DlcloseFn = unsafe extern "C" fn(*mut c_void) -> c_int;
pub type ExitFn = unsafe extern "C" fn(c_int) -> !;
pub type SigactionFn =
    unsafe extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int;
pub type SignalFn = unsafe extern "C" fn(c_int, libc::sighandler_t) -> libc::sighandler_t;
pub type GetattrFn = unsafe extern "C" fn(libc::pthread_t, *mut libc::pthread_attr_t) -> c_int;
/// pthread_mutex_lock and trylock, the rwlocks' rd/wr lock and trylock,
/// sem_trywait: one pointer argument. (The condition waits, join and
/// sem_wait are called from `hooks::wait`'s assembly, through their slots.)
pub type LockFn = unsafe extern "C" fn(*mut c_void) -> c_int;

/// Resolved pointers; each is 0 until `resolve` ran.
pub struct Real {
    pub malloc: AtomicUsize,
    pub free: AtomicUsize,
    pub calloc: AtomicUsize,
    pub realloc: AtomicUsize,
    pub posix_memalign: AtomicUsize,
    pub aligned_alloc: AtomicUsize,
    pub memalign: AtomicUsize,
    pub valloc: AtomicUsize,
    pub pvalloc: AtomicUsize,
    pub mmap: AtomicUsize,
    pub munmap: AtomicUsize,
    pub mremap: AtomicUsize,
    pub dlopen: AtomicUsize,
    pub dlclose: AtomicUsize,
    pub exit_: AtomicUsize,
    pub exit2: AtomicUsize,
    pub sigaction: AtomicUsize,
    pub signal: AtomicUsize,
    pub pthread_getattr_np: AtomicUsize,
    pub mutex_lock: AtomicUsize,
    pub mutex_trylock: AtomicUsize,
    pub rwlock_rdlock: AtomicUsize,
    pub rwlock_tryrdlock: AtomicUsize,
    pub rwlock_wrlock: AtomicUsize,
    pub rwlock_trywrlock: AtomicUsize,
    pub cond_wait: AtomicUsize,
    pub cond_timedwait: AtomicUsize,
    pub join: AtomicUsize,
    pub sem_wait: AtomicUsize,
    pub sem_trywait: AtomicUsize,
}

pub static REAL: Real = Real {
    malloc: AtomicUsize::new(0),
    free: AtomicUsize::new(0),
    calloc: AtomicUsize::new(0),
    realloc: AtomicUsize::new(0),
    posix_memalign: AtomicUsize::new(0),
    aligned_alloc: AtomicUsize::new(0),
    memalign: AtomicUsize::new(0),
    valloc: AtomicUsize::new(0),
    pvalloc: AtomicUsize::new(0),
    mmap: AtomicUsize::new(0),
    munmap: AtomicUsize::new(0),
    mremap: AtomicUsize::new(0),
    dlopen: AtomicUsize::new(0),
    dlclose: AtomicUsize::new(0),
    exit_: AtomicUsize::new(0),
    exit2: AtomicUsize::new(0),
    sigaction: AtomicUsize::new(0),
    signal: AtomicUsize::new(0),
    pthread_getattr_np: AtomicUsize::new(0),
    mutex_lock: AtomicUsize::new(0),
    mutex_trylock: AtomicUsize::new(0),
    rwlock_rdlock: AtomicUsize::new(0),
    rwlock_tryrdlock: AtomicUsize::new(0),
    rwlock_wrlock: AtomicUsize::new(0),
    rwlock_trywrlock: AtomicUsize::new(0),
    cond_wait: AtomicUsize::new(0),
    cond_timedwait: AtomicUsize::new(0),
    join: AtomicUsize::new(0),
    sem_wait: AtomicUsize::new(0),
    sem_trywait: AtomicUsize::new(0),
};

static RESOLVED: AtomicUsize = AtomicUsize::new(0);

fn sym(name: &[u8]) -> usize {
    // SAFETY: name is NUL-terminated; RTLD_NEXT lookups have no other precondition.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr() as *const c_char) } as usize;
    if p != 0 {
        return p;
    }
    // SAFETY: as above.
    unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr() as *const c_char) as usize }
}

/// Resolves every pointer once. Re-entrant calls made by `dlsym` see the
/// allocator pointers still at 0 and use the boot buffer.
pub fn resolve() {
    if RESOLVED.load(Ordering::Acquire) != 0 {
        return;
    }
    let r = &REAL;
    let set = |slot: &AtomicUsize, name: &[u8]| slot.store(sym(name), Ordering::Release);
    set(&r.malloc, b"malloc\0");
    set(&r.free, b"free\0");
    set(&r.calloc, b"calloc\0");
    set(&r.realloc, b"realloc\0");
    set(&r.posix_memalign, b"posix_memalign\0");
    set(&r.aligned_alloc, b"aligned_alloc\0");
    set(&r.memalign, b"memalign\0");
    set(&r.valloc, b"valloc\0");
    set(&r.pvalloc, b"pvalloc\0");
    set(&r.mmap, b"mmap\0");
    set(&r.munmap, b"munmap\0");
    set(&r.mremap, b"mremap\0");
    set(&r.dlopen, b"dlopen\0");
    set(&r.dlclose, b"dlclose\0");
    set(&r.exit_, b"_exit\0");
    set(&r.exit2, b"_Exit\0");
    set(&r.sigaction, b"sigaction\0");
    set(&r.signal, b"signal\0");
    set(&r.pthread_getattr_np, b"pthread_getattr_np\0");
    set(&r.mutex_lock, b"pthread_mutex_lock\0");
    set(&r.mutex_trylock, b"pthread_mutex_trylock\0");
    set(&r.rwlock_rdlock, b"pthread_rwlock_rdlock\0");
    set(&r.rwlock_tryrdlock, b"pthread_rwlock_tryrdlock\0");
    set(&r.rwlock_wrlock, b"pthread_rwlock_wrlock\0");
    set(&r.rwlock_trywrlock, b"pthread_rwlock_trywrlock\0");
    set(&r.cond_wait, b"pthread_cond_wait\0");
    set(&r.cond_timedwait, b"pthread_cond_timedwait\0");
    set(&r.join, b"pthread_join\0");
    set(&r.sem_wait, b"sem_wait\0");
    set(&r.sem_trywait, b"sem_trywait\0");
    RESOLVED.store(1, Ordering::Release);
}

/// The path of the object that defines the `malloc` found above, as the
/// loader names it (a preloaded jemalloc, or glibc); set once at start
/// (`note_allocator`), read when the dump is written.
static ALLOCATOR: core::sync::atomic::AtomicPtr<alloc::vec::Vec<u8>> =
    core::sync::atomic::AtomicPtr::new(core::ptr::null_mut());

/// Asks the loader which object defines the real `malloc` (`dladdr`, which
/// takes the loader's lock: once, at start, never on an event's path).
pub fn note_allocator() {
    let p = REAL.malloc.load(Ordering::Acquire);
    if p == 0 || !ALLOCATOR.load(Ordering::Acquire).is_null() {
        return;
    }
    // SAFETY: a zeroed Dl_info is valid; dladdr fills it for an address.
    let path = unsafe {
        let mut info: libc::Dl_info = core::mem::zeroed();
        if libc::dladdr(p as *const c_void, &mut info) == 0 || info.dli_fname.is_null() {
            return;
        }
        core::ffi::CStr::from_ptr(info.dli_fname)
            .to_bytes()
            .to_vec()
    };
    let b = alloc::boxed::Box::into_raw(alloc::boxed::Box::new(path));
    if ALLOCATOR
        .compare_exchange(
            core::ptr::null_mut(),
            b,
            Ordering::AcqRel,
            Ordering::Acquire,
        )
        .is_err()
    {
        // SAFETY: ours, never published.
        drop(unsafe { alloc::boxed::Box::from_raw(b) });
    }
}

/// See `note_allocator`; empty when unknown.
pub fn allocator() -> &'static [u8] {
    let p = ALLOCATOR.load(Ordering::Acquire);
    if p.is_null() {
        return &[];
    }
    // SAFETY: published once in `note_allocator` and never freed.
    unsafe { &*p }
}

macro_rules! getter {
    ($name:ident, $field:ident, $ty:ty) => {
        /// The real function, resolving on first use; None while resolving.
        #[inline(always)]
        pub fn $name() -> Option<$ty> {
            let mut p = REAL.$field.load(Ordering::Relaxed);
            if p == 0 {
                resolve();
                p = REAL.$field.load(Ordering::Acquire);
                if p == 0 {
                    return None;
                }
            }
            // SAFETY: p was returned by dlsym for a symbol of this type.
            Some(unsafe { core::mem::transmute::<usize, $ty>(p) })
        }
    };
}

getter!(malloc, malloc, MallocFn);
getter!(free, free, FreeFn);
getter!(calloc, calloc, CallocFn);
getter!(realloc, realloc, ReallocFn);
getter!(posix_memalign, posix_memalign, PosixMemalignFn);
getter!(aligned_alloc, aligned_alloc, AlignFn);
getter!(memalign, memalign, AlignFn);
getter!(valloc, valloc, MallocFn);
getter!(pvalloc, pvalloc, MallocFn);
getter!(mmap, mmap, MmapFn);
getter!(munmap, munmap, MunmapFn);
getter!(mremap, mremap, MremapFn);
getter!(dlopen, dlopen, DlopenFn);
getter!(dlclose, dlclose, DlcloseFn);
getter!(exit_, exit_, ExitFn);
getter!(exit2, exit2, ExitFn);
getter!(sigaction, sigaction, SigactionFn);
getter!(signal, signal, SignalFn);
getter!(pthread_getattr_np, pthread_getattr_np, GetattrFn);
getter!(mutex_lock, mutex_lock, LockFn);
getter!(mutex_trylock, mutex_trylock, LockFn);
getter!(rwlock_rdlock, rwlock_rdlock, LockFn);
getter!(rwlock_tryrdlock, rwlock_tryrdlock, LockFn);
getter!(rwlock_wrlock, rwlock_wrlock, LockFn);
getter!(rwlock_trywrlock, rwlock_trywrlock, LockFn);
getter!(sem_trywait, sem_trywait, LockFn);

// ---- the boot buffer ----

pub const BOOT_SIZE: usize = 256 * 1024;

#[repr(C, align(16))]
pub struct BootBuf([u8; BOOT_SIZE]);

pub static mut BOOT: BootBuf = BootBuf([0; BOOT_SIZE]);
static BOOT_USED: AtomicUsize = AtomicUsize::new(0);

pub fn boot_base() -> usize {
    core::ptr::addr_of_mut!(BOOT) as usize
}

/// Serves an allocation made while the real allocator is not yet known.
/// Blocks are 16-aligned with their size stored just before them.
pub fn boot_alloc(size: usize, align: usize) -> *mut c_void {
    let align = align.max(16);
    loop {
        let used = BOOT_USED.load(Ordering::Relaxed);
        let start = (boot_base() + used + 16 + align - 1) & !(align - 1);
        let end = start + size;
        if end > boot_base() + BOOT_SIZE {
            return core::ptr::null_mut();
        }
        if BOOT_USED
            .compare_exchange(used, end - boot_base(), Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            // SAFETY: start - 8 is inside the reserved range we just claimed;
            // the buffer is zero-filled, as calloc requires.
            unsafe { *((start - 8) as *mut usize) = size };
            return start as *mut c_void;
        }
    }
}

#[inline(always)]
pub fn is_boot(p: *mut c_void) -> bool {
    // One unsigned comparison: below the buffer wraps to a large offset.
    (p as usize).wrapping_sub(boot_base()) < BOOT_SIZE
}

/// Size of a boot block.
pub fn boot_size(p: *mut c_void) -> usize {
    // SAFETY: p is a boot block (checked by the caller); its size precedes it.
    unsafe { *((p as usize - 8) as *const usize) }
}
