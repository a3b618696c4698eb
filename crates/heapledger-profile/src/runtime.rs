//! Recognising the blocks that the C/C++ runtime allocates for itself.
//!
//! A preload profiler sees allocations that no leak checker should blame on the
//! program: the loader's TLS and link maps, glibc's atexit list, its cached
//! thread stacks and stdio buffers, libstdc++'s emergency exception pool. They
//! are alive at exit because the runtime frees them only under Valgrind (via
//! `__libc_freeres`) or never. heapledger reports them apart from the program's
//! leaks.
//!
//! A leak is the runtime's when either
//! - a frame of its stack is one of the runtime functions below, which
//!   allocate on the runtime's own behalf whoever called them (a thread's TLS
//!   block, allocated by `pthread_create` and cached by glibc after `join`), or
//! - every frame whose binary is known lies in a runtime library (loader,
//!   libc, libstdc++, libgcc...): no code of the program asked for it (static
//!   constructors of the runtime libraries run by the loader).
//!
//! Frames in the profiler's own library (MALT's `libmalt`) are ignored.
//! The recorder stores the result in `heapledger.runtimeLeaks`; files written by
//! MALT get it from [`classify_leaks`] when read.

use crate::addr::Addr;
use crate::model::Profile;
use crate::sites::basename;

/// Functions that allocate for the runtime itself, whoever called them.
/// Compared with the symbol less glibc's `__GI_` alias prefix and any
/// `@version` suffix, so `__GI__dl_allocate_tls` matches `_dl_allocate_tls`.
const RUNTIME_FUNCTIONS: &[&str] = &[
    "_dl_allocate_tls",                // thread TLS blocks (glibc caches them)
    "allocate_stack",                  // glibc's thread stack cache
    "_dl_update_slotinfo",             // dynamic TLS of loaded libraries
    "__tls_get_addr",                  // lazy dynamic TLS
    "_dl_new_object",                  // link maps of loaded libraries
    "_dl_map_object",                  // idem
    "__new_exitfn",                    // the atexit / __cxa_atexit list
    "__cxa_thread_atexit_impl",        // the thread_local destructor list
    "_IO_file_doallocate",             // stdio buffers of stdout and stderr
    "_nl_find_locale",                 // locale data, kept until exit
    "_dl_find_object_update",          // dlopen's table for _dl_find_object, never freed
    "_dlfo_mappings_segment_allocate", // idem (inlined into the above)
    "_dl_add_to_namespace_list",       // the loader's namespace list
    "__libc_unwind_link_get",          // libgcc_s, loaded once for pthread_exit and cancellation
];

/// Basename prefixes of the runtime's libraries.
const RUNTIME_LIBRARIES: &[&str] = &[
    "ld-linux",
    "ld64.so",
    "ld.so",
    "ld-musl",
    "libc.so",
    "libc-",
    "libc.musl",
    "libm.so",
    "libm-",
    "libpthread",
    "libdl.so",
    "libdl-",
    "librt.so",
    "libstdc++",
    "libc++.so",
    "libc++abi",
    "libgcc_s",
];

/// Basename prefixes of profilers' own libraries, whose frames say nothing.
const PROFILER_LIBRARIES: &[&str] = &["libmalt", "libheapledger"];

/// The functions that allocate for the runtime itself (see the module
/// documentation), as `heapledger leaks --print-suppressions` lists them.
pub fn runtime_functions() -> &'static [&'static str] {
    RUNTIME_FUNCTIONS
}

/// Base name prefixes of the runtime's libraries.
pub fn runtime_libraries() -> &'static [&'static str] {
    RUNTIME_LIBRARIES
}

/// Whether `binary` (a path) is one of the C/C++ runtime's libraries.
pub fn is_runtime_library(binary: &str) -> bool {
    let name = basename(binary);
    RUNTIME_LIBRARIES.iter().any(|p| name.starts_with(p))
}

/// Whether `function` is one that allocates for the runtime itself.
pub fn is_runtime_function(function: &str) -> bool {
    let name = function.strip_prefix("__GI_").unwrap_or(function);
    let name = name.split('@').next().unwrap_or(name);
    RUNTIME_FUNCTIONS.contains(&name)
}

fn is_profiler_library(binary: &str) -> bool {
    let name = basename(binary);
    PROFILER_LIBRARIES.iter().any(|p| name.starts_with(p))
}

/// Whether blocks allocated at `stack` belong to the runtime (see the module
/// documentation for the rule).
pub fn is_runtime_stack(profile: &Profile, stack: &[Addr]) -> bool {
    stack_verdict(stack, |a| frame_verdict(profile, a))
}

/// What one frame says of its stack.
#[derive(Clone, Copy)]
enum FrameVerdict {
    /// A function of the runtime's own allocations: the stack is the
    /// runtime's.
    Runtime,
    /// No site, or a profiler's own: says nothing.
    Nothing,
    /// A known binary, the runtime's library or not.
    Known { runtime_library: bool },
}

fn frame_verdict(profile: &Profile, addr: Addr) -> FrameVerdict {
    let Some(site) = profile.sites.resolve(addr) else {
        return FrameVerdict::Nothing;
    };
    // Functions inlined at this address count too (glibc inlines its
    // allocation helpers into the function that names the reason).
    if is_runtime_function(site.function)
        || profile
            .inline_chain(site.addr)
            .iter()
            .any(|f| is_runtime_function(f.function))
    {
        return FrameVerdict::Runtime;
    }
    if site.binary == crate::strings::UNKNOWN || is_profiler_library(site.binary) {
        return FrameVerdict::Nothing;
    }
    FrameVerdict::Known {
        runtime_library: is_runtime_library(site.binary),
    }
}

fn stack_verdict(stack: &[Addr], mut verdict: impl FnMut(Addr) -> FrameVerdict) -> bool {
    let mut known = 0usize;
    let mut all_runtime = true;
    for &a in stack {
        match verdict(a) {
            FrameVerdict::Runtime => return true,
            FrameVerdict::Nothing => {}
            FrameVerdict::Known { runtime_library } => {
                known += 1;
                all_runtime &= runtime_library;
            }
        }
    }
    known > 0 && all_runtime
}

/// Indexes into `profile.leaks` of the runtime's leaks, ascending.
pub fn classify_leaks(profile: &Profile) -> Vec<usize> {
    // Each address judged once: leaks share most of their frames (half a
    // million stacks' 8 000 leaks: 190 000 frames judged, 170 M
    // instructions).
    let mut seen: std::collections::HashMap<Addr, FrameVerdict> = Default::default();
    profile
        .leaks
        .iter()
        .enumerate()
        .filter(|(_, leak)| {
            stack_verdict(&leak.stack, |a| {
                *seen.entry(a).or_insert_with(|| frame_verdict(profile, a))
            })
        })
        .map(|(i, _)| i)
        .collect()
}
