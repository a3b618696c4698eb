//! Call trees (top-down and bottom-up) with the four degrees of recursion collapsing.
//!
//! The semantics follow the Puma profiler's "Recursion Collapsing" (seed
//! `003_1efddc738ed66678.txt`, stated precisely in
//! `shared/reference/recursion-collapsing.md`).
//!
//! # Input
//!
//! A sample is a stack of [`RoutineId`]s, root first, with a `u64` weight (a count
//! or bytes). What a routine *is* (a function, or a function and a source line) is
//! the caller's choice: it interns one name per routine key in a [`RoutineTable`].
//! Samples are collected in a [`Samples`] set, or streamed into a
//! [`CallTreeBuilder`] or [`FlatProfileBuilder`].
//!
//! * An **empty sample is rejected** with [`CallTreeError::EmptySample`] and leaves
//!   everything unchanged: silently dropping it would lose its weight. A caller
//!   that wants to keep the weight of an unknown stack gives it a placeholder
//!   routine such as `[unknown]`.
//! * A **zero-weight sample is ignored** after validation: it creates no node, so
//!   it changes nothing, not even the shape of the tree.
//!
//! # The replay
//!
//! Each sample is replayed from its first frame. The replay keeps `cur` (the
//! current node), whether the sample has crossed a recursive stub yet, and which
//! nodes it has already credited. For each frame `f` after the first it looks for
//! a *target*, a node higher on the current tree path where `f` already is:
//!
//! | mode | target |
//! |---|---|
//! | [`CollapseMode::None`] | never |
//! | [`CollapseMode::Direct`] | `cur`, when `cur` is routine `f` |
//! | [`CollapseMode::Conservative`] | the nearest node of `f` on the path, if every routine on the path below it also occurs at or above it |
//! | [`CollapseMode::Full`] | the nearest node of `f` on the path |
//!
//! With a target the replay goes to (or creates) the *stub* child `f...` of `cur`
//! that points to the target and jumps up to the target; otherwise it goes to (or
//! creates) the ordinary child `f`. Each node reached that the sample has not yet
//! credited gets the sample's weight in its inclusive count: *direct* before the
//! sample crossed a stub, *indirect* after. After the last frame the weight goes
//! to the exclusive count of `cur`, which is never a stub. A stub has no counts of
//! its own; it records the weight of the samples that crossed it (each counted
//! once), shown as "traversed".
//!
//! Consequences: a node is credited at most once per sample; the exclusive counts
//! add up to the total weight; `inclusive = exclusive + children's inclusive`
//! holds only without collapsing; in full mode no path repeats a routine.
//!
//! # Why it is fast and never recurses
//!
//! The tree path is always the chain of ancestors of `cur`, so whether `(cur, f)`
//! is a stub, and where it points, never changes once decided: the replay finds
//! the child among the few kept inline in `cur`'s node (or in one hash map keyed
//! by `(parent, routine)` beyond those) and consults the path only when it
//! creates a node. The path keeps, per routine, its nearest position (a linked
//! list through earlier positions) and the stack of positions where a routine
//! occurs for the first time, so both the full and the conservative question
//! are answered in O(1), and cutting the path back is amortised O(1) per frame.
//!
//! A large tree does not fit in cache, so a frame costs about one cache miss,
//! the node it lands on; what a frame touches is kept in one cache line per
//! node. Replaying each distinct stack once is what makes a big profile fast:
//! [`Samples`] merges identical stacks as they are added (adding their weights),
//! which changes no count, since a replay depends on the frames alone. The tree
//! is a flat arena of nodes with typed [`NodeId`]s; building, walking,
//! rendering, JSON output and dropping are all iterative, so a sample of any
//! depth (100 000 frames and more) works.
//!
//! # Bottom-up (callers) trees
//!
//! [`Direction::BottomUp`] replays each sample reversed, leaf first. Its roots are
//! the routines where the weight was spent (their inclusive count is that weight),
//! each node's children are its callers, and the exclusive count of a node is the
//! weight of the samples whose call chain *ends* there (the outermost frame, a
//! thread's entry). Collapsing then works on caller chains: a stub stands for a
//! caller that already appears nearer the leaf. Direct collapse merges
//! consecutive repeated callers (`s r r r main` reads `s <- r <- main`),
//! conservative collapse drops a repeated stretch of callers only when no routine
//! name is lost, and full collapse keeps each routine once per caller chain (the
//! chain with loops erased from the leaf side, which for mutual recursion can
//! differ from erasing them from the root side).
//!
//! # Output
//!
//! [`write_text`] renders the manual's layout ("In or Under" as `d (i)`, "In
//! Only", "Level", the routine indented by level, `f...` for a stub) and
//! [`write_json`] a nested JSON document; both honour [`RenderOptions`] and
//! order children by inclusive weight descending, then by name, with stubs
//! after their ordinary siblings (by traversed weight). [`FlatProfile`] is the per-routine table, counting a
//! routine once per sample, computed from the samples rather than from a tree.

mod build;
mod error;
mod flat;
mod hash;
mod mode;
mod prefix;
mod render;
mod routine;
mod samples;
mod tree;
mod trie;
mod walk;

pub use build::CallTreeBuilder;

/// The nodes a collapsed tree built in passes holds, about
/// ([`CallTreeBuilder::in_passes`]): 76 bytes each, 160 MB.
pub const PASS_BUDGET: usize = 1 << 21;
/// The levels each pass of a collapsed tree adds.
pub const PASS_LEVELS: u16 = 16;
pub use error::{CallTreeError, ParseDirectionError, ParseModeError};
pub use flat::{FlatProfile, FlatProfileBuilder, FlatRow};
pub use mode::{CollapseMode, Direction};
pub use prefix::PrefixTree;
pub use render::{to_json, to_text, write_flat_json, write_flat_text, write_json, write_text};
pub use routine::{RoutineId, RoutineTable};
pub use samples::{Sample, Samples};
pub use tree::{CallTree, Node, NodeId};
pub use walk::{RenderOptions, Visit, Walk};
