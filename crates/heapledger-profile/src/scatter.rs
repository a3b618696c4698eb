//! `scatter`: two 2-D histograms MALT's GUI draws as scatter plots.
//!
//! `sizeOverTime` counts allocations by (time, size); `lifetimeOverSize` by
//! (size, lifetime). Each axis has `size` bins up to `max`, linear or log2.

use serde::{Deserialize, Serialize};

/// `scatter`: the two charts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Scatter {
    /// x: time (ticks, linear), y: size (bytes, log).
    pub size_over_time: ScatterChart,
    /// x: size (bytes, log), y: lifetime (ticks, log).
    pub lifetime_over_size: ScatterChart,
}

impl Default for Scatter {
    fn default() -> Self {
        Scatter::empty()
    }
}

impl Scatter {
    /// Both charts with MALT's axis kinds, 64 bins and no points.
    pub fn empty() -> Scatter {
        Scatter {
            size_over_time: ScatterChart::empty(false, true),
            lifetime_over_size: ScatterChart::empty(true, true),
        }
    }
}

/// One chart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScatterChart {
    /// The axes.
    pub infos: ScatterInfos,
    /// The non-empty bins.
    pub points: Vec<ScatterPoint>,
}

impl ScatterChart {
    /// 64 bins per axis up to 1, no points.
    pub fn empty(x_log: bool, y_log: bool) -> ScatterChart {
        let axis = |log| ScatterAxis {
            max: 1,
            size: 64,
            log,
        };
        ScatterChart {
            infos: ScatterInfos {
                x_axis: axis(x_log),
                y_axis: axis(y_log),
            },
            points: Vec::new(),
        }
    }
}

/// `infos`: both axes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScatterInfos {
    /// Horizontal axis.
    pub x_axis: ScatterAxis,
    /// Vertical axis.
    pub y_axis: ScatterAxis,
}

/// One axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScatterAxis {
    /// Largest value the bins cover.
    pub max: u64,
    /// Number of bins.
    pub size: u64,
    /// Log2 bins rather than linear.
    pub log: bool,
}

/// One bin: `v` events at (`x`, `y`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScatterPoint {
    /// Bin position on x.
    pub x: u64,
    /// Bin position on y.
    pub y: u64,
    /// Events in the bin.
    pub v: u64,
}
