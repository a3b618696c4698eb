//! The summary of the real MALT 1.6.2 sample, whose numbers are known from
//! `sample.c`: `make()` is called 10 times from `main`, twice from `leak()`
//! and 100 times from the worker thread; `grow()` mallocs 16 B and reallocs
//! to 4096 B; `leak()` leaks two 128 B blocks. The rest (72704 B libstdc++
//! emergency pool, 1040 B atexit list, 352 B thread TLS) is the runtime's.

use std::path::PathBuf;

use heapledger_analysis::summary::{Blocks, FunctionCalls, Summary, SummaryOptions};
use heapledger_profile::Profile;

fn sample() -> Profile {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../heapledger-profile/tests/fixtures/malt-1.6.2-sample/profile.json");
    Profile::from_path(path).unwrap()
}

#[test]
fn figures_match_the_program() {
    let s = Summary::from_profile(&sample(), &SummaryOptions { top: 5 });
    assert_eq!(s.command, "./sample");
    assert_eq!(s.pid, None);
    assert_eq!(s.exit, None);
    let secs = s.run_seconds.unwrap();
    assert!((secs - 0.429).abs() < 0.001, "{secs}");

    let call = |name, count, bytes| FunctionCalls { name, count, bytes };
    assert_eq!(
        s.calls,
        [
            // 112 make() + grow()'s 16 B + libstdc++'s pool; bytes per thread summed.
            call("malloc", 114, 73296 + 6400),
            call("calloc", 2, 1040 + 352),
            call("realloc", 1, 4096),
            call("free", 111, 0),
        ]
    );
    assert_eq!(s.alloc_calls, 117);
    assert_eq!(s.alloc_bytes, 85184);
    assert_eq!(s.peak_requested, Some(74416));
    assert_eq!(s.peak_seconds, None);
    assert_eq!(
        s.alive,
        Blocks {
            count: 5,
            bytes: 72704 + 1040 + 352 + 2 * 128
        }
    );
    assert_eq!(
        s.alive_runtime,
        Blocks {
            count: 3,
            bytes: 72704 + 1040 + 352
        }
    );

    let by_bytes: Vec<(&str, u64, u64)> = s
        .top_by_bytes
        .iter()
        .map(|t| (t.site.function.as_str(), t.calls, t.bytes))
        .collect();
    assert_eq!(
        by_bytes,
        [
            ("std::__throw_ios_failure(char const*, int)", 1, 72704),
            ("make", 10 + 2 + 100, 10 * 32 + 2 * 128 + 100 * 64),
            ("grow", 2, 16 + 4096),
            ("__new_exitfn", 1, 1040),
            ("calloc", 1, 352),
        ]
    );
    let make = &s.top_by_calls[0];
    assert_eq!(make.site.function, "make");
    assert_eq!(make.site.location, "/home/user/demo/sample.c:4");
    assert_eq!(make.site.library, "sample");
    assert_eq!((make.calls, make.bytes), (112, 6976));
    assert_eq!(s.top_by_calls[1].site.function, "grow");

    // leak()'s two blocks come from two call sites on one line: one stack.
    assert_eq!(s.leaking_stacks, 1);
    let leak = &s.top_leaks[0];
    assert_eq!(
        leak.blocks,
        Blocks {
            count: 2,
            bytes: 256
        }
    );
    let frames: Vec<&str> = leak.frames.iter().map(|f| f.function.as_str()).collect();
    assert_eq!(
        frames,
        [
            "make",
            "leak",
            "main",
            "__libc_start_call_main",
            "__libc_start_main_impl",
            "_start"
        ]
    );
    assert_eq!(leak.frames[1].location, "/home/user/demo/sample.c:7");
    assert_eq!(leak.more_frames, 0);
    assert!(s.recording.is_none());
}

const EXPECTED: &str = "\
Program      ./sample
Process      exit status unknown
Run time     0.429 s
Recorded by  malt-1.6.2, 2026-11-21 08:02
Threads      2 that called the allocator, at most 2 at once

Allocation calls
  malloc       114  77.8 KiB (79696 B)
  calloc         2  1.4 KiB (1392 B)
  realloc        1  4.0 KiB (4096 B)
  free         111
  allocations  117  83.2 KiB (85184 B)

Peak requested memory   72.7 KiB (74416 B)
Alive at exit           5 blocks, 72.6 KiB (74352 B)
  by the program        2 blocks, 256 B
  by the C/C++ runtime  3 blocks, 72.4 KiB (74096 B) (not the program's leaks)

Memory over time (0 to 4.6 ms, 77 µs per column; each column its highest value)
  requested  ████████████████████████████████████████████████████████████  72.7 KiB (74416 B) at most
  resident   ████████████████████████████████████████████████████████████  5.7 MiB (5939200 B) at most

Allocation sizes (each range up to, not including, its end)
       16 B – 64 B   11   9.4%  ████
      64 B – 256 B  102  87.2%  ██████████████████████████████
     256 B – 1 KiB    1   0.9%  █
     1 KiB – 4 KiB    1   0.9%  █
    4 KiB – 16 KiB    1   0.9%  █
  64 KiB – 256 KiB    1   0.9%  █

Top allocation sites by bytes
               bytes  calls  lifetime: mean (min..max)  site
  71.0 KiB (72704 B)      1                          -  std::__throw_ios_failure(char const*, int)  ??  (libstdc++.so.6.0.30)
    6.8 KiB (6976 B)    112       23 µs (1 µs..164 µs)  make  /home/user/demo/sample.c:4  (sample)
    4.0 KiB (4112 B)      2        14 µs (3 µs..24 µs)  grow  /home/user/demo/sample.c:5  (sample)

Top allocation sites by calls
               bytes  calls  lifetime: mean (min..max)  site
    6.8 KiB (6976 B)    112       23 µs (1 µs..164 µs)  make  /home/user/demo/sample.c:4  (sample)
    4.0 KiB (4112 B)      2        14 µs (3 µs..24 µs)  grow  /home/user/demo/sample.c:5  (sample)
  71.0 KiB (72704 B)      1                          -  std::__throw_ios_failure(char const*, int)  ??  (libstdc++.so.6.0.30)

Top sites at the peak (memory they held when the whole process peaked)
       alive at peak  site
  71.0 KiB (72704 B)  std::__throw_ios_failure(char const*, int)  ??  (libstdc++.so.6.0.30)
    4.0 KiB (4096 B)  grow  /home/user/demo/sample.c:5  (sample)
    1.0 KiB (1040 B)  __new_exitfn  ./stdlib/./stdlib/cxa_atexit.c:114  (libc.so.6)

Top leaking stacks (1 of 1)
  256 B in 2 blocks
      make  /home/user/demo/sample.c:4  (sample)
      leak  /home/user/demo/sample.c:7  (sample)
      main  /home/user/demo/sample.c:11  (sample)
      __libc_start_call_main  ./csu/../sysdeps/x86/libc-start.c:58  (libc.so.6)
      __libc_start_main_impl  ./csu/../csu/libc-start.c:360  (libc.so.6)
      _start  ??  (sample)
";

#[test]
fn text_report_is_exact() {
    let text = Summary::from_profile(&sample(), &SummaryOptions { top: 3 }).to_string();
    if text != EXPECTED {
        panic!("summary changed; got:\n{text}");
    }
}
