//! The finished call tree: a flat arena of nodes with typed ids.

use std::ops::Index;

use super::{
    CallTreeBuilder, CollapseMode, Direction, PrefixTree, RoutineId, RoutineTable, Samples,
    PASS_BUDGET, PASS_LEVELS,
};

/// A node of a [`CallTree`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(u32);

impl NodeId {
    /// The hidden node above the roots; never handed out.
    pub(crate) const HIDDEN_ROOT: NodeId = NodeId(0);
    /// Marks "no node" in packed fields.
    pub(crate) const NONE: NodeId = NodeId(u32::MAX);

    pub(crate) fn from_index(index: usize) -> NodeId {
        NodeId(
            u32::try_from(index)
                .ok()
                .filter(|&index| index < u32::MAX)
                .expect("call tree exceeds u32::MAX nodes"),
        )
    }

    /// The position of this node in the tree's arena.
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

/// One node: an ordinary call of a routine, or a recursive stub `f...` that
/// points up to a higher node of the same routine.
#[derive(Clone, Debug)]
pub struct Node {
    pub(crate) routine: RoutineId,
    pub(crate) parent: NodeId,
    pub(crate) level: u32,
    /// The target of a stub; `NodeId::NONE` for an ordinary node.
    pub(crate) stub_target: NodeId,
    /// Inclusive weight reached directly; for a stub, the weight that crossed it.
    pub(crate) direct: u64,
    pub(crate) indirect: u64,
    pub(crate) excl: u64,
}

impl Node {
    /// The routine of this node (for a stub, the routine it recurses into).
    pub fn routine(&self) -> RoutineId {
        self.routine
    }

    /// The parent, or `None` for a root.
    pub fn parent(&self) -> Option<NodeId> {
        (self.parent != NodeId::HIDDEN_ROOT).then_some(self.parent)
    }

    /// Depth in the tree; roots are at level 1.
    pub fn level(&self) -> u32 {
        self.level
    }

    /// Whether this node is a recursive stub.
    pub fn is_stub(&self) -> bool {
        self.stub_target != NodeId::NONE
    }

    /// For a stub, the higher node of the same routine it points to.
    pub fn stub_target(&self) -> Option<NodeId> {
        self.is_stub().then_some(self.stub_target)
    }

    /// Inclusive ("in or under") weight of samples that reached this node before
    /// crossing any stub; 0 for a stub.
    pub fn incl_direct(&self) -> u64 {
        if self.is_stub() {
            0
        } else {
            self.direct
        }
    }

    /// Inclusive weight of samples that reached this node only after crossing a
    /// stub; 0 for a stub.
    pub fn incl_indirect(&self) -> u64 {
        self.indirect
    }

    /// Inclusive weight, direct plus indirect; 0 for a stub.
    pub fn inclusive(&self) -> u64 {
        self.incl_direct().saturating_add(self.indirect)
    }

    /// Exclusive ("in only") weight: samples whose replay ended here; 0 for a stub.
    pub fn excl(&self) -> u64 {
        self.excl
    }

    /// For a stub, the weight of the samples that crossed it (each sample once);
    /// 0 for an ordinary node.
    pub fn traversed(&self) -> u64 {
        if self.is_stub() {
            self.direct
        } else {
            0
        }
    }

    /// The weight that orders siblings and that the display limit applies to:
    /// inclusive weight, or traversed weight for a stub.
    pub(crate) fn sort_weight(&self) -> u64 {
        if self.is_stub() {
            self.direct
        } else {
            self.inclusive()
        }
    }
}

/// A call tree built from weighted samples in one collapse mode and direction.
///
/// Nodes live in one arena; [`NodeId`]s index it (`tree[id]`). Children are kept
/// in creation order; [`walk`](Self::walk) and the renderers sort them.
#[derive(Clone, Debug)]
pub struct CallTree {
    pub(crate) mode: CollapseMode,
    pub(crate) direction: Direction,
    /// Index 0 is the hidden root above the real roots.
    pub(crate) nodes: Vec<Node>,
    /// Children of node `i` are `child_ids[child_starts[i]..child_starts[i + 1]]`.
    pub(crate) child_starts: Vec<u32>,
    pub(crate) child_ids: Vec<NodeId>,
    pub(crate) routine_count: usize,
    pub(crate) total_weight: u64,
}

impl CallTree {
    /// Builds the tree of `samples` in `mode` and `direction`.
    pub fn build(samples: &Samples, mode: CollapseMode, direction: Direction) -> CallTree {
        Self::build_shown(samples, mode, direction, 0)
    }

    /// The tree of `samples` with only the nodes of `min_weight` or more
    /// (a stub's traversed weight), each with the numbers it has in
    /// [`CallTree::build`]'s tree (see
    /// [`CallTreeBuilder::finish_pruned`]). Built in passes over the
    /// samples ([`CallTreeBuilder::in_passes`]), so that the nodes held
    /// stay about [`PASS_BUDGET`] where the whole tree is larger; with
    /// `min_weight` 0, the whole tree at once. Without collapsing,
    /// [`CallTree::build_pruned`] costs less.
    pub fn build_shown(
        samples: &Samples,
        mode: CollapseMode,
        direction: Direction,
        min_weight: u64,
    ) -> CallTree {
        if min_weight == 0 {
            let mut b = CallTreeBuilder::new(mode, direction, samples.routines());
            // At most one node per frame; the reservation is virtual until used.
            b.reserve(samples.frame_count().min(1 << 22));
            return b.passes_over(samples, 0).finish();
        }
        CallTreeBuilder::in_passes(
            mode,
            direction,
            samples.routines(),
            PASS_BUDGET,
            PASS_LEVELS,
        )
        .passes_over(samples, min_weight)
        .finish_pruned(min_weight)
    }

    /// A tree of `nodes` (index 0 the hidden root; each parent before its
    /// children), its children listed in the order of the nodes.
    pub(crate) fn from_nodes(
        mode: CollapseMode,
        direction: Direction,
        nodes: Vec<Node>,
        routine_count: usize,
        total_weight: u64,
    ) -> CallTree {
        let mut child_starts = vec![0u32; nodes.len() + 1];
        for node in &nodes[1..] {
            child_starts[node.parent.index() + 1] += 1;
        }
        for i in 1..child_starts.len() {
            child_starts[i] += child_starts[i - 1];
        }
        let mut next = child_starts.clone();
        let mut child_ids = vec![NodeId::HIDDEN_ROOT; nodes.len() - 1];
        for (index, node) in nodes.iter().enumerate().skip(1) {
            let slot = &mut next[node.parent.index()];
            child_ids[*slot as usize] = NodeId::from_index(index);
            *slot += 1;
        }
        CallTree {
            mode,
            direction,
            nodes,
            child_starts,
            child_ids,
            routine_count,
            total_weight,
        }
    }

    /// The tree of `samples` without recursion collapsing, with only the
    /// nodes of `min_weight` or more: each lighter subtree is left out and
    /// its weight kept in its parent's inclusive weight (not its own), so
    /// that every node kept has the numbers it has in [`CallTree::build`]'s
    /// tree. The samples go into a [`PrefixTree`] (24 bytes a node), whose
    /// shown part only is made into the tree: a profile of 405 000 stacks
    /// 46 deep, whose whole tree takes 300 MB, makes a few thousand nodes.
    pub fn build_pruned(samples: &Samples, direction: Direction, min_weight: u64) -> CallTree {
        PrefixTree::new(direction)
            .fed(samples)
            .into_tree(min_weight)
    }

    /// The top-down (callees) tree of `samples`.
    pub fn top_down(samples: &Samples, mode: CollapseMode) -> CallTree {
        Self::build(samples, mode, Direction::TopDown)
    }

    /// The bottom-up (callers) tree of `samples`: each sample replayed leaf first.
    pub fn bottom_up(samples: &Samples, mode: CollapseMode) -> CallTree {
        Self::build(samples, mode, Direction::BottomUp)
    }

    /// The collapse mode the tree was built in.
    pub fn mode(&self) -> CollapseMode {
        self.mode
    }

    /// The direction the tree was built in.
    pub fn direction(&self) -> Direction {
        self.direction
    }

    /// The sum of the weights of all samples (saturating).
    pub fn total_weight(&self) -> u64 {
        self.total_weight
    }

    /// How many nodes, stubs included, the tree has.
    pub fn node_count(&self) -> usize {
        self.nodes.len() - 1
    }

    /// The roots, in creation order.
    pub fn roots(&self) -> &[NodeId] {
        self.children_of(NodeId::HIDDEN_ROOT)
    }

    /// The children of `id`, stubs included, in creation order.
    pub fn children(&self, id: NodeId) -> &[NodeId] {
        self.check(id);
        self.children_of(id)
    }

    /// Every node id, in creation order (a parent before its children).
    pub fn node_ids(&self) -> impl ExactSizeIterator<Item = NodeId> + '_ {
        (1..self.nodes.len()).map(NodeId::from_index)
    }

    /// `id` and its ancestors, up to its root.
    pub fn ancestors(&self, id: NodeId) -> impl Iterator<Item = NodeId> + '_ {
        self.check(id);
        std::iter::successors(Some(id), move |&id| self.nodes[id.index()].parent())
    }

    /// The routines from the root down to `id`, root first.
    pub fn path_routines(&self, id: NodeId) -> Vec<RoutineId> {
        let mut path: Vec<RoutineId> = self.ancestors(id).map(|id| self[id].routine).collect();
        path.reverse();
        path
    }

    /// The children of `id` in output order: ordinary nodes by inclusive weight
    /// descending, then stubs by traversed weight descending (as the manual lists
    /// a stub after its siblings), ties by routine name.
    pub fn sorted_children(&self, id: NodeId, routines: &RoutineTable) -> Vec<NodeId> {
        let mut children = self.children(id).to_vec();
        self.sort_siblings(&mut children, routines);
        children
    }

    pub(crate) fn sort_siblings(&self, siblings: &mut [NodeId], routines: &RoutineTable) {
        siblings.sort_unstable_by(|&a, &b| {
            let (node_a, node_b) = (&self[a], &self[b]);
            (node_a.is_stub().cmp(&node_b.is_stub()))
                .then(node_b.sort_weight().cmp(&node_a.sort_weight()))
                .then_with(|| {
                    routines
                        .name(node_a.routine)
                        .cmp(routines.name(node_b.routine))
                })
                .then(a.cmp(&b))
        });
    }

    /// Panics unless `routines` can name every routine of this tree.
    pub(crate) fn check_routines(&self, routines: &RoutineTable) {
        assert!(
            routines.len() >= self.routine_count,
            "the routine table ({} routines) is not the one the tree was built with ({} routines)",
            routines.len(),
            self.routine_count
        );
    }

    pub(crate) fn children_of(&self, id: NodeId) -> &[NodeId] {
        let start = self.child_starts[id.index()] as usize;
        let end = self.child_starts[id.index() + 1] as usize;
        &self.child_ids[start..end]
    }

    fn check(&self, id: NodeId) {
        assert!(
            id != NodeId::HIDDEN_ROOT && id.index() < self.nodes.len(),
            "{id:?} is not a node of this tree"
        );
    }
}

impl Index<NodeId> for CallTree {
    type Output = Node;

    /// # Panics
    ///
    /// If `id` is not a node of this tree.
    fn index(&self, id: NodeId) -> &Node {
        self.check(id);
        &self.nodes[id.index()]
    }
}
