//! The results: the table, the targets with PASS/MISS, the threads table, and
//! the same as JSON and CSV for `--out`.

use crate::measure::{Analysis, AnalysisSeries, Series, Stack, Tool};
use crate::workloads::{Case, Workload};
use serde_json::{json, Value};
use std::fmt::Write as _;

/// The targets the issue sets.
pub const CHURN_MAX_ADDED_RATIO: f64 = 0.25;
pub const PYTHON_MAX_WALL_RATIO: f64 = 0.33;
pub const PAIRS_MAX_ADDED_NS: f64 = 40.0;
/// Noise allowance of the threads criterion: heapledger's added cost per pair may
/// grow from T=1 to T by at most this factor times what plain's cost per pair does.
pub const THREADS_GROWTH_SLACK: f64 = 1.25;
/// Profiles at scale (`stacks`, `compileall`), issue 30: heapledger's added
/// wall time over heaptrack's.
pub const SCALE_MAX_ADDED_RATIO: f64 = 0.25;
/// heapledger's profile over heaptrack's compressed file.
pub const SCALE_MAX_FILE_RATIO: f64 = 1.0;
/// heapledger's largest process RSS over heaptrack's.
pub const SCALE_MAX_RSS_RATIO: f64 = 1.0;
/// `heapledger report` on the profile: wall time (s) and largest RSS (MB).
pub const REPORT_MAX_S: f64 = 1.0;
pub const REPORT_MAX_MB: f64 = 200.0;
/// `heapledger tree --collapse full` on the profile: wall time (s).
pub const TREE_MAX_S: f64 = 2.0;
/// `--only-lib` on `pairs`, whose calls are all another code's: ns added
/// per malloc+free pair (issue 34).
pub const OTHER_LIB_MAX_ADDED_NS: f64 = 15.0;
/// `locks`: ns added per uncontended lock+unlock pair (issue 35).
pub const LOCK_MAX_ADDED_NS: f64 = 10.0;
/// `locks`: a contended wait's time lost against the program's own
/// measure, at most this far apart (percent; issue 35).
pub const WAIT_MAX_ERROR_PERCENT: f64 = 1.0;
/// `--stack none` on the `varied` churn, ns added per malloc+free pair.
pub const VARIED_MAX_ADDED_NS: f64 = 40.0;

/// Facts about the run, for the header and the JSON.
pub struct Meta {
    /// A contended wait's time lost against the program's own measure.
    pub wait_accuracy: Option<crate::waits::Accuracy>,
    pub runs: u32,
    pub quick: bool,
    pub cpus: usize,
    pub load_start: String,
    pub load_end: String,
    pub heapledger: String,
    pub heaptrack: Option<String>,
    pub python: Option<String>,
    pub notes: Vec<String>,
    pub cflags: String,
    pub elapsed_s: f64,
}

/// One line of the main table.
struct Row<'a> {
    case: &'a Case,
    s: &'a Series,
    median: Option<f64>,
    min: Option<f64>,
    added: Option<f64>,
    ratio: Option<f64>,
    added_ns: Option<f64>,
}

/// A target (or an informative ratio, where `limit` is None).
struct Target {
    workload: &'static str,
    what: String,
    value: Option<f64>,
    unit: &'static str,
    limit: Option<f64>,
    /// None: not measurable (a tool failed, or heaptrack is missing).
    pass: Option<bool>,
}

/// The label of a target's paired figure (see `paired_median`).
const SAME_PAIRED: &str = "the same, median of each round's ratio";

impl Target {
    /// A ratio shown for information, with no limit.
    fn info(workload: &'static str, what: &str, value: Option<f64>) -> Target {
        Target::at_most(workload, what.into(), value, "", None)
    }

    /// A value compared with an upper limit (or shown for information).
    fn at_most(
        workload: &'static str,
        what: String,
        value: Option<f64>,
        unit: &'static str,
        limit: Option<f64>,
    ) -> Target {
        Target {
            workload,
            what,
            value,
            unit,
            limit,
            pass: limit.and_then(|l| value.map(|v| v <= l)),
        }
    }
}

/// One line of the threads table.
struct ThreadRow {
    threads: u32,
    plain_s: Option<f64>,
    plain_ns: Option<f64>,
    heapledger_s: Option<f64>,
    added_ns: Option<f64>,
    plain_growth: Option<f64>,
    heapledger_growth: Option<f64>,
    pass: Option<bool>,
    /// The recorder alone (no `heapledger run`): added ns/pair and its growth.
    recorder_ns: Option<f64>,
    recorder_growth: Option<f64>,
}

pub struct Report {
    pub text: String,
    pub json: Value,
    pub csv: String,
}

fn median_of(series: &[Series], case: usize, tool: Tool) -> Option<f64> {
    series
        .iter()
        .find(|s| s.case == case && s.tool == tool)
        .and_then(Series::median)
}

/// The median, over the rounds, of `a`'s time over `b`'s in the same
/// round: runs are interleaved, so a round that the machine made slow is
/// slow for both, and their ratio keeps less of that noise than the ratio
/// of the medians.
fn paired_median(series: &[Series], case: usize, a: Tool, b: Tool) -> Option<f64> {
    let times = |t: Tool| {
        series
            .iter()
            .find(|s| s.case == case && s.tool == t)
            .map(|s| s.times.clone())
    };
    let (ta, tb) = (times(a)?, times(b)?);
    if ta.len() != tb.len() {
        return None;
    }
    let r: Vec<f64> = ta.iter().zip(&tb).map(|(x, y)| x / y).collect();
    crate::measure::median(&r)
}

fn f(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.digits$}"))
}

fn verdict(p: Option<bool>) -> &'static str {
    match p {
        Some(true) => "PASS",
        Some(false) => "MISS",
        None => "n/a",
    }
}

fn rows<'a>(cases: &'a [Case], series: &'a [Series]) -> Vec<Row<'a>> {
    series
        .iter()
        .map(|s| {
            let case = &cases[s.case];
            let plain = median_of(series, s.case, Tool::Plain);
            let median = s.median();
            let (added, ratio) = match (s.tool, median, plain) {
                (Tool::Plain, Some(_), Some(_)) => (None, Some(1.0)),
                (_, Some(m), Some(p)) if p > 0.0 => (Some(m - p), Some(m / p)),
                _ => (None, None),
            };
            let added_ns = match (added, case.pairs) {
                (Some(a), Some(n)) if n > 0 => Some(a * 1e9 / n as f64),
                _ => None,
            };
            Row {
                case,
                s,
                median,
                min: s.min(),
                added,
                ratio,
                added_ns,
            }
        })
        .collect()
}

fn find<'a>(rows: &'a [Row<'a>], w: Workload, tool: Tool) -> Option<&'a Row<'a>> {
    rows.iter()
        .find(|r| r.case.workload == w && r.case.threads.is_none() && r.s.tool == tool)
}

fn targets(
    rows: &[Row],
    series: &[Series],
    analyses: &[AnalysisSeries],
    heaptrack: bool,
    threads: &[ThreadRow],
) -> Vec<Target> {
    let mut t = Vec::new();
    let has = |w: Workload| rows.iter().any(|r| r.case.workload == w);
    if has(Workload::Churn) && heaptrack {
        let ht_added = find(rows, Workload::Churn, Tool::Heaptrack)
            .and_then(|r| r.added)
            .filter(|&a| a > 0.0);
        for (stack, limit) in [
            (Stack::Dwarf, Some(CHURN_MAX_ADDED_RATIO)),
            (Stack::Fp, None),
        ] {
            let m = find(rows, Workload::Churn, Tool::Heapledger(stack)).and_then(|r| r.added);
            let value = m.zip(ht_added).map(|(m, h)| m / h);
            t.push(Target::at_most(
                "churn",
                format!("heapledger {} added / heaptrack added", stack.arg()),
                value,
                "",
                limit,
            ));
        }
    }
    if has(Workload::Python) && heaptrack {
        let m = find(rows, Workload::Python, Tool::Heapledger(Stack::Dwarf)).and_then(|r| r.median);
        let h = find(rows, Workload::Python, Tool::Heaptrack)
            .and_then(|r| r.median)
            .filter(|&h| h > 0.0);
        let value = m.zip(h).map(|(m, h)| m / h);
        t.push(Target::at_most(
            "python",
            "heapledger dwarf wall / heaptrack wall".into(),
            value,
            "",
            Some(PYTHON_MAX_WALL_RATIO),
        ));
        let paired = find(rows, Workload::Python, Tool::Heaptrack).and_then(|r| {
            paired_median(
                series,
                r.s.case,
                Tool::Heapledger(Stack::Dwarf),
                Tool::Heaptrack,
            )
        });
        t.push(Target::info("python", SAME_PAIRED, paired));
    }
    if has(Workload::Python) {
        let value = find(rows, Workload::Python, Tool::HeapledgerSampled)
            .and_then(|r| r.ratio)
            .map(|r| r - 1.0);
        // `--sample-every 512K` was to add at most 5 %: issue 30 withdrew
        // that target, a preload that only forwards already costing about
        // as much (the floors below). Shown for information.
        t.push(Target::info(
            "python",
            "heapledger 512K wall / plain wall - 1 (target withdrawn)",
            value,
        ));
        let over_plain = |tool: Tool| {
            find(rows, Workload::Python, tool)
                .and_then(|r| paired_median(series, r.s.case, tool, Tool::Plain).map(|m| m - 1.0))
        };
        t.push(Target::info(
            "python",
            SAME_PAIRED,
            over_plain(Tool::HeapledgerSampled),
        ));
        for (tool, what) in [
            (
                Tool::Forward,
                "floor: a preload that only forwards, the same",
            ),
            (
                Tool::Count,
                "floor: one that counts as the lean paths do, the same",
            ),
        ] {
            let floor = over_plain(tool);
            if floor.is_some() {
                t.push(Target::info("python", what, floor));
            }
        }
    }
    if has(Workload::Pairs) {
        for (stack, limit) in [
            (Stack::None, Some(PAIRS_MAX_ADDED_NS)),
            (Stack::Dwarf, None),
        ] {
            let value =
                find(rows, Workload::Pairs, Tool::Heapledger(stack)).and_then(|r| r.added_ns);
            t.push(Target::at_most(
                "pairs",
                format!("heapledger {} added per malloc+free pair", stack.arg()),
                value,
                " ns",
                limit,
            ));
        }
        let value = find(rows, Workload::Pairs, Tool::HeapledgerOtherLib).and_then(|r| r.added_ns);
        t.push(Target::at_most(
            "pairs",
            "heapledger --only-lib, another code's calls: added per malloc+free pair".to_owned(),
            value,
            " ns",
            Some(OTHER_LIB_MAX_ADDED_NS),
        ));
    }
    if has(Workload::Locks) {
        let value =
            find(rows, Workload::Locks, Tool::Heapledger(Stack::Dwarf)).and_then(|r| r.added_ns);
        t.push(Target::at_most(
            "locks",
            "heapledger added per uncontended lock+unlock pair".to_owned(),
            value,
            " ns",
            Some(LOCK_MAX_ADDED_NS),
        ));
    }
    if has(Workload::Varied) {
        for (tool, limit) in [
            (Tool::Heapledger(Stack::None), Some(VARIED_MAX_ADDED_NS)),
            (Tool::Heapledger(Stack::Dwarf), None),
            (Tool::Heaptrack, None),
        ] {
            if tool == Tool::Heaptrack && !heaptrack {
                continue;
            }
            let value = find(rows, Workload::Varied, tool).and_then(|r| r.added_ns);
            t.push(Target::at_most(
                "varied",
                format!("{} added per malloc+free pair", tool.name()),
                value,
                " ns",
                limit,
            ));
        }
    }
    for w in [
        Workload::Stacks,
        Workload::StacksThreads,
        Workload::Compileall,
    ] {
        if has(w) {
            scale_targets(&mut t, rows, analyses, w, heaptrack);
        }
    }
    if threads.len() > 1 {
        let checked: Vec<Option<bool>> = threads.iter().skip(1).map(|r| r.pass).collect();
        let pass = if checked.iter().any(|p| p.is_none()) {
            None
        } else {
            Some(checked.iter().all(|p| *p == Some(true)))
        };
        let worst = threads
            .iter()
            .skip(1)
            .filter_map(|r| r.heapledger_growth.zip(r.plain_growth).map(|(m, p)| m / p))
            .max_by(f64::total_cmp);
        t.push(Target {
            workload: "threads",
            what: "heapledger added/pair growth / plain's, worst T".into(),
            value: worst,
            unit: "",
            limit: Some(THREADS_GROWTH_SLACK),
            pass,
        });
    }
    t
}

/// Issue 30's targets 1 to 4 on a profile at scale.
fn scale_targets(
    t: &mut Vec<Target>,
    rows: &[Row],
    analyses: &[AnalysisSeries],
    w: Workload,
    heaptrack: bool,
) {
    let name = w.name();
    let hl = find(rows, w, Tool::Heapledger(Stack::Dwarf));
    let ht = find(rows, w, Tool::Heaptrack);
    if heaptrack {
        let ht_added = ht.and_then(|r| r.added).filter(|&a| a > 0.0);
        let value = hl.and_then(|r| r.added).zip(ht_added).map(|(m, h)| m / h);
        t.push(Target::at_most(
            name,
            "heapledger dwarf added / heaptrack added".into(),
            value,
            "",
            Some(SCALE_MAX_ADDED_RATIO),
        ));
        let ratio = |f: fn(&Series) -> Option<f64>| {
            hl.and_then(|r| f(r.s))
                .zip(ht.and_then(|r| f(r.s)).filter(|&h| h > 0.0))
                .map(|(m, h)| m / h)
        };
        t.push(Target::at_most(
            name,
            "heapledger profile / heaptrack's .zst, bytes".into(),
            ratio(Series::out_mb),
            "",
            Some(SCALE_MAX_FILE_RATIO),
        ));
        t.push(Target::at_most(
            name,
            "heapledger largest RSS / heaptrack's".into(),
            ratio(Series::rss_mb),
            "",
            Some(SCALE_MAX_RSS_RATIO),
        ));
    }
    let case = hl.map(|r| r.s.case);
    let a = |what: Analysis| {
        analyses
            .iter()
            .find(|a| Some(a.case) == case && a.what == what)
    };
    let report = a(Analysis::Report);
    t.push(Target::at_most(
        name,
        "heapledger report, wall".into(),
        report.and_then(AnalysisSeries::median),
        " s",
        Some(REPORT_MAX_S),
    ));
    t.push(Target::at_most(
        name,
        "heapledger report, largest RSS".into(),
        report.and_then(AnalysisSeries::rss_mb),
        " MB",
        Some(REPORT_MAX_MB),
    ));
    t.push(Target::at_most(
        name,
        "heapledger tree --collapse full, wall".into(),
        a(Analysis::Tree).and_then(AnalysisSeries::median),
        " s",
        Some(TREE_MAX_S),
    ));
    // Issue 30 asks a reader's memory to follow what it shows, with no
    // number: shown for reference.
    for what in [Analysis::Tree, Analysis::TreePlain] {
        t.push(Target::at_most(
            name,
            format!("{}, largest RSS", what.name()),
            a(what).and_then(AnalysisSeries::rss_mb),
            " MB",
            None,
        ));
    }
}

fn thread_rows(cases: &[Case], series: &[Series]) -> Vec<ThreadRow> {
    let mut out: Vec<ThreadRow> = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        let (Some(threads), Some(pairs)) = (c.threads, c.pairs) else {
            continue;
        };
        let plain_s = median_of(series, i, Tool::Plain);
        let heapledger_s = median_of(series, i, Tool::Heapledger(Stack::Dwarf));
        let per = |s: f64| s * 1e9 / pairs as f64;
        let plain_ns = plain_s.map(per);
        let added_ns = heapledger_s.zip(plain_s).map(|(m, p)| per(m - p));
        let recorder_ns = median_of(series, i, Tool::Recorder)
            .zip(plain_s)
            .map(|(m, p)| per(m - p));
        out.push(ThreadRow {
            threads,
            plain_s,
            plain_ns,
            heapledger_s,
            added_ns,
            plain_growth: None,
            heapledger_growth: None,
            pass: None,
            recorder_ns,
            recorder_growth: None,
        });
    }
    let base_recorder = out.first().and_then(|r| r.recorder_ns);
    if let Some(b) = base_recorder.filter(|&b| b > 0.0) {
        for r in out.iter_mut() {
            r.recorder_growth = r.recorder_ns.map(|m| m / b);
        }
    }
    let base = out.first().map(|r| (r.plain_ns, r.added_ns));
    if let Some((Some(bp), Some(bm))) = base {
        for r in out.iter_mut() {
            r.plain_growth = r.plain_ns.filter(|_| bp > 0.0).map(|p| p / bp);
            r.heapledger_growth = r.added_ns.filter(|_| bm > 0.0).map(|m| m / bm);
            r.pass = r
                .heapledger_growth
                .zip(r.plain_growth)
                .map(|(m, p)| m <= p * THREADS_GROWTH_SLACK);
        }
    }
    out
}

pub fn build(
    cases: &[Case],
    series: &[Series],
    analyses: &[AnalysisSeries],
    meta: &Meta,
) -> Report {
    let rows = rows(cases, series);
    let threads = thread_rows(cases, series);
    let mut targets = targets(&rows, series, analyses, meta.heaptrack.is_some(), &threads);
    if let Some(a) = meta.wait_accuracy {
        targets.push(Target::at_most(
            "locks",
            format!(
                "a contended wait: time lost {:.3} s against the program's own {:.3} s, apart by",
                a.recorded_ns as f64 / 1e9,
                a.program_ns as f64 / 1e9
            ),
            Some(a.error_percent()),
            " %",
            Some(WAIT_MAX_ERROR_PERCENT),
        ));
    }
    let mut s = String::new();

    // Header.
    let _ = writeln!(
        s,
        "heapledger-bench: {} run{} of each, interleaved; wall time of the whole run (start-up, symbolization, writing){}",
        meta.runs,
        if meta.runs == 1 { "" } else { "s" },
        if meta.quick { "; --quick (workloads 10x smaller)" } else { "" }
    );
    let _ = writeln!(
        s,
        "machine: {} CPUs; load average {} at start, {} at end; took {:.0} s",
        meta.cpus, meta.load_start, meta.load_end, meta.elapsed_s
    );
    for n in &meta.notes {
        let _ = writeln!(s, "note: {n}");
    }
    let _ = writeln!(s);

    // Main table.
    let _ = writeln!(
        s,
        "{:<18} {:<15} {:>9} {:>9} {:>9} {:>8} {:>14}",
        "workload", "tool", "median s", "min s", "added s", "x plain", "added ns/pair"
    );
    // The threads workload has its own table below.
    let mut last = "";
    for r in rows.iter().filter(|r| r.case.threads.is_none()) {
        if !last.is_empty() && last != r.case.label {
            let _ = writeln!(s);
        }
        last = &r.case.label;
        if let (Some(e), true) = (&r.s.error, r.s.times.is_empty()) {
            let _ = writeln!(
                s,
                "{:<18} {:<15} failed: {e}",
                r.case.label,
                r.s.tool.name()
            );
            continue;
        }
        let _ = writeln!(
            s,
            "{:<18} {:<15} {:>9} {:>9} {:>9} {:>8} {:>14}{}",
            r.case.label,
            r.s.tool.name(),
            f(r.median, 3),
            f(r.min, 3),
            f(r.added, 3),
            f(r.ratio, 2),
            f(r.added_ns, 1),
            if r.s.error.is_some() {
                "  (failed later; partial)"
            } else {
                ""
            }
        );
    }

    // Profiles at scale.
    let scale: Vec<&Row> = rows.iter().filter(|r| r.case.workload.at_scale()).collect();
    if !scale.is_empty() {
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "profiles at scale: medians of the runs; file: heapledger's profile, heaptrack's .zst; RSS: the largest process of the run (tool, program, helpers)"
        );
        let _ = writeln!(
            s,
            "{:<18} {:<17} {:>9} {:>9} {:>17} {:>9} {:>11}",
            "workload", "tool", "median s", "added s", "added/heaptrack's", "file MB", "max RSS MB"
        );
        let mut last = "";
        for r in &scale {
            if r.s.times.is_empty() {
                continue;
            }
            if !last.is_empty() && last != r.case.label {
                let _ = writeln!(s);
            }
            last = &r.case.label;
            let ht_added = find(&rows, r.case.workload, Tool::Heaptrack)
                .and_then(|h| h.added)
                .filter(|&a| a > 0.0);
            let vs_ht = match r.s.tool {
                Tool::Plain => None,
                _ => r.added.zip(ht_added).map(|(a, h)| a / h),
            };
            let _ = writeln!(
                s,
                "{:<18} {:<17} {:>9} {:>9} {:>17} {:>9} {:>11}",
                r.case.label,
                r.s.tool.name(),
                f(r.median, 3),
                f(r.added, 3),
                f(vs_ht, 2),
                f(r.s.out_mb(), 1),
                f(r.s.rss_mb(), 1),
            );
        }
    }
    if !analyses.is_empty() {
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "reading the profiles (the last run's file; output to /dev/null): medians of the runs"
        );
        let _ = writeln!(
            s,
            "{:<18} {:<32} {:>9} {:>9} {:>11}",
            "workload", "command", "file MB", "median s", "max RSS MB"
        );
        for a in analyses {
            let label = cases.get(a.case).map_or("", |c| c.label.as_str());
            if let (Some(e), true) = (&a.error, a.times.is_empty()) {
                let _ = writeln!(s, "{:<18} {:<32} failed: {e}", label, a.what.name());
                continue;
            }
            let _ = writeln!(
                s,
                "{:<18} {:<32} {:>9} {:>9} {:>11}",
                label,
                a.what.name(),
                f(Some(a.input_bytes as f64 / 1e6), 1),
                f(a.median(), 3),
                f(a.rss_mb(), 1),
            );
        }
    }

    // Targets.
    if !targets.is_empty() {
        let _ = writeln!(s);
        let _ = writeln!(s, "targets");
        for t in &targets {
            let value = t
                .value
                .map_or_else(|| "n/a".into(), |v| format!("{v:.2}{}", t.unit));
            let (limit, v) = match t.limit {
                Some(l) => (format!("<= {l}{}", t.unit), verdict(t.pass)),
                None => ("(info)".into(), ""),
            };
            let _ = writeln!(
                s,
                "{:<10} {:<46} {:>10}  {:<10} {}",
                t.workload, t.what, value, limit, v
            );
        }
    }

    // Threads.
    if !threads.is_empty() {
        let pairs: Vec<u64> = cases
            .iter()
            .filter(|c| c.threads.is_some())
            .filter_map(|c| c.pairs)
            .collect();
        let first = pairs.first().copied().unwrap_or(0);
        let split = if pairs.iter().all(|&p| p == first) {
            format!("{first} churn pairs in total, split over T threads")
        } else {
            format!("{first} churn pairs in each of T threads (--threads-weak)")
        };
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "threads: {split}; heapledger --stack dwarf; per pair = wall / total pairs"
        );
        let _ = writeln!(
            s,
            "{:>3} {:>9} {:>14} {:>11} {:>22} {:>12} {:>15} {:>17} {:>15}",
            "T",
            "plain s",
            "plain ns/pair",
            "heapledger s",
            "heapledger added ns/pair",
            "plain vs T1",
            "heapledger vs T1",
            "recorder ns/pair",
            "recorder vs T1"
        );
        for r in &threads {
            let _ = writeln!(
                s,
                "{:>3} {:>9} {:>14} {:>11} {:>22} {:>12} {:>15} {:>17} {:>15}  {}",
                r.threads,
                f(r.plain_s, 3),
                f(r.plain_ns, 1),
                f(r.heapledger_s, 3),
                f(r.added_ns, 1),
                f(r.plain_growth, 2),
                f(r.heapledger_growth, 2),
                f(r.recorder_ns, 1),
                f(r.recorder_growth, 2),
                if r.threads == threads[0].threads {
                    ""
                } else {
                    verdict(r.pass)
                }
            );
        }
        let _ = writeln!(
            s,
            "PASS where heapledger's growth <= {THREADS_GROWTH_SLACK} x plain's growth (from the first row; the factor allows for noise)"
        );
        let _ = writeln!(
            s,
            "recorder: the recorder alone (LD_PRELOAD, raw dump at exit; no `heapledger run` beside the program), for comparison; the verdict is on the whole run"
        );
    }

    // JSON and CSV.
    let results: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!({
                "workload": r.case.workload.name(),
                "case": r.case.label,
                "threads": r.case.threads,
                "pairs": r.case.pairs,
                "command": r.case.program.display(),
                "tool": r.s.tool.name(),
                "times_s": r.s.times,
                "median_s": r.median,
                "min_s": r.min,
                "added_s": r.added,
                "ratio_to_plain": r.ratio,
                "added_ns_per_pair": r.added_ns,
                "max_rss_kb": r.s.rss_kb,
                "output_bytes": r.s.out_bytes,
                "error": r.s.error,
            })
        })
        .collect();
    let json_analyses: Vec<Value> = analyses
        .iter()
        .map(|a| {
            json!({
                "workload": cases.get(a.case).map(|c| c.workload.name()),
                "command": a.what.name(),
                "input_bytes": a.input_bytes,
                "times_s": a.times,
                "median_s": a.median(),
                "max_rss_kb": a.rss_kb,
                "error": a.error,
            })
        })
        .collect();
    let json_targets: Vec<Value> = targets
        .iter()
        .map(|t| {
            json!({
                "workload": t.workload,
                "what": t.what,
                "value": t.value,
                "unit": t.unit.trim(),
                "limit": t.limit,
                "verdict": t.limit.map(|_| verdict(t.pass)),
            })
        })
        .collect();
    let json_threads: Vec<Value> = threads
        .iter()
        .map(|r| {
            json!({
                "threads": r.threads,
                "plain_median_s": r.plain_s,
                "plain_ns_per_pair": r.plain_ns,
                "heapledger_median_s": r.heapledger_s,
                "heapledger_added_ns_per_pair": r.added_ns,
                "plain_growth": r.plain_growth,
                "heapledger_growth": r.heapledger_growth,
                "verdict": verdict(r.pass),
            })
        })
        .collect();
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let json = json!({
        "tool": "heapledger-bench",
        "unix_time": unix,
        "runs": meta.runs,
        "quick": meta.quick,
        "cpus": meta.cpus,
        "load_average_start": meta.load_start,
        "load_average_end": meta.load_end,
        "elapsed_s": meta.elapsed_s,
        "cflags": meta.cflags,
        "heapledger": meta.heapledger,
        "heaptrack": meta.heaptrack,
        "python": meta.python,
        "notes": meta.notes,
        "results": results,
        "targets": json_targets,
        "threads": json_threads,
        "analyses": json_analyses,
    });
    let mut csv = String::from("workload,case,tool,run,seconds,max_rss_kb,output_bytes\n");
    let cell = |v: Option<&u64>| v.map_or_else(String::new, u64::to_string);
    for r in &rows {
        for (i, t) in r.s.times.iter().enumerate() {
            let _ = writeln!(
                csv,
                "{},{},{},{},{t:.6},{},{}",
                r.case.workload.name(),
                r.case.label,
                r.s.tool.name(),
                i + 1,
                cell(r.s.rss_kb.get(i)),
                cell(r.s.out_bytes.get(i)),
            );
        }
    }
    for a in analyses {
        let label = cases.get(a.case).map_or("", |c| c.label.as_str());
        let w = cases.get(a.case).map_or("", |c| c.workload.name());
        for (i, t) in a.times.iter().enumerate() {
            let _ = writeln!(
                csv,
                "{w},{label},{},{},{t:.6},{},",
                a.what.name(),
                i + 1,
                cell(a.rss_kb.get(i)),
            );
        }
    }
    // No trailing blanks (the verdict column is empty on informative lines).
    let text = s.lines().map(str::trim_end).collect::<Vec<_>>().join("\n") + "\n";
    Report { text, json, csv }
}
