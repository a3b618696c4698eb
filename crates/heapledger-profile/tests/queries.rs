//! Questions asked of the MALT sample, with answers known from `sample.c`.

mod common;

use heapledger_profile::{runtime, Addr, Profile};

fn sample() -> Profile {
    Profile::from_path(common::sample_path()).unwrap()
}

#[test]
fn resolves_addresses_to_source() {
    let p = sample();
    let make = p.resolve("0x563b06c6e181").unwrap();
    assert_eq!(make.function, "make");
    assert_eq!(make.file, "/home/user/demo/sample.c");
    assert_eq!(make.line, Some(4));
    assert_eq!(make.binary_name(), "sample");
    assert_eq!(
        make.to_string(),
        "make  /home/user/demo/sample.c:4  (sample)"
    );
    // Known address without a line; unknown address; not an address.
    assert_eq!(p.resolve("0x563b06c6e0b0").unwrap().line, None);
    assert!(p.resolve("0x1").is_none());
    assert!(p.resolve("main").is_none());
    // Python pseudo-addresses are kept apart from native ones.
    assert!(p.resolve_addr(Addr::python(1)).is_some());
    assert!(p.resolve_addr(Addr::native(1)).is_none());
    // An address's binary from the mappings, for frames without a symbol.
    let mapping = p.sites.mapping_of(Addr::native(0x563b06c6d010)).unwrap();
    assert_eq!(mapping.file, "/home/user/demo/sample");
    assert!(p.sites.mapping_of(Addr::native(1)).is_none());
}

#[test]
fn frames_of_a_stack_are_innermost_first() {
    let p = sample();
    let worker_make = p
        .stacks()
        .find(|s| s.infos.alloc.count == 100)
        .expect("the worker's 100 mallocs");
    let names: Vec<&str> = p
        .frames(&worker_make.stack)
        .map(|f| f.site.map_or("?", |s| s.function))
        .collect();
    assert_eq!(
        names,
        [
            "make",
            "worker",
            "MALT::pthreadWrapperStartRoutine(void*)",
            "start_thread",
            "clone3"
        ]
    );
    assert_eq!(p.stacks.allocating().count(), 9);
    assert_eq!(p.stacks.len(), 12);
}

#[test]
fn totals_over_threads() {
    let p = sample();
    let t = p.call_totals();
    assert_eq!(t.malloc.count, 114); // 112 make() + 16 B in grow() + libstdc++'s pool
    assert_eq!(t.calloc.count, 2);
    assert_eq!(t.realloc.count, 1);
    assert_eq!(t.free.count, 111);
    assert_eq!(t.malloc.sum + t.calloc.sum + t.realloc.sum, 85184);
    assert_eq!(p.peak_requested(), Some(74416));
    let secs = p.runtime_seconds().unwrap();
    assert!((secs - 1114115092.0 / 2596133007.0).abs() < 1e-9);
}

#[test]
fn runtime_leaks_are_recognised() {
    let p = sample();
    // leaks: libstdc++ pool, atexit list, leak() x2, pthread TLS.
    assert_eq!(p.runtime_leaks(), vec![0, 1, 4]);
    let memory: Vec<u64> = p
        .runtime_leaks()
        .iter()
        .map(|&i| p.leaks[i].memory)
        .collect();
    assert_eq!(memory, [72704, 1040, 352]);
    assert!(runtime::is_runtime_library(
        "/usr/lib/x86_64-linux-gnu/libc.so.6"
    ));
    assert!(runtime::is_runtime_library("/lib64/ld-linux-x86-64.so.2"));
    assert!(!runtime::is_runtime_library("/home/user/demo/sample"));
    assert!(runtime::is_runtime_function("__GI__dl_allocate_tls"));
    assert!(!runtime::is_runtime_function("my_allocate_stack"));
}
