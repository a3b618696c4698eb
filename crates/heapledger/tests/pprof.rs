//! `export --format pprof` (issue 32), judged by `go tool pprof`: its
//! totals of Go's four heap sample types equal the profile's, each site's
//! samples carry exactly its allocations, locations name the program's
//! functions, files and lines, and the mappings carry build ids.

mod common;
mod support;

use common::*;
use std::process::Command;

/// Each sample's values, and its location ids leaf first.
type Samples = Vec<(Vec<u64>, Vec<u64>)>;

/// `go tool pprof -raw FILE`: the samples, each location's text
/// (`0x... M=1 function file:line ...`), and the whole output.
fn raw(file: &std::path::Path) -> (Samples, Vec<(u64, String)>, String) {
    support::require_tool("go", "golang-go");
    let o = Command::new("go")
        .args(["tool", "pprof", "-raw"])
        .arg(file)
        .output()
        .expect("go tool pprof");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let mut samples = Vec::new();
    let mut locations = Vec::new();
    let mut part = "";
    for line in text.lines() {
        match line {
            "Samples:" | "Locations" | "Mappings" => {
                part = line;
                continue;
            }
            _ => {}
        }
        match part {
            "Samples:" => {
                if let Some((values, stack)) = line.split_once(':') {
                    let nums = |s: &str| -> Vec<u64> {
                        s.split_whitespace()
                            .filter_map(|w| w.parse().ok())
                            .collect()
                    };
                    samples.push((nums(values), nums(stack)));
                }
            }
            "Locations" => {
                if let Some((id, rest)) = line.trim_start().split_once(": ") {
                    if let Ok(id) = id.parse() {
                        locations.push((id, rest.to_owned()));
                    }
                }
            }
            _ => {}
        }
    }
    (samples, locations, text)
}

#[test]
fn go_tool_pprof_reads_the_exact_totals_sites_and_build_ids() {
    let dir = Scratch::new("pprof");
    let exe = dir.join("basic");
    compile("cc", &["basic.c"], SITE_FLAGS, &exe);
    let (p, _) = profile_of("dwarf", &dir, &exe, &[] as &[&str]);
    let out = dir.join("p.pb.gz");
    let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .arg("export")
        .arg(dir.join("p.sqlite"))
        .args(["--format", "pprof", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (samples, locations, text) = raw(&out);
    assert!(
        text.contains(
            "alloc_objects/count alloc_space/bytes[dflt] inuse_objects/count inuse_space/bytes"
        ),
        "{text}"
    );
    let sum = |k: usize| samples.iter().map(|s| s.0[k]).sum::<u64>();
    let allocs: u64 = p.stacks.iter().map(|s| s.infos.alloc.count).sum();
    let bytes: u64 = p.stacks.iter().map(|s| s.infos.alloc.sum).sum();
    let leaked: u64 = p.leaks.iter().map(|l| l.count).sum();
    let leaked_bytes: u64 = p.leaks.iter().map(|l| l.memory).sum();
    assert_eq!(
        (sum(0), sum(1), sum(2), sum(3)),
        (allocs, bytes, leaked, leaked_bytes)
    );
    // alloc_small's blocks: the samples whose leaf location is its call.
    let line = site_line("basic.c", "small");
    let small = site(&p, "alloc_small", line);
    let at: Vec<u64> = locations
        .iter()
        .filter(|(_, t)| t.contains(" alloc_small ") && t.contains(&format!("basic.c:{line} ")))
        .map(|(id, _)| *id)
        .collect();
    assert!(
        !at.is_empty(),
        "no location of alloc_small at basic.c:{line}:\n{text}"
    );
    let mine = samples.iter().filter(|s| at.contains(&s.1[0]));
    let (n, b) = mine.fold((0, 0), |t, s| (t.0 + s.0[0], t.1 + s.0[1]));
    assert_eq!((n, b), (small.alloc.count, small.alloc.sum), "{text}");
    // The executable's mapping with its build id.
    let ext = p.heapledger.as_ref().unwrap();
    let id = ext
        .modules
        .iter()
        .find(|m| m.path.ends_with("/basic"))
        .and_then(|m| m.build_id.clone())
        .expect("the executable's build id");
    assert!(
        text.lines()
            .skip_while(|l| *l != "Mappings")
            .any(|l| l.contains("/basic ") && l.contains(&id) && l.contains("[FN][FL][LN][IN]")),
        "{text}"
    );
}
