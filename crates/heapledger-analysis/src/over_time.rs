//! Memory over time in the summary: the timeline's buckets
//! (`timeline.memoryTimeline`) folded into a fixed number of columns, each
//! the highest value of its buckets, drawn as one line of block characters
//! per series, so that a run's shape (plateaus, spikes, a steady climb)
//! shows on one screen.

use heapledger_profile::timeline::memory;
use heapledger_profile::Profile;
use std::fmt;

use crate::summary::format_bytes;

/// Columns drawn.
pub const COLUMNS: usize = 60;

/// See the module's doc.
#[derive(Debug, Clone, PartialEq)]
pub struct OverTime {
    /// The time the columns cover, from the start, in seconds.
    pub seconds: f64,
    /// Per column: the highest requested bytes alive, the highest resident
    /// memory.
    pub requested: Vec<u64>,
    pub resident: Vec<u64>,
}

impl OverTime {
    /// The columns of `profile`'s timeline; None where it has none, or no
    /// clock rate to place it in time.
    pub fn of(profile: &Profile) -> Option<OverTime> {
        let series = &profile.timeline.memory_timeline;
        let tps = profile.globals.ticks_per_second;
        if series.values.is_empty() || tps == 0 {
            return None;
        }
        let n = series.values.len();
        let columns = n.min(COLUMNS);
        let mut requested = vec![0u64; columns];
        let mut resident = vec![0u64; columns];
        for (i, v) in series.values.iter().enumerate() {
            let c = i * columns / n;
            let get = |k: usize| v.get(k).copied().unwrap_or(0);
            requested[c] = requested[c].max(get(memory::REQUESTED));
            resident[c] = resident[c].max(get(memory::PHYSICAL));
        }
        Some(OverTime {
            seconds: n as f64 * series.per_points as f64 / tps as f64,
            requested,
            resident,
        })
    }
}

/// One series as block characters, scaled to its own maximum (a blank
/// column: nothing).
fn bars(values: &[u64]) -> String {
    const BLOCKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let max = values.iter().copied().max().unwrap_or(0).max(1);
    values
        .iter()
        .map(|&v| {
            if v == 0 {
                ' '
            } else {
                let k = ((v as u128 * 8).div_ceil(max as u128)) as usize;
                BLOCKS[k.clamp(1, 8) - 1]
            }
        })
        .collect()
}

fn seconds(s: f64) -> String {
    if s < 1e-3 {
        format!("{:.0} µs", s * 1e6)
    } else if s < 0.01 {
        format!("{:.1} ms", s * 1e3)
    } else if s < 1.0 {
        format!("{:.0} ms", s * 1e3)
    } else {
        format!("{s:.1} s")
    }
}

impl fmt::Display for OverTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let per = self.seconds / self.requested.len().max(1) as f64;
        writeln!(
            f,
            "Memory over time (0 to {}, {} per column; each column its highest value)",
            seconds(self.seconds),
            seconds(per)
        )?;
        for (name, values) in [
            ("requested", &self.requested),
            ("resident ", &self.resident),
        ] {
            let max = values.iter().copied().max().unwrap_or(0);
            writeln!(
                f,
                "  {name}  {}  {} at most",
                bars(values),
                format_bytes(max)
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_scale_to_the_maximum_and_leave_zero_blank() {
        assert_eq!(bars(&[0, 1, 4, 8]), " ▁▄█");
        assert_eq!(bars(&[0, 0]), "  ");
        assert_eq!(bars(&[5, 5]), "██");
    }
}
