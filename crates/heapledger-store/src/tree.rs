//! The stacks' prefix tree: each distinct (parent, frame) pair once.

#[cfg(test)]
use heapledger_wire::prefix::Built;
pub use heapledger_wire::prefix::{build, ROOT};

/// A prefix tree already built (node 0 the root, each parent's number
/// below its children's, each (parent, frame) pair once), ready to be
/// numbered depth first with children by frame, as [`build`] numbers them.
/// Linear but for sorting each node's children: no stack is compared with
/// another. Its rows are made one at a time as they are written: Python
/// compiling its library has 1.9 million nodes, whose rows took 15 MB at
/// the peak of `heapledger run`.
pub struct Dfs<'a> {
    /// Node `p`'s children, by frame, are `children[start[p]..start[p + 1]]`.
    start: Vec<u32>,
    children: Vec<u32>,
    frame: &'a [u32],
}

/// A tree's rows in order: (how many levels up from the node before, to
/// this one's parent, plus one; the frame), with each one's node.
pub struct Walk<'t> {
    tree: &'t Dfs<'t>,
    /// (node, its depth) to visit, the next last.
    todo: Vec<(u32, u32)>,
    last_depth: u32,
}

pub fn from_tree<'a>(parent: &[u32], frame: &'a [u32]) -> Dfs<'a> {
    let n = parent.len();
    // Each node's children, by frame (counting sort by parent, then each
    // short run sorted).
    let mut start = vec![0u32; n + 1];
    for &p in &parent[1..] {
        start[p as usize + 1] += 1;
    }
    for i in 0..n {
        start[i + 1] += start[i];
    }
    let mut fill = start.clone();
    let mut children = vec![0u32; n.saturating_sub(1)];
    for (c, &p) in parent.iter().enumerate().skip(1) {
        children[fill[p as usize] as usize] = c as u32;
        fill[p as usize] += 1;
    }
    drop(fill);
    for p in 0..n {
        let run = &mut children[start[p] as usize..start[p + 1] as usize];
        if run.len() > 1 {
            run.sort_unstable_by_key(|&c| frame[c as usize]);
        }
    }
    Dfs {
        start,
        children,
        frame,
    }
}

impl<'a> Dfs<'a> {
    /// Rows to write, the root's excluded.
    pub fn rows(&self) -> usize {
        self.start.len().saturating_sub(2)
    }

    /// The rows, in order.
    pub fn walk(&'a self) -> Walk<'a> {
        let mut w = Walk {
            tree: self,
            todo: Vec::new(),
            last_depth: 0,
        };
        w.push_children(0, 0);
        w
    }

    /// Each node's number (its row's, plus one; the root's [`ROOT`]).
    pub fn number(&'a self) -> Vec<u32> {
        let mut number = vec![ROOT; self.start.len() - 1];
        for (row, (node, _)) in self.walk().enumerate() {
            number[node as usize] = row as u32 + 1;
        }
        number
    }
}

impl Walk<'_> {
    fn push_children(&mut self, p: u32, depth: u32) {
        let t = self.tree;
        let run = &t.children[t.start[p as usize] as usize..t.start[p as usize + 1] as usize];
        self.todo.extend(run.iter().rev().map(|&c| (c, depth + 1)));
    }
}

impl Iterator for Walk<'_> {
    /// (node, (levels up, frame)).
    type Item = (u32, (u32, u32));

    fn next(&mut self) -> Option<Self::Item> {
        let (c, depth) = self.todo.pop()?;
        let row = (self.last_depth + 1 - depth, self.tree.frame[c as usize]);
        self.last_depth = depth;
        self.push_children(c, depth);
        Some((c, row))
    }
}

/// The tree read back: each node's parent and frame (node 0 is the root).
pub struct Nodes {
    pub parent: Vec<u32>,
    pub frame: Vec<u32>,
}

impl Nodes {
    pub fn new() -> Nodes {
        Nodes {
            parent: vec![ROOT],
            frame: vec![u32::MAX],
        }
    }

    /// Appends nodes from `node` block rows; `path` holds the node ids from
    /// the root's child to the node read last, and carries over blocks.
    pub fn push(&mut self, up: u64, frame: u32, path: &mut Vec<u32>) -> Result<(), String> {
        let keep = (path.len() as u64)
            .checked_sub(up)
            .ok_or_else(|| "a node stands under no node".to_owned())?;
        path.truncate(keep as usize);
        let id = self.parent.len() as u32;
        self.parent.push(path.last().copied().unwrap_or(ROOT));
        self.frame.push(frame);
        path.push(id);
        Ok(())
    }

    /// A node's frames, innermost first.
    #[cfg(test)]
    pub fn frames(&self, mut node: u32, out: &mut Vec<u32>) {
        out.clear();
        while node != ROOT {
            out.push(self.frame[node as usize]);
            node = self.parent[node as usize];
        }
    }

    pub fn len(&self) -> usize {
        self.parent.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stacks as `build` takes them: all frames, and where each stack ends.
    fn flat(stacks: &[Vec<u32>]) -> (Vec<u32>, Vec<usize>) {
        let frames = stacks.iter().flatten().copied().collect();
        let ends = stacks
            .iter()
            .scan(0, |n, s| {
                *n += s.len();
                Some(*n)
            })
            .collect();
        (frames, ends)
    }

    #[test]
    fn a_built_tree_gives_the_rows_build_gives() {
        // root; 1 = 5; 2 = 5>3; 3 = 4; 4 = 5>1; 5 = 5>3>2.
        let parent = [0, 0, 1, 0, 1, 2];
        let frame = [0, 5, 3, 4, 1, 2];
        let tree = from_tree(&parent, &frame);
        let rows: Vec<(u32, u32)> = tree.walk().map(|(_, r)| r).collect();
        let number = tree.number();
        assert_eq!(rows.len(), tree.rows());
        let stacks: Vec<Vec<u32>> = vec![vec![5, 3, 2], vec![4], vec![5, 1], vec![5]];
        let (flat, ends) = flat(&stacks);
        let built = build(&flat, &ends);
        assert_eq!(rows, built.rows);
        assert_eq!(
            [number[5], number[3], number[4], number[1]].to_vec(),
            built.nodes
        );
    }

    #[test]
    fn depth_first_rows_rebuild_the_same_stacks() {
        let stacks: Vec<Vec<u32>> = vec![
            vec![1, 2, 3],
            vec![1, 2, 4],
            vec![1, 5],
            vec![6],
            vec![1, 2, 3, 7],
            vec![],
            vec![1, 2],
        ];
        let (frames, ends) = flat(&stacks);
        let Built { rows, nodes } = build(&frames, &ends);
        let mut read = Nodes::new();
        let mut path = Vec::new();
        for (up, f) in rows {
            read.push(u64::from(up), f, &mut path).unwrap();
        }
        let mut out = Vec::new();
        for (s, n) in stacks.iter().zip(nodes) {
            read.frames(n, &mut out);
            out.reverse();
            assert_eq!(&out, s);
        }
    }
}
