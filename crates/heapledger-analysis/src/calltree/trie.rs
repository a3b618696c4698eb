//! A prefix tree of routines, the store of [`Samples`](super::Samples) and
//! [`PrefixTree`](super::PrefixTree): stacks that share their outer frames
//! share their nodes, 16 bytes a node, where a flat list of every stack's
//! frames takes 4 bytes a frame (Python compiling its library: 2 M nodes
//! against 30 M frames).
//!
//! A node's children are a list of at most [`LISTED`] (most nodes have
//! one or two), then a hash map for the rest: a frame costs a short scan,
//! no hash, in the common case, and a node with thousands of callees (an
//! interpreter's loop) stays fast.

use super::hash::IdMap;
use super::RoutineId;

/// Children kept in a node's list before the hash map takes the rest.
const LISTED: u32 = 8;
/// Ends a list; no node.
pub(crate) const NONE: u32 = u32::MAX;

/// Nodes by index; 0 is the root, above the outermost frames.
#[derive(Clone, Debug)]
pub(crate) struct Trie {
    pub(crate) parents: Vec<u32>,
    pub(crate) routines: Vec<RoutineId>,
    first_child: Vec<u32>,
    next_sibling: Vec<u32>,
    /// Children past a node's first [`LISTED`], by (parent, routine).
    more: IdMap<(u32, RoutineId), u32>,
    /// The routines of the last path walked ([`Trie::walk`]) and their
    /// nodes.
    last_routines: Vec<RoutineId>,
    last_nodes: Vec<u32>,
}

impl Default for Trie {
    fn default() -> Self {
        Trie {
            parents: vec![NONE],
            routines: vec![RoutineId::NONE],
            first_child: vec![NONE],
            next_sibling: vec![NONE],
            more: IdMap::default(),
            last_routines: Vec::new(),
            last_nodes: Vec::new(),
        }
    }
}

impl Trie {
    /// How many nodes, the root included.
    pub(crate) fn len(&self) -> usize {
        self.parents.len()
    }

    /// The child `routine` of `parent`, and whether it was made now.
    pub(crate) fn child(&mut self, parent: u32, routine: RoutineId) -> (u32, bool) {
        let mut listed = 0;
        let mut at = self.first_child[parent as usize];
        while at != NONE {
            if self.routines[at as usize] == routine {
                return (at, false);
            }
            listed += 1;
            at = self.next_sibling[at as usize];
        }
        if listed == LISTED {
            if let Some(&found) = self.more.get(&(parent, routine)) {
                return (found, false);
            }
        }
        let id = u32::try_from(self.parents.len())
            .ok()
            .filter(|&id| id < NONE)
            .expect("more than u32::MAX - 1 prefix tree nodes");
        self.parents.push(parent);
        self.routines.push(routine);
        self.first_child.push(NONE);
        if listed < LISTED {
            self.next_sibling.push(std::mem::replace(
                &mut self.first_child[parent as usize],
                id,
            ));
        } else {
            self.next_sibling.push(NONE);
            self.more.insert((parent, routine), id);
        }
        (id, true)
    }

    /// The node of the path `routines` from the root, made where new
    /// (`made` is told each node made, in order). The walk starts below
    /// the routines the path shares with the last one walked: the
    /// profile store gives its stacks in the order of its tree's nodes,
    /// so that each shares most of its frames with the one before
    /// (compileall's: 46 frames a stack, each a lookup among a node's
    /// children, most of them cache misses).
    pub(crate) fn walk(&mut self, routines: &[RoutineId], mut made: impl FnMut()) -> u32 {
        let shared = routines
            .iter()
            .zip(&self.last_routines)
            .take_while(|(a, b)| a == b)
            .count();
        self.last_routines.truncate(shared);
        self.last_nodes.truncate(shared);
        let mut at = self.last_nodes.last().copied().unwrap_or(0);
        for &routine in &routines[shared..] {
            let (next, new) = self.child(at, routine);
            if new {
                made();
            }
            at = next;
            self.last_routines.push(routine);
            self.last_nodes.push(at);
        }
        at
    }

    /// The routines from the outermost frame to `node`.
    pub(crate) fn frames(&self, node: u32) -> Vec<RoutineId> {
        let mut out = Vec::with_capacity(64);
        let mut at = node;
        while at != 0 {
            out.push(self.routines[at as usize]);
            at = self.parents[at as usize];
        }
        out.reverse();
        out
    }

    /// Only what a walk from the leaves up needs is kept: parents and
    /// routines.
    pub(crate) fn into_parents(self) -> (Vec<u32>, Vec<RoutineId>) {
        (self.parents, self.routines)
    }
}
