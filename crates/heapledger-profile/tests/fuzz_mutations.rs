//! Fuzzing the profile reader with proptest: a small heapledger profile
//! (every section, heapledger's data included) and MALT's sample, damaged by
//! byte mutations (bit flips, bytes set, inserted, deleted, runs copied,
//! cuts). Whatever the bytes, reading returns (never panics) within a
//! memory bound of the input's size, its error is one short line without
//! control characters, and a profile it accepts writes and reads back the
//! same.
//!
//! `HEAPLEDGER_FUZZ_CASES=N` runs N cases per property instead of the
//! default (kept to a few seconds for CI).

mod common;
mod counting;
mod mutations;

use counting::peak_of;
use heapledger_profile::{
    stack_mode, Addr, HeapledgerExt, InstrEntry, Leak, Profile, Run, StackInfos, StackStat,
    StringTable, ThreadStats,
};
use mutations::{apply, cases, mutation};
use proptest::prelude::*;

/// A small profile as `heapledger run` writes it.
fn small() -> Vec<u8> {
    let mut run = Run::new("heapledger-0.1.0", "prog", "prog -x");
    run.runtime = 5_000_000;
    let mut p = Profile::new(run);
    p.globals.ticks_per_second = 1_000_000_000;
    p.globals.total_memory = 16 << 30;
    p.globals.max_thread_count = 2;
    let mut strings = StringTable::from_strings(p.sites.strings.clone());
    for (i, addr) in [0x401010u64, 0x401100, 0x401200].into_iter().enumerate() {
        let entry = InstrEntry {
            file: strings.intern("prog.c"),
            function: strings.intern(&format!("f{i}")),
            line: Some(10 + i as u32),
            binary: strings.intern("/bin/prog"),
        };
        p.sites.instr.insert(Addr::native(addr), entry);
    }
    p.sites.strings = strings.into_strings();
    for (i, stack) in [&[0x401010u64, 0x401100][..], &[0x401200, 0x401100]]
        .into_iter()
        .enumerate()
    {
        let mut infos = StackInfos::default();
        infos.alloc.add(100 + i as u64);
        infos.alloc.add(4096);
        infos.free.add(100);
        infos.alive_req = 4096;
        infos.max_alive_req = 4196;
        infos.global_peak = 4096;
        let stack = stack.iter().map(|&a| Addr::native(a)).collect();
        p.stacks.push(StackStat::new(format!("{i}"), stack, infos));
    }
    p.leaks.push(Leak {
        stack: vec![Addr::native(0x401010), Addr::native(0x401100)],
        count: 1,
        memory: 4096,
    });
    let mut thread = ThreadStats {
        cnt_mem_ops: 5,
        ..Default::default()
    };
    thread.stats.malloc.count = 4;
    thread.stats.malloc.sum = 8392;
    thread.stats.free.count = 1;
    p.threads.push(thread);
    p.mem_stats.size_map.insert(4096, 2);
    let mut ext = HeapledgerExt::new(stack_mode::DWARF, 256);
    ext.peak_requested = 8192;
    ext.peak_time = 1000;
    ext.internal_memory = 1 << 20;
    p.heapledger = Some(ext);
    let mut bytes = Vec::new();
    p.write_to(&mut bytes).unwrap();
    bytes
}

/// Reads `bytes`: no panic, memory within bounds, a one-line error; a
/// profile read writes and reads back the same (its frames without a
/// site named).
fn read_checked(bytes: &[u8]) -> Result<(), TestCaseError> {
    let (result, peak) = peak_of(|| Profile::from_slice(bytes));
    // The model of a profile takes a few times the bytes of its JSON.
    let bound = (1 << 20) + 32 * bytes.len();
    prop_assert!(
        peak <= bound,
        "reading {} bytes took {peak} bytes (bound {bound})",
        bytes.len()
    );
    match result {
        Ok(profile) => {
            let mut written = Vec::new();
            profile.write_to(&mut written).unwrap();
            let again = Profile::from_slice(&written);
            prop_assert!(
                again.is_ok(),
                "written back, it reads as: {:?}",
                again.err()
            );
            // Frames without a site get one as they are written.
            let mut named = profile;
            named.name_every_frame();
            prop_assert_eq!(again.unwrap(), named);
        }
        Err(e) => {
            let msg = e.to_string();
            prop_assert!(
                !msg.chars().any(char::is_control) && msg.chars().count() < 300,
                "{} characters: {:?}",
                msg.chars().count(),
                msg
            );
        }
    }
    Ok(())
}

#[test]
fn the_small_profile_reads() {
    let p = Profile::from_slice(&small()).unwrap();
    assert_eq!(p.stacks.len(), 2);
    assert!(p.heapledger.is_some());
}

proptest! {
    #![proptest_config(cases(1000))]

    #[test]
    fn mutated_small_profiles(mutations in prop::collection::vec(mutation(), 1..6)) {
        read_checked(&apply(small(), &mutations))?;
    }
}

proptest! {
    #![proptest_config(cases(40))]

    /// MALT's file is 390 KB: fewer cases.
    #[test]
    fn mutated_malt_sample(mutations in prop::collection::vec(mutation(), 1..4)) {
        read_checked(&apply(common::sample_bytes(), &mutations))?;
    }
}
