//! Profiles as heapledger writes them hold every key, of every type, that MALT
//! 1.6.2's reader requires, and no `null` (see `malt_reader/mod.rs` for where
//! in MALT's source each requirement comes from); their totals are where
//! MALT's tools read them.

mod common;
mod malt_reader;

use heapledger_profile::{
    stack_mode, timeline, Addr, ExitInfo, HeapledgerExt, InstrEntry, Leak, ModuleInfo, Profile,
    Run, StackInfos, StackStat, StringTable,
};
use serde_json::Value;

/// MALT's own file meets the list: the list asks nothing MALT does not write.
#[test]
fn malt_sample_meets_what_its_reader_requires() {
    let v: Value = serde_json::from_slice(&common::sample_bytes()).unwrap();
    assert_eq!(malt_reader::problems(&v), Vec::<String>::new());
}

/// The checker finds what it is meant to find.
#[test]
fn the_checker_sees_nulls_missing_keys_and_wrong_types() {
    let mut v: Value = serde_json::from_slice(&common::sample_bytes()).unwrap();
    v["config"].as_object_mut().unwrap().remove("tools");
    v["run"]["runtime"] = Value::from(1.5);
    v["heapledger"] = serde_json::json!({"exit": {"signal": null}});
    let problems = malt_reader::problems(&v);
    assert_eq!(
        problems,
        [
            "$.heapledger.exit.signal: null (MALT's parser stops at it)",
            "$.run.runtime: a non-negative integer, found 1.5",
            "$.config: no key \"tools\"",
        ],
    );
}

/// A profile as the converter builds it, with every optional value of
/// heapledger's key absent (no exit code, no sampling, a module without a
/// build id): on today's code those were written as `null`, and `config`
/// held only `stack` and `output`.
fn converted() -> Profile {
    let mut p = Profile::new(Run::new("heapledger-0.1.0", "demo", "./demo ''"));
    let mut strings = StringTable::new();
    let (file, function, binary) = (
        strings.intern("demo.c"),
        strings.intern("main"),
        strings.intern("/bin/demo"),
    );
    p.sites.strings = strings.into_strings();
    p.sites.instr.insert(
        Addr::native(0x401136),
        InstrEntry {
            file,
            function,
            line: None,
            binary,
        },
    );
    for (i, (size, count, peak)) in [(100u64, 3u64, 200i64), (7, 1, 0)].into_iter().enumerate() {
        let mut infos = StackInfos::default();
        for _ in 0..count {
            infos.alloc.add(size);
        }
        if i == 0 {
            infos.mmap.add(4096);
        }
        infos.global_peak = peak;
        p.stacks.push(StackStat::new(
            format!("0x{i}"),
            vec![Addr::native(0x401136)],
            infos,
        ));
    }
    p.leaks.push(Leak {
        stack: vec![Addr::native(0x401136)],
        count: 1,
        memory: 7,
    });
    p.config.set("stack", "mode", stack_mode::DWARF);
    let mut ext = HeapledgerExt::new(stack_mode::DWARF, 256);
    ext.exit = ExitInfo {
        code: None,
        signal: Some(9),
    };
    ext.peak_requested = 207;
    ext.internal_memory_peak = 4242;
    ext.modules.push(ModuleInfo {
        path: "/bin/demo".into(),
        build_id: None,
        lower: Addr::native(0x401000),
        upper: Addr::native(0x402000),
        file_offset: Addr::native(0x1000),
    });
    p.heapledger = Some(ext);
    p.fill_malt_totals();
    p
}

#[test]
fn a_converted_profile_meets_what_malts_reader_requires() {
    let p = converted();
    let mut bytes = Vec::new();
    p.write_to(&mut bytes).unwrap();
    let text = String::from_utf8(bytes).unwrap();
    assert!(!text.contains("null"), "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(malt_reader::problems(&v), Vec::<String>::new());
    // The pretty writer too.
    let mut pretty = Vec::new();
    p.write_pretty_to(&mut pretty).unwrap();
    let v: Value = serde_json::from_slice(&pretty).unwrap();
    assert_eq!(malt_reader::problems(&v), Vec::<String>::new());
    // Absent values read back as absent.
    assert_eq!(Profile::from_slice(text.as_bytes()).unwrap(), p);
}

/// MALT's reader and viewer take the peaks from `memoryTimeline.peak` and
/// the per-domain totals from `domains` (Extractor.cpp): they hold
/// heapledger's numbers, not zeros.
#[test]
fn totals_are_where_malts_tools_read_them() {
    let p = converted();
    let peak = &p.timeline.memory_timeline.peak;
    assert_eq!(peak[timeline::memory::REQUESTED], 207);
    assert_eq!(peak[timeline::memory::INTERNAL], 4242);
    let d = &p.domains;
    assert_eq!((d.counters.c, d.mem.c), (4, 307));
    assert_eq!((d.counters.mmap, d.mem.mmap), (1, 4096));
    assert_eq!(d.local_peak.c, 207);
    assert_eq!(d.at_global_peak.c, 200);
    assert_eq!(
        p.config.get("sampling", "enabled"),
        Some(&Value::Bool(false))
    );
    // Our own reader still takes heapledger's exact figure.
    assert_eq!(p.peak_requested(), Some(207));

    // A MALT file is left as MALT wrote it.
    let mut malt = Profile::from_path(common::sample_path()).unwrap();
    let before = malt.clone();
    malt.fill_malt_totals();
    assert_eq!(malt, before);
}

/// Sampling shows in MALT's `config.sampling`.
#[test]
fn sampling_is_in_malts_config() {
    let mut p = converted();
    p.heapledger.as_mut().unwrap().sample_every = Some(524288);
    p.fill_malt_totals();
    assert_eq!(
        p.config.get("sampling", "enabled"),
        Some(&Value::Bool(true))
    );
    assert_eq!(
        p.config.get("sampling", "count"),
        Some(&Value::from(524288))
    );
}
