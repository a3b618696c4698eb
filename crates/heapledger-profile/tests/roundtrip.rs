//! The model keeps every key MALT writes: read MALT's file, write it, read it
//! again, and compare as JSON values (and key order, which `Value` ignores).

mod common;

use heapledger_profile::{
    stack_mode, Addr, ExitInfo, HeapledgerExt, InlineFrame, ModuleInfo, Profile, Run, StackInfos,
    StackStat, StringTable,
};
use serde_json::Value;

/// Every object's keys in document order, depth first, as one list of paths.
fn key_paths(v: &Value, prefix: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                let path = format!("{prefix}.{k}");
                out.push(path.clone());
                key_paths(child, &path, out);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                key_paths(child, &format!("{prefix}[{i}]"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn malt_sample_round_trips_exactly() {
    let bytes = common::sample_bytes();
    let original: Value = serde_json::from_slice(&bytes).unwrap();
    let profile = Profile::from_path(common::sample_path()).unwrap();
    assert!(profile.heapledger.is_none());

    let mut written = Vec::new();
    profile.write_to(&mut written).unwrap();
    let again: Value = serde_json::from_slice(&written).unwrap();
    assert_eq!(again, original);

    let (mut a, mut b) = (Vec::new(), Vec::new());
    key_paths(&original, "", &mut a);
    key_paths(&again, "", &mut b);
    assert_eq!(a, b, "key order differs from MALT's");

    // And the written file reads back into the same model.
    assert_eq!(Profile::from_slice(&written).unwrap(), profile);
}

#[test]
fn pretty_output_is_malt_like_and_equal() {
    let profile = Profile::from_path(common::sample_path()).unwrap();
    let mut pretty = Vec::new();
    profile.write_pretty_to(&mut pretty).unwrap();
    assert!(pretty.starts_with(b"{\n \"run\": {\n  \"formatVersion\": \"1.6\""));
    let original: Value = serde_json::from_slice(&common::sample_bytes()).unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&pretty).unwrap(), original);
}

#[test]
fn top_level_keys_in_malt_order_then_heapledger() {
    let mut profile = Profile::new(Run::new("heapledger-0.1.0", "a.out", "./a.out"));
    let mut ext = HeapledgerExt::new(stack_mode::DWARF, 64);
    ext.pid = 42;
    ext.exit = ExitInfo {
        code: Some(0),
        signal: None,
    };
    profile.heapledger = Some(ext);
    let v: Value = serde_json::to_value(&profile).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "run",
            "config",
            "stacks",
            "sites",
            "timeline",
            "scatter",
            "threads",
            "memStats",
            "globals",
            "leaks",
            "domains",
            "heapledger"
        ]
    );
    // Without heapledger data the key is absent, as in MALT's files.
    profile.heapledger = None;
    let v: Value = serde_json::to_value(&profile).unwrap();
    assert!(v.get("heapledger").is_none());
}

#[test]
fn empty_sections_are_well_formed() {
    let profile = Profile::new(Run::new("heapledger-0.1.0", "a.out", "./a.out"));
    let v: Value = serde_json::to_value(&profile).unwrap();
    assert_eq!(v["sites"]["strings"], serde_json::json!(["??"]));
    assert_eq!(
        v["timeline"]["memoryTimeline"]["fields"],
        serde_json::json!([
            "requestedMem",
            "physicalMem",
            "virtualMem",
            "internalMem",
            "segments"
        ])
    );
    assert_eq!(
        v["timeline"]["systemTimeline"]["peak"],
        serde_json::json!([0, 0, 0])
    );
    assert_eq!(
        v["scatter"]["sizeOverTime"]["points"],
        serde_json::json!([])
    );
    assert_eq!(
        v["scatter"]["lifetimeOverSize"]["infos"]["yAxis"],
        serde_json::json!({"max": 1, "size": 64, "log": true})
    );
    assert_eq!(v["memStats"]["globalVariables"], serde_json::json!({}));
    assert_eq!(
        v["domains"]["atGlobalPeak"],
        serde_json::json!({"c": 0, "pyObj": 0, "pyMem": 0, "pyRaw": 0, "mmap": 0})
    );
    let mut bytes = Vec::new();
    profile.write_to(&mut bytes).unwrap();
    assert_eq!(Profile::from_slice(&bytes).unwrap(), profile);
}

/// What the recorder's converter does: intern names, add stacks and symbols,
/// fill heapledger's key; everything survives a write and a read.
#[test]
fn built_profile_round_trips_with_heapledger_data() {
    let mut profile = Profile::new(Run::new("heapledger-0.1.0", "demo", "./demo --fast"));
    let mut strings = StringTable::new();
    let file = strings.intern("/src/demo.c");
    let leaf_fn = strings.intern("make");
    let caller_fn = strings.intern("main");
    let binary = strings.intern("/bin/demo");
    let (leaf, caller) = (Addr::native(0x401136), Addr::native(0x401200));
    profile.sites.instr.insert(
        leaf,
        heapledger_profile::InstrEntry {
            file,
            function: leaf_fn,
            line: Some(4),
            binary,
        },
    );
    profile.sites.instr.insert(
        caller,
        heapledger_profile::InstrEntry {
            file,
            function: caller_fn,
            line: None,
            binary,
        },
    );
    let mut infos = StackInfos::default();
    infos.alloc.add(32);
    infos.alloc.add(64);
    profile
        .stacks
        .push(StackStat::new("0x1", vec![leaf, caller], infos));
    let mut ext = HeapledgerExt::new(stack_mode::FP, 128);
    ext.sample_every = Some(16);
    ext.peak_requested = 96;
    ext.peak_time = 1234;
    ext.modules.push(ModuleInfo {
        path: "/bin/demo".into(),
        build_id: Some("0123abcd".into()),
        lower: Addr::native(0x401000),
        upper: Addr::native(0x402000),
        file_offset: Addr::native(0x1000),
    });
    let inlined_fn = strings.intern("helper");
    ext.inlined.insert(
        leaf,
        vec![InlineFrame {
            function: inlined_fn,
            file,
            line: Some(9),
        }],
    );
    ext.runtime_leaks = vec![0];
    profile.heapledger = Some(ext);
    profile.sites.strings = strings.into_strings();

    let mut bytes = Vec::new();
    profile.write_to(&mut bytes).unwrap();
    let back = Profile::from_slice(&bytes).unwrap();
    assert_eq!(back, profile);

    let v: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(
        v["sites"]["instr"]["0x401200"],
        serde_json::json!({"file": 1, "function": 3, "binary": 4})
    );
    assert_eq!(v["heapledger"]["version"], 1);
    assert_eq!(v["heapledger"]["stackMode"], "fp");
    assert_eq!(v["heapledger"]["modules"][0]["fileOffset"], "0x1000");
    assert_eq!(v["heapledger"]["inlined"]["0x401136"][0]["line"], 9);

    let site = back.resolve("0x401136").unwrap();
    assert_eq!(
        (site.function, site.line, site.binary_name()),
        ("make", Some(4), "demo")
    );
    assert_eq!(back.resolve("0x401200").unwrap().line, None);
    let chain = back.inline_chain(leaf);
    assert_eq!(chain.len(), 1);
    assert_eq!((chain[0].function, chain[0].line), ("helper", Some(9)));
    assert_eq!(back.peak_requested(), Some(96));
}
