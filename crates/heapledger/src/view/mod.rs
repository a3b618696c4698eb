//! `heapledger view` and `export --format html`: the web viewer.
//!
//! The pages are plain HTML, CSS and JavaScript (`assets/view`, no build
//! step), with uPlot for the charts (`assets/vendor/uplot`, vendored from
//! its npm package: small, fast on long series, no dependencies) and
//! inferno's SVG for the flame graph (zoom, search and tooltips are
//! inferno's own). All of it is embedded in the binary. `view` serves the
//! pages and answers their data requests from the profile as they come
//! (`server.rs`); `export --format html` computes the same answers for the
//! default views once and writes everything into one file. The flame
//! graph's tooltips are `flameinfo.rs`, time ranges and one thread's view
//! `range.rs`, the sources page `sources.rs`.

mod flameinfo;
mod range;
mod server;
mod sources;

pub use server::serve;

use crate::export::{flame_frames, flame_lines_of, flamegraph_svg_of, FlameFrame, Weights};
use crate::profiles::Opened;
use crate::tree::Range;
use crate::tree::{Metric, Naming};
use anyhow::{anyhow, Result};
use flameinfo::flame_info;
use heapledger_analysis::calltree::{self, CollapseMode, Direction, RenderOptions, Samples};
use heapledger_profile::timeline::{bandwidth, memory};
use range::{filter_of, range_answer};
use std::path::Path;
use std::sync::Arc;

pub const INDEX_HTML: &str = include_str!("../../assets/view/index.html");
pub const APP_JS: &str = include_str!("../../assets/view/app.js");
pub const APP_CSS: &str = include_str!("../../assets/view/app.css");
pub const UPLOT_JS: &str = include_str!("../../assets/vendor/uplot/uPlot.iife.min.js");
pub const UPLOT_CSS: &str = include_str!("../../assets/vendor/uplot/uPlot.min.css");

/// Call tree nodes under this share of the total are left out of the
/// pages (the text `tree --limit` shows them).
const TREE_LIMIT_PERCENT: f64 = 0.1;

/// The profile behind the served pages, and the answers given so far.
pub struct Viewer {
    pub o: Opened,
    /// The profile compared against (`view PROFILE BASE`).
    pub base: Option<Opened>,
    /// The samples of the last metric asked for (the flame graph and the
    /// call tree of one metric share them: reading them is most of a
    /// large profile's cost).
    samples: SampleCache,
    /// Answers by request, the oldest dropped past `CACHED` of them.
    answers: Vec<(String, &'static str, Arc<Vec<u8>>)>,
}

/// Answers kept (a flame graph of a large profile is a few MB).
const CACHED: usize = 16;

/// What a data request asks for (`api/NAME?QUERY`).
fn param<'a>(query: &'a str, key: &str) -> Option<&'a str> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

/// A query value with its `%XX` escapes (and `+`) decoded.
fn decoded(value: &str) -> String {
    let b = value.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(v) => {
                        out.push(v);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn metric_of(query: &str) -> Result<Metric> {
    let m = param(query, "metric").unwrap_or("bytes");
    <Metric as clap::ValueEnum>::from_str(m, true).map_err(|_| anyhow!("no metric `{m}`"))
}

/// `jit=1`: each stack's Python and other JIT functions and the
/// allocating one only (`--jit-only`).
fn naming_of(query: &str) -> Naming {
    Naming {
        by_line: false,
        jit_only: param(query, "jit") == Some("1"),
    }
}

fn collapse_of(query: &str) -> Result<CollapseMode> {
    let c = param(query, "collapse").unwrap_or("none");
    c.parse().map_err(|_| anyhow!("no collapse mode `{c}`"))
}

impl Viewer {
    pub fn new(o: Opened, base: Option<Opened>) -> Viewer {
        Viewer {
            o,
            base,
            samples: SampleCache::default(),
            answers: Vec::new(),
        }
    }

    /// Answers a data request (see [`answer`]), from the answers kept
    /// where it was asked before.
    pub fn answer(&mut self, name: &str, query: &str) -> Result<(&'static str, Arc<Vec<u8>>)> {
        let key = format!("{name}?{query}");
        if let Some(at) = self.answers.iter().position(|a| a.0 == key) {
            let a = self.answers.remove(at);
            let out = (a.1, a.2.clone());
            self.answers.push(a);
            return Ok(out);
        }
        let (kind, body) = match name {
            "meta" | "diff" | "diffflame" => diff_answer(&self.o, self.base.as_ref(), name, query)?,
            _ => answer(&self.o, &mut self.samples, name, query)?,
        };
        let body = Arc::new(body);
        if self.answers.len() >= CACHED {
            self.answers.remove(0);
        }
        self.answers.push((key, kind, body.clone()));
        Ok((kind, body))
    }

    /// Computes what the first page views ask for (the summary, the
    /// timeline, the flame graph by bytes), so that they come at once.
    pub fn warm(&mut self) -> Result<()> {
        self.answer("summary", "")?;
        self.answer("timeline", "")?;
        // (A profile with nothing to draw says so when asked.)
        let _ = self.answer("flame", "metric=bytes&inverted=0&collapse=none&jit=0");
        Ok(())
    }
}

/// What the pages ask of two profiles: `meta` (whether there is a base),
/// `diff` (the sites that changed, as `heapledger diff --json`) and
/// `diffflame` (the differential flame graph).
fn diff_answer(
    o: &Opened,
    base: Option<&Opened>,
    name: &str,
    query: &str,
) -> Result<(&'static str, Vec<u8>)> {
    const JSON: &str = "application/json";
    if name == "meta" {
        let base = base.map(|b| b.profile.run.command.clone());
        return Ok((
            JSON,
            serde_json::to_vec(&serde_json::json!({ "base": base }))?,
        ));
    }
    let base = base
        .ok_or_else(|| anyhow!("no base profile: `heapledger view PROFILE BASE` compares two"))?;
    if name == "diff" {
        let rows = crate::diff::rows(base, o)?;
        let mut v = crate::diff::to_json(&rows);
        v["base"] = base.profile.run.command.clone().into();
        v["new"] = o.profile.run.command.clone().into();
        return Ok((JSON, serde_json::to_vec(&v)?));
    }
    let svg = crate::export::differential_svg_in(base, None, o, None, metric_of(query)?)?;
    Ok(("image/svg+xml", svg))
}

/// The samples last read: of a metric, over the whole run, a time range
/// or a thread (`Range::key`); and the frames of their flame graph last
/// drawn, which its tooltips need again (`flameinfo`): laying them out
/// takes most of a flame graph's time where recursion is collapsed
/// (compileall's callers' view: 1.8 s).
#[derive(Default)]
pub struct SampleCache {
    samples: Option<((Metric, String, Naming), Samples)>,
    frames: Option<(FlameKey, Arc<Vec<FlameFrame>>)>,
}

/// Which flame graph of the samples: (inverted, collapse).
type FlameKey = (bool, CollapseMode);

/// The samples of `metric` (in `range`, where given), from `cache` when
/// they are its.
fn samples_of<'a>(
    o: &Opened,
    cache: &'a mut SampleCache,
    metric: Metric,
    naming: Naming,
    range: Option<&Range>,
) -> Result<&'a Samples> {
    let key = (
        metric,
        range.map_or(String::new(), |r| r.key.clone()),
        naming,
    );
    if cache.samples.as_ref().is_none_or(|c| c.0 != key) {
        *cache = SampleCache::default();
        let rows = range.map(|r| r.rows.as_slice());
        cache.samples = Some((key, crate::tree::samples_in(o, metric, naming, rows)?));
    }
    Ok(&cache.samples.as_ref().expect("set above").1)
}

/// The frames of the flame graph of `weights` (in `range`, where given),
/// from `cache` when they are its.
fn flame_frames_of(
    o: &Opened,
    cache: &mut SampleCache,
    weights: &Weights,
    range: Option<&Range>,
) -> Result<Arc<Vec<FlameFrame>>> {
    samples_of(o, cache, weights.metric, weights.naming, range)?;
    let key = (weights.inverted, weights.collapse);
    if let Some((k, frames)) = &cache.frames {
        if *k == key {
            return Ok(frames.clone());
        }
    }
    let samples = &cache.samples.as_ref().expect("read above").1;
    let frames = Arc::new(flame_frames(&flame_lines_of(samples, weights)));
    cache.frames = Some((key, frames.clone()));
    Ok(frames)
}

/// Answers a data request: `summary`, `flame`, `tree` or `timeline`,
/// with its query; (content type, body).
pub fn answer(
    o: &Opened,
    cache: &mut SampleCache,
    name: &str,
    query: &str,
) -> Result<(&'static str, Vec<u8>)> {
    const JSON: &str = "application/json";
    match name {
        "summary" => Ok((JSON, serde_json::to_vec(&summary(o)?)?)),
        "timeline" => Ok((JSON, serde_json::to_vec(&timeline(o))?)),
        "range" => Ok((JSON, serde_json::to_vec(&range_answer(o, query)?)?)),
        "threads" => Ok((JSON, serde_json::to_vec(&threads(o))?)),
        "scatter" => Ok((JSON, serde_json::to_vec(&scatter(o))?)),
        "globals" => Ok((JSON, serde_json::to_vec(&globals(o)?)?)),
        // `heapledger waits --json`: every entry of time lost, with both
        // stacks.
        "waits" => Ok((
            JSON,
            crate::waits::report(&o.profile, 16, true).into_bytes(),
        )),
        "sources" => Ok((JSON, serde_json::to_vec(&sources::files(o)?)?)),
        // Where a routine of the flame graph or the call tree is defined.
        "where" => {
            let function = decoded(param(query, "function").unwrap_or(""));
            Ok((JSON, serde_json::to_vec(&sources::where_is(o, &function))?))
        }
        "source" => {
            let file = decoded(param(query, "file").unwrap_or(""));
            Ok((JSON, serde_json::to_vec(&sources::source(o, &file)?)?))
        }
        // The leak report as `heapledger leaks` prints it (the built-in
        // suppressions applied).
        "leaks" => {
            let opts = crate::leaks::LeakOptions {
                each: false,
                frames: 24,
                top: 200,
                no_builtin: false,
            };
            let mut text = Vec::new();
            crate::leaks::report(o, &[], &opts, &mut text)?;
            Ok(("text/plain; charset=utf-8", text))
        }
        "flame" => {
            let weights = Weights {
                metric: metric_of(query)?,
                inverted: param(query, "inverted") == Some("1"),
                collapse: collapse_of(query)?,
                naming: naming_of(query),
            };
            let range = filter_of(o, query)?;
            let samples = samples_of(o, cache, weights.metric, weights.naming, range.as_ref())?;
            let lines = flame_lines_of(samples, &weights);
            let svg = flamegraph_svg_of(o, &lines, weights)?;
            // Its tooltips' request comes next.
            cache.frames = Some((
                (weights.inverted, weights.collapse),
                Arc::new(flame_frames(&lines)),
            ));
            Ok(("image/svg+xml", svg))
        }
        // Every metric's weight of each frame of a flame graph (keyed
        // `depth:x` as the SVG lays frames out), for its tooltips.
        "flameinfo" => {
            let weights = Weights {
                metric: metric_of(query)?,
                inverted: param(query, "inverted") == Some("1"),
                collapse: collapse_of(query)?,
                naming: naming_of(query),
            };
            let range = filter_of(o, query)?;
            Ok((
                JSON,
                serde_json::to_vec(&flame_info(o, cache, weights, range.as_ref())?)?,
            ))
        }
        "tree" => {
            let metric = metric_of(query)?;
            let direction = match param(query, "direction").unwrap_or("top-down") {
                "bottom-up" => Direction::BottomUp,
                _ => Direction::TopDown,
            };
            let samples = samples_of(o, cache, metric, naming_of(query), None)?;
            let tree = crate::tree::shown_tree(
                samples,
                collapse_of(query)?,
                direction,
                TREE_LIMIT_PERCENT,
            );
            let mut out = Vec::new();
            calltree::write_json(
                &mut out,
                &tree,
                samples.routines(),
                metric.name(),
                &RenderOptions {
                    limit_percent: TREE_LIMIT_PERCENT,
                    max_level: 512,
                },
            )?;
            Ok((JSON, out))
        }
        _ => Err(anyhow!("no data `{name}`")),
    }
}

/// One row per thread: its number, memory operations, calls and bytes per
/// allocator function, its deepest stack.
fn threads(o: &Opened) -> serde_json::Value {
    // (Which have their own stacks, for the flame graph's thread filter.)
    let own = o.thread_stack_threads().map(|t| t.0).unwrap_or_default();
    let rows: Vec<serde_json::Value> = o
        .profile
        .threads
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let calls: serde_json::Map<String, serde_json::Value> = t
                .stats
                .iter()
                .into_iter()
                .filter(|(_, c)| c.count > 0)
                .map(|(name, c)| (name.to_owned(), serde_json::json!([c.count, c.sum])))
                .collect();
            serde_json::json!({
                "thread": i + 1,
                "merged": t.merged_threads,
                "mem_ops": t.cnt_mem_ops,
                "calls": calls,
                "deepest_stack_bytes": t.stack_mem.size,
                "own_stacks": own.contains(&(i as u32)),
            })
        })
        .collect();
    serde_json::Value::Array(rows)
}

/// The scatter plots' bins, times in seconds: allocations by (time, size)
/// and freed blocks by (size, lifetime), each `[x, y, count]`.
fn scatter(o: &Opened) -> serde_json::Value {
    let tps = o.profile.globals.ticks_per_second.max(1) as f64;
    let s = &o.profile.scatter;
    let size_time: Vec<_> = s
        .size_over_time
        .points
        .iter()
        .map(|p| serde_json::json!([p.x as f64 / tps, p.y, p.v]))
        .collect();
    let life_size: Vec<_> = s
        .lifetime_over_size
        .points
        .iter()
        .map(|p| serde_json::json!([p.x, p.y as f64 / tps, p.v]))
        .collect();
    serde_json::json!({ "size_over_time": size_time, "lifetime_over_size": life_size })
}

/// Global and thread-local variables, largest first (at most 500).
fn globals(o: &Opened) -> Result<serde_json::Value> {
    let all = o.globals()?;
    let mut rows: Vec<_> = all
        .iter()
        .flat_map(|(binary, vars)| vars.iter().map(move |v| (binary, v)))
        .collect();
    rows.sort_by_key(|(_, v)| std::cmp::Reverse(v.size));
    let total: u64 = rows.iter().map(|(_, v)| v.size).sum();
    let count = rows.len();
    rows.truncate(500);
    Ok(serde_json::json!({
        "count": count,
        "bytes": total,
        "rows": rows.iter().map(|(binary, v)| serde_json::json!({
            "name": v.name,
            "size": v.size,
            "tls": v.tls,
            "binary": heapledger_profile::basename(binary),
            "file": v.source_file,
            "line": v.line,
        })).collect::<Vec<_>>(),
    }))
}

fn summary(o: &Opened) -> Result<serde_json::Value> {
    let mut sites = heapledger_analysis::summary::SiteSums::new();
    o.each_stack(|stack, infos| sites.add(&o.profile, stack, infos))?;
    let s = heapledger_analysis::summary::Summary::with_sites(
        &o.profile,
        sites,
        &heapledger_analysis::summary::SummaryOptions { top: 20 },
    );
    Ok(s.to_json())
}

/// The timeline's buckets as columns: seconds from the start, memory
/// (requested, resident, virtual) and bytes allocated and freed per
/// bucket.
fn timeline(o: &Opened) -> serde_json::Value {
    let p = &o.profile;
    let tps = p.globals.ticks_per_second.max(1) as f64;
    let m = &p.timeline.memory_timeline;
    let b = &p.timeline.memory_bandwidth;
    let step = m.per_points as f64 / tps;
    let col = |values: &[Vec<u64>], k: usize| -> Vec<u64> {
        values
            .iter()
            .map(|v| v.get(k).copied().unwrap_or(0))
            .collect()
    };
    let secs: Vec<f64> = (0..m.values.len()).map(|i| i as f64 * step).collect();
    let mut alloc = col(&b.values, bandwidth::ALLOC_MEM);
    let mut free = col(&b.values, bandwidth::FREE_MEM);
    alloc.resize(secs.len(), 0);
    free.resize(secs.len(), 0);
    // The call site whose allocation set each point's highest requested
    // memory (none: `null`).
    let sites: Vec<Option<String>> = (0..secs.len())
        .map(|i| {
            let a = *m.callsite.get(i)?;
            (a != heapledger_profile::Addr::NULL)
                .then(|| heapledger_analysis::summary::site_of(p, a).to_string())
        })
        .collect();
    serde_json::json!({
        "sites": sites,
        "step_seconds": step,
        "seconds": secs,
        "requested": col(&m.values, memory::REQUESTED),
        "resident": col(&m.values, memory::PHYSICAL),
        "virtual": col(&m.values, memory::VIRTUAL),
        "alloc_bytes": alloc,
        "free_bytes": free,
    })
}

/// The page as served: assets by URL.
pub fn served_page() -> String {
    INDEX_HTML
        .replace(
            "<!--STYLE-->",
            r#"<link rel="stylesheet" href="uplot.css"><link rel="stylesheet" href="app.css">"#,
        )
        .replace("<!--DATA-->", "")
        .replace(
            "<!--SCRIPTS-->",
            r#"<script src="uplot.js"></script><script src="app.js"></script>"#,
        )
}

/// One self-contained page: the assets inline, and the answers of the
/// default views (the summary, the timeline, the flame graph by bytes,
/// allocations and bytes at the peak, and by bytes inverted, the call
/// tree both ways by bytes, and top-down with recursion fully collapsed)
/// embedded, each bounded as the pages are
/// (flame graph frames narrower than drawn and tree nodes under 0.1%
/// left out).
/// What the HTML file holds at most of source files (bytes of their JSON).
const EMBEDDED_SOURCES: usize = 4 << 20;

/// `s` as JavaScript's `encodeURIComponent` writes it (the page looks its
/// embedded sources up by that key).
fn uri_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

pub fn page_with_data(o: &Opened) -> Result<String> {
    let mut cache = SampleCache::default();
    let mut data = serde_json::Map::new();
    data.insert("summary".into(), summary(o)?);
    data.insert("timeline".into(), timeline(o));
    data.insert("range".into(), range_answer(o, "")?);
    data.insert("meta".into(), serde_json::json!({ "base": null }));
    data.insert("threads".into(), threads(o));
    data.insert("scatter".into(), scatter(o));
    data.insert("globals".into(), globals(o)?);
    data.insert(
        "waits".into(),
        serde_json::from_str(&crate::waits::report(&o.profile, 16, true))?,
    );
    let (_, leaks) = answer(o, &mut cache, "leaks", "")?;
    data.insert("leaks".into(), String::from_utf8(leaks)?.into());
    // The sources: the list, and the files that weigh most, as many as
    // fit in EMBEDDED_SOURCES bytes (the page is meant to travel).
    let files = sources::files(o)?;
    let mut room = EMBEDDED_SOURCES;
    for f in files.as_array().into_iter().flatten() {
        let (Some(file), true) = (f["file"].as_str(), f["readable"] == true) else {
            continue;
        };
        let Ok(one) = sources::source(o, file) else {
            continue;
        };
        let size = serde_json::to_string(&one)?.len();
        if size > room {
            continue;
        }
        room -= size;
        data.insert(format!("source?file={}", uri_component(file)), one);
    }
    data.insert("sources".into(), files);
    // What is weighed by bytes first, then the other metrics: the stacks
    // are read once per metric (`samples_of` keeps the last).
    let flame = |o: &Opened,
                 cache: &mut SampleCache,
                 data: &mut serde_json::Map<_, _>,
                 metric: &str,
                 inverted: u8|
     -> Result<()> {
        let q = format!("metric={metric}&inverted={inverted}&collapse=none&jit=0");
        if let Ok((_, svg)) = answer(o, cache, "flame", &q) {
            data.insert(format!("flame?{q}"), String::from_utf8(svg)?.into());
        }
        Ok(())
    };
    flame(o, &mut cache, &mut data, "bytes", 0)?;
    flame(o, &mut cache, &mut data, "bytes", 1)?;
    // The first flame graph's tooltips with every metric.
    let q = "metric=bytes&inverted=0&collapse=none&jit=0";
    if let Ok((_, info)) = answer(o, &mut cache, "flameinfo", q) {
        data.insert(format!("flameinfo?{q}"), serde_json::from_slice(&info)?);
    }
    let mut trees = Vec::new();
    for (direction, collapse) in [
        ("top-down", "none"),
        ("top-down", "full"),
        ("bottom-up", "none"),
    ] {
        let q = format!("metric=bytes&direction={direction}&collapse={collapse}");
        let (_, json) = answer(o, &mut cache, "tree", &q)?;
        trees.push((format!("tree?{q}"), json));
    }
    flame(o, &mut cache, &mut data, "count", 0)?;
    flame(o, &mut cache, &mut data, "peak", 0)?;
    // The trees go in as their JSON text: a deep tree (up to 512 levels)
    // nests deeper than serde_json reads back by default (128).
    let mut text = serde_json::to_string(&data)?;
    text.pop(); // the closing brace
    for (key, json) in trees {
        if text.len() > 1 {
            text.push(',');
        }
        text.push_str(&serde_json::to_string(&key)?);
        text.push(':');
        text.push_str(std::str::from_utf8(&json)?);
    }
    text.push('}');
    // `</` inside a string would end the script element early.
    let data = text.replace("</", "<\\/");
    Ok(INDEX_HTML
        .replace(
            "<!--STYLE-->",
            &format!("<style>{UPLOT_CSS}\n{APP_CSS}</style>"),
        )
        .replace(
            "<!--DATA-->",
            &format!("<script>window.HEAPLEDGER_DATA = {data};</script>"),
        )
        .replace(
            "<!--SCRIPTS-->",
            &format!("<script>{UPLOT_JS}</script>\n<script>{APP_JS}</script>"),
        ))
}

/// `export --format html`: the viewer's pages in one file.
pub fn write_html(o: &Opened, out: &Path) -> Result<()> {
    let page = page_with_data(o)?;
    crate::output::write_whole(out, |mut f| {
        std::io::Write::write_all(&mut f, page.as_bytes())?;
        Ok(())
    })
}
