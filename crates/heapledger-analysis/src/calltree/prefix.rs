//! The tree without recursion collapsing, built from stacks streamed in
//! one at a time without keeping them: a prefix tree of routines, 24 bytes
//! a node, whose shown part becomes a [`CallTree`].
//!
//! Without collapsing, a node is a path of routines from the root, its
//! inclusive weight that of the stacks through it, and a child never
//! weighs more than its parent; so the tree is made once, its weights
//! summed from the leaves up, and only the nodes a display shows turned
//! into [`Node`]s. [`CallTree::build_pruned`] gives the same tree from a
//! [`Samples`](super::Samples) set, which holds every stack's frames: on
//! Python compiling its library, 130 MB of frames against 48 MB of nodes.
//!
//! Direct collapsing ([`CollapseMode::Direct`]) is a prefix tree too: a
//! routine calling itself stays on its node (crossing the node's stub
//! `f...`), so a stack's path only goes down, each node at most once; the
//! weights a stack gives after such a crossing are kept apart (indirect),
//! and each node's stub counts the stacks that crossed it. The other
//! collapsing modes jump up to nodes higher on the path, and are built by
//! [`CallTreeBuilder`](super::CallTreeBuilder).
//!
//! A node's children are a list of at most [`LISTED`] (most nodes have
//! one or two), then a hash map for the rest: a frame costs a short scan,
//! no hash, in the common case, and a node with thousands of callees (an
//! interpreter's loop) stays fast.

use super::hash::IdMap;
use super::routine::check_frames;
use super::tree::Node;
use super::{CallTree, CallTreeError, CollapseMode, Direction, NodeId, RoutineId, RoutineTable};

/// Children kept in a node's list before the hash map takes the rest.
const LISTED: u32 = 8;
/// Ends a list.
const NONE: u32 = u32::MAX;

/// Where a stack's walk with direct collapsing stands.
#[derive(Default)]
struct Walk {
    via_stub: bool,
    in_run: bool,
}

/// Stacks as a prefix tree of routines, with each stack's weight at its
/// last node.
///
/// ```
/// use heapledger_analysis::calltree::{Direction, PrefixTree, RoutineTable};
/// let mut routines = RoutineTable::new();
/// let (main, f, g) = (routines.intern("main"), routines.intern("f"), routines.intern("g"));
/// let mut prefix = PrefixTree::new(Direction::TopDown);
/// prefix.routines_grew(&routines);
/// prefix.push(&[main, f], 3).unwrap();
/// prefix.push(&[main, g], 1).unwrap();
/// let tree = prefix.into_tree(2);
/// assert_eq!(tree.node_count(), 2); // main (4) and f (3); g is under 2
/// assert_eq!(tree[tree.roots()[0]].inclusive(), 4);
/// ```
#[derive(Debug)]
pub struct PrefixTree {
    direction: Direction,
    routine_count: usize,
    /// Index 0 is the hidden root above the real roots.
    parents: Vec<u32>,
    routines: Vec<RoutineId>,
    first_child: Vec<u32>,
    next_sibling: Vec<u32>,
    /// The weight of the stacks that end at the node.
    own: Vec<u64>,
    /// Direct collapsing: `indirect` and `stub` are kept.
    direct_collapse: bool,
    /// The weight of the stacks that reached the node after crossing a
    /// stub (direct collapsing; empty otherwise).
    indirect: Vec<u64>,
    /// The weight of the stacks that crossed the node's stub (direct
    /// collapsing; empty otherwise).
    stub: Vec<u64>,
    /// Children past a node's first [`LISTED`], by (parent, routine).
    more: IdMap<(u32, RoutineId), u32>,
    total_weight: u64,
}

impl PrefixTree {
    /// An empty tree for `direction` (bottom-up takes each stack leaf
    /// first); no routine is known until [`routines_grew`](Self::routines_grew).
    pub fn new(direction: Direction) -> PrefixTree {
        PrefixTree {
            direction,
            routine_count: 0,
            parents: vec![NONE],
            routines: vec![RoutineId::NONE],
            first_child: vec![NONE],
            next_sibling: vec![NONE],
            own: vec![0],
            direct_collapse: false,
            indirect: Vec::new(),
            stub: Vec::new(),
            more: IdMap::default(),
            total_weight: 0,
        }
    }

    /// An empty tree with direct collapsing ([`CollapseMode::Direct`]),
    /// 40 bytes a node.
    pub fn direct_collapse(direction: Direction) -> PrefixTree {
        PrefixTree {
            direct_collapse: true,
            indirect: vec![0],
            stub: vec![0],
            ..PrefixTree::new(direction)
        }
    }

    /// Takes the routines of `routines` as known (a table that grows as
    /// the stacks are read).
    pub fn routines_grew(&mut self, routines: &RoutineTable) {
        self.routine_count = self.routine_count.max(routines.len());
    }

    /// Adds a stack, routines root first, with its weight. A zero-weight
    /// stack changes nothing.
    ///
    /// # Errors
    ///
    /// [`CallTreeError::EmptySample`] for no frames and
    /// [`CallTreeError::UnknownRoutine`] for a routine not known; nothing
    /// is added then.
    pub fn push(&mut self, frames: &[RoutineId], weight: u64) -> Result<(), CallTreeError> {
        check_frames(frames, self.routine_count)?;
        if weight == 0 {
            return Ok(());
        }
        let mut at = 0u32;
        if self.direct_collapse {
            let mut walk = Walk::default();
            match self.direction {
                Direction::TopDown => {
                    for &r in frames {
                        at = self.step_direct(at, r, weight, &mut walk);
                    }
                }
                Direction::BottomUp => {
                    for &r in frames.iter().rev() {
                        at = self.step_direct(at, r, weight, &mut walk);
                    }
                }
            }
        } else {
            match self.direction {
                Direction::TopDown => frames.iter().for_each(|&r| at = self.child(at, r)),
                Direction::BottomUp => frames.iter().rev().for_each(|&r| at = self.child(at, r)),
            }
        }
        let own = &mut self.own[at as usize];
        *own = own.saturating_add(weight);
        self.total_weight = self.total_weight.saturating_add(weight);
        Ok(())
    }

    /// The sum of the weights pushed (saturating).
    pub fn total_weight(&self) -> u64 {
        self.total_weight
    }

    /// How many nodes the stacks made.
    pub fn node_count(&self) -> usize {
        self.parents.len() - 1
    }

    /// One frame with direct collapsing, from node `at`: the routine of
    /// `at` again crosses its stub and stays; another goes down to its
    /// child. `walk`: whether the stack crossed a stub yet, and whether the
    /// frame before crossed this one (a run of the same routine crosses it
    /// once, and the path never comes back to a node it left).
    fn step_direct(&mut self, at: u32, routine: RoutineId, weight: u64, walk: &mut Walk) -> u32 {
        if at != 0 && self.routines[at as usize] == routine {
            if !walk.in_run {
                let stub = &mut self.stub[at as usize];
                *stub = stub.saturating_add(weight);
            }
            walk.in_run = true;
            walk.via_stub = true;
            return at;
        }
        walk.in_run = false;
        let next = self.child(at, routine);
        if walk.via_stub {
            let indirect = &mut self.indirect[next as usize];
            *indirect = indirect.saturating_add(weight);
        }
        next
    }

    /// The child `routine` of `parent`, made if new.
    fn child(&mut self, parent: u32, routine: RoutineId) -> u32 {
        let mut listed = 0;
        let mut at = self.first_child[parent as usize];
        while at != NONE {
            if self.routines[at as usize] == routine {
                return at;
            }
            listed += 1;
            at = self.next_sibling[at as usize];
        }
        if listed == LISTED {
            if let Some(&found) = self.more.get(&(parent, routine)) {
                return found;
            }
        }
        let id = u32::try_from(self.parents.len())
            .ok()
            .filter(|&id| id < NONE)
            .expect("more than u32::MAX - 1 prefix tree nodes");
        self.parents.push(parent);
        self.routines.push(routine);
        self.first_child.push(NONE);
        self.own.push(0);
        if self.direct_collapse {
            self.indirect.push(0);
            self.stub.push(0);
        }
        if listed < LISTED {
            self.next_sibling.push(std::mem::replace(
                &mut self.first_child[parent as usize],
                id,
            ));
        } else {
            self.next_sibling.push(NONE);
            self.more.insert((parent, routine), id);
        }
        id
    }

    /// The call tree with the nodes of `min_weight` or more (a stub: the
    /// weight that crossed it): a lighter node is left out with everything
    /// under it, its weight kept in its parent's inclusive weight, not its
    /// own, as [`CallTree::build_pruned`] does. 0 keeps every node.
    pub fn into_tree(self, min_weight: u64) -> CallTree {
        let PrefixTree {
            direction,
            routine_count,
            parents,
            routines,
            first_child,
            next_sibling,
            own,
            direct_collapse,
            indirect,
            stub,
            more,
            total_weight,
        } = self;
        drop((first_child, next_sibling, more));
        // Inclusive weights, children (made after their parents) first:
        // every stack through a node ends under it, since paths only go
        // down.
        let mut inclusive = own.clone();
        for index in (1..parents.len()).rev() {
            let weight = inclusive[index];
            let parent = &mut inclusive[parents[index] as usize];
            *parent = parent.saturating_add(weight);
        }
        // The nodes kept, in the order made (parents first), renumbered; a
        // node's stub right after it.
        let mut new_index = vec![NONE; parents.len()];
        new_index[0] = 0;
        let mut nodes = vec![Node {
            routine: RoutineId::NONE,
            parent: NodeId::HIDDEN_ROOT,
            level: 0,
            stub_target: NodeId::NONE,
            direct: 0,
            indirect: 0,
            excl: 0,
        }];
        for index in 1..parents.len() {
            let parent = new_index[parents[index] as usize];
            if parent == NONE || inclusive[index] < min_weight {
                continue;
            }
            let id = NodeId::from_index(nodes.len());
            new_index[index] = nodes.len() as u32;
            let level = nodes[parent as usize].level + 1;
            let late = if direct_collapse { indirect[index] } else { 0 };
            nodes.push(Node {
                routine: routines[index],
                parent: NodeId::from_index(parent as usize),
                level,
                stub_target: NodeId::NONE,
                direct: inclusive[index].saturating_sub(late),
                indirect: late,
                excl: own[index],
            });
            let crossed = if direct_collapse { stub[index] } else { 0 };
            if crossed > 0 && crossed >= min_weight {
                nodes.push(Node {
                    routine: routines[index],
                    parent: id,
                    level: level + 1,
                    stub_target: id,
                    direct: crossed,
                    indirect: 0,
                    excl: 0,
                });
            }
        }
        let mode = match direct_collapse {
            true => CollapseMode::Direct,
            false => CollapseMode::None,
        };
        CallTree::from_nodes(mode, direction, nodes, routine_count, total_weight)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calltree::Samples;

    /// A node with hundreds of children (past the list, into the map),
    /// each met again later: the same tree as from the sample set.
    #[test]
    fn children_past_the_list_are_found_again() {
        let mut samples = Samples::new();
        let mut prefix = PrefixTree::new(Direction::TopDown);
        let mut routines = RoutineTable::new();
        for round in 0..3u64 {
            for callee in 0..300u64 {
                let names = ["main".to_owned(), "loop".to_owned(), format!("f{callee}")];
                let ids: Vec<RoutineId> = names.iter().map(|n| routines.intern(n)).collect();
                prefix.routines_grew(&routines);
                let weight = 1 + (callee * 7 + round) % 5;
                prefix.push(&ids, weight).unwrap();
                samples.push_names(names.iter(), weight).unwrap();
            }
        }
        assert_eq!(prefix.node_count(), 302);
        let tree = prefix.into_tree(0);
        let whole = CallTree::build(&samples, CollapseMode::None, Direction::TopDown);
        assert_eq!(tree.node_count(), whole.node_count());
        let paths = |t: &CallTree| {
            let mut v: Vec<(Vec<RoutineId>, u64, u64)> = t
                .node_ids()
                .map(|id| (t.path_routines(id), t[id].inclusive(), t[id].excl()))
                .collect();
            v.sort();
            v
        };
        assert_eq!(paths(&tree), paths(&whole));
    }

    #[test]
    fn bad_stacks_are_refused_and_change_nothing() {
        let mut prefix = PrefixTree::new(Direction::BottomUp);
        let mut routines = RoutineTable::new();
        let main = routines.intern("main");
        // Not yet known to the tree.
        assert!(prefix.push(&[main], 1).is_err());
        prefix.routines_grew(&routines);
        assert!(prefix.push(&[], 1).is_err());
        prefix.push(&[main], 0).unwrap();
        assert_eq!(prefix.node_count(), 0);
        assert_eq!(prefix.total_weight(), 0);
        prefix.push(&[main], 2).unwrap();
        assert_eq!(prefix.node_count(), 1);
    }
}
