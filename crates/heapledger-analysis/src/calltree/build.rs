//! The replay: builds a [`CallTree`] one sample at a time.
//!
//! The replay is bound by memory latency: a large tree does not fit in cache,
//! so each frame costs about one cache miss, the child node it lands on. To keep
//! it at one, what a frame needs lives in one 64-byte [`HotNode`]: counts, the
//! stamp of the last sample that credited it, the stub target, and up to
//! [`INLINE_CHILDREN`] children, found without a hash lookup. Further children
//! go to one hash map keyed by `(parent, routine)`. What only node creation and
//! [`CallTreeBuilder::finish`] need (routine, parent, level) lies in separate
//! arrays.

use super::hash::IdMap;
use super::routine::check_frames;
use super::tree::Node;
use super::{CallTree, CallTreeError, CollapseMode, Direction, NodeId, RoutineId, RoutineTable};

/// Children kept in the node itself; most call-tree nodes have fewer.
const INLINE_CHILDREN: usize = 4;
/// An unused inline child slot.
const NO_ROUTINE: u32 = u32::MAX;

/// What the replay touches for each frame, in one cache line.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
struct HotNode {
    /// Inclusive weight reached directly; for a stub, the weight that crossed it.
    direct: u64,
    indirect: u64,
    excl: u64,
    /// The last sample that credited this node (or crossed this stub).
    stamp: u32,
    /// The target of a stub; `NodeId::NONE` for an ordinary node.
    stub_target: NodeId,
    /// Routines of the first children, `NO_ROUTINE` where unused.
    child_routines: [u32; INLINE_CHILDREN],
    child_ids: [NodeId; INLINE_CHILDREN],
}

impl HotNode {
    fn new(stub_target: NodeId) -> HotNode {
        HotNode {
            direct: 0,
            indirect: 0,
            excl: 0,
            stamp: 0,
            stub_target,
            child_routines: [NO_ROUTINE; INLINE_CHILDREN],
            child_ids: [NodeId::NONE; INLINE_CHILDREN],
        }
    }
}

/// Builds a [`CallTree`] from samples streamed in one at a time.
///
/// ```
/// use heapledger_analysis::calltree::{CallTreeBuilder, CollapseMode, Direction, RoutineTable};
/// let mut routines = RoutineTable::new();
/// let (main, r) = (routines.intern("main"), routines.intern("r"));
/// let mut builder = CallTreeBuilder::new(CollapseMode::Full, Direction::TopDown, &routines);
/// builder.push(&[main, r, r], 5).unwrap();
/// let tree = builder.finish();
/// assert_eq!(tree.node_count(), 3); // main, r and the stub r...
/// ```
#[derive(Debug)]
pub struct CallTreeBuilder {
    mode: CollapseMode,
    direction: Direction,
    routine_count: usize,
    /// Index 0 is the hidden root above the real roots.
    hot: Vec<HotNode>,
    routines: Vec<RoutineId>,
    parents: Vec<NodeId>,
    levels: Vec<u32>,
    /// Children beyond the inline ones, keyed by `(parent, routine)`.
    more_children: IdMap<(NodeId, RoutineId), NodeId>,
    path: Path,
    stamp: u32,
    total_weight: u64,
}

impl CallTreeBuilder {
    /// A builder for samples whose routines come from `routines` (or a table
    /// that holds at least the same routines).
    pub fn new(mode: CollapseMode, direction: Direction, routines: &RoutineTable) -> Self {
        let tracks_path = matches!(mode, CollapseMode::Conservative | CollapseMode::Full);
        CallTreeBuilder {
            mode,
            direction,
            routine_count: routines.len(),
            hot: vec![HotNode::new(NodeId::NONE)],
            routines: vec![RoutineId::NONE],
            parents: vec![NodeId::HIDDEN_ROOT],
            levels: vec![0],
            more_children: IdMap::default(),
            path: Path::new(tracks_path, routines.len()),
            stamp: 0,
            total_weight: 0,
        }
    }

    /// Takes the routines added to the builder's table since it was made
    /// (or since the last call): a builder fed while the names are
    /// interned, stack by stack.
    pub fn routines_grew(&mut self, routines: &RoutineTable) {
        if routines.len() > self.routine_count {
            self.routine_count = routines.len();
            self.path.grow(self.routine_count);
        }
    }

    /// The sum of the weights pushed so far (saturating).
    pub fn total_weight(&self) -> u64 {
        self.total_weight
    }

    /// Makes room for `additional` more nodes.
    pub fn reserve(&mut self, additional: usize) {
        self.hot.reserve(additional);
        self.routines.reserve(additional);
        self.parents.reserve(additional);
        self.levels.reserve(additional);
    }

    /// Replays one sample, frames root first (a bottom-up builder reverses them).
    ///
    /// Returns the node credited with the sample's exclusive weight, or `None`
    /// for a zero-weight sample, which is ignored.
    ///
    /// # Errors
    ///
    /// [`CallTreeError::EmptySample`] for no frames, and
    /// [`CallTreeError::UnknownRoutine`] for a routine not in the table; the tree
    /// is unchanged then.
    pub fn push(
        &mut self,
        frames: &[RoutineId],
        weight: u64,
    ) -> Result<Option<NodeId>, CallTreeError> {
        check_frames(frames, self.routine_count)?;
        if weight == 0 {
            return Ok(None);
        }
        self.next_stamp();
        self.total_weight = self.total_weight.saturating_add(weight);
        let last = match self.direction {
            Direction::TopDown => self.replay(frames.iter().copied(), weight),
            Direction::BottomUp => self.replay(frames.iter().rev().copied(), weight),
        };
        Ok(Some(last))
    }

    /// Replays a path whose `weight` belongs to nodes below it that are
    /// left out (each too light to show: see [`CallTree::build_pruned`]):
    /// the path's nodes take it in their inclusive weights, none as its
    /// own, and the tree's total takes it. An empty path adds to the total
    /// alone.
    ///
    /// # Errors
    ///
    /// [`CallTreeError::UnknownRoutine`] for a routine not in the table.
    pub fn push_hidden(&mut self, frames: &[RoutineId], weight: u64) -> Result<(), CallTreeError> {
        if weight == 0 {
            return Ok(());
        }
        if !frames.is_empty() {
            check_frames(frames, self.routine_count)?;
            self.next_stamp();
            match self.direction {
                Direction::TopDown => self.replay_with(frames.iter().copied(), weight, false),
                Direction::BottomUp => {
                    self.replay_with(frames.iter().rev().copied(), weight, false)
                }
            };
        }
        self.total_weight = self.total_weight.saturating_add(weight);
        Ok(())
    }

    /// The finished tree.
    pub fn finish(self) -> CallTree {
        self.finish_pruned(0)
    }

    /// The finished tree with only the nodes a display of `min_weight`
    /// shows: a node whose inclusive weight (a stub's traversed weight) is
    /// under it is left out with everything below it. Every node kept has
    /// the numbers it has in the whole tree, since a child never weighs
    /// more than its parent: a sample that credits a node credited its
    /// parent on the way down (a stub jumps up to a node it crossed). Made
    /// for the collapsing modes, whose whole tree is built to be exact;
    /// only the shown part is kept past the build (see
    /// [`CallTree::build_pruned`] for the mode without collapsing, which
    /// never builds the rest).
    pub fn finish_pruned(mut self, min_weight: u64) -> CallTree {
        self.more_children = IdMap::default();
        // The new index of each node kept (parents come before children),
        // `u32::MAX` for one left out.
        const OUT: u32 = u32::MAX;
        let mut new_index = vec![OUT; self.hot.len()];
        new_index[0] = 0;
        let mut kept = 1u32;
        for index in 1..self.hot.len() {
            let hot = &self.hot[index];
            let weight = if hot.stub_target == NodeId::NONE {
                hot.direct.saturating_add(hot.indirect)
            } else {
                hot.direct
            };
            if new_index[self.parents[index].index()] != OUT && weight >= min_weight {
                new_index[index] = kept;
                kept += 1;
            }
        }
        let remap = |id: NodeId| NodeId::from_index(new_index[id.index()] as usize);
        let mut nodes: Vec<Node> = Vec::with_capacity(kept as usize);
        for index in (0..self.hot.len()).filter(|&i| new_index[i] != OUT) {
            let hot = &self.hot[index];
            nodes.push(Node {
                routine: self.routines[index],
                parent: if index == 0 {
                    self.parents[0]
                } else {
                    remap(self.parents[index])
                },
                level: self.levels[index],
                // A stub's target is above it, so kept with it.
                stub_target: if hot.stub_target == NodeId::NONE {
                    NodeId::NONE
                } else {
                    remap(hot.stub_target)
                },
                direct: hot.direct,
                indirect: hot.indirect,
                excl: hot.excl,
            });
        }
        drop(self.hot);
        drop(new_index);
        CallTree::from_nodes(
            self.mode,
            self.direction,
            nodes,
            self.routine_count,
            self.total_weight,
        )
    }

    fn next_stamp(&mut self) {
        if self.stamp == u32::MAX {
            for node in &mut self.hot {
                node.stamp = 0;
            }
            self.stamp = 0;
        }
        self.stamp += 1;
    }

    fn replay(&mut self, frames: impl Iterator<Item = RoutineId>, weight: u64) -> NodeId {
        self.replay_with(frames, weight, true)
    }

    /// [`Self::replay`]; `own`: whether the last node takes the weight as
    /// its own (exclusive) too.
    fn replay_with(
        &mut self,
        frames: impl Iterator<Item = RoutineId>,
        weight: u64,
        own: bool,
    ) -> NodeId {
        let stamp = self.stamp;
        self.path.truncate(0);
        let mut cur = NodeId::HIDDEN_ROOT;
        let mut via_stub = false;
        for routine in frames {
            let next = match self.find_child(cur, routine) {
                Some(next) => next,
                None => self.create_child(cur, routine),
            };
            let node = &mut self.hot[next.index()];
            let first_visit = node.stamp != stamp;
            node.stamp = stamp;
            if node.stub_target == NodeId::NONE {
                if first_visit {
                    let count = if via_stub {
                        &mut node.indirect
                    } else {
                        &mut node.direct
                    };
                    *count = count.saturating_add(weight);
                }
                self.path.push(next, routine);
                cur = next;
            } else {
                // Cross the stub and jump up to its target, already credited.
                if first_visit {
                    node.direct = node.direct.saturating_add(weight);
                }
                via_stub = true;
                cur = node.stub_target;
                self.path.truncate(self.levels[cur.index()] as usize);
            }
        }
        if own {
            let node = &mut self.hot[cur.index()];
            node.excl = node.excl.saturating_add(weight);
        }
        cur
    }

    fn find_child(&self, parent: NodeId, routine: RoutineId) -> Option<NodeId> {
        let node = &self.hot[parent.index()];
        let wanted = routine.index() as u32;
        if let Some(slot) = node.child_routines.iter().position(|&r| r == wanted) {
            return Some(node.child_ids[slot]);
        }
        if node.child_routines[INLINE_CHILDREN - 1] == NO_ROUTINE {
            return None;
        }
        self.more_children.get(&(parent, routine)).copied()
    }

    /// Creates the child `routine` of `cur`: a stub when the mode collapses this
    /// call, an ordinary node otherwise. `self.path` is the path to `cur`.
    ///
    /// The path is the chain of `cur`'s ancestors, so the decision depends on
    /// `(cur, routine)` alone and is taken once, here.
    fn create_child(&mut self, cur: NodeId, routine: RoutineId) -> NodeId {
        let target = match self.mode {
            CollapseMode::None => None,
            CollapseMode::Direct => (self.routines[cur.index()] == routine).then_some(cur),
            CollapseMode::Conservative => self
                .path
                .nearest(routine)
                .filter(|&position| self.path.keeps_all_names_when_cut_below(position))
                .map(|position| self.path.node(position)),
            CollapseMode::Full => self
                .path
                .nearest(routine)
                .map(|position| self.path.node(position)),
        };
        let id = NodeId::from_index(self.hot.len());
        self.hot.push(HotNode::new(target.unwrap_or(NodeId::NONE)));
        self.routines.push(routine);
        self.parents.push(cur);
        self.levels.push(self.levels[cur.index()] + 1);

        let parent = &mut self.hot[cur.index()];
        match parent.child_routines.iter().position(|&r| r == NO_ROUTINE) {
            Some(slot) => {
                parent.child_routines[slot] = routine.index() as u32;
                parent.child_ids[slot] = id;
            }
            None => {
                self.more_children.insert((cur, routine), id);
            }
        }
        id
    }
}

/// The tree path from a root to the current node, with what the conservative and
/// full modes ask of it answered in O(1).
///
/// Stays empty in the modes that do not need it.
#[derive(Debug)]
struct Path {
    entries: Vec<PathEntry>,
    /// Per routine, its nearest (deepest) position on the path, or `NOWHERE`.
    nearest: Vec<u32>,
    /// Positions holding the first (highest) occurrence of their routine.
    first_occurrences: Vec<u32>,
    enabled: bool,
}

#[derive(Clone, Copy, Debug)]
struct PathEntry {
    node: NodeId,
    routine: RoutineId,
    /// The next position up the path holding the same routine, or `NOWHERE`.
    previous_same: u32,
}

const NOWHERE: u32 = u32::MAX;

impl Path {
    fn new(enabled: bool, routine_count: usize) -> Path {
        Path {
            entries: Vec::new(),
            nearest: if enabled {
                vec![NOWHERE; routine_count]
            } else {
                Vec::new()
            },
            first_occurrences: Vec::new(),
            enabled,
        }
    }

    /// Makes room for routines up to `routine_count`.
    fn grow(&mut self, routine_count: usize) {
        if self.enabled && self.nearest.len() < routine_count {
            self.nearest.resize(routine_count, NOWHERE);
        }
    }

    fn push(&mut self, node: NodeId, routine: RoutineId) {
        if !self.enabled {
            return;
        }
        let position = self.entries.len() as u32;
        let previous_same = std::mem::replace(&mut self.nearest[routine.index()], position);
        if previous_same == NOWHERE {
            self.first_occurrences.push(position);
        }
        self.entries.push(PathEntry {
            node,
            routine,
            previous_same,
        });
    }

    /// Cuts the path back to its first `len` entries.
    fn truncate(&mut self, len: usize) {
        if self.entries.len() <= len {
            return;
        }
        for entry in self.entries.drain(len..).rev() {
            self.nearest[entry.routine.index()] = entry.previous_same;
            if entry.previous_same == NOWHERE {
                self.first_occurrences.pop();
            }
        }
    }

    fn nearest(&self, routine: RoutineId) -> Option<usize> {
        let position = *self.nearest.get(routine.index())?;
        (position != NOWHERE).then_some(position as usize)
    }

    fn node(&self, position: usize) -> NodeId {
        self.entries[position].node
    }

    /// Whether every routine below `position` also occurs at or above it.
    fn keeps_all_names_when_cut_below(&self, position: usize) -> bool {
        self.first_occurrences
            .last()
            .is_none_or(|&first| first as usize <= position)
    }
}
