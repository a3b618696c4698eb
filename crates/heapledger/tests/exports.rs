//! Exports with one weight (issue 32): folded stacks add up to the
//! profile's totals, site by site; the flame graph is an SVG that names
//! the program's functions, its callers' view drawn the other way.

mod common;

use common::*;
use std::process::Command;

fn heapledger(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(args)
        .output()
        .expect("cannot run heapledger")
}

/// `export STORE --format folded --metric METRIC [EXTRA...]`, written to
/// `out`, as (stack, weight) lines.
fn folded(
    store: &std::path::Path,
    out: &std::path::Path,
    metric: &str,
    extra: &[&str],
) -> Vec<(String, u64)> {
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "export".as_ref(),
        store.as_os_str(),
        "--format".as_ref(),
        "folded".as_ref(),
        "--metric".as_ref(),
        metric.as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
    ];
    args.extend(extra.iter().map(|&a| std::ffi::OsStr::new(a)));
    let o = heapledger(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::read_to_string(out)
        .unwrap()
        .lines()
        .map(|l| {
            let (stack, w) = l.rsplit_once(' ').expect("`stack weight`");
            (stack.to_owned(), w.parse().expect("a weight"))
        })
        .collect()
}

#[test]
fn folded_stacks_add_up_to_the_profile_and_the_flame_graph_names_its_sites() {
    let dir = Scratch::new("exports");
    let exe = dir.join("basic");
    compile("cc", &["basic.c"], SITE_FLAGS, &exe);
    let (p, _) = profile_of("dwarf", &dir, &exe, &[] as &[&str]);
    let store = dir.join("p.sqlite");
    let folded = |metric: &str| folded(&store, &dir.join(&format!("{metric}.folded")), metric, &[]);
    let totals = p.stacks.iter().fold((0, 0), |t, s| {
        (t.0 + s.infos.alloc.count, t.1 + s.infos.alloc.sum)
    });
    let bytes = folded("bytes");
    let count = folded("count");
    assert_eq!(bytes.iter().map(|l| l.1).sum::<u64>(), totals.1);
    assert_eq!(count.iter().map(|l| l.1).sum::<u64>(), totals.0);
    // Root first, the allocating function last: alloc_small's 24-byte
    // blocks, all under main.
    let small = site(&p, "alloc_small", site_line("basic.c", "small"));
    let at_small: u64 = bytes
        .iter()
        .filter(|(s, _)| s.ends_with(";alloc_small"))
        .map(|l| l.1)
        .sum();
    assert_eq!(at_small, small.alloc.sum);
    assert!(
        bytes
            .iter()
            .filter(|(s, _)| s.ends_with(";alloc_small"))
            .all(|(s, _)| s.contains(";main;")),
        "{bytes:?}"
    );

    // speedscope's file format: its samples are the folded stacks, by
    // frame index, with the same weights.
    let ss = dir.join("p.speedscope.json");
    let o = heapledger(&[
        "export".as_ref(),
        store.as_os_str(),
        "--format".as_ref(),
        "speedscope".as_ref(),
        "-o".as_ref(),
        ss.as_os_str(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&ss).unwrap()).unwrap();
    assert_eq!(
        j["$schema"],
        "https://www.speedscope.app/file-format-schema.json"
    );
    let frames = j["shared"]["frames"].as_array().unwrap();
    let prof = &j["profiles"][0];
    assert_eq!(prof["type"], "sampled");
    assert_eq!(prof["unit"], "bytes");
    assert_eq!(prof["endValue"], totals.1);
    let weights: Vec<u64> = prof["weights"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_u64().unwrap())
        .collect();
    assert_eq!(weights.iter().sum::<u64>(), totals.1);
    let mut from_speedscope: Vec<(String, u64)> = prof["samples"]
        .as_array()
        .unwrap()
        .iter()
        .zip(&weights)
        .map(|(s, w)| {
            let names: Vec<&str> = s
                .as_array()
                .unwrap()
                .iter()
                .map(|i| {
                    frames[i.as_u64().unwrap() as usize]["name"]
                        .as_str()
                        .unwrap()
                })
                .collect();
            (names.join(";"), *w)
        })
        .collect();
    let mut from_folded = bytes.clone();
    from_speedscope.sort();
    from_folded.sort();
    assert_eq!(from_speedscope, from_folded);

    for inverted in [false, true] {
        let svg = dir.join(&format!("f{inverted}.svg"));
        let mut args: Vec<&std::ffi::OsStr> = vec![
            "export".as_ref(),
            store.as_os_str(),
            "--format".as_ref(),
            "flamegraph".as_ref(),
            "-o".as_ref(),
            svg.as_os_str(),
        ];
        if inverted {
            args.push("--inverted".as_ref());
        }
        let o = heapledger(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(
            text.starts_with("<?xml"),
            "{}",
            &text[..100.min(text.len())]
        );
        assert!(text.trim_end().ends_with("</svg>"));
        assert!(
            text.contains("alloc_small"),
            "no alloc_small in the flame graph"
        );
        assert!(text.contains("main"));
        assert_eq!(text.contains(", callers"), inverted);
    }
}

/// `heapledger check` (issue 32): exit 0 within every budget, 1 with one
/// line per budget exceeded, the same verdicts as JSON.
#[test]
fn check_holds_a_profile_to_its_budgets() {
    let dir = Scratch::new("check");
    let exe = dir.join("basic");
    compile("cc", &["basic.c"], SITE_FLAGS, &exe);
    let (p, _) = profile_of("dwarf", &dir, &exe, &[] as &[&str]);
    let store = dir.join("p.sqlite");
    let peak = p.heapledger.as_ref().unwrap().peak_requested;
    let allocs: u64 = p.stacks.iter().map(|s| s.infos.alloc.count).sum();
    let check = |args: &[String]| {
        let mut all: Vec<&std::ffi::OsStr> = vec!["check".as_ref(), store.as_os_str()];
        all.extend(args.iter().map(|a| -> &std::ffi::OsStr { a.as_ref() }));
        let o = heapledger(&all);
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    // Exactly at the peak and the allocations: within.
    let (code, out, err) = check(&[
        "--max-peak".into(),
        peak.to_string(),
        "--max-allocations".into(),
        allocs.to_string(),
    ]);
    assert_eq!((code, out.as_str()), (Some(0), ""), "{err}");
    // One byte and one call under: two lines, exit 1.
    let (code, out, _) = check(&[
        "--max-peak".into(),
        (peak - 1).to_string(),
        "--max-allocations".into(),
        (allocs - 1).to_string(),
    ]);
    assert_eq!(code, Some(1));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(
        lines[0].starts_with("peak ") && lines[0].contains("exceeds --max-peak"),
        "{out}"
    );
    assert!(
        lines[1].starts_with(&format!("allocations {allocs} exceeds --max-allocations")),
        "{out}"
    );
    // basic.c leaks on purpose: no leak allowed fails, as JSON too.
    let (code, out, _) = check(&["--max-leaked".into(), "0".into(), "--json".into()]);
    assert_eq!(code, Some(1));
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["within_budget"], false);
    assert_eq!(j["budgets"][0]["name"], "leaked");
    assert!(j["budgets"][0]["value"].as_u64().unwrap() > 0);
    // No budget: a usage error.
    let (code, _, err) = check(&[]);
    assert_eq!(code, Some(2));
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// `heapledger diff` (issue 32): two runs of a program that makes more
/// blocks at one site: that site alone is listed, with its exact change;
/// the JSON holds both sides; a differential flame graph is written.
#[test]
fn diff_names_the_site_that_grew_and_only_it() {
    let dir = Scratch::new("diff");
    let (a, b) = grow_runs(&dir);
    let svg = dir.join("d.svg");
    let o = heapledger(&[
        "diff".as_ref(),
        a.as_os_str(),
        b.as_os_str(),
        "--flamegraph".as_ref(),
        svg.as_os_str(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines[0].starts_with("Sites that changed (1 in all)"),
        "{text}"
    );
    assert!(
        lines[2].contains("+2.0 KiB (2000 B)") && lines[2].contains("+20"),
        "{text}"
    );
    assert!(
        lines[2].contains("grown  ") && lines[2].contains("grow.c:"),
        "{text}"
    );
    assert!(std::fs::read_to_string(&svg).unwrap().contains("grown"));

    let o = heapledger(&[
        "diff".as_ref(),
        a.as_os_str(),
        b.as_os_str(),
        "--json".as_ref(),
    ]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let sites = j["sites"].as_array().unwrap();
    assert_eq!(sites.len(), 1, "{j}");
    assert_eq!(sites[0]["function"], "grown");
    assert_eq!(sites[0]["base"]["calls"], 10);
    assert_eq!(sites[0]["new"]["calls"], 30);
    assert_eq!(sites[0]["new"]["bytes"], 3000);

    // A profile against itself: nothing changed.
    let o = heapledger(&["diff".as_ref(), a.as_os_str(), a.as_os_str()]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "No site changed.\n");
}

/// `heapledger diff` (issue 32) across two builds of one source, whose
/// code lies at other addresses (a padding object linked first): the
/// site that doubled and the one that disappeared are listed, exactly,
/// and nothing else; `--format flamegraph` writes the differential flame
/// graph alone.
#[test]
fn diff_matches_sites_across_builds() {
    let dir = Scratch::new("diff-builds");
    let pad = dir.join("pad.c");
    std::fs::write(
        &pad,
        "void pad(void) { __asm__ volatile(\".skip 65536, 0x90\"); }\n",
    )
    .unwrap();
    let (one, two) = (dir.join("grow1"), dir.join("grow2"));
    compile("cc", &["grow.c"], SITE_FLAGS, &one);
    compile("cc", &[pad.to_str().unwrap(), "grow.c"], SITE_FLAGS, &two);
    let nm = |exe: &std::path::Path| {
        let o = Command::new("nm").arg(exe).output().unwrap();
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .find(|l| l.ends_with(" T steady"))
            .map(|l| l.split(' ').next().unwrap().to_owned())
    };
    assert_ne!(nm(&one), nm(&two), "the builds place steady() alike");
    let (a, b) = (dir.join("a.sqlite"), dir.join("b.sqlite"));
    for (out, exe, args) in [(&a, &one, &["10"][..]), (&b, &two, &["20", "gone"][..])] {
        let o = heapledger_run("dwarf", out, exe, args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let o = heapledger(&[
        "diff".as_ref(),
        a.as_os_str(),
        b.as_os_str(),
        "--json".as_ref(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let sites: Vec<(String, u64, u64, u64, u64)> = j["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["function"].as_str().unwrap().to_owned(),
                s["base"]["calls"].as_u64().unwrap(),
                s["new"]["calls"].as_u64().unwrap(),
                s["base"]["bytes"].as_u64().unwrap(),
                s["new"]["bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        sites,
        [
            ("grown".to_owned(), 10, 20, 1000, 2000),
            ("gone".to_owned(), 5, 0, 150, 0),
        ],
        "{j}"
    );
    let svg = dir.join("d.svg");
    let o = heapledger(&[
        "diff".as_ref(),
        a.as_os_str(),
        b.as_os_str(),
        "--format".as_ref(),
        "flamegraph".as_ref(),
        "-o".as_ref(),
        svg.as_os_str(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.stdout, b"");
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.contains("grown") && text.contains("gone"),
        "no sites in the SVG"
    );
}

/// `--collapse` (as `tree --collapse`): the flame graph of a recursive
/// program draws each recursion once; the weights still add up.
#[test]
fn folded_stacks_collapse_recursion_on_request() {
    let dir = Scratch::new("exports-collapse");
    let exe = dir.join("recursion");
    compile("cc", &["recursion.c"], SITE_FLAGS, &exe);
    let (p, _) = profile_of("dwarf", &dir, &exe, &[] as &[&str]);
    let store = dir.join("p.sqlite");
    let folded = |collapse: &str| {
        let out = dir.join(&format!("{collapse}.folded"));
        folded(&store, &out, "count", &["--collapse", collapse])
    };
    let total: u64 = p.stacks.iter().map(|s| s.infos.alloc.count).sum();
    let plain = folded("none");
    let full = folded("full");
    assert_eq!(plain.iter().map(|l| l.1).sum::<u64>(), total);
    assert_eq!(full.iter().map(|l| l.1).sum::<u64>(), total);
    let repeats = |stack: &str| {
        let parts: Vec<&str> = stack.split(';').collect();
        parts
            .iter()
            .enumerate()
            .any(|(i, f)| parts[..i].contains(f))
    };
    assert!(plain.iter().any(|(s, _)| s.contains(";r;r;")), "{plain:?}");
    assert!(
        full.iter().all(|(s, _)| !repeats(s)),
        "a routine repeats after full collapsing: {full:?}"
    );
    // `r`'s recursion folds into one `r`: all its leaf calls under it.
    let r_leaf: u64 = full
        .iter()
        .filter(|(s, _)| s.ends_with(";main;r;leaf"))
        .map(|l| l.1)
        .sum();
    let r_calls: u64 = plain
        .iter()
        .filter(|(s, _)| s.contains(";main;r;") && s.ends_with(";leaf"))
        .map(|l| l.1)
        .sum();
    assert!(r_calls > 1);
    assert_eq!(r_leaf, r_calls);
    // And the flame graph draws it.
    let svg = dir.join("r.svg");
    let o = heapledger(&[
        "export".as_ref(),
        store.as_os_str(),
        "--format".as_ref(),
        "flamegraph".as_ref(),
        "--collapse".as_ref(),
        "full".as_ref(),
        "-o".as_ref(),
        svg.as_os_str(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
}

/// The flame graph's frames are the call tree's nodes: each frame's name
/// and width (in its title: `name (N allocations, P%)`) equal a node's
/// routine and inclusive value in `tree --json`, all of them.
#[test]
fn flame_graph_frames_are_the_call_trees_nodes() {
    let dir = Scratch::new("exports-svg");
    let exe = dir.join("basic");
    compile("cc", &["basic.c"], SITE_FLAGS, &exe);
    let _ = profile_of("dwarf", &dir, &exe, &[] as &[&str]);
    let store = dir.join("p.sqlite");
    // The callers' view is the bottom-up tree.
    for inverted in [false, true] {
        let svg = dir.join("p.svg");
        let mut args: Vec<&std::ffi::OsStr> = vec![
            "export".as_ref(),
            store.as_os_str(),
            "--format".as_ref(),
            "flamegraph".as_ref(),
            "--metric".as_ref(),
            "count".as_ref(),
            "-o".as_ref(),
            svg.as_os_str(),
        ];
        if inverted {
            args.push("--inverted".as_ref());
        }
        let o = heapledger(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let text = std::fs::read_to_string(&svg).unwrap();
        let mut frames: Vec<(String, u64)> = text
            .split("<title>")
            .skip(1)
            .filter_map(|t| {
                let t = &t[..t.find("</title>")?];
                let (name, rest) = t.rsplit_once(" (")?;
                let n: u64 = rest
                    .split_whitespace()
                    .next()?
                    .replace(',', "")
                    .parse()
                    .ok()?;
                (name != "all").then(|| (name.to_owned(), n))
            })
            .collect();
        let mut args: Vec<&std::ffi::OsStr> = vec![
            "tree".as_ref(),
            store.as_os_str(),
            "--metric".as_ref(),
            "count".as_ref(),
            "--limit".as_ref(),
            "0".as_ref(),
            "--json".as_ref(),
        ];
        if inverted {
            args.push("--bottom-up".as_ref());
        }
        let o = heapledger(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let tree: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        fn walk(n: &serde_json::Value, out: &mut Vec<(String, u64)>) {
            let incl = n["incl_direct"].as_u64().unwrap();
            if incl > 0 {
                out.push((n["routine"].as_str().unwrap().to_owned(), incl));
            }
            for c in n["children"].as_array().unwrap() {
                walk(c, out);
            }
        }
        let mut nodes = Vec::new();
        for r in tree["roots"].as_array().unwrap() {
            walk(r, &mut nodes);
        }
        frames.sort();
        nodes.sort();
        assert!(nodes.len() > 5, "{nodes:?}");
        assert_eq!(frames, nodes, "inverted: {inverted}");
    }
}

/// A call tree 300 levels deep (deeper than serde_json reads back by
/// default) goes into the HTML export whole, and `tree` prints it in every
/// collapsing mode: the recursion's one allocation at the bottom.
#[test]
fn a_tree_deeper_than_a_json_readers_limit_is_exported() {
    use serde::Deserialize;
    let dir = Scratch::new("exports-deep");
    let exe = dir.join("deep_recursion");
    compile("cc", &["deep_recursion.c"], SITE_FLAGS, &exe);
    let store = dir.join("p.sqlite");
    let o = heapledger_run("dwarf", &store, &exe, &[] as &[&str]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let html = dir.join("p.html");
    let o = heapledger(&[
        "export".as_ref(),
        store.as_os_str(),
        "--format".as_ref(),
        "html".as_ref(),
        "-o".as_ref(),
        html.as_os_str(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let page = std::fs::read_to_string(&html).unwrap();
    let data = page
        .split_once("window.HEAPLEDGER_DATA = ")
        .and_then(|(_, rest)| rest.split_once(";</script>"))
        .expect("the page's data")
        .0
        .replace("<\\/", "</");
    let mut de = serde_json::Deserializer::from_str(&data);
    de.disable_recursion_limit();
    let data = serde_json::Value::deserialize(&mut de).expect("the page's data is JSON");
    let tree = &data["tree?metric=bytes&direction=top-down&collapse=none"];
    // Down the first children to the deepest node: `down` 256 times (the
    // recorder keeps a stack's 256 innermost frames by default).
    let (mut node, mut downs) = (&tree["roots"][0], 0);
    while !node.is_null() {
        downs += usize::from(node["routine"] == "down");
        node = &node["children"][0];
    }
    assert_eq!(
        downs,
        256,
        "{downs} levels of down in {}",
        &data.to_string()[..500]
    );
    for collapse in ["none", "direct", "conservative", "full"] {
        let o = heapledger(&[
            "tree".as_ref(),
            "--collapse".as_ref(),
            collapse.as_ref(),
            store.as_os_str(),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.contains("down"), "{collapse}: {text}");
    }
}

/// `-o -` and `-o /dev/stdout` write to standard output, a pipe here (`...
/// -o - | flamegraph.pl`), byte for byte what a file gets. Before, `-` was
/// a file named `-`, and `/dev/stdout` on a pipe failed: its temporary
/// file was to be made beside `pipe:[N]`, in `/proc/self/fd`.
#[test]
fn an_export_to_standard_output() {
    let dir = Scratch::new("export-stdout");
    let exe = dir.join("basic");
    compile("cc", &["basic.c"], SITE_FLAGS, &exe);
    profile_of("dwarf", &dir, &exe, &[] as &[&str]);
    let store = dir.join("p.sqlite");
    let file = dir.join("bytes.folded");
    folded(&store, &file, "bytes", &[]);
    let want = std::fs::read(&file).unwrap();
    assert!(!want.is_empty());
    for out in ["-", "/dev/stdout"] {
        let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
            .args(["export".as_ref(), store.as_os_str()])
            .args(["--format", "folded", "-o", out])
            .current_dir(dir.join("."))
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "-o {out}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(o.stdout == want, "-o {out}: not the file's bytes");
    }
    assert!(!dir.join("-").exists(), "a file named `-` was written");
}
