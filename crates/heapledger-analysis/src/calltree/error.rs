//! Errors of the call-tree analysis.

use thiserror::Error;

/// A sample that cannot be added to a call tree or a flat profile.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum CallTreeError {
    /// The sample has no frame. Nothing was added.
    #[error(
        "empty sample: every sample needs at least one frame \
         (give an unknown stack a placeholder routine such as `[unknown]` to keep its weight)"
    )]
    EmptySample,
    /// A frame names a routine that the routine table does not hold.
    #[error(
        "routine id {id} is not in the routine table ({known} routines): \
         intern every routine in the table the tree is built with"
    )]
    UnknownRoutine {
        /// The offending id.
        id: u32,
        /// How many routines the table holds.
        known: usize,
    },
    /// A line of the text sample form (`weight: frame frame ...`) is malformed.
    #[error("sample line {line}: {reason}")]
    BadLine {
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
}

/// A collapse mode name that is not one of `none`, `direct`, `conservative`, `full`.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("unknown recursion collapse mode `{0}`: expected one of none, direct, conservative, full")]
pub struct ParseModeError(pub(crate) String);

/// A call-tree direction name that is not `top-down` or `bottom-up`.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("unknown call tree direction `{0}`: expected one of top-down, bottom-up")]
pub struct ParseDirectionError(pub(crate) String);
