//! The summary's temporary and short-lived allocations.
//!
//! A **temporary** block (heaptrack's notion) is one freed by the thread
//! that allocated it before that thread allocated anything else: a buffer
//! made, used and dropped at once, which a local or a reused buffer would
//! save. The recorder decides it exactly, per block, from the thread's last
//! allocated pointer (heaptrack's own reader approximates it: a free
//! counts when its block has the size and stack of the last allocation of
//! any thread). Not measured in `--sample-every` mode, where most
//! allocations pass unseen.
//!
//! A **short-lived** site (DHAT's notion) is one with at least 0.5 % of
//! all allocations whose blocks live, on average, at most
//! [`SHORT_LIVED_NS`]: DHAT says 500 instructions; heapledger measures
//! time, not instructions.

use std::cmp::Reverse;
use std::fmt;

use crate::summary::{format_duration, table, SiteTotal};

/// A site's mean lifetime at or below this is short-lived (with enough
/// blocks): 1 µs.
pub const SHORT_LIVED_NS: u64 = 1_000;
/// ... and its share of all allocations at least this, in thousandths.
pub const SHORT_LIVED_SHARE_PER_MILLE: u64 = 5;

/// Temporary and short-lived allocations of a profile.
#[derive(Debug, Clone, PartialEq)]
pub struct Temporary {
    /// Temporary allocations in all; None where the profile does not
    /// measure them (sampled, or not heapledger's).
    pub total: Option<u64>,
    /// Allocation calls in all.
    pub allocations: u64,
    /// The sites with the most temporary blocks (none with 0).
    pub top: Vec<SiteTotal>,
    /// Short-lived sites, most allocations first.
    pub short_lived: Vec<SiteTotal>,
    /// The clock's rate (0: unknown, and no site is short-lived).
    pub ticks_per_second: u64,
}

impl Temporary {
    /// From every site's totals.
    pub fn of(
        sites: &[SiteTotal],
        allocations: u64,
        measured: bool,
        ticks_per_second: u64,
        top: usize,
    ) -> Temporary {
        let total = measured.then(|| sites.iter().map(|s| s.temporary).sum());
        let mut by_temporary: Vec<SiteTotal> = match measured {
            true => sites.iter().filter(|s| s.temporary > 0).cloned().collect(),
            false => Vec::new(),
        };
        by_temporary.sort_by(|a, b| {
            (Reverse(a.temporary), Reverse(a.calls), &a.site.function).cmp(&(
                Reverse(b.temporary),
                Reverse(b.calls),
                &b.site.function,
            ))
        });
        by_temporary.truncate(top);
        let tps = ticks_per_second;
        let short = |s: &SiteTotal| {
            let Some(mean) = s.lifetime.sum.checked_div(s.lifetime.count) else {
                return false;
            };
            tps > 0
                && (mean as u128 * 1_000_000_000) <= (SHORT_LIVED_NS as u128 * tps as u128)
                && s.calls as u128 * 1000
                    >= allocations as u128 * SHORT_LIVED_SHARE_PER_MILLE as u128
        };
        let mut short_lived: Vec<SiteTotal> = sites.iter().filter(|s| short(s)).cloned().collect();
        short_lived.sort_by(|a, b| {
            (Reverse(a.calls), &a.site.function).cmp(&(Reverse(b.calls), &b.site.function))
        });
        short_lived.truncate(top);
        Temporary {
            total,
            allocations,
            top: by_temporary,
            short_lived,
            ticks_per_second,
        }
    }

    fn mean_lifetime(&self, s: &SiteTotal) -> String {
        match s.lifetime.sum.checked_div(s.lifetime.count) {
            Some(mean) if self.ticks_per_second > 0 => {
                format_duration(mean as f64 / self.ticks_per_second as f64)
            }
            _ => "-".to_owned(),
        }
    }

    /// The summary's line for them: "1000 (62.5% of allocations)".
    pub fn line(&self) -> String {
        match self.total {
            None => "not measured (sampled, or not recorded by heapledger)".to_owned(),
            Some(n) => format!(
                "{n} ({} of allocations; freed before their thread allocated again)",
                percent(n, self.allocations)
            ),
        }
    }

    pub fn to_json(&self, site: impl Fn(&SiteTotal) -> serde_json::Value) -> serde_json::Value {
        use serde_json::json;
        let tps = self.ticks_per_second as f64;
        let mean = |s: &SiteTotal| {
            (tps > 0.0)
                .then(|| s.lifetime.sum.checked_div(s.lifetime.count))
                .flatten()
                .map(|m| m as f64 / tps)
        };
        json!({
            "count": self.total,
            "top_sites": self.top.iter().map(|s| {
                let mut o = site(s);
                o["temporary"] = json!(s.temporary);
                o
            }).collect::<Vec<_>>(),
            "short_lived_sites": self.short_lived.iter().map(|s| {
                let mut o = site(s);
                o["mean_lifetime_seconds"] = json!(mean(s));
                o
            }).collect::<Vec<_>>(),
            "short_lived_below_seconds": SHORT_LIVED_NS as f64 / 1e9,
        })
    }
}

fn percent(n: u64, of: u64) -> String {
    match of {
        0 => "0%".to_owned(),
        _ => format!("{:.1}%", n as f64 * 100.0 / of as f64),
    }
}

impl fmt::Display for Temporary {
    /// The two tables, each with a blank line before it; nothing where
    /// they are empty.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.top.is_empty() {
            writeln!(f)?;
            writeln!(
                f,
                "Top temporary allocation sites (blocks freed before their thread allocated again)"
            )?;
            let mut rows = vec![vec![
                "temporary".to_owned(),
                "of its calls".to_owned(),
                "mean lifetime".to_owned(),
                "site".to_owned(),
            ]];
            rows.extend(self.top.iter().map(|s| {
                vec![
                    s.temporary.to_string(),
                    percent(s.temporary, s.calls),
                    self.mean_lifetime(s),
                    s.site.to_string(),
                ]
            }));
            table(f, "  ", &rows, 3)?;
        }
        if !self.short_lived.is_empty() {
            writeln!(f)?;
            writeln!(
                f,
                "Short-lived allocation sites (DHAT's: at least {}% of allocations, living {} on average or less)",
                SHORT_LIVED_SHARE_PER_MILLE as f64 / 10.0,
                format_duration(SHORT_LIVED_NS as f64 / 1e9)
            )?;
            let mut rows = vec![vec![
                "calls".to_owned(),
                "of all".to_owned(),
                "mean lifetime".to_owned(),
                "site".to_owned(),
            ]];
            rows.extend(self.short_lived.iter().map(|s| {
                vec![
                    s.calls.to_string(),
                    percent(s.calls, self.allocations),
                    self.mean_lifetime(s),
                    s.site.to_string(),
                ]
            }));
            table(f, "  ", &rows, 3)?;
        }
        Ok(())
    }
}
