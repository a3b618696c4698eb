//! The four degrees of recursion collapsing, and the two directions of a tree.

use std::fmt;
use std::str::FromStr;

use super::error::{ParseDirectionError, ParseModeError};

/// How much recursion the replay collapses into stubs, in increasing order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CollapseMode {
    /// No collapsing: the plain prefix tree of the stacks.
    None,
    /// Collapse only direct recursion: `f` called from `f`.
    Direct,
    /// Collapse to the nearest higher instance unless a routine name would be lost.
    Conservative,
    /// Collapse whenever a higher instance of the routine is on the path.
    Full,
}

impl CollapseMode {
    /// Every mode, in increasing order of collapsing.
    pub const ALL: [CollapseMode; 4] = [
        CollapseMode::None,
        CollapseMode::Direct,
        CollapseMode::Conservative,
        CollapseMode::Full,
    ];

    /// The name used on the command line and in JSON output.
    pub const fn as_str(self) -> &'static str {
        match self {
            CollapseMode::None => "none",
            CollapseMode::Direct => "direct",
            CollapseMode::Conservative => "conservative",
            CollapseMode::Full => "full",
        }
    }
}

impl fmt::Display for CollapseMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CollapseMode {
    type Err = ParseModeError;

    /// Parses `none`, `direct`, `conservative` or `full` (ASCII case ignored).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CollapseMode::ALL
            .into_iter()
            .find(|mode| mode.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| ParseModeError(s.to_owned()))
    }
}

/// Which end of the stacks the tree starts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Direction {
    /// Callees tree: roots are the outermost frames (`main`), children are callees.
    TopDown,
    /// Callers tree: roots are the leaf frames, children are callers.
    BottomUp,
}

impl Direction {
    /// Both directions.
    pub const ALL: [Direction; 2] = [Direction::TopDown, Direction::BottomUp];

    /// The name used on the command line and in JSON output.
    pub const fn as_str(self) -> &'static str {
        match self {
            Direction::TopDown => "top-down",
            Direction::BottomUp => "bottom-up",
        }
    }
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Direction {
    type Err = ParseDirectionError;

    /// Parses `top-down` or `bottom-up` (ASCII case ignored).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Direction::ALL
            .into_iter()
            .find(|direction| direction.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| ParseDirectionError(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_round_trip_through_their_names() {
        for mode in CollapseMode::ALL {
            assert_eq!(mode.to_string().parse::<CollapseMode>(), Ok(mode));
        }
        assert_eq!("FULL".parse::<CollapseMode>(), Ok(CollapseMode::Full));
        for direction in Direction::ALL {
            assert_eq!(direction.to_string().parse::<Direction>(), Ok(direction));
        }
    }

    #[test]
    fn bad_names_give_one_line_listing_the_valid_values() {
        let err = "partial".parse::<CollapseMode>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown recursion collapse mode `partial`: expected one of none, direct, conservative, full"
        );
        let err = "sideways".parse::<Direction>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown call tree direction `sideways`: expected one of top-down, bottom-up"
        );
        assert!("".parse::<CollapseMode>().is_err());
    }
}
