//! An iterative depth-first walk of a call tree in output order, with the
//! rendering filters applied.

use super::{CallTree, NodeId, RoutineTable};

/// What the renderers show.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RenderOptions {
    /// Hide a node (and so everything under it) whose inclusive weight is under
    /// this percentage of the total weight; a stub is hidden when the weight
    /// that crossed it is. 0 shows every node. Default 1.
    pub limit_percent: f64,
    /// Hide nodes deeper than this level (roots are level 1). Default 64.
    pub max_level: u32,
}

impl Default for RenderOptions {
    fn default() -> Self {
        RenderOptions {
            limit_percent: 1.0,
            max_level: 64,
        }
    }
}

impl RenderOptions {
    /// Shows every node at every level.
    pub fn all() -> Self {
        RenderOptions {
            limit_percent: 0.0,
            max_level: u32::MAX,
        }
    }

    fn shows(&self, weight: u64, level: u32, total: u64) -> bool {
        level <= self.max_level && weight as f64 * 100.0 >= self.limit_percent * total as f64
    }
}

/// One step of a [`Walk`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Visit {
    /// The walk reaches a node; its shown children follow, then its `Leave`.
    Enter(NodeId),
    /// The walk is done with a node and everything shown under it.
    Leave(NodeId),
}

/// The shown nodes of a tree, depth first, siblings in output order (see
/// [`CallTree::sorted_children`]). Uses an explicit stack, never recursion.
#[derive(Debug)]
pub struct Walk<'a> {
    tree: &'a CallTree,
    routines: &'a RoutineTable,
    options: RenderOptions,
    stack: Vec<Visit>,
    siblings: Vec<NodeId>,
}

impl CallTree {
    /// Walks the nodes that `options` shows, depth first in output order.
    ///
    /// # Panics
    ///
    /// If `routines` is smaller than the table the tree was built with.
    pub fn walk<'a>(&'a self, routines: &'a RoutineTable, options: &RenderOptions) -> Walk<'a> {
        self.check_routines(routines);
        let mut walk = Walk {
            tree: self,
            routines,
            options: *options,
            stack: Vec::new(),
            siblings: Vec::new(),
        };
        walk.push_children(NodeId::HIDDEN_ROOT);
        walk
    }
}

impl Walk<'_> {
    /// Pushes the shown children of `id` so that the first pops first.
    fn push_children(&mut self, id: NodeId) {
        let tree = self.tree;
        let total = tree.total_weight;
        self.siblings.clear();
        self.siblings
            .extend(tree.children_of(id).iter().copied().filter(|&child| {
                let node = &tree.nodes[child.index()];
                self.options.shows(node.sort_weight(), node.level, total)
            }));
        tree.sort_siblings(&mut self.siblings, self.routines);
        self.stack
            .extend(self.siblings.iter().rev().map(|&child| Visit::Enter(child)));
    }
}

impl Iterator for Walk<'_> {
    type Item = Visit;

    fn next(&mut self) -> Option<Visit> {
        let visit = self.stack.pop()?;
        if let Visit::Enter(id) = visit {
            self.stack.push(Visit::Leave(id));
            self.push_children(id);
        }
        Some(visit)
    }
}
