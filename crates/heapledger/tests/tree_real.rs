//! `heapledger tree` on real profiles: a C program with direct and mutual
//! recursion (exact trees in the four collapse modes), a recursive python3
//! function, and bad input.

mod common;

use common::{compile, profile_of, Scratch, SITE_FLAGS};
use serde_json::Value;
use std::process::Command;

fn heapledger() -> Command {
    Command::new(env!("CARGO_BIN_EXE_heapledger"))
}

fn tree_json(profile: &std::path::Path, args: &[&str]) -> Value {
    let o = heapledger()
        .arg("tree")
        .arg(profile)
        .args(args)
        .args(["--json", "--limit", "0"])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "heapledger tree failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Trees nest one JSON level per call level: deeper than serde_json's
    // default limit of 128 for a Python stack.
    let mut de = serde_json::Deserializer::from_slice(&o.stdout);
    de.disable_recursion_limit();
    serde::Deserialize::deserialize(&mut de).expect("tree JSON")
}

/// The subtree under `main`, one line per node: `level routine d i e` with
/// levels relative to main, stubs as `level f... -> level`.
fn rows_under_main(v: &Value) -> Vec<String> {
    fn find(n: &Value) -> Option<&Value> {
        if n["routine"] == "main" {
            return Some(n);
        }
        n["children"].as_array()?.iter().find_map(find)
    }
    let main = v["roots"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(find)
        .expect("a main node");
    let base = main["level"].as_u64().unwrap();
    let mut rows = Vec::new();
    let mut stack = vec![main];
    while let Some(n) = stack.pop() {
        let name = n["routine"].as_str().unwrap();
        if let Some(to) = n.get("stub_to") {
            // A stub's level is its parent's plus one; the JSON gives its target's.
            rows.push(format!("{name}... -> {}", to.as_u64().unwrap() - base + 1));
            continue;
        }
        rows.push(format!(
            "{} {name} {} {} {}",
            n["level"].as_u64().unwrap() - base + 1,
            n["incl_direct"],
            n["incl_indirect"],
            n["excl"]
        ));
        if let Some(c) = n["children"].as_array() {
            // Depth first, in the printed order.
            stack.extend(c.iter().rev());
        }
    }
    rows
}

#[test]
fn c_recursion_in_every_mode() {
    let dir = Scratch::new("tree");
    let exe = dir.join("recursion");
    compile("cc", &["recursion.c"], SITE_FLAGS, &exe);
    let (_p, _) = profile_of("dwarf", &dir, &exe, &[] as &[&str]);
    let prof = dir.join("p.json");
    let rows = |mode: &str| {
        rows_under_main(&tree_json(
            &prof,
            &["--collapse", mode, "--metric", "count"],
        ))
    };

    // r(3): leaf at 4 depths; a(4): a b a b a, leaf under each a.
    assert_eq!(
        rows("none"),
        [
            "1 main 7 0 0",
            "2 r 4 0 0",
            "3 r 3 0 0",
            "4 r 2 0 0",
            "5 leaf 1 0 1",
            "5 r 1 0 0",
            "6 leaf 1 0 1",
            "4 leaf 1 0 1",
            "3 leaf 1 0 1",
            "2 a 3 0 0",
            "3 b 2 0 0",
            "4 a 2 0 0",
            "5 b 1 0 0",
            "6 a 1 0 0",
            "7 leaf 1 0 1",
            "5 leaf 1 0 1",
            "3 leaf 1 0 1",
        ]
    );
    // Direct: r's self-calls collapse; a and b call each other, never themselves.
    assert_eq!(
        rows("direct"),
        [
            "1 main 7 0 0",
            "2 r 4 0 0",
            "3 leaf 1 3 4",
            "r... -> 2",
            "2 a 3 0 0",
            "3 b 2 0 0",
            "4 a 2 0 0",
            "5 b 1 0 0",
            "6 a 1 0 0",
            "7 leaf 1 0 1",
            "5 leaf 1 0 1",
            "3 leaf 1 0 1",
        ]
    );
    // Conservative: main a b a b -> the second b can go back to the first (the
    // a it cuts out still appears above); the second a cannot (it would cut
    // the only b).
    assert_eq!(
        rows("conservative"),
        [
            "1 main 7 0 0",
            "2 r 4 0 0",
            "3 leaf 1 3 4",
            "r... -> 2",
            "2 a 3 0 0",
            "3 b 2 0 0",
            "4 a 2 0 0",
            "5 leaf 1 1 2",
            "b... -> 3",
            "3 leaf 1 0 1",
        ]
    );
    // Full: every repeat goes back up.
    assert_eq!(
        rows("full"),
        [
            "1 main 7 0 0",
            "2 r 4 0 0",
            "3 leaf 1 3 4",
            "r... -> 2",
            "2 a 3 0 0",
            "3 leaf 1 2 3",
            "3 b 2 0 0",
            "a... -> 2"
        ]
    );

    // Bottom-up: the leaf is the root and carries every allocation.
    let bu = tree_json(
        &prof,
        &["--collapse", "none", "--metric", "count", "--bottom-up"],
    );
    let roots = bu["roots"].as_array().unwrap();
    assert_eq!(roots.len(), 1);
    assert_eq!(roots[0]["routine"], "leaf");
    assert_eq!(roots[0]["incl_direct"], 7);

    // Text layout: `d (i)` in-or-under, in-only, level, indented routine, stubs.
    let o = heapledger()
        .arg("tree")
        .arg(&prof)
        .args(["--collapse", "full", "--metric", "count", "--limit", "0"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("In or Under") && text.contains("In Only") && text.contains("Level"),
        "{text}"
    );
    let leaf_line = text
        .lines()
        .find(|l| l.contains("1 (3)"))
        .unwrap_or_else(|| panic!("no `1 (3)` row:\n{text}"));
    assert!(leaf_line.trim_end().ends_with("leaf"), "{leaf_line}");
    assert!(
        text.lines().any(|l| l.trim_end().ends_with("r...")),
        "{text}"
    );

    // Bytes: r's leaf allocates 100 bytes four times, a's 10 bytes three times.
    let b = rows_under_main(&tree_json(
        &prof,
        &["--collapse", "full", "--metric", "bytes"],
    ));
    assert_eq!(b[0], "1 main 430 0 0");
    assert!(b.contains(&"3 leaf 100 300 400".to_owned()), "{b:?}");

    // Every block stays alive to the end (kept in a global array): the
    // bytes at the peak and the bytes leaked are the same 430.
    for metric in ["peak", "leaked"] {
        let t = tree_json(&prof, &["--collapse", "full", "--metric", metric]);
        assert_eq!(t["total"], 430, "{metric}");
        assert_eq!(rows_under_main(&t), b, "{metric}");
    }

    // One routine per source line: r appears once per line it calls from
    // (the leaf call, the recursive call), leaf at its malloc line.
    let by_line = all_rows(&tree_json(
        &prof,
        &["--collapse", "none", "--metric", "count", "--by-line"],
    ));
    let line = |name| common::site_line("recursion.c", name);
    for want in [
        format!("r recursion.c:{} 3 0 0", line("r_rec")),
        format!("r recursion.c:{} 1 0 0", line("r_leaf")),
        format!("leaf recursion.c:{} 1 0 1", line("leaf")),
    ] {
        assert!(by_line.contains(&want), "no `{want}` in {by_line:?}");
    }
    // By function, the same calls are one routine r.
    assert!(!all_rows(&tree_json(&prof, &["--metric", "count"]))
        .iter()
        .any(|r| r.starts_with("r recursion.c")));
}

/// A collapsed tree larger than its budget of nodes is built in passes
/// over the stacks read again (`HEAPLEDGER_TREE_NODES` makes the budget 3
/// nodes): the same text, in every mode, both ways, with every limit, from
/// the store and from MALT's JSON.
#[test]
fn a_tree_built_in_passes_is_the_same_tree() {
    let dir = Scratch::new("tree-passes");
    let exe = dir.join("recursion");
    compile("cc", &["recursion.c"], SITE_FLAGS, &exe);
    let _ = profile_of("dwarf", &dir, &exe, &[] as &[&str]);
    for prof in [dir.join("p.sqlite"), dir.join("p.json")] {
        for mode in ["none", "direct", "conservative", "full"] {
            for way in [&[][..], &["--bottom-up"][..]] {
                for limit in ["0", "1", "20"] {
                    let tree = |nodes: Option<&str>| {
                        let mut c = heapledger();
                        c.arg("tree")
                            .arg(&prof)
                            .args(["--collapse", mode, "--limit", limit, "--metric", "count"])
                            .args(way);
                        match nodes {
                            Some(n) => c.env("HEAPLEDGER_TREE_NODES", n),
                            None => c.env_remove("HEAPLEDGER_TREE_NODES"),
                        };
                        let o = c.output().unwrap();
                        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
                        String::from_utf8(o.stdout).unwrap()
                    };
                    let whole = tree(None);
                    assert!(whole.contains(" r\n"), "{whole}");
                    assert_eq!(tree(Some("3")), whole, "{mode} {way:?} --limit {limit}");
                }
            }
        }
    }
}

/// Every ordinary node as `routine d i e`, in no particular order.
fn all_rows(v: &Value) -> Vec<String> {
    let mut rows = Vec::new();
    let mut stack: Vec<&Value> = v["roots"].as_array().unwrap().iter().collect();
    while let Some(n) = stack.pop() {
        if n.get("stub_to").is_none() {
            rows.push(format!(
                "{} {} {} {}",
                n["routine"].as_str().unwrap(),
                n["incl_direct"],
                n["incl_indirect"],
                n["excl"]
            ));
        }
        if let Some(c) = n["children"].as_array() {
            stack.extend(c);
        }
    }
    rows
}

/// Every path of a fully collapsed tree holds each routine once.
fn no_repeat_on_paths(v: &Value) -> bool {
    fn walk(n: &Value, path: &mut Vec<String>) -> bool {
        if n.get("stub_to").is_some() {
            return true;
        }
        let name = n["routine"].as_str().unwrap().to_owned();
        if path.contains(&name) {
            return false;
        }
        path.push(name);
        let ok = n["children"]
            .as_array()
            .is_none_or(|c| c.iter().all(|c| walk(c, path)));
        path.pop();
        ok
    }
    v["roots"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| walk(r, &mut Vec::new()))
}

fn count_stubs(v: &Value) -> usize {
    fn walk(n: &Value) -> usize {
        usize::from(n.get("stub_to").is_some())
            + n["children"]
                .as_array()
                .map_or(0, |c| c.iter().map(walk).sum())
    }
    v["roots"].as_array().unwrap().iter().map(walk).sum()
}

fn max_repeats(v: &Value, routine: &str) -> usize {
    fn walk(n: &Value, routine: &str, seen: usize) -> usize {
        let seen = seen + usize::from(n["routine"] == routine && n.get("stub_to").is_none());
        n["children"].as_array().map_or(seen, |c| {
            c.iter()
                .map(|c| walk(c, routine, seen))
                .max()
                .unwrap_or(seen)
        })
    }
    v["roots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| walk(r, routine, 0))
        .max()
        .unwrap_or(0)
}

#[test]
fn python_recursive_function() {
    // CPython 3.11 runs Python-to-Python calls in one C frame, so the
    // recursion goes through a C builtin (map) to show in native stacks:
    // every level of f is one more _PyEval_EvalFrameDefault.
    let dir = Scratch::new("tree-py");
    let prof = dir.join("p.json");
    // The interpreter itself, not a wrapper script that would run first.
    let exe = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .unwrap();
    let python = String::from_utf8_lossy(&exe.stdout).trim().to_owned();
    let script = "def f(n):\n    if n == 0:\n        return [str(i) for i in range(100)]\n    return list(map(f, [n - 1]))\nfor _ in range(20):\n    f(30)\nprint('ok')";
    let o = heapledger()
        .args(["run", "-q", "-o"])
        .arg(&prof)
        .args(["--", &python, "-c", script])
        .env("PYTHONMALLOC", "malloc")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "ok\n");
    let trees: Vec<Value> = ["none", "direct", "conservative", "full"]
        .iter()
        // Each level of f is about ten tree levels (inline frames
        // included): lift the default cut at level 64.
        .map(|m| {
            tree_json(
                &prof,
                &[
                    "--collapse",
                    m,
                    "--metric",
                    "count",
                    "--max-level",
                    "100000",
                ],
            )
        })
        .collect();
    let totals: Vec<u64> = trees.iter().map(|t| t["total"].as_u64().unwrap()).collect();
    assert!(
        totals.iter().all(|&t| t == totals[0] && t > 0),
        "{totals:?}"
    );
    let eval = "_PyEval_EvalFrameDefault";
    let repeats: Vec<usize> = trees.iter().map(|t| max_repeats(t, eval)).collect();
    // Without collapsing, the 30 levels of f show as a chain of eval frames.
    assert!(repeats[0] >= 30, "{repeats:?}");
    // The eval frames never call themselves directly (map sits between):
    // direct collapse keeps the chain; full collapse folds it to one.
    assert_eq!(repeats[1], repeats[0], "{repeats:?}");
    assert!(repeats[2] < repeats[0], "{repeats:?}");
    assert_eq!(repeats[3], 1, "{repeats:?}");
    assert!(
        no_repeat_on_paths(&trees[3]),
        "full collapse left a repeated routine on a path"
    );
    let stubs: Vec<usize> = trees.iter().map(count_stubs).collect();
    assert_eq!(stubs[0], 0, "{stubs:?}");
    assert!(stubs[2] > 0 && stubs[3] > 0, "{stubs:?}");
}

#[test]
fn bad_input_is_one_line() {
    let dir = Scratch::new("tree-bad");
    let junk = dir.join("junk.json");
    std::fs::write(&junk, b"{\"run\": {").unwrap();
    for (args, what) in [
        (vec!["tree", junk.to_str().unwrap()], "truncated"),
        (vec!["tree", "/nonexistent/p.json"], "does not exist"),
        (
            vec!["tree", junk.to_str().unwrap(), "--collapse", "sideways"],
            "sideways",
        ),
        (
            vec!["tree", junk.to_str().unwrap(), "--metric", "weight"],
            "weight",
        ),
        (
            vec!["tree", junk.to_str().unwrap(), "--limit", "200"],
            "200",
        ),
    ] {
        let o = heapledger().args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(err.contains(what), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
}

#[test]
fn callgrind_export_reads_in_callgrind_annotate() {
    let dir = Scratch::new("callgrind");
    let exe = dir.join("recursion");
    compile("cc", &["recursion.c"], SITE_FLAGS, &exe);
    let _ = profile_of("dwarf", &dir, &exe, &[] as &[&str]);
    let out = dir.join("callgrind.out");
    let o = heapledger()
        .args(["export", "--format", "callgrind"])
        .arg(dir.join("p.json"))
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let a = Command::new("callgrind_annotate")
        .arg("--inclusive=yes")
        .arg(&out)
        // callgrind_annotate strips its working directory from `fl=` names
        // but not from `cfl=` ones, which splits a function in two when
        // run beside its source: run it where no source lies.
        .current_dir("/")
        .output()
        .expect("callgrind_annotate (valgrind)");
    let text = String::from_utf8_lossy(&a.stdout);
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    // Inclusive allocation counts: main made all 7, r 4, a 3.
    let row = |f: &str| {
        text.lines()
            .find(|l| l.trim_end().ends_with(&format!(":{f}")) || l.contains(&format!(":{f} ")))
    };
    for (f, n) in [("main", "7"), ("leaf", "7"), ("r", "4"), ("a", "3")] {
        let line = row(f).unwrap_or_else(|| panic!("no {f} in:\n{text}"));
        assert!(line.trim_start().starts_with(n), "{f}: {line}");
    }
    let bad = heapledger()
        .args(["export", "--format", "callgrind", "/nonexistent.json"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert_eq!(
        String::from_utf8_lossy(&bad.stderr)
            .trim_end()
            .lines()
            .count(),
        1
    );
}
