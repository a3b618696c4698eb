//! Time ranges of a run (`api/range`, and the flame graph's `from` and
//! `to`): at the resolution of the checkpoints, read from the profile
//! store's checkpoint series; and the flame graph of one thread
//! (`thread`).

use super::param;
use crate::profiles::Opened;
use crate::tree::Range;
use anyhow::{anyhow, bail, Result};

/// What a flame graph's `query` limits it to: a thread (`thread=N`), or
/// a time range (`from=S&to=S`); None for the whole run.
pub(super) fn filter_of(o: &Opened, query: &str) -> Result<Option<Range>> {
    match param(query, "thread").filter(|t| !t.is_empty()) {
        Some(t) => {
            if param(query, "from").is_some() {
                bail!("a thread's own stacks are known for the whole run only");
            }
            let n = t
                .parse()
                .map_err(|_| anyhow!("`{t}` is not a thread's number"))?;
            crate::tree::thread(o, n).map(Some)
        }
        None => range_of(o, query),
    }
}

/// The range `from=S&to=S` of `query` asks for (seconds; None where it
/// asks for none), widened to the checkpoints around it.
fn range_of(o: &Opened, query: &str) -> Result<Option<Range>> {
    let (Some(a), Some(b)) = (param(query, "from"), param(query, "to")) else {
        return Ok(None);
    };
    let seconds = |v: &str| -> Result<f64> {
        v.parse::<f64>()
            .ok()
            .filter(|s| s.is_finite())
            .ok_or_else(|| anyhow!("`{v}` is not a time in seconds"))
    };
    crate::tree::range(o, seconds(a)?, seconds(b)?).map(Some)
}

/// `range`: the sites that allocated in a time range of the run (at the
/// resolution of the checkpoints) with what they allocated and freed in it
/// and still held at its end, largest first (at most 100).
pub(super) fn range_answer(o: &Opened, query: &str) -> Result<serde_json::Value> {
    let times = o.series_times()?;
    let Some(r) = range_of(o, query)? else {
        return Ok(serde_json::json!({ "points": times }));
    };
    // Per site: allocations, bytes, frees, bytes freed in the range; bytes
    // held at its end.
    let mut sites: std::collections::HashMap<
        String,
        (heapledger_analysis::summary::Site, [u64; 5]),
    > = Default::default();
    let (mut row, mut next) = (0u32, 0usize);
    let mut total = [0u64; 5];
    o.each_stack(|stack, _| {
        let at = row;
        row += 1;
        while next < r.rows.len() && r.rows[next].0 < at {
            next += 1;
        }
        let Some((_, a, b)) = r.rows.get(next).filter(|x| x.0 == at) else {
            return;
        };
        let v = [
            b[0].saturating_sub(a[0]),
            b[1].saturating_sub(a[1]),
            b[2].saturating_sub(a[2]),
            b[3].saturating_sub(a[3]),
            b[1].saturating_sub(b[3]),
        ];
        for (sum, x) in total.iter_mut().zip(v) {
            *sum += x;
        }
        if v[0] == 0 {
            return;
        }
        let site =
            heapledger_analysis::summary::allocation_site(&o.profile, stack).unwrap_or_else(|| {
                heapledger_analysis::summary::Site {
                    function: "[no stack]".into(),
                    location: "??".into(),
                    library: "??".into(),
                }
            });
        let e = sites
            .entry(site.to_string())
            .or_insert_with(|| (site, [0; 5]));
        for (sum, x) in e.1.iter_mut().zip(v) {
            *sum += x;
        }
    })?;
    let mut sites: Vec<_> = sites.into_values().collect();
    sites.sort_by(|x, y| {
        y.1[1]
            .cmp(&x.1[1])
            .then_with(|| x.0.function.cmp(&y.0.function))
    });
    let count = sites.len();
    sites.truncate(100);
    Ok(serde_json::json!({
        "points": times,
        "from": r.from_s,
        "to": r.to_s,
        "allocations": total[0],
        "bytes": total[1],
        "frees": total[2],
        "freed": total[3],
        "sites_count": count,
        "sites": sites.iter().map(|(s, v)| serde_json::json!({
            "function": s.function,
            "location": s.location,
            "library": s.library,
            "allocations": v[0],
            "bytes": v[1],
            "frees": v[2],
            "freed": v[3],
            "held": v[4],
        })).collect::<Vec<_>>(),
    }))
}
