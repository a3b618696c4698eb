//! Temporary allocations (issue 31, point 5): a block freed by the thread
//! that made it before that thread allocated anything else (heaptrack's
//! definition), counted per stack by the recorder, exactly, and shown by
//! `report` ("Temporary", "Top temporary allocation sites", JSON), `tree
//! --metric temporary`, and the short-lived sites (DHAT's rule) beside
//! them. programs/temporary.c makes known patterns; heaptrack, on the same
//! program, counts the same per site.

mod common;
mod support;

use common::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const N: u64 = 1000;

fn build(dir: &Scratch) -> std::path::PathBuf {
    let exe = dir.join("temporary");
    let mut flags = SITE_FLAGS.to_vec();
    flags.push("-pthread");
    compile("cc", &["temporary.c"], &flags, &exe);
    exe
}

fn line(name: &str) -> u32 {
    site_line("temporary.c", name)
}

fn heapledger(args: &[&str], store: &Path) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(args)
        .arg(store)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "heapledger {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn each_site_counts_exactly_its_temporary_blocks() {
    let dir = Scratch::new("temporary");
    let exe = build(&dir);
    for mode in ["dwarf", "fp"] {
        let (p, _) = profile_of(mode, &dir, &exe, &["threads"]);
        let t = |name: &str| site(&p, fn_of(name), line(name)).temporary;
        let calls = |name: &str| site(&p, fn_of(name), line(name)).alloc.count;
        // Made, used and freed at once: all.
        assert_eq!((t("pairs"), calls("pairs")), (N, N), "{mode}");
        // a is freed after b was made, and its free ends b's chance.
        assert_eq!((t("first"), t("second")), (0, 0), "{mode}");
        // realloc releases the block made last; its own is freed next.
        assert_eq!((t("grown_first"), t("grown_realloc")), (N, N), "{mode}");
        // Of N blocks kept until all were made, the last one made.
        assert_eq!(t("kept"), 1, "{mode}");
        // Per thread: two threads making pairs at once lose none.
        assert_eq!(
            (t("thread_pairs"), calls("thread_pairs")),
            (2 * N, 2 * N),
            "{mode}"
        );
        // Freed by another thread: never.
        assert_eq!((t("handed_over"), calls("handed_over")), (0, 10), "{mode}");
    }

    // The summary: the total, and the sites most temporary first.
    let store = dir.join("p.sqlite");
    let v: serde_json::Value =
        serde_json::from_str(&heapledger(&["report", "--json"], &store)).unwrap();
    let total = v["temporary"]["count"].as_u64().expect("a count");
    let ours = 5 * N + 1;
    assert!(
        (ours..ours + 20).contains(&total),
        "{total} temporary blocks in all: the program's {ours} and a few of the runtime's"
    );
    let top = v["temporary"]["top_sites"].as_array().unwrap();
    let row = |i: usize| {
        (
            top[i]["function"].as_str().unwrap().to_owned(),
            top[i]["temporary"].as_u64().unwrap(),
        )
    };
    assert_eq!(row(0), ("pairs_thread".to_owned(), 2 * N));
    let text = heapledger(&["report"], &store);
    let head = text
        .lines()
        .find(|l| l.starts_with("Temporary "))
        .unwrap_or_else(|| panic!("no Temporary line:\n{text}"));
    assert!(head.contains(&format!("{total} (")), "{head}");
    let table: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("Top temporary allocation sites"))
        .skip(2)
        .take_while(|l| !l.is_empty())
        .collect();
    assert!(
        table[0].split_whitespace().take(2).collect::<Vec<_>>() == ["2000", "100.0%"]
            && table[0].contains("pairs_thread"),
        "{table:?}"
    );
    // Short-lived sites: the pairs, living well under 1 µs on average
    // (held by nothing), are; the kept blocks are not.
    let short: Vec<&str> = v["temporary"]["short_lived_sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["function"].as_str().unwrap())
        .collect();
    assert!(!short.contains(&"kept"), "{short:?}");

    // The call tree weighed by temporary blocks: its total is the profile's.
    let tree = heapledger(&["tree", "--metric", "temporary", "--json"], &store);
    let tree: serde_json::Value = serde_json::from_str(&tree).unwrap();
    assert_eq!(tree["total"].as_u64(), Some(total), "{tree}");

    // A budget: exactly the count is within it, one fewer is not.
    let check = |limit: u64| {
        let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
            .arg("check")
            .arg(&store)
            .args(["--max-temporary", &limit.to_string()])
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    };
    assert_eq!(check(total), (Some(0), String::new()));
    assert_eq!(
        check(total - 1),
        (
            Some(1),
            format!(
                "temporary allocations {total} exceeds --max-temporary {}\n",
                total - 1
            )
        )
    );
}

fn fn_of(site: &str) -> &'static str {
    match site {
        "pairs" => "pairs",
        "first" | "second" => "interleaved",
        "grown_first" | "grown_realloc" => "grown",
        "kept" => "kept",
        "thread_pairs" => "pairs_thread",
        "handed_over" => "made_for_other",
        _ => unreachable!(),
    }
}

#[test]
fn sampled_profiles_say_temporary_blocks_are_not_measured() {
    let dir = Scratch::new("temporary-sampled");
    let exe = build(&dir);
    let store = dir.join("p.sqlite");
    let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["run", "-q", "--sample-every", "4096", "-o"])
        .arg(&store)
        .arg("--")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value =
        serde_json::from_str(&heapledger(&["report", "--json"], &store)).unwrap();
    assert!(v["temporary"]["count"].is_null(), "{}", v["temporary"]);
    let text = heapledger(&["report"], &store);
    assert!(
        text.lines()
            .any(|l| l.starts_with("Temporary ") && l.contains("not measured")),
        "{text}"
    );
    // A budget on them cannot be checked: one line, exit 2.
    let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .arg("check")
        .arg(&store)
        .args(["--max-temporary", "0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.lines().count() == 1 && err.contains("temporary"),
        "{err}"
    );
}

/// heaptrack's `MOST TEMPORARY ALLOCATIONS`: (temporary, allocations) per
/// source line of the program.
fn heaptrack_temporary(exe: &Path, dir: &Scratch) -> Vec<(u32, (u64, u64))> {
    let heaptrack = support::require_tool("heaptrack", "heaptrack");
    let print = support::require_tool("heaptrack_print", "heaptrack");
    let mut c = Command::new(heaptrack);
    c.arg("-o").arg(dir.join("ht")).arg(exe);
    let o = support::run(c, Duration::from_secs(120));
    assert_eq!(o.code, Some(0), "heaptrack: {}", o.stderr);
    let data = ["zst", "gz"]
        .iter()
        .map(|e| dir.join(&format!("ht.{e}")))
        .find(|p| p.is_file())
        .expect("heaptrack's data file");
    let mut c = Command::new(print);
    c.arg("-f").arg(&data);
    let o = support::run(c, Duration::from_secs(120));
    assert_eq!(o.code, Some(0), "heaptrack_print: {}", o.stderr);
    let text = o.stdout;
    let lines: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("MOST TEMPORARY ALLOCATIONS"))
        .collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        // "1000 temporary allocations of 1000 allocations in total (100.00%) from"
        let w: Vec<&str> = l.split_whitespace().collect();
        if !(l.ends_with(" from") && w.get(1) == Some(&"temporary")) {
            continue;
        }
        let at = lines.get(i + 2).and_then(|a| a.trim().strip_prefix("at "));
        let Some(at) = at.filter(|a| a.contains("temporary.c:")) else {
            continue;
        };
        let line: u32 = at.rsplit(':').next().unwrap().parse().unwrap();
        out.push((line, (w[0].parse().unwrap(), w[4].parse().unwrap())));
    }
    out
}

#[test]
fn heaptrack_counts_the_same_temporary_blocks_per_site() {
    let dir = Scratch::new("temporary-heaptrack");
    let exe = build(&dir);
    let theirs = heaptrack_temporary(&exe, &dir);
    let (p, _) = profile_of("dwarf", &dir, &exe, &[] as &[&str]);
    for name in ["pairs", "grown_first", "grown_realloc", "kept"] {
        let s = site(&p, fn_of(name), line(name));
        let l = line(name);
        let got = theirs.iter().find(|(at, _)| *at == l).map(|x| x.1);
        assert_eq!(
            got,
            Some((s.temporary, s.alloc.count)),
            "{name} (line {l}): heaptrack's (temporary, allocations) vs heapledger's; heaptrack's list: {theirs:?}"
        );
    }
    // Neither counts any of the interleaved blocks (heaptrack lists none).
    for name in ["first", "second"] {
        assert_eq!(site(&p, fn_of(name), line(name)).temporary, 0);
        assert!(
            !theirs.iter().any(|(at, _)| *at == line(name)),
            "{theirs:?}"
        );
    }
}
