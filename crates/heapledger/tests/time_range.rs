//! Time ranges of one run, from the checkpoint series (issue 30; the
//! viewer's timeline selection of issue 33 stands on it): `phases.c`
//! allocates at three sites 600 ms apart while checkpoints are written
//! every 100 ms. Between two checkpoints, `tree --from --to` shows exactly
//! what was allocated then: the stretches add up to the whole run, and
//! each phase falls after the one before. A program killed by SIGKILL
//! keeps its series up to its last checkpoint.

mod common;

use common::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const SITES: [&str; 3] = ["first_phase", "second_phase", "third_phase"];

fn recorded(dir: &Scratch, args: &[&str]) -> PathBuf {
    phases_recorded(dir, "0.1", args)
}

/// Each phase site's weight by `metric` in `tree --from A --to B`.
fn in_range(store: &Path, metric: &str, a: f64, b: f64) -> HashMap<String, u64> {
    let (a, b) = (a.to_string(), b.to_string());
    match tree_own_weights(store, &["--metric", metric, "--from", &a, "--to", &b]) {
        Ok(mut w) => {
            w.retain(|name, v| SITES.contains(&name.as_str()) && *v > 0);
            w
        }
        // Nothing allocated in the range: no tree to print.
        Err(err) => {
            assert!(err.contains("nothing"), "{err}");
            HashMap::new()
        }
    }
}

/// `heapledger ARGS` (each `{}` the store) must fail with one line that
/// holds `says`.
fn refused(store: &Path, args: &[&str], says: &str) {
    let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(args.iter().map(|a| match *a {
            "{}" => store.as_os_str(),
            a => std::ffi::OsStr::new(a),
        }))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains(says), "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
}

fn checkpoints(store: &Path) -> Vec<f64> {
    let r = report_json(store);
    r["checkpoints"]
        .as_array()
        .unwrap_or_else(|| panic!("no checkpoints in {r:#}"))
        .iter()
        .map(|t| t.as_f64().unwrap())
        .collect()
}

/// The stretches between consecutive checkpoints (from the start) add up
/// to the whole run, and each phase lies in stretches after the one
/// before's.
fn stretches_add_up(store: &Path, metric: &str, whole: [u64; 3]) {
    let points = checkpoints(store);
    assert!(points.len() >= 3, "{points:?}");
    let mut sum = [0u64; 3];
    let mut seen: [Vec<usize>; 3] = Default::default();
    let mut from = 0.0;
    for (i, &to) in points.iter().enumerate() {
        let w = in_range(store, metric, from, to);
        for (k, site) in SITES.iter().enumerate() {
            if let Some(&v) = w.get(*site) {
                sum[k] += v;
                seen[k].push(i);
            }
        }
        from = to;
    }
    assert_eq!(sum, whole, "{metric} by stretch, {points:?}");
    for k in 1..3 {
        assert!(
            seen[k - 1].iter().max() < seen[k].iter().min(),
            "{} in stretches {:?}, {} in {:?}",
            SITES[k - 1],
            seen[k - 1],
            SITES[k],
            seen[k]
        );
    }
}

#[test]
fn stretches_between_checkpoints_add_up_to_the_run() {
    let dir = Scratch::new("time-range");
    let store = recorded(&dir, &[]);
    let whole = in_range(&store, "bytes", 0.0, 1e9);
    let bytes = [100 * 1000, 40 * 5000, 7 * 333];
    for (k, site) in SITES.iter().enumerate() {
        assert_eq!(whole.get(*site), Some(&bytes[k]), "{site}: {whole:?}");
    }
    stretches_add_up(&store, "bytes", bytes);
    stretches_add_up(&store, "count", [100, 40, 7]);
    // The last checkpoint is the end of the run.
    let points = checkpoints(&store);
    let r = report_json(&store);
    let runtime = r["program"]["run_seconds"].as_f64().unwrap();
    let last = *points.last().unwrap();
    assert!(
        last >= 1.8 && (last - runtime).abs() < 0.01,
        "{last} {runtime}"
    );
    // Not a time; another metric than allocations or bytes: one line.
    refused(
        &store,
        &["tree", "--from", "nan", "--to", "1", "{}"],
        "numbers of seconds",
    );
    refused(
        &store,
        &["tree", "--metric", "peak", "--from", "0", "--to", "1", "{}"],
        "allocations or bytes",
    );
}

#[test]
fn a_killed_program_keeps_its_series_up_to_its_last_checkpoint() {
    let dir = Scratch::new("time-range-killed");
    let store = recorded(&dir, &["kill"]);
    let r = report_json(&store);
    let at = r["program"]["checkpoint"]["seconds"].as_f64();
    assert!(
        at.is_some(),
        "the summary says it stops at a checkpoint: {r:#}"
    );
    // The series ends there.
    let points = checkpoints(&store);
    assert!(
        (points.last().unwrap() - at.unwrap()).abs() < 1e-6,
        "{points:?} {at:?}"
    );
    stretches_add_up(&store, "bytes", [100 * 1000, 40 * 5000, 7 * 333]);
}

#[test]
fn a_profile_without_checkpoints_says_so() {
    let dir = Scratch::new("time-range-none");
    let store = phases_recorded(&dir, "0", &[]);
    refused(
        &store,
        &["tree", "--from", "0", "--to", "1", "{}"],
        "no checkpoints",
    );
}

/// `diff` of two time ranges of one run (the same file twice): the
/// stretch of the first phase against the stretch of the third names the
/// first as shrunk and the third as grown, with their exact numbers.
#[test]
fn the_start_of_a_run_against_its_end() {
    let dir = Scratch::new("time-range-diff");
    let store = recorded(&dir, &[]);
    let points = checkpoints(&store);
    // The stretch (from, to) holding each phase.
    let mut at: HashMap<&str, (f64, f64)> = HashMap::new();
    let mut from = 0.0;
    for &to in &points {
        for site in in_range(&store, "count", from, to).keys() {
            let name = SITES.iter().find(|s| *s == site).unwrap();
            at.insert(name, (from, to));
        }
        from = to;
    }
    let (first, third) = (at["first_phase"], at["third_phase"]);
    let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["diff", "--json"])
        .arg(&store)
        .arg(&store)
        .args(["--base-range", &format!("{}:{}", first.0, first.1)])
        .args(["--range", &format!("{}:{}", third.0, third.1)])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let site = |f: &str| {
        v["sites"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["function"] == f)
            .map(|s| {
                let n = |side: &str, k: &str| s[side][k].as_u64().unwrap();
                [
                    n("base", "calls"),
                    n("base", "bytes"),
                    n("new", "calls"),
                    n("new", "bytes"),
                ]
            })
    };
    assert_eq!(site("first_phase"), Some([100, 100_000, 0, 0]), "{v:#}");
    assert_eq!(site("third_phase"), Some([0, 0, 7, 2331]), "{v:#}");
    assert_eq!(site("second_phase"), None, "{v:#}");
    // A range that is not one: one line.
    refused(&store, &["diff", "{}", "{}", "--range", "soon"], "FROM:TO");
}
