//! The code modules of the process (from `dl_iterate_phdr`): their unwind
//! tables for framehop, and a record of every executable mapping ever seen,
//! so addresses in a library that was `dlclose`d before exit still
//! symbolize.
//!
//! The unwinder is rebuilt when modules change (after `dlopen`/`dlclose`, or
//! when an unwind meets an address no module covers and the loader reports a
//! change) and published through an atomic pointer. Old unwinders are kept:
//! another thread may still be unwinding with one. Their number is bounded by
//! the number of module changes.

use crate::base::sync;
use crate::base::sync::SpinLock;
use alloc::string::String;
use alloc::vec::Vec;
use core::ffi::{c_int, c_void, CStr};
use core::ops::Deref;
use core::ptr::null_mut;
use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use framehop::x86_64::UnwinderX86_64;
use framehop::{ExplicitModuleSectionInfo, MustNotAllocateDuringUnwind, Unwinder};

/// Unwind section bytes that live in the loaded module itself.
#[derive(Clone, Copy)]
pub struct MappedBytes {
    ptr: *const u8,
    len: usize,
}
// SAFETY: read-only bytes of a loaded module.
unsafe impl Send for MappedBytes {}
unsafe impl Sync for MappedBytes {}

impl Deref for MappedBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the bytes belong to a module mapped while this unwinder is
        // in use (a module is only unloaded once no code of it runs).
        unsafe { core::slice::from_raw_parts(self.ptr, self.len) }
    }
}

pub type Fh = UnwinderX86_64<MappedBytes, MustNotAllocateDuringUnwind>;

pub static UNWINDER: AtomicPtr<Fh> = AtomicPtr::new(null_mut());
/// The loader's add+sub counters when the unwinder was last built.
static LOADER_GEN: AtomicU64 = AtomicU64::new(u64::MAX);
/// libc's executable range, where the signal return trampoline lives.
pub static LIBC_LO: AtomicU64 = AtomicU64::new(0);
pub static LIBC_HI: AtomicU64 = AtomicU64::new(0);
/// Set once a CPython (its executable or `libpython`) is mapped: only
/// there does the unwinder look for CPython's perf trampolines, which
/// takes a system call the first time an address is looked at (see
/// `unwind::step`), one a strict sandbox of another program might refuse
/// by killing it.
pub static PYTHON: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

#[derive(Clone, PartialEq, Eq)]
pub struct ModuleRec {
    pub start: u64,
    pub end: u64,
    pub file_offset: u64,
    pub path: String,
    pub build_id: Vec<u8>,
}

/// Every executable mapping seen since start.
pub static SEEN: SpinLock<Vec<ModuleRec>> = SpinLock::new(Vec::new());
pub static REBUILD_LOCK: SpinLock<()> = SpinLock::new(());

struct Found {
    name: String,
    base: u64,
    exec: Vec<(u64, u64, u64)>, // start, end, file offset
    eh_hdr: Option<(u64, u64)>, // svma, size
    eh_frame: Option<(u64, u64)>,
    build_id: Vec<u8>,
}

fn exe_path() -> String {
    let mut buf = [0u8; 4096];
    // Through the calling thread first: see `dump::encode::read_proc`.
    for path in [c"/proc/thread-self/exe", c"/proc/self/exe"] {
        // SAFETY: buf is writable for its length.
        let n = unsafe { libc::readlink(path.as_ptr(), buf.as_mut_ptr() as *mut _, buf.len()) };
        if n > 0 {
            return String::from_utf8_lossy(&buf[..n as usize]).into_owned();
        }
    }
    String::new()
}

/// Reads a DWARF pointer encoded as in .eh_frame_hdr (the common encodings).
unsafe fn read_encoded(p: *const u8, enc: u8, hdr_base: u64) -> Option<u64> {
    // SAFETY: the caller points p into a mapped .eh_frame_hdr.
    unsafe {
        let v: i64 = match enc & 0x0f {
            0x03 => (p as *const u32).read_unaligned() as i64,
            0x0b => (p as *const i32).read_unaligned() as i64,
            0x04 | 0x0c => (p as *const i64).read_unaligned(),
            _ => return None,
        };
        match enc & 0x70 {
            0x00 => Some(v as u64),
            0x10 => Some((p as u64).wrapping_add(v as u64)),
            0x30 => Some(hdr_base.wrapping_add(v as u64)),
            _ => None,
        }
    }
}

unsafe fn build_id_of(info: &libc::dl_phdr_info, ph: &libc::Elf64_Phdr) -> Vec<u8> {
    // SAFETY: PT_NOTE segments of loaded modules are mapped and well formed.
    unsafe {
        let mut p = (info.dlpi_addr + ph.p_vaddr) as *const u8;
        let end = p.add(ph.p_memsz as usize);
        while (p as usize) + 12 <= end as usize {
            let namesz = (p as *const u32).read_unaligned() as usize;
            let descsz = (p.add(4) as *const u32).read_unaligned() as usize;
            let ty = (p.add(8) as *const u32).read_unaligned();
            let name = p.add(12);
            let desc = name.add((namesz + 3) & !3);
            if ty == 3 && namesz == 4 && core::slice::from_raw_parts(name, 4) == b"GNU\0" {
                return core::slice::from_raw_parts(desc, descsz).to_vec();
            }
            p = desc.add((descsz + 3) & !3);
        }
        Vec::new()
    }
}

unsafe extern "C" fn collect(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: the loader passes a valid info; data is our Vec.
    let (info, out) = unsafe { (&*info, &mut *(data as *mut Vec<Found>)) };
    let name = if info.dlpi_name.is_null() {
        String::new()
    } else {
        // SAFETY: a NUL-terminated string owned by the loader.
        unsafe { CStr::from_ptr(info.dlpi_name) }
            .to_string_lossy()
            .into_owned()
    };
    let mut f = Found {
        name,
        base: info.dlpi_addr,
        exec: Vec::new(),
        eh_hdr: None,
        eh_frame: None,
        build_id: Vec::new(),
    };
    // SAFETY: dlpi_phdr has dlpi_phnum entries.
    let phdrs = unsafe { core::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    for ph in phdrs {
        match ph.p_type {
            libc::PT_LOAD if ph.p_flags & libc::PF_X != 0 => {
                let start = info.dlpi_addr + ph.p_vaddr;
                f.exec.push((start, start + ph.p_memsz, ph.p_offset));
            }
            libc::PT_GNU_EH_FRAME => f.eh_hdr = Some((ph.p_vaddr, ph.p_memsz)),
            // SAFETY: info and ph describe a loaded module.
            libc::PT_NOTE if f.build_id.is_empty() => f.build_id = unsafe { build_id_of(info, ph) },
            _ => {}
        }
    }
    if let Some((hdr_svma, _)) = f.eh_hdr {
        let hdr = (info.dlpi_addr + hdr_svma) as *const u8;
        // SAFETY: the header is mapped; its second byte is the pointer encoding.
        let eh = unsafe {
            if *hdr == 1 {
                read_encoded(hdr.add(4), *hdr.add(1), hdr as u64)
            } else {
                None
            }
        };
        if let Some(eh_avma) = eh {
            // .eh_frame runs to at most the end of the load segment holding it.
            let end = phdrs
                .iter()
                .filter(|p| p.p_type == libc::PT_LOAD)
                .map(|p| {
                    (
                        info.dlpi_addr + p.p_vaddr,
                        info.dlpi_addr + p.p_vaddr + p.p_memsz,
                    )
                })
                .find(|&(s, e)| eh_avma >= s && eh_avma < e)
                .map(|(_, e)| e);
            if let Some(end) = end {
                f.eh_frame = Some((eh_avma - info.dlpi_addr, end - eh_avma));
            }
        }
    }
    if !f.exec.is_empty() {
        out.push(f);
    }
    0
}

unsafe extern "C" fn loader_gen(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: valid info from the loader; data is our u64.
    unsafe {
        *(data as *mut u64) = (*info)
            .dlpi_adds
            .wrapping_mul(1 << 32)
            .wrapping_add((*info).dlpi_subs)
    };
    1
}

fn current_loader_gen() -> u64 {
    let mut g = 0u64;
    // SAFETY: the callback only writes to g.
    unsafe { libc::dl_iterate_phdr(Some(loader_gen), &mut g as *mut u64 as *mut c_void) };
    g
}

/// Rebuilds the unwinder from the loader's current module list if it changed.
///
/// Not while this thread is in the middle of a refresh already (a signal
/// handler that interrupted one writes the profile from `_exit`): the list
/// stays as it was.
pub fn refresh(force: bool) {
    let _e = sync::ErrnoGuard::new();
    let Some(_g) = REBUILD_LOCK.lock_unless_held_here() else {
        return;
    };
    let gen = current_loader_gen();
    if !force && gen == LOADER_GEN.load(Ordering::Acquire) {
        return;
    }
    let mut found: Vec<Found> = Vec::new();
    // SAFETY: the callback only pushes to `found`.
    unsafe { libc::dl_iterate_phdr(Some(collect), &mut found as *mut Vec<Found> as *mut c_void) };
    let mut fh = Fh::new();
    let exe = exe_path();
    let mut seen = SEEN.lock();
    for (i, f) in found.iter().enumerate() {
        let path = if f.name.is_empty() {
            if i == 0 {
                exe.clone()
            } else {
                String::from("[vdso]")
            }
        } else {
            f.name.clone()
        };
        let file = path.rsplit('/').next().unwrap_or(&path);
        if file.starts_with("libpython") || file.starts_with("python") {
            PYTHON.store(true, Ordering::Relaxed);
        }
        if path.contains("/libc.so") {
            if let Some(&(s, e, _)) = f.exec.first() {
                LIBC_LO.store(s, Ordering::Relaxed);
                LIBC_HI.store(e, Ordering::Relaxed);
            }
        }
        for &(s, e, off) in &f.exec {
            let rec = ModuleRec {
                start: s,
                end: e,
                file_offset: off,
                path: path.clone(),
                build_id: f.build_id.clone(),
            };
            if !seen.contains(&rec) {
                seen.push(rec);
            }
        }
        let (Some((hdr_svma, hdr_len)), Some((eh_svma, eh_len))) = (f.eh_hdr, f.eh_frame) else {
            continue;
        };
        let lo = f.exec.iter().map(|e| e.0).min().unwrap_or(0);
        let hi = f.exec.iter().map(|e| e.1).max().unwrap_or(0);
        let text_svma = (lo - f.base)..(hi - f.base);
        let info = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: Some(text_svma),
            eh_frame_hdr_svma: Some(hdr_svma..hdr_svma + hdr_len),
            eh_frame_hdr: Some(MappedBytes {
                ptr: (f.base + hdr_svma) as *const u8,
                len: hdr_len as usize,
            }),
            eh_frame_svma: Some(eh_svma..eh_svma + eh_len),
            eh_frame: Some(MappedBytes {
                ptr: (f.base + eh_svma) as *const u8,
                len: eh_len as usize,
            }),
            text: None,
            stubs_svma: None,
            stub_helper_svma: None,
            got_svma: None,
            unwind_info: None,
            debug_frame: None,
            text_segment_svma: None,
            text_segment: None,
        };
        fh.add_module(framehop::Module::new(path, lo..hi, f.base, info));
    }
    drop(seen);
    let b = alloc::boxed::Box::into_raw(alloc::boxed::Box::new(fh));
    UNWINDER.store(b, Ordering::Release);
    LOADER_GEN.store(gen, Ordering::Release);
}
