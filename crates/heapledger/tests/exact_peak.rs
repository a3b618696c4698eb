//! The peak with threads: the bytes each stack held at the process's peak
//! (`globalPeak`) sum exactly to the peak, and where the peak is not raced
//! they are DHAT's bytes at t-gmax, site by site (`peak_threads.c`).

mod common;

use common::*;
use heapledger_profile::Profile;
use std::collections::BTreeMap;

/// The bytes at the peak of the stacks through each of `functions`.
fn at_peak_by_function(p: &Profile, functions: &[&str]) -> BTreeMap<String, u64> {
    let mut by = BTreeMap::new();
    for s in &p.stacks.stats {
        let names: Vec<String> = s.stack.iter().map(|&a| frame(p, a).0).collect();
        for f in functions {
            if names.iter().any(|n| n == f) {
                *by.entry(f.to_string()).or_default() += s.infos.global_peak.max(0) as u64;
            }
        }
    }
    by
}

/// Every stack's bytes at the peak, summed, and the peak.
fn sum_and_peak(p: &Profile) -> (i64, u64) {
    let sum = p.stacks.stats.iter().map(|s| s.infos.global_peak).sum();
    (sum, p.peak_requested().expect("a peak"))
}

#[test]
fn shares_of_a_raced_peak_sum_to_it() {
    let dir = Scratch::new("peak-race");
    let exe = compile_threaded("peak_threads", &dir);
    for stack in ["dwarf", "fp", "none"] {
        for _ in 0..3 {
            let (p, _) = profile_of(stack, &dir, &exe, &["race"]);
            let (sum, peak) = sum_and_peak(&p);
            assert_eq!(sum, peak as i64, "--stack {stack}: shares at the peak");
            assert!(peak >= 8192, "--stack {stack}: peak {peak}");
        }
    }
}

#[test]
fn shares_of_an_unraced_peak_are_dhats() {
    let dir = Scratch::new("peak-barrier");
    let exe = compile_threaded("peak_threads", &dir);
    let (p, _) = profile_of("dwarf", &dir, &exe, &["barrier"]);
    let (sum, peak) = sum_and_peak(&p);
    assert_eq!(sum, peak as i64, "shares at the peak");
    let ours = at_peak_by_function(&p, &["main_buffer", "worker_hold", "churn", "late_block"]);
    assert_eq!(ours.get("main_buffer"), Some(&8192), "{ours:?}");
    assert_eq!(
        ours.get("worker_hold"),
        Some(&(4 * 1024 * (1 + 2 + 3 + 4))),
        "{ours:?}"
    );
    assert_eq!(ours.get("churn").copied().unwrap_or(0), 0, "{ours:?}");
    assert_eq!(ours.get("late_block").copied().unwrap_or(0), 0, "{ours:?}");

    // DHAT, on the same program: its bytes at t-gmax per site.
    let out = dir.join("dhat.json");
    let o = std::process::Command::new("valgrind")
        .args(["--tool=dhat", "-q"])
        .arg(format!("--dhat-out-file={}", out.display()))
        .arg(&exe)
        .arg("barrier")
        .output()
        .expect("cannot run valgrind");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let dhat: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let ftbl = dhat["ftbl"].as_array().unwrap();
    let mut theirs: BTreeMap<String, u64> = BTreeMap::new();
    let mut total = 0;
    for pp in dhat["pps"].as_array().unwrap() {
        let gb = pp["gb"].as_u64().unwrap();
        total += gb;
        for f in ["main_buffer", "worker_hold", "churn", "late_block"] {
            let through = pp["fs"].as_array().unwrap().iter().any(|i| {
                let text = ftbl[i.as_u64().unwrap() as usize].as_str().unwrap();
                text.contains(&format!(": {f} ("))
            });
            if through {
                *theirs.entry(f.to_string()).or_default() += gb;
            }
        }
    }
    for f in ["main_buffer", "worker_hold", "churn", "late_block"] {
        assert_eq!(
            ours.get(f).copied().unwrap_or(0),
            theirs.get(f).copied().unwrap_or(0),
            "{f}: ours {ours:?}, DHAT's {theirs:?}"
        );
    }
    // What the C library allocates for threads differs under valgrind; the
    // program's own part of the peak is the same.
    let own = |m: &BTreeMap<String, u64>| m.values().sum::<u64>();
    assert!(total >= own(&theirs) && peak >= own(&ours));
}
