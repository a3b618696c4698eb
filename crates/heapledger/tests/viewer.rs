//! The web viewer (issue 33), judged in headless Chromium
//! (`tests/web/view.mjs`): `heapledger view` prints its URL, with a token,
//! as the first line and serves on 127.0.0.1 only; its pages show the
//! profile's own numbers (the overview's cards equal `report --json`'s,
//! the flame graph's frames the call tree's, the call tree's rows
//! `tree --json`'s), expand and zoom as a user clicks, draw the timeline,
//! load nothing from outside, and raise no error; a URL without the token
//! is refused; Ctrl-C ends it. `export --format html` gives the same pages
//! in one file, opened from disk.

mod common;
mod support;

use common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// What view.mjs saw at `url` (following a top site's link to the
/// sources page where its file's name holds `source`).
fn look(url: &str, source: &str) -> serde_json::Value {
    look_with(url, source, &[])
}

/// `look` with more variables for view.mjs (`HEAPLEDGER_JIT`).
fn look_with(url: &str, source: &str, env: &[(&str, &str)]) -> serde_json::Value {
    let (web, chromium) = support::web_tools();
    let mut c = Command::new("node");
    c.arg(web.join("view.mjs")).arg(url).arg(&chromium);
    c.env("HEAPLEDGER_SOURCE", source);
    c.envs(env.iter().copied());
    let o = support::run(c, Duration::from_secs(180));
    assert_eq!(o.code, Some(0), "view.mjs: {}\n{}", o.stderr, o.stdout);
    let seen: serde_json::Value = serde_json::from_str(o.stdout.trim())
        .unwrap_or_else(|e| panic!("view.mjs printed no JSON ({e}): {}", o.stdout));
    assert_eq!(seen["errors"], serde_json::json!([]), "{seen:#}");
    assert_eq!(
        seen["remote"],
        serde_json::json!([]),
        "loaded from outside: {seen:#}"
    );
    seen
}

/// Every (routine, inclusive) node of `tree --json --limit 0.1`.
fn tree_nodes(store: &Path, extra: &[&str]) -> Vec<(String, u64)> {
    let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .arg("tree")
        .arg(store)
        .args(["--json", "--limit", "0.1", "--max-level", "512"])
        .args(extra)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let tree: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    fn walk(n: &serde_json::Value, out: &mut Vec<(String, u64)>) {
        if let Some(incl) = n["incl_direct"].as_u64() {
            out.push((n["routine"].as_str().unwrap().to_owned(), incl));
            for c in n["children"].as_array().unwrap() {
                walk(c, out);
            }
        }
    }
    let mut out = Vec::new();
    for r in tree["roots"].as_array().unwrap() {
        walk(r, &mut out);
    }
    out
}

/// The call tree page's rows as (routine, inclusive direct), stubs left
/// out.
fn tree_rows(rows: &serde_json::Value) -> Vec<(String, u64)> {
    rows.as_array()
        .unwrap()
        .iter()
        .filter(|r| r["cells"][2].as_str() != Some(""))
        .map(|r| {
            let c = &r["cells"];
            let incl = c[0]
                .as_str()
                .unwrap()
                .split(' ')
                .next()
                .unwrap()
                .replace(',', "");
            (c[3].as_str().unwrap().to_owned(), incl.parse().unwrap())
        })
        .collect()
}

/// "make_buffer (1,300 bytes, 23.62%)" -> ("make_buffer", 1300)
/// `n` as the viewer shows counts: with a comma every three digits.
fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn frame(title: &str) -> (String, u64) {
    // inferno's first line; every metric's weight follows (the viewer's).
    let title = title.lines().next().unwrap_or("");
    let (name, rest) = title.rsplit_once(" (").unwrap();
    let n = rest.split_whitespace().next().unwrap().replace(',', "");
    (name.to_owned(), n.parse().unwrap())
}

fn check_pages(seen: &serde_json::Value, store: &Path) {
    let r = report_json(store);
    let card = |name: &str| seen["cards"][name]["exact"].as_str().unwrap().to_owned();
    assert_eq!(
        card("Peak requested"),
        r["peak"]["requested_bytes"].to_string()
    );
    assert_eq!(
        card("Peak resident"),
        r["peak"]["resident_bytes"].to_string()
    );
    assert_eq!(card("Allocations"), r["allocations"]["count"].to_string());
    assert_eq!(
        card("Leaked"),
        r["alive_at_exit"]["by_the_program"]["bytes"].to_string()
    );
    assert_eq!(card("Temporary"), r["temporary"]["count"].to_string());
    // The program leaks: a warning says so, and links to where.
    assert!(
        seen["warnings"][0]
            .as_str()
            .unwrap()
            .starts_with("The program left 407 B in 6 blocks"),
        "{seen:#}"
    );
    let top = &r["top_sites_by_bytes"][1];
    assert_eq!(seen["sites"][1][3], top["function"], "{seen:#}");
    // No Python or JIT frame: no such table.
    assert_eq!(seen["jitShown"], false, "{seen:#}");

    // The flame graph's frames are the call tree's nodes (by bytes, and
    // inverted by allocations: the callers' tree).
    // Both sorted: the frames of an SVG's titles, and the tree's nodes.
    let frames = |key: &str| {
        let mut f: Vec<(String, u64)> = seen[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| frame(t.as_str().unwrap()))
            .filter(|f| f.0 != "all")
            .collect();
        f.sort();
        f
    };
    let sorted_nodes = |extra: &[&str]| {
        let mut n = tree_nodes(store, extra);
        n.sort();
        n
    };
    let nodes = sorted_nodes(&[]);
    assert_eq!(frames("flame"), nodes);
    assert_eq!(seen["flameZoom"], true, "a click did not zoom");
    // The breadcrumb: all, the frames from the root, main last; "all"
    // zooms out.
    let crumbs: Vec<&str> = seen["flameCrumbs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(
        (crumbs.first(), crumbs.last()),
        (Some(&"all"), Some(&"main")),
        "{crumbs:?}"
    );
    assert!(crumbs.contains(&"_start"), "{crumbs:?}");
    // ... and a link to the source of the frame zoomed into.
    assert_eq!(
        seen["flameCrumbSource"],
        serde_json::json!(["the source of main"])
    );
    assert_eq!(seen["flameUnzoomedByCrumb"], true, "{seen:#}");
    // A routine of the call tree opens its source: main's, in leaks.c, at
    // its first line the profile names.
    if seen.get("treeSource").is_some() {
        assert!(
            seen["treeSource"].as_str().unwrap().ends_with("leaks.c"),
            "{seen:#}"
        );
        assert!(
            seen["treeSourceHash"].as_str().unwrap().contains("&line="),
            "{seen:#}"
        );
    }
    assert_eq!(
        seen["flameMainLabel"].as_str().map(str::trim),
        Some("main"),
        "{seen:#}"
    );
    // A frame's tooltip: its weight by every metric, as the call tree of
    // each weighs its node; inferno's search still reads its name alone.
    let tooltip = seen["flameTooltip"].as_str().expect("main's tooltip");
    let main_by = |metric: &str| {
        tree_nodes(store, &["--metric", metric])
            .into_iter()
            .find(|n| n.0 == "main")
            .map(|n| n.1)
            .unwrap()
    };
    let lines: Vec<&str> = tooltip.lines().collect();
    assert!(lines[0].starts_with("main ("), "{tooltip}");
    let count = main_by("count");
    assert!(
        lines.contains(&format!("allocations: {}", thousands(count)).as_str()),
        "{tooltip}: main has {count} allocations"
    );
    for name in [
        "bytes allocated: ",
        "bytes at peak: ",
        "bytes leaked: ",
        "temporary allocations: ",
    ] {
        assert!(
            lines.iter().any(|l| l.starts_with(name)),
            "{name} in {tooltip}"
        );
    }
    assert!(
        seen["flameSearchAfterTooltips"]
            .as_str()
            .unwrap()
            .starts_with("Matched: "),
        "{seen:#}"
    );
    assert_ne!(
        seen["flameSearchAfterTooltips"], "Matched: 0.0%",
        "{seen:#}"
    );
    let metric = seen["flameInvertedMetric"].as_str().unwrap();
    assert_eq!(
        frames("flameInverted"),
        sorted_nodes(&["--bottom-up", "--metric", metric])
    );

    // Search (inferno's): the share of the frames that match.
    let total: u64 = nodes.iter().filter(|n| n.0 == "_start").map(|n| n.1).sum();
    let matched: u64 = nodes
        .iter()
        .filter(|n| n.0.starts_with("make_"))
        .map(|n| n.1)
        .sum();
    assert_eq!(
        seen["flameSearch"],
        format!("Matched: {:.1}%", matched as f64 * 100.0 / total as f64)
    );

    // The call tree's rows: the tree's nodes in order, the first levels
    // open; a click opens a closed one; collapsing as `tree` does.
    let rows = seen["tree"].as_array().unwrap();
    assert_eq!(tree_rows(&seen["tree"]), tree_nodes(store, &[]));
    assert_eq!(
        tree_rows(&seen["treeFull"]),
        tree_nodes(store, &["--collapse", "full"])
    );
    assert_eq!(rows[0]["hidden"], false);
    assert_eq!(
        seen["treeToggle"],
        serde_json::json!([true, false]),
        "a click on a node's toggle did not hide, then show, its children"
    );
    assert!(seen["treeBottomUp"][0]["cells"][3].as_str().unwrap() != "_start");

    // Sources (served pages): the site's line, with its bytes, and the
    // source text of that line.
    if let Some(target) = seen["sourceTarget"].as_array() {
        let line = site_line("leaks.c", "buffer");
        assert!(
            seen["sourceName"].as_str().unwrap().ends_with("leaks.c"),
            "{seen:#}"
        );
        assert_eq!(target[5], line.to_string(), "{target:?}");
        assert_eq!(target[0], "13", "allocations through the line: {target:?}");
        assert_eq!(target[2], "1.3 KiB", "bytes allocated on it: {target:?}");
        assert!(
            target[6].as_str().unwrap().contains("SITE:buffer"),
            "{target:?}"
        );
        assert!(seen["sourceFiles"].to_string().contains("leaks.c"));
    }

    // Sizes: the summary's ranges; leaks: `heapledger leaks`'s report;
    // threads: one row, its calls; globals: libc's own at least.
    let ranges = r["allocation_sizes"].as_array().unwrap();
    assert_eq!(seen["sizes"].as_array().unwrap().len(), ranges.len());
    for (row, range) in seen["sizes"].as_array().unwrap().iter().zip(ranges) {
        assert_eq!(
            row[1].as_str().unwrap().replace(',', ""),
            range["count"].to_string()
        );
    }
    // Both scatter plots drawn, a circle per bin.
    let scatter = seen["scatter"].as_array().unwrap();
    assert!(
        scatter.len() == 2 && scatter.iter().all(|n| n.as_u64().unwrap() > 0),
        "{scatter:?}"
    );
    let leaks = seen["leaks"].as_str().unwrap();
    assert!(leaks.starts_with("=== Memory Leak Report ==="), "{leaks}");
    assert!(leaks.contains("Current Leaks: 6 (407 bytes)"), "{leaks}");
    assert!(leaks.contains("make_buffer"), "{leaks}");
    let threads = seen["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 1, "{seen:#}");
    let head: Vec<&str> = seen["threadsHead"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap())
        .collect();
    let malloc = head.iter().position(|h| *h == "malloc").unwrap();
    assert_eq!(
        threads[0][malloc].as_str().unwrap().replace(',', ""),
        r["calls"]["malloc"]["count"].to_string()
    );
    assert!(seen["globals"]
        .as_str()
        .unwrap()
        .contains("global and thread-local variables"));
    assert!(!seen["globalRows"].as_array().unwrap().is_empty());

    // leaks.c waits for nothing: the Time lost page says so.
    assert!(
        seen["waitsTotal"]
            .as_str()
            .unwrap()
            .starts_with("No time lost waiting was recorded"),
        "{seen:#}"
    );

    // Pointing at the memory chart names that point's peak's call site.
    let at = seen["timelineSite"].as_str().unwrap_or("");
    assert!(at.contains("requested at most"), "{at}");
    assert!(seen["timelineCanvases"].as_u64().unwrap() >= 2, "{seen:#}");
    let legend = seen["timelineLegend"].to_string();
    assert!(
        legend.contains("requested") && legend.contains("resident"),
        "{legend}"
    );
}

/// The whole answer (head and body) to `GET path` sent to `host` with
/// `Host: host_header` and a foreign `Origin`.
fn raw_get(host: &str, path: &str, host_header: &str) -> String {
    let mut s = std::net::TcpStream::connect(host).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host_header}\r\nOrigin: http://evil.example\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    answer
}

/// The body of `GET url + path` (the viewer's token path).
fn http_get(url: &str, path: &str) -> String {
    let rest = &url["http://".len()..];
    let (host, base) = rest.split_once('/').unwrap();
    let answer = raw_get(host, &format!("/{base}{path}"), host);
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{path}: {answer}");
    body.to_owned()
}

fn recorded(dir: &Scratch) -> std::path::PathBuf {
    recorded_program(dir, "leaks")
}

/// The store of `tests/programs/NAME.c` recorded in `dir`.
fn recorded_program(dir: &Scratch, name: &str) -> std::path::PathBuf {
    let exe = dir.join(name);
    compile("cc", &[&format!("{name}.c")], SITE_FLAGS, &exe);
    let store = dir.join("p.sqlite");
    let o = heapledger_run("dwarf", &store, &exe, &[] as &[&str]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    store
}

/// What the pages showed of the profile of `tests/programs/NAME.c`, built
/// with threads and recorded in `dir`; and its store.
fn threaded_pages(name: &str, dir: &Scratch) -> (serde_json::Value, std::path::PathBuf) {
    let exe = compile_threaded(name, dir);
    let store = dir.join("p.sqlite");
    let o = heapledger_run("dwarf", &store, &exe, &[] as &[&str]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (mut child, url) = start_view(&store, None);
    let seen = look(&url, "");
    let _ = child.kill();
    let _ = child.wait();
    (seen, store)
}

/// `heapledger view STORE [BASE] --no-browser`, and the URL it printed
/// first.
fn start_view(store: &Path, base: Option<&Path>) -> (std::process::Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .arg("view")
        .arg(store)
        .args(base)
        .arg("--no-browser")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let url = first.trim().to_owned();
    let ok = url.starts_with("http://127.0.0.1:") && url.ends_with('/') && url.len() > 50;
    if !ok {
        let _ = child.kill();
        panic!("first line {first:?}");
    }
    (child, url)
}

#[test]
fn view_serves_the_profiles_own_numbers() {
    let dir = Scratch::new("viewer");
    let store = recorded(&dir);
    let (mut child, url) = start_view(&store, None);
    let seen = look(&url, "leaks.c");
    check_pages(&seen, &store);
    assert!(
        seen["treeSource"].is_string(),
        "the tree's main did not open its source: {seen:#}"
    );
    // Sorting the call tree by "In only".
    assert_eq!(seen["treeSortedByExcl"]["sorted"], true, "{seen:#}");
    assert!(
        seen["treeSortedByExcl"]["groups"].as_u64().unwrap() >= 1,
        "{seen:#}"
    );
    assert_eq!(seen["treeSortHeader"], "In only ▾");
    assert!(
        seen["sourceTarget"].is_array(),
        "the sources page was not reached"
    );

    // Without the token, or with another: 403; with it but for another
    // host (DNS rebinding): 403; no CORS header ever.
    let rest = &url["http://".len()..];
    let (host, path) = rest.split_once('/').unwrap();
    let token = path.trim_end_matches('/');
    let get = |p: &str, host_header: &str| raw_get(host, p, host_header);
    for p in [
        "/",
        "/app.js",
        "/api/summary",
        &format!("/{token}x/"),
        "/../etc/passwd",
    ] {
        let answer = get(p, host);
        assert!(answer.starts_with("HTTP/1.1 403"), "{p}: {answer}");
    }
    let answer = get(&format!("/{token}/api/summary"), "rebound.example:80");
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    let answer = get(&format!("/{token}/api/summary"), host);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        !answer.to_lowercase().contains("access-control-"),
        "{answer}"
    );
    // Only the viewer's own files: no path reaches the disk.
    for p in ["etc/passwd", "..%2f..%2fetc%2fpasswd", "Cargo.toml"] {
        let answer = get(&format!("/{token}/{p}"), host);
        assert!(answer.starts_with("HTTP/1.1 404"), "{p}: {answer}");
    }
    // Not on other addresses of the machine.
    let port = host.rsplit(':').next().unwrap();
    if let Ok(addrs) = std::net::ToSocketAddrs::to_socket_addrs(&(hostname().as_str(), 0)) {
        for a in addrs.filter(|a| !a.ip().is_loopback()) {
            let to = std::net::SocketAddr::new(a.ip(), port.parse().unwrap());
            assert!(
                std::net::TcpStream::connect_timeout(&to, Duration::from_millis(300)).is_err(),
                "the viewer answers on {to}"
            );
        }
    }

    // The tooltips' weights: walked once over the stacks without
    // collapsing, from each metric's call tree with it; a frame drawn the
    // same both ways (the program's own, which do not recurse) has the
    // same numbers.
    for inverted in [0, 1] {
        let info = |collapse: &str| -> serde_json::Value {
            let q = format!("api/flameinfo?metric=bytes&inverted={inverted}&collapse={collapse}");
            serde_json::from_str(&http_get(&url, &q)).unwrap()
        };
        let (none, direct) = (info("none"), info("direct"));
        assert_eq!(none["metrics"], direct["metrics"]);
        let (a, b) = (
            none["frames"].as_object().unwrap(),
            direct["frames"].as_object().unwrap(),
        );
        let same = a.iter().filter(|(k, v)| b.get(*k) == Some(v)).count();
        let both = a.keys().filter(|k| b.contains_key(*k)).count();
        assert!(
            both > 5 && same == both,
            "inverted={inverted}: {same} of {both}: {none:#} {direct:#}"
        );
    }

    // Ctrl-C ends it.
    unsafe { libc_kill(child.id() as i32, 2) };
    let status = wait_within(&mut child, Duration::from_secs(10));
    assert_eq!(status.and_then(|s| s.code()), Some(0), "after Ctrl-C");
}

/// The timeline's time range (issue 33, on issue 30's checkpoint series):
/// `phases.c` allocates at three sites 600 ms apart, checkpoints every
/// 100 ms. Dragging across the whole chart lists the three sites with
/// what they allocated and still held at the end; its flame graph shows
/// them; `api/range` between two checkpoints holds only what was
/// allocated between them.
#[test]
fn the_timeline_selects_a_time_range() {
    let dir = Scratch::new("viewer-range");
    let store = phases_recorded(&dir, "0.1", &[]);
    let (mut child, url) = start_view(&store, None);
    let seen = look(&url, "");
    let api = |q: &str| -> serde_json::Value {
        let body = http_get(&url, &format!("api/range{q}"));
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
    };
    let whole = api("?from=0&to=1000");
    let points = api("");

    // The whole run: each site's allocations, bytes, frees and what it
    // still held at the end.
    let row = |v: &serde_json::Value, f: &str| -> Vec<u64> {
        let s = v["sites"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["function"] == f)
            .unwrap_or_else(|| panic!("no {f} in {v:#}"));
        ["allocations", "bytes", "frees", "held"]
            .iter()
            .map(|k| s[*k].as_u64().unwrap())
            .collect()
    };
    assert_eq!(row(&whole, "first_phase"), [100, 100_000, 0, 100_000]);
    assert_eq!(row(&whole, "second_phase"), [40, 200_000, 20, 100_000]);
    assert_eq!(row(&whole, "third_phase"), [7, 2331, 7, 0]);
    // Between the checkpoints around the second phase: it alone.
    let times: Vec<f64> = points["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_f64().unwrap())
        .collect();
    let mut found = false;
    for w in times.windows(2) {
        let r = api(&format!("?from={}&to={}", w[0], w[1]));
        let names: Vec<&str> = r["sites"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["function"].as_str().unwrap())
            .collect();
        if names.contains(&"second_phase") {
            assert_eq!(names, ["second_phase"], "{r:#}");
            assert_eq!(row(&r, "second_phase"), [40, 200_000, 20, 100_000]);
            found = true;
        }
    }
    assert!(
        found,
        "no stretch between checkpoints holds the second phase: {times:?}"
    );
    let _ = child.kill();
    let _ = child.wait();

    // The page: the selection's table, its flame graph.
    let sites = seen["rangeSites"].to_string();
    for f in ["first_phase", "second_phase", "third_phase"] {
        assert!(sites.contains(f), "{f}: {seen:#}");
    }
    let second = seen["rangeSites"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r[0] == "second_phase")
        .unwrap();
    assert_eq!(second[2], "40", "{second}");
    assert_eq!(second[3], "195.3 KiB", "{second}");
    assert_eq!(second[5], "97.7 KiB", "{second}");
    assert!(
        seen["rangeBanner"]
            .as_str()
            .unwrap()
            .starts_with("Only what was allocated between"),
        "{seen:#}"
    );
    let titles = seen["rangeFlame"].to_string();
    // (By the weight last picked on the flame graph's page.)
    assert!(
        titles.contains("second_phase (200,000 bytes")
            || titles.contains("second_phase (40 allocations"),
        "{titles}"
    );
    assert!(
        titles.contains("all (147 allocations") || titles.contains("all (302,331 bytes"),
        "{titles}"
    );
}

/// The flame graph's thread filter: `threads.c`'s four threads share one
/// call site; the last thread listed shows its own share of it alone.
#[test]
fn the_flame_graph_shows_one_thread() {
    let dir = Scratch::new("viewer-thread");
    let (seen, _) = threaded_pages("threads", &dir);
    let options = seen["threadOptions"].to_string();
    assert!(
        options.starts_with("[\"\",") && options.contains("\"5\""),
        "{options}"
    );
    let titles = seen["threadFlame"].as_array().unwrap();
    let alloc = titles
        .iter()
        .filter_map(|t| t.as_str())
        .find(|t| t.starts_with("thread_alloc ("))
        .unwrap_or_else(|| panic!("{titles:?}"));
    // One thread's share: 10 (k + 1) blocks of 1000 + 8 k bytes.
    let ok = (0..4u64).any(|k| {
        let n = 10 * (k + 1);
        alloc.starts_with(&format!("thread_alloc ({n} allocations"))
            || alloc.starts_with(&format!(
                "thread_alloc ({} bytes",
                thousands(n * (1000 + 8 * k))
            ))
    });
    assert!(ok, "{alloc}");
}

/// A program whose allocations come through JIT code named in a perf map
/// (the stub of `jit_perfmap.c`, named as CPython names a module's code):
/// the overview lists the JIT function under the sites, as `report`
/// does.
#[test]
fn the_overview_lists_the_python_and_jit_functions() {
    let dir = Scratch::new("viewer-jit");
    let exe = dir.join("jit_perfmap");
    compile("cc", &["jit_perfmap.c"], SITE_FLAGS, &exe);
    let store = dir.join("p.sqlite");
    let o = heapledger_run("dwarf", &store, &exe, &["25", "python"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let pid = String::from_utf8_lossy(&o.stdout).trim().to_owned();
    let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
    let (mut child, url) = start_view(&store, None);
    let seen = look_with(&url, "", &[("HEAPLEDGER_JIT", "1")]);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(seen["jitShown"], true, "{seen:#}");
    // The flame graph with "Python and JIT functions only": the stub's
    // frame over the allocating function, main and the loader's frames
    // left out; and back.
    let titles: Vec<String> = seen["jitFlame"]
        .as_array()
        .unwrap_or_else(|| panic!("{seen:#}"))
        .iter()
        .map(|t| frame(t.as_str().unwrap()).0)
        .collect();
    assert!(titles.iter().any(|t| t == "<module>"), "{titles:?}");
    assert!(titles.iter().any(|t| t == "alloc_from_jit"), "{titles:?}");
    assert!(!titles.iter().any(|t| t == "main"), "{titles:?}");
    assert!(seen["jitFlameOff"].is_array(), "{seen:#}");
    // The call tree the same way (bottom-up, as the tour leaves it): the
    // allocating function, then the stub's frame under it, no main.
    let routines: Vec<&str> = seen["jitTree"]
        .as_array()
        .unwrap_or_else(|| panic!("{seen:#}"))
        .iter()
        .map(|r| r["cells"][3].as_str().unwrap().trim())
        .collect();
    assert!(routines.contains(&"<module>"), "{routines:?}");
    assert!(routines.contains(&"alloc_from_jit"), "{routines:?}");
    assert!(!routines.contains(&"main"), "{routines:?}");
    assert_eq!(
        seen["jitSites"],
        serde_json::json!([["1.2 KiB", "25", "0 B", "<module>", "/srv/app/view.py"]]),
        "{seen:#}"
    );
}

/// The time lost page: `waits.c`'s mutex waits, first, with the waiter's
/// and the holder's stacks a click away, as `report --json` lists them.
#[test]
fn the_time_lost_page_shows_the_waits() {
    // programs/waits.c: a mutex held five times 200 ms while main waits.
    let dir = Scratch::new("viewer-waits");
    let (seen, store) = threaded_pages("waits", &dir);
    let r = report_json(&store);
    let rows = seen["waits"].as_array().unwrap();
    let entries = r["time_lost"]["entries"].as_array().unwrap();
    assert_eq!(rows.len(), entries.len(), "{seen:#}");
    // The first row is the report's first entry: the mutex waits at
    // wait_for_lock, held by hold_lock.
    let first: Vec<&str> = rows[0]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(first[1], entries[0]["count"].to_string());
    assert_eq!(first[3], "mutex");
    assert!(first[5].starts_with("wait_for_lock "), "{first:?}");
    assert!(first[6].starts_with("hold_lock "), "{first:?}");
    let stacks = seen["waitsStacks"].as_str().unwrap();
    assert!(
        stacks.starts_with("waiting at:") && stacks.contains("held by:"),
        "{stacks}"
    );
}

/// Switching the call tree's recursion collapsing on a recursive program
/// changes its rows as `tree --collapse` does.
#[test]
fn the_call_tree_collapses_recursion_as_tree_does() {
    let dir = Scratch::new("viewer-recursion");
    let store = recorded_program(&dir, "recursion");
    let (mut child, url) = start_view(&store, None);
    let seen = look(&url, "");
    unsafe { libc_kill(child.id() as i32, 2) };
    let _ = wait_within(&mut child, Duration::from_secs(10));
    let none = tree_rows(&seen["tree"]);
    let full = tree_rows(&seen["treeFull"]);
    assert_eq!(none, tree_nodes(&store, &[]));
    assert_eq!(full, tree_nodes(&store, &["--collapse", "full"]));
    assert_ne!(none, full, "collapsing changed nothing");
}

/// `view NEW BASE`: the Diff page names the site that grew, with its
/// change, as `heapledger diff` does, and draws the differential flame
/// graph.
#[test]
fn the_diff_page_names_the_site_that_grew() {
    let dir = Scratch::new("viewer-diff");
    let (a, b) = grow_runs(&dir);
    let (mut child, url) = start_view(&b, Some(&a));
    let seen = look(&url, "");
    unsafe { libc_kill(child.id() as i32, 2) };
    let _ = wait_within(&mut child, Duration::from_secs(10));
    let rows = seen["diff"].as_array().expect("a Diff page");
    assert_eq!(rows.len(), 1, "{seen:#}");
    // function, where, calls, bytes, at peak, leaked, library
    assert_eq!(rows[0][0], "grown");
    assert_eq!(rows[0][2], "+20");
    assert_eq!(rows[0][3], "+2.0 KiB");
    assert!(seen["diffFlame"].to_string().contains("grown"), "{seen:#}");
}

#[test]
fn the_html_export_is_the_viewer_in_one_file() {
    let dir = Scratch::new("viewer-html");
    let store = recorded(&dir);
    let html = dir.join("report.html");
    let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .arg("export")
        .arg(&store)
        .args(["--format", "html", "-o"])
        .arg(&html)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&html).unwrap();
    // Self-contained: no script or style from anywhere else.
    assert!(!text.contains("src=\"http") && !text.contains("href=\"http"));
    let seen = look(&format!("file://{}", html.display()), "leaks.c");
    check_pages(&seen, &store);
    // The source file is in the page too.
    assert!(
        seen["sourceTarget"].is_array(),
        "the sources page was not reached: {seen:#}"
    );
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap_or_default()
        .trim()
        .to_owned()
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

fn wait_within(
    child: &mut std::process::Child,
    limit: Duration,
) -> Option<std::process::ExitStatus> {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    None
}

/// The flame graph's tooltips on a program that recurses: with no
/// collapsing and with direct collapsing (one pass over the stacks), and
/// with conservative and full collapsing (a tree per metric, built in
/// passes keeping the frames' paths), every frame drawn has its bytes and
/// allocations, both ways; top-down they are the call tree's inclusive
/// weights (`tree --collapse MODE`).
#[test]
fn tooltips_of_a_recursive_program_weigh_every_frame() {
    let dir = Scratch::new("viewer-recursion");
    let store = recorded_program(&dir, "recursion");
    let (mut child, url) = start_view(&store, None);
    let mut bytes_seen: Vec<(&str, u64)> = Vec::new();
    for collapse in ["none", "direct", "conservative", "full"] {
        for inverted in [0, 1] {
            let q = format!("api/flameinfo?metric=bytes&inverted={inverted}&collapse={collapse}");
            let info: serde_json::Value = serde_json::from_str(&http_get(&url, &q)).unwrap();
            let metrics = info["metrics"].as_array().unwrap();
            let k = metrics.iter().position(|m| m == "bytes allocated").unwrap();
            let c = metrics.iter().position(|m| m == "allocations").unwrap();
            let frames = info["frames"].as_object().unwrap();
            assert!(frames.len() > 3, "{collapse} {inverted}: {info}");
            for (key, v) in frames {
                assert!(
                    v[k].as_u64().is_some_and(|b| b > 0) && v[c].as_u64().is_some_and(|n| n > 0),
                    "{collapse} {inverted}: {key} {v}"
                );
                if inverted == 0 {
                    bytes_seen.push((collapse, v[k].as_u64().unwrap()));
                }
            }
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    // Each top-down frame's bytes are those of a node of the tree.
    let mut trees: std::collections::HashMap<&str, Vec<u64>> = Default::default();
    for (collapse, b) in &bytes_seen {
        let inclusive = trees
            .entry(collapse)
            .or_insert_with(|| tree_inclusive(&store, collapse));
        assert!(
            inclusive.contains(b),
            "{collapse}: {b} is no node's inclusive weight: {inclusive:?}"
        );
    }
}

/// Every node's inclusive bytes in `tree --collapse COLLAPSE` (and the
/// total), stubs left out.
fn tree_inclusive(store: &Path, collapse: &str) -> Vec<u64> {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["tree", "--json", "--limit", "0", "--collapse", collapse])
        .arg(store)
        .output()
        .unwrap();
    let tree: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut inclusive = vec![tree["total"].as_u64().unwrap()];
    let mut todo: Vec<&serde_json::Value> = tree["roots"].as_array().unwrap().iter().collect();
    while let Some(n) = todo.pop() {
        // (A stub has no inclusive weight.)
        if let (Some(d), Some(i)) = (n["incl_direct"].as_u64(), n["incl_indirect"].as_u64()) {
            inclusive.push(d + i);
        }
        todo.extend(n["children"].as_array().into_iter().flatten());
    }
    inclusive
}
