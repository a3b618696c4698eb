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
//! The nodes are a [`Trie`]'s.

use super::routine::check_frames;
use super::tree::Node;
use super::trie::{Trie, NONE};
use super::{
    CallTree, CallTreeError, CollapseMode, Direction, NodeId, RoutineId, RoutineTable, Samples,
};

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
    /// Node 0 is the hidden root above the real roots.
    trie: Trie,
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
    total_weight: u64,
}

impl PrefixTree {
    /// An empty tree for a call tree in `direction`; no routine is known
    /// until [`routines_grew`](Self::routines_grew). The stacks are kept
    /// outermost frame first either way: stacks share their outer frames
    /// far more than their leaves (Python compiling its library: 2.3 M
    /// nodes, against 16.7 M leaf first), and the callers' view is read
    /// from that tree (see [`into_tree`](Self::into_tree)).
    pub fn new(direction: Direction) -> PrefixTree {
        PrefixTree {
            direction,
            routine_count: 0,
            trie: Trie::default(),
            own: vec![0],
            direct_collapse: false,
            indirect: Vec::new(),
            stub: Vec::new(),
            total_weight: 0,
        }
    }

    /// An empty tree for a call tree with direct collapsing
    /// ([`CollapseMode::Direct`]): top-down, 40 bytes a node (each node's
    /// indirect weight and stub kept as the stacks come); bottom-up, 24
    /// (the callers' view is read level by level, crossings included).
    pub fn direct_collapse(direction: Direction) -> PrefixTree {
        let mut tree = PrefixTree::new(direction);
        tree.direct_collapse = true;
        if direction == Direction::TopDown {
            tree.indirect.push(0);
            tree.stub.push(0);
        }
        tree
    }

    /// Whether the stacks' walks are collapsed as they come (direct
    /// collapsing, top-down).
    fn collapses_as_pushed(&self) -> bool {
        self.direct_collapse && self.direction == Direction::TopDown
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
        if self.collapses_as_pushed() {
            let mut walk = Walk::default();
            for &r in frames {
                at = self.step_direct(at, r, weight, &mut walk);
            }
        } else {
            let own = &mut self.own;
            at = self.trie.walk(frames, || own.push(0));
        }
        let own = &mut self.own[at as usize];
        *own = own.saturating_add(weight);
        self.total_weight = self.total_weight.saturating_add(weight);
        Ok(())
    }

    /// Every stack of `samples` pushed (their routine table taken as
    /// known).
    pub fn fed(mut self, samples: &Samples) -> PrefixTree {
        self.routines_grew(samples.routines());
        samples.each(|_, frames, weight| {
            self.push(frames, weight)
                .expect("a sample set holds only valid samples");
        });
        self
    }

    /// The sum of the weights pushed (saturating).
    pub fn total_weight(&self) -> u64 {
        self.total_weight
    }

    /// How many nodes the stacks made.
    pub fn node_count(&self) -> usize {
        self.trie.len() - 1
    }

    /// One frame with direct collapsing, from node `at`: the routine of
    /// `at` again crosses its stub and stays; another goes down to its
    /// child. `walk`: whether the stack crossed a stub yet, and whether the
    /// frame before crossed this one (a run of the same routine crosses it
    /// once, and the path never comes back to a node it left).
    fn step_direct(&mut self, at: u32, routine: RoutineId, weight: u64, walk: &mut Walk) -> u32 {
        if at != 0 && self.trie.routines[at as usize] == routine {
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
        let (id, made) = self.trie.child(parent, routine);
        if made {
            self.own.push(0);
            if self.collapses_as_pushed() {
                self.indirect.push(0);
                self.stub.push(0);
            }
        }
        id
    }

    /// The folded lines a flame graph is drawn from (no collapsing): each
    /// node of `min_weight` or more whose ancestors are too, with its own
    /// weight and that of its children left out (narrower than the
    /// narrowest frame drawn: the frames drawn keep their exact widths);
    /// and each root lighter than that as one frame of its weight. Paths
    /// in the tree's order (leaf first, bottom-up), to `emit`.
    pub fn into_lines(self, min_weight: u64, mut emit: impl FnMut(&[RoutineId], u64)) {
        let shown = self.shown(min_weight);
        let nodes = &shown.nodes;
        // What the kept children take of each node's inclusive weight.
        let mut below = vec![0u64; nodes.len()];
        for node in nodes[1..].iter().filter(|n| !n.is_stub()) {
            let b = &mut below[node.parent.index()];
            *b = b.saturating_add(node.direct.saturating_add(node.indirect));
        }
        let mut path = Vec::new();
        for (index, node) in nodes.iter().enumerate().skip(1) {
            if node.is_stub() {
                continue;
            }
            let own = node
                .direct
                .saturating_add(node.indirect)
                .saturating_sub(below[index]);
            if own > 0 {
                path.clear();
                let mut at = index;
                while at != 0 {
                    path.push(nodes[at].routine);
                    at = nodes[at].parent.index();
                }
                path.reverse();
                emit(&path, own);
            }
        }
        for (routine, weight) in shown.light_roots {
            emit(&[routine], weight);
        }
    }

    /// The call tree with the nodes of `min_weight` or more (a stub: the
    /// weight that crossed it): a lighter node is left out with everything
    /// under it, its weight kept in its parent's inclusive weight, not its
    /// own, as [`CallTree::build_pruned`] does. 0 keeps every node.
    ///
    /// The callers' view (bottom-up) is read from the tree of outer frames
    /// first, level by level: the stacks' last nodes, grouped by routine,
    /// are its roots; each group kept is split by the routine of the next
    /// frame out, and so on; a group lighter than `min_weight` is not
    /// looked at further. It takes 16 bytes a distinct stack besides the
    /// tree, and time for the nodes kept only.
    pub fn into_tree(self, min_weight: u64) -> CallTree {
        let (mode, direction) = (self.mode(), self.direction);
        let (routine_count, total_weight) = (self.routine_count, self.total_weight);
        let shown = self.shown(min_weight);
        CallTree::from_nodes(mode, direction, shown.nodes, routine_count, total_weight)
    }

    fn mode(&self) -> CollapseMode {
        match self.direct_collapse {
            true => CollapseMode::Direct,
            false => CollapseMode::None,
        }
    }

    /// The nodes of `min_weight` or more, parents first (index 0 the
    /// hidden root), and the lighter roots.
    fn shown(self, min_weight: u64) -> Shown {
        match self.direction {
            Direction::TopDown => self.shown_top_down(min_weight),
            Direction::BottomUp => self.shown_bottom_up(min_weight),
        }
    }

    fn shown_top_down(self, min_weight: u64) -> Shown {
        let PrefixTree {
            trie,
            own,
            direct_collapse,
            indirect,
            stub,
            ..
        } = self;
        let (parents, routines) = trie.into_parents();
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
        let mut shown = Shown::new();
        for index in 1..parents.len() {
            let parent = new_index[parents[index] as usize];
            if parent == NONE {
                continue;
            }
            if inclusive[index] < min_weight {
                if parent == 0 && inclusive[index] > 0 {
                    shown.light_roots.push((routines[index], inclusive[index]));
                }
                continue;
            }
            let nodes = &mut shown.nodes;
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
        shown
    }

    fn shown_bottom_up(self, min_weight: u64) -> Shown {
        let direct_collapse = self.direct_collapse;
        let (parents, routines) = self.trie.into_parents();
        // Each stack's walk out from its last node: where it is, its
        // weight, whether it crossed a stub yet (direct collapsing).
        let mut walks: Vec<(u32, u64, bool)> = self
            .own
            .iter()
            .enumerate()
            .filter(|&(_, &w)| w > 0)
            .map(|(node, &w)| (node as u32, w, false))
            .collect();
        drop(self.own);
        let mut shown = Shown::new();
        // (the walks at a node's frames, that node in `shown`)
        let mut work = vec![(0..walks.len(), 0u32)];
        while let Some((range, parent)) = work.pop() {
            let group = &mut walks[range.clone()];
            group.sort_unstable_by_key(|&(at, _, _)| routines[at as usize]);
            let mut i = 0;
            while i < group.len() {
                let routine = routines[group[i].0 as usize];
                let mut j = i;
                let (mut weight, mut late, mut ended, mut crossed) = (0u64, 0u64, 0u64, 0u64);
                while j < group.len() && routines[group[j].0 as usize] == routine {
                    let (at, w, via) = &mut group[j];
                    weight = weight.saturating_add(*w);
                    if *via {
                        late = late.saturating_add(*w);
                    }
                    // One frame further out; 0: past the stack's outermost.
                    *at = parents[*at as usize];
                    // The same routine again crosses this node's stub.
                    if direct_collapse && *at != 0 && routines[*at as usize] == routine {
                        while *at != 0 && routines[*at as usize] == routine {
                            *at = parents[*at as usize];
                        }
                        crossed = crossed.saturating_add(*w);
                        *via = true;
                    }
                    if *at == 0 {
                        ended = ended.saturating_add(*w);
                    }
                    j += 1;
                }
                if weight < min_weight {
                    if parent == 0 {
                        shown.light_roots.push((routine, weight));
                    }
                    i = j;
                    continue;
                }
                let id = shown.nodes.len() as u32;
                let level = shown.nodes[parent as usize].level + 1;
                shown.nodes.push(Node {
                    routine,
                    parent: NodeId::from_index(parent as usize),
                    level,
                    stub_target: NodeId::NONE,
                    direct: weight.saturating_sub(late),
                    indirect: late,
                    excl: ended,
                });
                if crossed > 0 && crossed >= min_weight {
                    let node = NodeId::from_index(id as usize);
                    shown.nodes.push(Node {
                        routine,
                        parent: node,
                        level: level + 1,
                        stub_target: node,
                        direct: crossed,
                        indirect: 0,
                        excl: 0,
                    });
                }
                // The walks that go on, first in the run.
                let run = &mut group[i..j];
                let mut on = 0;
                for k in 0..run.len() {
                    if run[k].0 != 0 {
                        run.swap(on, k);
                        on += 1;
                    }
                }
                if on > 0 {
                    let start = range.start + i;
                    work.push((start..start + on, id));
                }
                i = j;
            }
        }
        shown
    }
}

/// What [`PrefixTree::shown`] keeps.
struct Shown {
    /// Index 0 is the hidden root; parents before their children.
    nodes: Vec<Node>,
    /// The roots lighter than the weight kept: (routine, weight).
    light_roots: Vec<(RoutineId, u64)>,
}

impl Shown {
    fn new() -> Shown {
        Shown {
            nodes: vec![Node {
                routine: RoutineId::NONE,
                parent: NodeId::HIDDEN_ROOT,
                level: 0,
                stub_target: NodeId::NONE,
                direct: 0,
                indirect: 0,
                excl: 0,
            }],
            light_roots: Vec::new(),
        }
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
