//! `export --format speedscope` (issue 32), judged by speedscope itself:
//! the file validates against the schema speedscope's npm package ships,
//! and speedscope's own page (that package's build, in headless Chromium)
//! opens it and lists, in its sandwich view, every function of the
//! profile with the share of the total that heapledger's folded stacks
//! give it, in and under it and in it alone. The browser side is
//! `tests/web/speedscope.mjs`.

mod common;
mod support;

use common::*;
use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

/// speedscope's `formatPercent`, as its sandwich view prints shares.
fn speedscope_percent(p: f64) -> String {
    if p == 100.0 {
        "100%".into()
    } else if p > 99.0 {
        ">99%".into()
    } else if p < 0.01 {
        "<0.01%".into()
    } else if p < 1.0 {
        format!("{p:.2}%")
    } else if p < 10.0 {
        format!("{p:.1}%")
    } else {
        format!("{p:.0}%")
    }
}

#[test]
fn speedscope_opens_the_export_with_heapledgers_shares() {
    let (web, chromium) = support::web_tools();
    let dir = Scratch::new("speedscope");
    let exe = dir.join("basic");
    compile("cc", &["basic.c"], SITE_FLAGS, &exe);
    let store = dir.join("p.sqlite");
    let o = heapledger_run("dwarf", &store, &exe, &[] as &[&str]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let export = |format: &str, out: &std::path::Path| {
        let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
            .arg("export")
            .arg(&store)
            .args(["--format", format, "--metric", "bytes", "-o"])
            .arg(out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    let ss = dir.join("p.speedscope.json");
    let folded = dir.join("p.folded");
    export("speedscope", &ss);
    export("folded", &folded);

    // Per function, from the folded stacks: in or under it (once per
    // stack), and in it alone.
    let mut total = 0u64;
    let mut shares: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for line in std::fs::read_to_string(&folded).unwrap().lines() {
        let (stack, w) = line.rsplit_once(' ').unwrap();
        let w: u64 = w.parse().unwrap();
        total += w;
        let frames: Vec<&str> = stack.split(';').collect();
        let mut seen = std::collections::HashSet::new();
        for f in &frames {
            if seen.insert(*f) {
                shares.entry(f.to_string()).or_default().0 += w;
            }
        }
        shares
            .entry(frames.last().unwrap().to_string())
            .or_default()
            .1 += w;
    }

    let mut c = Command::new("node");
    c.arg(web.join("speedscope.mjs")).arg(&ss).arg(&chromium);
    let o = support::run(c, Duration::from_secs(180));
    assert_eq!(
        o.code,
        Some(0),
        "speedscope.mjs: {}\n{}",
        o.stderr,
        o.stdout
    );
    let seen: serde_json::Value = serde_json::from_str(o.stdout.trim()).unwrap();
    assert_eq!(seen["valid"], true, "schema: {}", seen["schemaErrors"]);
    assert_eq!(seen["errors"], serde_json::json!([]), "{seen}");
    assert!(
        seen["title"].as_str().unwrap().ends_with(" - speedscope"),
        "{seen}"
    );

    // The sandwich view: "Total\tSelf\tSymbol Name", then per function
    // three lines: "12.5 KB (41%)", "\t0 B (<0.01%)", "\tname".
    let text = seen["sandwich"].as_str().unwrap();
    let rows: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("Total\tSelf"))
        .skip(1)
        .collect();
    let pct = |cell: &str| {
        cell.rsplit_once('(')
            .and_then(|(_, p)| p.strip_suffix(')'))
            .unwrap_or_else(|| panic!("no share in {cell:?}"))
            .to_owned()
    };
    let mut listed = BTreeMap::new();
    for row in rows.chunks(3).filter(|r| r.len() == 3) {
        listed.insert(row[2].trim().to_owned(), (pct(row[0]), pct(row[1].trim())));
    }
    let want: BTreeMap<String, (String, String)> = shares
        .iter()
        .map(|(f, &(incl, own))| {
            let p = |v: u64| speedscope_percent(v as f64 * 100.0 / total as f64);
            (f.clone(), (p(incl), p(own)))
        })
        .collect();
    assert_eq!(listed, want, "speedscope's sandwich view:\n{text}");
    assert!(listed.len() >= 8, "{listed:?}");
}
