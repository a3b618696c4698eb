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

/// Runs `heapledger ARGS`, which must succeed.
fn heapledger_ok<S: AsRef<std::ffi::OsStr>>(args: &[S]) {
    let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(args)
        .output()
        .expect("cannot run heapledger");
    assert!(
        o.status.success(),
        "heapledger {:?}: {}",
        args.iter().map(|a| a.as_ref()).collect::<Vec<_>>(),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `heapledger export STORE --format pprof -o OUT`.
fn export_pprof(store: &std::path::Path, out: &std::path::Path) {
    heapledger_ok(&[
        "export".as_ref(),
        store.as_os_str(),
        "--format".as_ref(),
        "pprof".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
}

#[test]
fn go_tool_pprof_reads_the_exact_totals_sites_and_build_ids() {
    let dir = Scratch::new("pprof");
    let exe = dir.join("basic");
    compile("cc", &["basic.c"], SITE_FLAGS, &exe);
    let (p, _) = profile_of("dwarf", &dir, &exe, &[] as &[&str]);
    let out = dir.join("p.pb.gz");
    export_pprof(&dir.join("p.sqlite"), &out);
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

/// Runs `go tool pprof ARGS FILE` (values in plain units) and returns
/// its output.
fn pprof_text(file: &std::path::Path, args: &[&str]) -> String {
    let o = Command::new("go")
        .args(["tool", "pprof", "-unit=B"])
        .args(args)
        .arg(file)
        .output()
        .expect("go tool pprof");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A value as pprof prints it with `-unit=B` ("4096B", or "4096" for counts).
fn pprof_value(w: &str) -> u64 {
    w.trim_end_matches('B').parse().expect("a number")
}

/// A function's name as pprof lists it, without its inlining mark.
fn pprof_name(s: &str) -> &str {
    let s = s.trim();
    s.strip_suffix(" (inline)")
        .or_else(|| s.strip_suffix(" (partial-inline)"))
        .unwrap_or(s)
}

/// `go tool pprof -top` with every node: each function's flat value of
/// sample type `index`.
fn top_values(file: &std::path::Path, index: &str) -> std::collections::BTreeMap<String, u64> {
    let text = pprof_text(
        file,
        &[
            "-top",
            "-nodecount=1000000",
            "-nodefraction=0",
            "-edgefraction=0",
            &format!("-sample_index={index}"),
        ],
    );
    let mut out = std::collections::BTreeMap::new();
    for line in text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
    {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() < 6 {
            continue;
        }
        let flat = pprof_value(cols[0]);
        // The name: everything after the five numeric columns.
        let mut s = line.trim_start();
        for _ in 0..5 {
            s = s.trim_start();
            s = &s[s.find(char::is_whitespace).unwrap_or(s.len())..];
        }
        if flat > 0 {
            *out.entry(pprof_name(s).to_owned()).or_default() += flat;
        }
    }
    out
}

/// `go tool pprof -traces`: each call stack (outermost first, `;` between
/// functions, as folded stacks write them) with its value of sample type
/// `index`, summed over the traces that read alike.
fn trace_values(file: &std::path::Path, index: &str) -> std::collections::BTreeMap<String, u64> {
    let text = pprof_text(file, &["-traces", &format!("-sample_index={index}")]);
    let mut out = std::collections::BTreeMap::new();
    let mut add = |value: u64, frames: &mut Vec<String>| {
        if value > 0 && !frames.is_empty() {
            frames.reverse();
            *out.entry(frames.join(";")).or_default() += value;
        }
        frames.clear();
    };
    let (mut value, mut frames) = (0u64, Vec::new());
    for line in text.lines().skip_while(|l| !l.starts_with("-----")) {
        if line.starts_with("-----") {
            add(value, &mut frames);
            continue;
        }
        // A trace's first line has its value in the first 11 columns.
        let (head, name) = line.split_at(line.len().min(11));
        if !head.trim().is_empty() {
            value = pprof_value(head.trim());
        }
        if !name.trim().is_empty() {
            // As folded stacks write a name's own `;`.
            frames.push(pprof_name(name).replace(';', ":"));
        }
    }
    add(value, &mut frames);
    out
}

/// Our own folded export of `store` weighed by `metric`: each stack's
/// weight, and each leaf function's.
type Folded = (
    std::collections::BTreeMap<String, u64>,
    std::collections::BTreeMap<String, u64>,
);

fn folded(store: &std::path::Path, dir: &Scratch, metric: &str) -> Folded {
    let out = dir.join(&format!("{metric}.folded"));
    heapledger_ok(&[
        "export".as_ref(),
        store.as_os_str(),
        "--format".as_ref(),
        "folded".as_ref(),
        "--metric".as_ref(),
        metric.as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    let (mut stacks, mut leaves) = Folded::default();
    for l in std::fs::read_to_string(&out).unwrap().lines() {
        let (stack, w) = l.rsplit_once(' ').unwrap();
        let w: u64 = w.parse().unwrap();
        *stacks.entry(stack.to_owned()).or_default() += w;
        // Folded stacks write a name's own `;` as `:`.
        let leaf = stack.rsplit(';').next().unwrap().replace(':', ";");
        *leaves.entry(leaf).or_default() += w;
    }
    (stacks, leaves)
}

/// C++ and python3 (and a sampled profile), read by `go tool pprof -top`
/// and `-traces`: for each of Go's four sample types, the values per
/// function and per call stack equal ours (folded exports, `report`); a
/// sampled profile carries estimated totals with its period, as Go's heap
/// profiles do.
#[test]
fn go_tool_pprof_values_per_function_and_stack_equal_ours_for_cxx_python_and_sampled() {
    support::require_tool("go", "golang-go");
    let dir = Scratch::new("pprof-functions");
    let cxx = dir.join("cxx");
    compile("c++", &["cxx.cpp"], SITE_FLAGS, &cxx);
    let python = support::real_python();
    let script = "d = [str(i) * 3 for i in range(20000)]\n";
    let runs: [(&str, Vec<std::ffi::OsString>, &[&str]); 3] = [
        ("cxx", vec![cxx.clone().into()], &[]),
        (
            "python",
            vec![python.clone().into(), "-c".into(), script.into()],
            &[],
        ),
        (
            "sampled",
            vec![python.into(), "-c".into(), script.into()],
            &["--sample-every", "4K"],
        ),
    ];
    let mut python_bytes = 0;
    for (name, cmd, opts) in runs {
        let store = dir.join(&format!("{name}.sqlite"));
        let mut args: Vec<std::ffi::OsString> = vec!["run".into(), "-q".into()];
        args.extend(opts.iter().map(|&o| o.into()));
        args.extend(["-o".into(), store.clone().into_os_string(), "--".into()]);
        args.extend(cmd);
        heapledger_ok(&args);
        let pb = dir.join(&format!("{name}.pb.gz"));
        export_pprof(&store, &pb);
        // Allocations and bytes: every function and every stack.
        for (index, metric) in [("alloc_objects", "count"), ("alloc_space", "bytes")] {
            let (stacks, leaves) = folded(&store, &dir, metric);
            assert!(leaves.len() > 1, "{name}: {leaves:?}");
            assert_eq!(
                top_values(&pb, index),
                leaves,
                "{name}: pprof's {index} per function differs from our {metric}"
            );
            assert_eq!(
                trace_values(&pb, index),
                stacks,
                "{name}: pprof's {index} per stack differs from our {metric}"
            );
        }
        // In use at exit: the totals of report's blocks alive at exit (the
        // runtime's own included, which our `leaked` weight leaves out), and
        // no function with less than our leaked bytes.
        let report = report_json(&store);
        let alive = &report["alive_at_exit"];
        let total = |index: &str| top_values(&pb, index).values().sum::<u64>();
        assert_eq!(
            (total("inuse_objects"), total("inuse_space")),
            (
                alive["count"].as_u64().unwrap(),
                alive["bytes"].as_u64().unwrap()
            ),
            "{name}: {report}"
        );
        let inuse = top_values(&pb, "inuse_space");
        for (f, leaked) in folded(&store, &dir, "leaked").1 {
            let theirs = inuse.get(&f).copied().unwrap_or(0);
            assert!(theirs >= leaked, "{name}: {f}: {theirs} < {leaked}");
        }
        let (_, _, text) = raw(&pb);
        let period = if opts.is_empty() {
            "Period: 1\n"
        } else {
            "Period: 4096\n"
        };
        assert!(text.contains(period), "{name}: {text}");
        // Sampled values are estimates of the whole: near the full run's.
        let bytes = total("alloc_space");
        match name {
            "python" => python_bytes = bytes,
            "sampled" => {
                let ratio = bytes as f64 / python_bytes as f64;
                assert!(
                    (0.85..1.15).contains(&ratio),
                    "sampled {bytes} B against {python_bytes} B"
                );
            }
            _ => {}
        }
    }
}
