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
use super::{
    CallTree, CallTreeError, CollapseMode, Direction, NodeId, RoutineId, RoutineTable, Samples,
};

/// Children kept in the node itself; most call-tree nodes have fewer.
const INLINE_CHILDREN: usize = 4;
/// An unused inline child slot.
const NO_ROUTINE: u32 = u32::MAX;
/// A node left out (see `CallTreeBuilder::kept`).
const OUT: u32 = u32::MAX;

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
    /// Built in passes (see [`CallTreeBuilder::in_passes`]): per node,
    /// [`OPEN`], [`REFUSED`], and how many levels below it nodes may still
    /// be made in this pass; empty for a builder of the whole tree.
    flags: Vec<u16>,
    /// The levels a pass after the first makes below a node kept open.
    depth_step: u16,
    /// Nodes are made while the builder holds fewer than this many.
    budget: usize,
    /// The budget asked for (a pass may get more: see `end_pass`).
    budget_asked: usize,
    /// The nodes kept, and those of them kept open, after the last pass.
    last_pass: (usize, usize),
    /// Built in passes: per node, the weight of the samples that ended
    /// below it in nodes not made (its light subtrees' own weights).
    hidden: Vec<u64>,
    /// Every root is kept, however light (see [`Self::keeping_roots`]).
    keep_roots: bool,
    /// Paths kept however light (see [`Self::keeping_paths`]).
    paths: Option<IdMap<(u32, RoutineId), u32>>,
    /// Weights of further metrics pushed with each sample (see
    /// [`Self::with_more_weights`]): how many ...
    more: usize,
    /// ... per kept path (by its number), their direct then their
    /// indirect weights ...
    more_w: Vec<u64>,
    /// ... and their totals.
    more_total: Vec<u64>,
    /// The kept path of each entry of `path`, `OUT` for none: where a
    /// sample's walk is among the kept paths.
    more_path: Vec<u32>,
}

/// A node that could not make a child in this pass (a level past its
/// limit, or the budget spent): open in the next, if kept.
const REFUSED: u16 = 0x8000;
/// A node whose children may be made in this pass: one made in it, or one
/// kept from the last that could not make all of its own there.
const OPEN: u16 = 0x4000;
/// How many levels below a node may still be made: `flags & LEVELS`;
/// all of it, no limit (the first pass).
const LEVELS: u16 = 0x3fff;

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
            flags: Vec::new(),
            depth_step: 0,
            budget: usize::MAX,
            budget_asked: usize::MAX,
            last_pass: (0, 0),
            hidden: Vec::new(),
            keep_roots: false,
            paths: None,
            more: 0,
            more_w: Vec::new(),
            more_total: Vec::new(),
            more_path: Vec::new(),
        }
    }

    /// A builder of the part of the tree a display shows, made in passes
    /// over the same samples, which hold at most about `budget` nodes
    /// (or twice the nodes shown, where that is more): the collapsed
    /// modes' whole tree can be far larger than what is shown (compileall's
    /// callers' tree with conservative collapsing: 16 M nodes, 1.2 GB, to
    /// show 286).
    ///
    /// The first pass makes the nodes while the budget lasts: one pass,
    /// where the whole tree fits. After each pass, [`Self::end_pass`]
    /// keeps the nodes heavy enough to show; the next pass makes the
    /// missing children of those that could not make them all, down to
    /// `depth_step` levels below them, and so on. Between the nodes made,
    /// a sample's walk goes on by the routines on its path alone: the
    /// collapsing decisions depend on them only. A node is made on a sample's first visit in its pass, so its
    /// numbers are those of the whole tree; a light node's children are
    /// light too (a child never weighs more than its parent), so nothing
    /// below one left out is ever needed.
    pub fn in_passes(
        mode: CollapseMode,
        direction: Direction,
        routines: &RoutineTable,
        budget: usize,
        depth_step: u16,
    ) -> Self {
        let mut b = CallTreeBuilder::new(mode, direction, routines);
        b.path = Path::new(true, routines.len());
        b.flags = vec![OPEN | LEVELS];
        b.hidden = vec![0];
        b.depth_step = depth_step.clamp(1, LEVELS - 1);
        b.budget_asked = budget.max(2);
        b.budget = b.budget_asked;
        b
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
                Direction::TopDown => self.replay_with(frames.iter().copied(), weight, false, &[]),
                Direction::BottomUp => {
                    self.replay_with(frames.iter().rev().copied(), weight, false, &[])
                }
            };
        }
        self.total_weight = self.total_weight.saturating_add(weight);
        Ok(())
    }

    /// This builder in passes keeps every root, however light, with the
    /// weights of its subtrees: a flame graph draws each root (see
    /// [`Self::finish_with_hidden`]).
    pub fn keeping_roots(mut self) -> Self {
        self.keep_roots = true;
        self
    }

    /// This builder in passes also keeps the nodes at these paths of
    /// routines, however light: `(parent, routine) -> path`, each path
    /// numbered from 1 with its parent path before it, 0 the hidden root
    /// (a flame graph's frames, whose numbers in another metric's tree its
    /// tooltips show).
    pub fn keeping_paths(
        mut self,
        paths: impl IntoIterator<Item = ((u32, RoutineId), u32)>,
    ) -> Self {
        self.paths = Some(paths.into_iter().collect());
        self
    }

    /// This builder, which keeps paths ([`Self::keeping_paths`]), takes
    /// `k` more weights with each sample ([`Self::push_weights`]) and
    /// gives a tree for each ([`Self::finish_pruned_each`]), whose nodes
    /// at those paths have that metric's numbers: the trees of several
    /// metrics from one replay of the samples (a flame graph's tooltips
    /// show every metric at its frames). The further weights are kept for
    /// the paths alone, so that they cost no memory per node: a sample's
    /// walk follows its kept path (a lookup of each step's routine) while
    /// it is on one.
    ///
    /// # Panics
    ///
    /// Without [`Self::keeping_paths`] first.
    pub fn with_more_weights(mut self, k: usize) -> Self {
        let paths = self
            .paths
            .as_ref()
            .expect("more weights are kept at the paths kept");
        let n = paths.values().map(|&p| p as usize + 1).max().unwrap_or(1);
        self.more = k;
        self.more_w = vec![0; n * 2 * k];
        self.more_total = vec![0; k];
        self
    }

    /// [`Self::push`] with a weight for each metric of a builder
    /// [`Self::with_more_weights`]: `weights[0]` is the first (the one
    /// [`Self::finish_pruned`] and the passes' pruning use), then the `k`
    /// others. A sample every weight of which is 0 is ignored. A node
    /// that only samples of 0 by some metric reach is in that metric's
    /// tree with weight 0 (see [`Self::finish_pruned_each`]).
    ///
    /// # Errors
    ///
    /// As [`Self::push`].
    ///
    /// # Panics
    ///
    /// If `weights` does not hold `1 + k` weights.
    pub fn push_weights(
        &mut self,
        frames: &[RoutineId],
        weights: &[u64],
    ) -> Result<Option<NodeId>, CallTreeError> {
        assert_eq!(weights.len(), 1 + self.more, "a weight per metric");
        check_frames(frames, self.routine_count)?;
        if weights.iter().all(|&w| w == 0) {
            return Ok(None);
        }
        self.next_stamp();
        self.total_weight = self.total_weight.saturating_add(weights[0]);
        for (t, &w) in self.more_total.iter_mut().zip(&weights[1..]) {
            *t = t.saturating_add(w);
        }
        let more = &weights[1..];
        let last = match self.direction {
            Direction::TopDown => self.replay_with(frames.iter().copied(), weights[0], true, more),
            Direction::BottomUp => {
                self.replay_with(frames.iter().rev().copied(), weights[0], true, more)
            }
        };
        Ok(Some(last))
    }

    /// Ends a pass of a builder [`Self::in_passes`]: keeps the nodes of
    /// `min_weight` or more, as [`Self::finish_pruned`] would. Returns
    /// whether the samples must be pushed again, all of them in the same
    /// order (some node kept could not make all of its children); if not,
    /// [`Self::finish_pruned`] with the same `min_weight` gives the tree.
    /// A builder of the whole tree needs one pass.
    pub fn end_pass(&mut self, min_weight: u64) -> bool {
        if self.flags.is_empty() {
            return false;
        }
        let keep = self.kept(min_weight);
        let open = (0..self.hot.len())
            .filter(|&i| keep[i] != OUT && self.flags[i] & REFUSED != 0)
            .count();
        if open == 0 {
            return false;
        }
        let n = keep.iter().filter(|&&k| k != OUT).count();
        if (n, open) == self.last_pass {
            // No node was completed: the nodes open hold more than the
            // budget below them within the levels a pass makes. Fewer
            // levels, down to one (a node's children only), then a larger
            // budget.
            if self.depth_step > 1 {
                self.depth_step = (self.depth_step / 4).max(1);
            } else {
                self.budget_asked = self.budget_asked.saturating_mul(2);
            }
        } else if self.hot.len() < self.budget / 4 {
            // Room to spare: more levels at once (a long chain of heavy
            // nodes, as a deep recursion makes, takes fewer passes).
            self.depth_step = self.depth_step.saturating_mul(4).min(LEVELS - 1);
        }
        self.last_pass = (n, open);
        // The kept nodes, their numbers cleared for the next pass: open
        // where a child was refused, so that only those make children.
        let remap = |id: NodeId| NodeId::from_index(keep[id.index()] as usize);
        let mut hot = Vec::with_capacity(n);
        let mut routines = Vec::with_capacity(n);
        let mut parents = Vec::with_capacity(n);
        let mut levels = Vec::with_capacity(n);
        let mut flags = Vec::with_capacity(n);
        for i in (0..self.hot.len()).filter(|&i| keep[i] != OUT) {
            let old = &self.hot[i];
            let target = if old.stub_target == NodeId::NONE {
                NodeId::NONE
            } else {
                remap(old.stub_target)
            };
            hot.push(HotNode::new(target));
            routines.push(self.routines[i]);
            parents.push(if i == 0 {
                self.parents[0]
            } else {
                remap(self.parents[i])
            });
            levels.push(self.levels[i]);
            flags.push(if self.flags[i] & REFUSED != 0 {
                OPEN | self.depth_step
            } else {
                0
            });
        }
        self.more_children = IdMap::default();
        self.hidden = vec![0; hot.len()];
        self.hot = hot;
        self.routines = routines;
        self.parents = parents;
        self.levels = levels;
        self.flags = flags;
        for index in 1..self.hot.len() {
            let parent = self.parents[index];
            self.link_child(parent, self.routines[index], NodeId::from_index(index));
        }
        self.stamp = 0;
        self.total_weight = 0;
        self.path.truncate(0);
        // Room for at least as many new nodes as are kept.
        self.budget = self.budget_asked.max(n.saturating_mul(2));
        self.more_w.fill(0);
        self.more_total.fill(0);
        true
    }

    /// The new index of each node of `min_weight` or more whose ancestors
    /// are too (parents come before children), `OUT` for the others.
    fn kept(&self, min_weight: u64) -> Vec<u32> {
        self.kept_at_paths(min_weight).0
    }

    /// [`Self::kept`], and each node's kept path (`OUT` for none; empty
    /// for a builder that keeps no paths).
    fn kept_at_paths(&self, min_weight: u64) -> (Vec<u32>, Vec<u32>) {
        let mut new_index = vec![OUT; self.hot.len()];
        new_index[0] = 0;
        // Each node's path among `paths`, where it has one.
        let mut path_of = match &self.paths {
            Some(_) => vec![OUT; self.hot.len()],
            None => Vec::new(),
        };
        if let Some(first) = path_of.first_mut() {
            *first = 0;
        }
        let mut kept = 1u32;
        for index in 1..self.hot.len() {
            let hot = &self.hot[index];
            let weight = if hot.stub_target == NodeId::NONE {
                hot.direct.saturating_add(hot.indirect)
            } else {
                hot.direct
            };
            let parent = self.parents[index];
            let root = self.keep_roots && parent == NodeId::HIDDEN_ROOT;
            let wanted = match &self.paths {
                Some(paths) => {
                    let above = path_of[parent.index()];
                    if above != OUT {
                        if let Some(&path) = paths.get(&(above, self.routines[index])) {
                            path_of[index] = path;
                        }
                    }
                    path_of[index] != OUT
                }
                None => false,
            };
            if new_index[parent.index()] != OUT && (weight >= min_weight || root || wanted) {
                new_index[index] = kept;
                kept += 1;
            }
        }
        (new_index, path_of)
    }

    /// Pushes every sample of `samples`, in passes until [`Self::end_pass`]
    /// with `min_weight` asks for no more: the builder then gives the tree
    /// by [`Self::finish_pruned`] or [`Self::finish_with_hidden`] with the
    /// same `min_weight`.
    pub fn passes_over(mut self, samples: &Samples, min_weight: u64) -> Self {
        loop {
            samples.each(|_, frames, weight| {
                self.push(frames, weight)
                    .expect("a sample set holds only valid samples");
            });
            if !self.end_pass(min_weight) {
                return self;
            }
        }
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
    pub fn finish_pruned(self, min_weight: u64) -> CallTree {
        self.finish_with_hidden(min_weight).0
    }

    /// [`Self::finish_pruned`], and for each node of the tree (by index),
    /// the own weights of its subtrees left out (made in no pass, or
    /// lighter than `min_weight`), for a builder [`Self::in_passes`]; all
    /// 0 otherwise. With the own weights of the subtrees kept, what a
    /// flame graph that leaves light subtrees out adds to a node's own.
    pub fn finish_with_hidden(mut self, min_weight: u64) -> (CallTree, Vec<u64>) {
        self.more_children = IdMap::default();
        self.flags = Vec::new();
        // The new index of each node kept (parents come before children),
        // `OUT` for one left out.
        let new_index = self.kept(min_weight);
        let nodes = self.nodes_kept(&new_index, |hot, _| (hot.direct, hot.indirect, hot.excl));
        // The own weights of the nodes left out go to their nearest
        // ancestor kept (children come after their parents).
        let mut hidden = vec![0; nodes.len()];
        if !self.hidden.is_empty() {
            for index in (1..self.hot.len()).rev() {
                let w = self.hidden[index].saturating_add(self.hot[index].excl);
                if new_index[index] == OUT {
                    let parent = self.parents[index].index();
                    self.hidden[parent] = self.hidden[parent].saturating_add(w);
                }
            }
            for (index, &w) in self.hidden.iter().enumerate() {
                if new_index[index] != OUT {
                    hidden[new_index[index] as usize] = w;
                }
            }
        }
        drop(self.hot);
        drop(new_index);
        let tree = CallTree::from_nodes(
            self.mode,
            self.direction,
            nodes,
            self.routine_count,
            self.total_weight,
        );
        (tree, hidden)
    }

    /// [`Self::finish_pruned`] for a builder [`Self::with_more_weights`]:
    /// the tree of each metric, the first one's first. Every tree has the
    /// nodes the first one's weights keep (`min_weight` or more, and the
    /// paths); the further metrics' numbers are those of the nodes at the
    /// kept paths (0 elsewhere). A node that no sample of some metric
    /// reached weighs 0 in its tree (it is not there in a tree of that
    /// metric alone). The further metrics' trees have no own (exclusive)
    /// weights.
    pub fn finish_pruned_each(mut self, min_weight: u64) -> Vec<CallTree> {
        self.more_children = IdMap::default();
        self.flags = Vec::new();
        let (new_index, path_of) = self.kept_at_paths(min_weight);
        let k = self.more;
        let mut trees = Vec::with_capacity(1 + k);
        for metric in 0..=k {
            let nodes = self.nodes_kept(&new_index, |hot, index| match metric {
                0 => (hot.direct, hot.indirect, hot.excl),
                m => match path_of.get(index) {
                    Some(&path) if path != OUT => {
                        let at = path as usize * 2 * k + m - 1;
                        (self.more_w[at], self.more_w[at + k], 0)
                    }
                    _ => (0, 0, 0),
                },
            });
            let total = match metric {
                0 => self.total_weight,
                m => self.more_total[m - 1],
            };
            trees.push(CallTree::from_nodes(
                self.mode,
                self.direction,
                nodes,
                self.routine_count,
                total,
            ));
        }
        trees
    }

    /// The nodes kept (`new_index`, see [`Self::kept`]) as a tree's, with
    /// the weights (direct, indirect, exclusive) `weights` gives each.
    fn nodes_kept(
        &self,
        new_index: &[u32],
        weights: impl Fn(&HotNode, usize) -> (u64, u64, u64),
    ) -> Vec<Node> {
        let kept = new_index.iter().filter(|&&k| k != OUT).count();
        let remap = |id: NodeId| NodeId::from_index(new_index[id.index()] as usize);
        let mut nodes: Vec<Node> = Vec::with_capacity(kept);
        for index in (0..self.hot.len()).filter(|&i| new_index[i] != OUT) {
            let hot = &self.hot[index];
            let (direct, indirect, excl) = weights(hot, index);
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
                direct,
                indirect,
                excl,
            });
        }
        nodes
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
        self.replay_with(frames, weight, true, &[])
    }

    /// [`Self::replay`]; `own`: whether the last node takes the weight as
    /// its own (exclusive) too; `more`: the further weights of a builder
    /// [`Self::with_more_weights`] (their own weights are not kept).
    /// Returns the last node, `NodeId::NONE` where that is one not made in
    /// this pass (see [`Self::in_passes`]).
    fn replay_with(
        &mut self,
        frames: impl Iterator<Item = RoutineId>,
        weight: u64,
        own: bool,
        more: &[u64],
    ) -> NodeId {
        let stamp = self.stamp;
        self.path.truncate(0);
        let mut cur = NodeId::HIDDEN_ROOT;
        let mut via_stub = false;
        // Where the walk is among the kept paths (0: the hidden root's),
        // for the further weights.
        let tracks = !more.is_empty();
        let mut cur_path = 0u32;
        if tracks {
            self.more_path.clear();
        }
        for routine in frames {
            let next = if cur == NodeId::NONE {
                NodeId::NONE
            } else {
                match self.find_child(cur, routine) {
                    Some(next) => next,
                    None => self.try_create_child(cur, routine),
                }
            };
            let next_path = if tracks {
                self.path_below(cur_path, routine)
            } else {
                OUT
            };
            if next == NodeId::NONE {
                // A node not made in this pass: the walk goes on by the
                // routines of the path, as the node would have.
                match self.collapse_target(cur, routine) {
                    Some(position) => {
                        via_stub = true;
                        cur = self.path.node(position);
                        self.path.truncate(position + 1);
                        if tracks {
                            self.more_path.truncate(position + 1);
                            cur_path = self.more_path[position];
                        }
                    }
                    None => {
                        self.path.push(NodeId::NONE, routine);
                        cur = NodeId::NONE;
                        if tracks {
                            self.more_path.push(next_path);
                            cur_path = next_path;
                        }
                    }
                }
                continue;
            }
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
                    if next_path != OUT {
                        self.add_more(next_path, via_stub, more);
                    }
                }
                self.path.push(next, routine);
                cur = next;
                if tracks {
                    self.more_path.push(next_path);
                    cur_path = next_path;
                }
            } else {
                // Cross the stub and jump up to its target, already credited.
                let target = node.stub_target;
                if first_visit && next_path != OUT {
                    self.add_more(next_path, false, more);
                }
                if first_visit {
                    let node = &mut self.hot[next.index()];
                    node.direct = node.direct.saturating_add(weight);
                }
                via_stub = true;
                cur = target;
                let len = self.levels[cur.index()] as usize;
                self.path.truncate(len);
                if tracks {
                    self.more_path.truncate(len);
                    cur_path = self.more_path[len - 1];
                }
            }
        }
        if own {
            if cur != NodeId::NONE {
                let node = &mut self.hot[cur.index()];
                node.excl = node.excl.saturating_add(weight);
            } else {
                // Below the deepest node made on the path.
                let made = self.path.deepest_made().unwrap_or(NodeId::HIDDEN_ROOT);
                let hidden = &mut self.hidden[made.index()];
                *hidden = hidden.saturating_add(weight);
            }
        }
        cur
    }

    /// The kept path below kept path `path` by `routine`, `OUT` for none.
    #[inline]
    fn path_below(&self, path: u32, routine: RoutineId) -> u32 {
        if path == OUT {
            return OUT;
        }
        self.paths
            .as_ref()
            .and_then(|paths| paths.get(&(path, routine)))
            .copied()
            .unwrap_or(OUT)
    }

    /// Adds the further weights `more` to kept path `path`'s direct
    /// weights, or its indirect ones.
    fn add_more(&mut self, path: u32, indirect: bool, more: &[u64]) {
        let k = self.more;
        let at = path as usize * 2 * k + if indirect { k } else { 0 };
        for (w, &m) in self.more_w[at..at + k].iter_mut().zip(more) {
            *w = w.saturating_add(m);
        }
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

    /// The child `routine` of `cur`, made unless this pass of a builder in
    /// passes makes none there (then `NodeId::NONE`, and `cur` is marked
    /// to make it in the next pass).
    #[inline]
    fn try_create_child(&mut self, cur: NodeId, routine: RoutineId) -> NodeId {
        if !self.flags.is_empty() {
            let budget_spent = self.hot.len() >= self.budget;
            let flags = &mut self.flags[cur.index()];
            if *flags & OPEN == 0 {
                // Its children were all made in an earlier pass: this one
                // was too light to keep.
                return NodeId::NONE;
            }
            let levels = *flags & LEVELS;
            if levels == 0 || budget_spent {
                *flags |= REFUSED;
                return NodeId::NONE;
            }
            // The first pass's nodes have no limit (`LEVELS`).
            self.flags
                .push(OPEN | if levels == LEVELS { LEVELS } else { levels - 1 });
            self.hidden.push(0);
        }
        self.create_child(cur, routine)
    }

    /// Where the mode collapses a call of `routine` from `cur`: the
    /// position on the path of the node it jumps up to, or None for an
    /// ordinary child. `self.path` is the path to `cur` (`NodeId::NONE`,
    /// a node not made, only in a builder in passes, whose path is kept in
    /// every mode).
    fn collapse_target(&self, cur: NodeId, routine: RoutineId) -> Option<usize> {
        match self.mode {
            CollapseMode::None => None,
            CollapseMode::Direct => {
                let same = if cur == NodeId::NONE {
                    self.path.last_routine() == Some(routine)
                } else {
                    self.routines[cur.index()] == routine
                };
                same.then(|| self.path.len().saturating_sub(1))
            }
            CollapseMode::Conservative => self
                .path
                .nearest(routine)
                .filter(|&position| self.path.keeps_all_names_when_cut_below(position)),
            CollapseMode::Full => self.path.nearest(routine),
        }
    }

    /// Creates the child `routine` of `cur`: a stub when the mode collapses this
    /// call, an ordinary node otherwise. `self.path` is the path to `cur`.
    ///
    /// The path is the chain of `cur`'s ancestors, so the decision depends on
    /// `(cur, routine)` alone and is taken once, here.
    fn create_child(&mut self, cur: NodeId, routine: RoutineId) -> NodeId {
        let target = match self.mode {
            // The direct mode's builder of the whole tree keeps no path.
            CollapseMode::Direct => (self.routines[cur.index()] == routine).then_some(cur),
            _ => self
                .collapse_target(cur, routine)
                .map(|position| self.path.node(position)),
        };
        let id = NodeId::from_index(self.hot.len());
        self.hot.push(HotNode::new(target.unwrap_or(NodeId::NONE)));
        self.routines.push(routine);
        self.parents.push(cur);
        self.levels.push(self.levels[cur.index()] + 1);
        self.link_child(cur, routine, id);
        id
    }

    /// Lists `id` among the children of `parent`.
    fn link_child(&mut self, parent: NodeId, routine: RoutineId, id: NodeId) {
        let node = &mut self.hot[parent.index()];
        match node.child_routines.iter().position(|&r| r == NO_ROUTINE) {
            Some(slot) => {
                node.child_routines[slot] = routine.index() as u32;
                node.child_ids[slot] = id;
            }
            None => {
                self.more_children.insert((parent, routine), id);
            }
        }
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

    fn len(&self) -> usize {
        self.entries.len()
    }

    /// The deepest node on the path that was made (see `in_passes`).
    fn deepest_made(&self) -> Option<NodeId> {
        self.entries
            .iter()
            .rev()
            .map(|e| e.node)
            .find(|&n| n != NodeId::NONE)
    }

    fn last_routine(&self) -> Option<RoutineId> {
        self.entries.last().map(|e| e.routine)
    }

    /// Whether every routine below `position` also occurs at or above it.
    fn keeps_all_names_when_cut_below(&self, position: usize) -> bool {
        self.first_occurrences
            .last()
            .is_none_or(|&first| first as usize <= position)
    }
}
