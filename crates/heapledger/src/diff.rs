//! `heapledger diff BASE NEW`: which allocation sites grew or shrank
//! between two profiles, by allocations, bytes, bytes at the peak and
//! bytes leaked, largest change first. Sites are matched by function and
//! source location (not by address, which differs between runs and
//! builds), as the summary names them.

use crate::profiles::Opened;
use crate::tree::RangeRows;
use anyhow::Result;
use heapledger_analysis::summary::{format_bytes, SiteSums, SiteTotal};
use std::collections::HashMap;

/// A site's totals in both profiles.
pub struct Row {
    pub function: String,
    pub location: String,
    pub library: String,
    pub base: [u64; 4],
    pub new: [u64; 4],
}

impl Row {
    fn delta(&self, k: usize) -> i128 {
        i128::from(self.new[k]) - i128::from(self.base[k])
    }
}

/// Column order of `Row::base` and `Row::new`.
pub const COLUMNS: [&str; 4] = ["calls", "bytes", "bytes_at_peak", "leaked"];

/// Every site of a profile, with its leaks; or, with `range`, what each
/// allocated in that time range (allocations and bytes alone).
fn sites(o: &Opened, range: Option<&RangeRows>) -> Result<Vec<SiteTotal>> {
    let mut sums = SiteSums::new();
    if let Some(rows) = range {
        let (mut row, mut next) = (0u32, 0usize);
        o.each_stack(|stack, _| {
            let at = row;
            row += 1;
            while next < rows.len() && rows[next].0 < at {
                next += 1;
            }
            if let Some((_, a, b)) = rows.get(next).filter(|r| r.0 == at) {
                let mut infos = heapledger_profile::StackInfos::default();
                infos.alloc.count = b[0].saturating_sub(a[0]);
                infos.alloc.sum = b[1].saturating_sub(a[1]);
                sums.add(&o.profile, stack, &infos);
            }
        })?;
        return Ok(sums.into_totals());
    }
    o.each_stack(|stack, infos| sums.add(&o.profile, stack, infos))?;
    let mut runtime = o.profile.runtime_leaks();
    runtime.sort_unstable();
    for (i, l) in o.profile.leaks.iter().enumerate() {
        if runtime.binary_search(&i).is_err() {
            sums.add_leak(&o.profile, &l.stack, l.memory);
        }
    }
    Ok(sums.into_totals())
}

/// The rows of every site of either profile that changed, largest change
/// in bytes first (then in calls, at the peak, leaked).
pub fn rows(base: &Opened, new: &Opened) -> Result<Vec<Row>> {
    rows_in(base, None, new, None)
}

/// As [`rows`], each side limited to a time range of its run where given
/// (`tree::range`: what was allocated between two checkpoints; a diff of
/// the start and the end of one run): calls and bytes then, no peak nor
/// leaks.
pub fn rows_in(
    base: &Opened,
    base_range: Option<&RangeRows>,
    new: &Opened,
    new_range: Option<&RangeRows>,
) -> Result<Vec<Row>> {
    let mut rows: Vec<Row> = Vec::new();
    let mut index: HashMap<(String, String), usize> = HashMap::new();
    for (which, o, range) in [(0, base, base_range), (1, new, new_range)] {
        for t in sites(o, range)? {
            let key = (t.site.function.clone(), t.site.location.clone());
            let i = *index.entry(key).or_insert_with(|| {
                rows.push(Row {
                    function: t.site.function.clone(),
                    location: t.site.location.clone(),
                    library: t.site.library.clone(),
                    base: [0; 4],
                    new: [0; 4],
                });
                rows.len() - 1
            });
            let v = [t.calls, t.bytes, t.at_peak, t.leaked];
            let into = if which == 0 {
                &mut rows[i].base
            } else {
                &mut rows[i].new
            };
            for (a, b) in into.iter_mut().zip(v) {
                *a = a.saturating_add(b);
            }
        }
    }
    rows.retain(|r| r.base != r.new);
    rows.sort_by_key(|r| {
        std::cmp::Reverse((
            r.delta(1).abs(),
            r.delta(0).abs(),
            r.delta(2).abs(),
            r.delta(3).abs(),
        ))
    });
    Ok(rows)
}

fn signed_bytes(d: i128) -> String {
    let sign = if d < 0 { "-" } else { "+" };
    format!("{sign}{}", format_bytes(d.unsigned_abs() as u64))
}

/// The rows as text: one line per site, at most `top`.
pub fn to_text(rows: &[Row], top: usize) -> String {
    let mut out = String::new();
    if rows.is_empty() {
        out.push_str("No site changed.\n");
        return out;
    }
    out.push_str(&format!(
        "Sites that changed ({} in all), largest change in bytes first (new - base)\n",
        rows.len()
    ));
    let cells: Vec<[String; 5]> = rows
        .iter()
        .take(top)
        .map(|r| {
            [
                signed_bytes(r.delta(1)),
                format!("{:+}", r.delta(0)),
                signed_bytes(r.delta(2)),
                signed_bytes(r.delta(3)),
                format!("{}  {}  ({})", r.function, r.location, r.library),
            ]
        })
        .collect();
    let head = ["bytes", "calls", "at peak", "leaked", "site"];
    let width: Vec<usize> = (0..4)
        .map(|k| {
            cells
                .iter()
                .map(|c| c[k].len())
                .max()
                .unwrap_or(0)
                .max(head[k].len())
        })
        .collect();
    let line = |c: [&str; 5]| {
        format!(
            "  {:>w0$}  {:>w1$}  {:>w2$}  {:>w3$}  {}\n",
            c[0],
            c[1],
            c[2],
            c[3],
            c[4],
            w0 = width[0],
            w1 = width[1],
            w2 = width[2],
            w3 = width[3]
        )
    };
    out.push_str(&line(head));
    for c in &cells {
        out.push_str(&line([&c[0], &c[1], &c[2], &c[3], &c[4]]));
    }
    if rows.len() > top {
        out.push_str(&format!("  ... {} more (--top)\n", rows.len() - top));
    }
    out
}

/// The rows as JSON: per site, `function`, `location`, `library`, and
/// `base` and `new` with `calls`, `bytes`, `bytes_at_peak`, `leaked`.
pub fn to_json(rows: &[Row]) -> serde_json::Value {
    let obj = |v: &[u64; 4]| -> serde_json::Value {
        COLUMNS
            .iter()
            .zip(v)
            .map(|(k, v)| ((*k).to_owned(), serde_json::json!(v)))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    serde_json::json!({
        "sites": rows.iter().map(|r| serde_json::json!({
            "function": r.function,
            "location": r.location,
            "library": r.library,
            "base": obj(&r.base),
            "new": obj(&r.new),
        })).collect::<Vec<_>>(),
    })
}
