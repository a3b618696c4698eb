//! Profiles written by `heapledger run` open in MALT 1.6.2's own reader:
//! every key and type it requires, no `null` (the list, read from MALT's
//! source, is in heapledger-profile's `tests/malt_reader/mod.rs`), and the
//! totals MALT's reader shows (allocation count, bytes, peak) are the
//! summary's. Programs: a C program with threads, a C++ program, a forked
//! child.

mod common;
#[path = "../../heapledger-profile/tests/malt_reader/mod.rs"]
mod malt_reader;

use common::*;
use heapledger_analysis::summary::{Summary, SummaryOptions};
use heapledger_profile::Profile;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// The raw JSON of `path` meets MALT's reader, and the totals MALT's
/// reader prints (`Extractor::getSummary`: count and bytes summed over
/// `stacks`, peak from `timeline.memoryTimeline.peak[0]`) are the summary's.
fn assert_opens_in_malt(path: &Path) -> Profile {
    let text = std::fs::read_to_string(path).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        malt_reader::problems(&v),
        Vec::<String>::new(),
        "{}",
        path.display()
    );
    let p = Profile::from_path(path).unwrap();
    let s = Summary::from_profile(&p, &SummaryOptions::default());
    let stats = &v["stacks"]["stats"];
    let sum = |key: &str| -> u64 {
        stats
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["infos"]["alloc"][key].as_u64().unwrap())
            .sum()
    };
    assert!(sum("count") > 0, "{}", path.display());
    assert_eq!(sum("count"), s.alloc_calls, "{}", path.display());
    assert_eq!(sum("sum"), s.alloc_bytes, "{}", path.display());
    let malt_peak = v["timeline"]["memoryTimeline"]["peak"][0].as_u64().unwrap();
    assert_eq!(Some(malt_peak), s.peak_requested, "{}", path.display());
    // The home page's domains: everything recorded is the C allocator's.
    assert_eq!(v["domains"]["counters"]["c"].as_u64(), Some(s.alloc_calls));
    assert_eq!(v["domains"]["mem"]["c"].as_u64(), Some(s.alloc_bytes));
    assert_eq!(v["domains"]["localPeak"]["c"].as_u64(), Some(malt_peak));
    p
}

#[test]
fn c_program_with_threads_opens_in_malt() {
    let dir = Scratch::new("malt-threads");
    let exe = compile_threaded("threads", &dir);
    let out = dir.join("p.json");
    let o = heapledger_run("dwarf", &out, &exe, &[] as &[&str]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let p = assert_opens_in_malt(&out);
    // 10+20+30+40 blocks of the threads.
    assert!(p.stacks.iter().map(|s| s.infos.alloc.count).sum::<u64>() >= 100);
}

#[test]
fn cxx_program_opens_in_malt() {
    let dir = Scratch::new("malt-cxx");
    let exe = dir.join("cxx");
    compile("c++", &["cxx.cpp"], SITE_FLAGS, &exe);
    let out = dir.join("p.json");
    let o = heapledger_run("dwarf", &out, &exe, &[] as &[&str]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_opens_in_malt(&out);
}

#[test]
fn forked_child_and_parent_open_in_malt() {
    let dir = Scratch::new("malt-fork");
    let exe = dir.join("forker");
    compile("cc", &["fork.c"], SITE_FLAGS, &exe);
    let out = dir.join("p.json");
    let o = heapledger_run("dwarf", &out, &exe, &[] as &[&str]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_opens_in_malt(&out);
    let children: Vec<_> = std::fs::read_dir(dir.join("p.children"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(children.len(), 1, "{children:?}");
    assert_opens_in_malt(&children[0]);
}

/// The summary's `Program` line quotes what a shell would need quoted;
/// `tree --metric leaked` counts the program's leaks only, as the summary
/// does (not stdout's buffer).
#[test]
fn program_line_quotes_and_leaked_tree_leaves_the_runtime_out() {
    let dir = Scratch::new("malt-stdout");
    let exe = dir.join("stdout_leak");
    compile("cc", &["stdout_leak.c"], SITE_FLAGS, &exe);
    let out = dir.join("p.json");
    let o = heapledger_run("dwarf", &out, &exe, &["a b", "$x", "it's"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let p = assert_opens_in_malt(&out);
    let text = Summary::from_profile(&p, &SummaryOptions::default()).to_string();
    let program = text.lines().next().unwrap();
    assert!(
        program.ends_with("/stdout_leak 'a b' '$x' 'it'\\''s'"),
        "{program}"
    );
    assert!(
        text.contains("  by the program        1 block, 77 B\n"),
        "{text}"
    );
    let tree = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["tree", "--metric", "leaked"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(tree.status.success());
    let tree = String::from_utf8_lossy(&tree.stdout);
    assert!(tree.contains("total bytes leaked 77\n"), "{tree}");
    assert!(tree.contains("leak_it"), "{tree}");
}

/// A program without symbols (stripped): MALT's viewer names frames from
/// `sites.instr`, where an unresolved frame is named by its address and
/// module, as every other output names it, never `??`; and the command
/// line keeps its empty arguments.
#[test]
fn unresolved_frames_are_named_for_malts_viewer() {
    let dir = Scratch::new("malt-stripped");
    let exe = dir.join("basic");
    compile("cc", &["basic.c"], &["-O1", "-fno-builtin"], &exe);
    let strip = Command::new("strip").arg(&exe).status().unwrap();
    assert!(strip.success());
    let out = dir.join("p.json");
    let o = heapledger_run("dwarf", &out, &exe, &["", "x"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let p = assert_opens_in_malt(&out);
    let mut named = 0;
    for (addr, entry) in &p.sites.instr {
        let function = p.sites.string(entry.function);
        assert_ne!(function, "??", "{addr}: a bare ?? in sites.instr");
        if function.ends_with(" (basic)") {
            assert!(function.starts_with("0x"), "{function}");
            named += 1;
        }
    }
    assert!(named > 0, "no frame of the stripped program");
    assert!(p.run.command.ends_with(" '' x"), "{}", p.run.command);
}

/// The peaks of resident and virtual memory (the kernel's VmHWM and
/// VmPeak): in the summary, and where MALT's home page reads them
/// (`timeline.memoryTimeline.peak`, physical and virtual).
#[test]
fn peaks_of_resident_and_virtual_memory_are_there() {
    let dir = Scratch::new("malt-rss");
    let exe = dir.join("touch_memory");
    compile("cc", &["touch_memory.c"], &["-O0", "-fno-builtin"], &exe);
    let out = dir.join("p.json");
    let o = heapledger_run("dwarf", &out, &exe, &[] as &[&str]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let p = assert_opens_in_malt(&out);
    let ext = p.heapledger.as_ref().unwrap();
    assert!(ext.peak_rss >= 40 << 20, "peak RSS {}", ext.peak_rss);
    assert!(
        ext.peak_virtual >= ext.peak_rss,
        "{} {}",
        ext.peak_virtual,
        ext.peak_rss
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let peak = &v["timeline"]["memoryTimeline"]["peak"];
    assert_eq!(peak[1].as_u64(), Some(ext.peak_rss));
    assert_eq!(peak[2].as_u64(), Some(ext.peak_virtual));
    let s = Summary::from_profile(&p, &SummaryOptions::default()).to_string();
    assert!(s.contains("\nPeak resident memory "), "{s}");
    assert!(s.contains("\nPeak virtual memory "), "{s}");
}
