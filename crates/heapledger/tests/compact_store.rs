//! `heapledger run` writes the profile store from the dump's stacks held
//! compactly (a prefix tree, counters packed: `Profile::compact`), never
//! as the list of stacks a JSON profile is written from. Both ways must
//! give the same store: the same dump converted each way, written, and
//! read back, stack by stack and leak by leak; and the same summary.

mod common;

use common::{compile, programs_dir, Scratch, SITE_FLAGS};
use heapledger::convert::{to_compact_profile, to_profile, ProcessEnd};
use heapledger::profiles::{open, Load, Pick};
use heapledger_profile::{Addr, Profile};
use std::path::Path;
use std::process::Command;

/// The dump `exe` leaves when run under the recorder.
fn dump_of(exe: &Path, dir: &Scratch, tag: &str) -> heapledger_wire::Dump {
    let raw = dir.join(tag);
    std::fs::create_dir_all(&raw).unwrap();
    let status = Command::new(exe)
        .env("LD_PRELOAD", heapledger::preload::find_preload().unwrap())
        .env(heapledger_wire::ENV_DIR, &raw)
        .env(heapledger_wire::ENV_OPTS, "stack=dwarf")
        .status()
        .unwrap();
    assert!(status.success());
    let mut files: Vec<_> = std::fs::read_dir(&raw)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".hlraw"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let bytes = std::fs::read(files.pop().unwrap()).unwrap();
    heapledger_wire::decode(&bytes).unwrap()
}

/// Stacks by their frames' names, with their counters as JSON.
type Stacks = Vec<(Vec<String>, String)>;
/// Leaks by their frames' names, with their blocks and bytes.
type Leaks = Vec<(Vec<String>, u64, u64)>;

/// A store's main process read back: its stacks, sorted, and its leaks.
fn read_back(store: &Path) -> (Stacks, Leaks) {
    let o = open(store, Pick::Main, Load::Whole).unwrap();
    let p = &o.profile;
    let names = |stack: &[Addr]| -> Vec<String> {
        stack.iter().map(|a| p.frame_name(*a).to_string()).collect()
    };
    let mut stacks: Vec<_> = p
        .stacks
        .iter()
        .map(|s| (names(&s.stack), serde_json::to_string(&s.infos).unwrap()))
        .collect();
    stacks.sort();
    let leaks = p
        .leaks
        .iter()
        .map(|l| (names(&l.stack), l.count, l.memory))
        .collect();
    (stacks, leaks)
}

fn store(p: &Profile, path: &Path) {
    heapledger::output::write_store(std::slice::from_ref(p), path).unwrap();
}

#[test]
fn the_compact_stacks_write_the_store_the_stack_list_writes() {
    let dir = Scratch::new("compact");
    // C with leaks; C++, whose operator new frames are dropped and whose
    // stacks may then become one; Rust, whose allocations' leaves are in
    // `alloc::` plumbing, past which the summary's sites are.
    for (compiler, src) in [
        ("cc", "leaks.c"),
        ("c++", "cxx.cpp"),
        ("rustc", "rust_sites.rs"),
    ] {
        let exe = dir.join(src.split('.').next().unwrap());
        if compiler == "rustc" {
            let o = Command::new("rustc")
                .args(["-g", "-O", "-o"])
                .arg(&exe)
                .arg(programs_dir().join(src))
                .output()
                .expect("rustc");
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        } else {
            compile(compiler, &[src], SITE_FLAGS, &exe);
        }
        let d = dump_of(&exe, &dir, src);
        let symbols = heapledger_symbols::Symbols::new();
        let end = ProcessEnd::default();
        let listed = to_profile(&mut d.clone(), &end, &symbols);
        let compact = to_compact_profile(&mut d.clone(), &end, &symbols);
        assert!(compact.compact.is_some() && compact.stacks.is_empty());
        assert!(listed.compact.is_none() && !listed.stacks.is_empty());
        let (a, b) = (dir.join("listed.sqlite"), dir.join("compact.sqlite"));
        store(&listed, &a);
        store(&compact, &b);
        let (from_list, from_compact) = (read_back(&a), read_back(&b));
        assert!(!from_list.0.is_empty() && !from_list.1.is_empty(), "{src}");
        assert_eq!(from_list, from_compact, "{src}");
        // The same stacks, in the same order, once expanded.
        let mut expanded = compact.clone();
        expanded.expand_stacks();
        assert_eq!(expanded.stacks, listed.stacks, "{src}");
        assert_eq!(expanded.leaks, listed.leaks, "{src}");
        // The summary `run` prints: the same sites, whether a stack's
        // frames are fetched (the list) or only its leaf where that decides
        // its site (compact: operator new's callers in C++).
        let summary = |p: &Profile| {
            heapledger_analysis::summary::Summary::from_profile(p, &Default::default()).to_string()
        };
        let text = summary(&listed);
        assert!(text.contains("Top allocation sites"), "{src}: {text}");
        assert_eq!(summary(&compact), text, "{src}");
        std::fs::remove_file(&a).unwrap();
        std::fs::remove_file(&b).unwrap();
    }
}
