//! `flameinfo`: the weight of each frame of a flame graph by every metric,
//! for its tooltips.
//!
//! Without recursion collapsing, a frame's weight by a metric is the sum of
//! the stacks whose routines (root first, or leaf first for the callers'
//! view) begin with the frame's path: one pass over the stacks gives every
//! metric at once, walking each stack down a trie of the drawn frames (a
//! profile of 432 000 stacks 46 frames deep: a few seconds and the trie's
//! memory, where a call tree per metric took a minute and 2.3 GB). Direct
//! collapsing is the same walk with each run of one routine taken as one
//! frame (its path only goes down, each node once a stack). With the
//! conservative and full modes, one call tree is built with every metric's
//! weights (`CallTreeBuilder::with_more_weights`), and the frames found in
//! each metric's tree by routine.

use super::{flame_frames_of, SampleCache};
use crate::export::{FlameFrame, Weights};
use crate::profiles::Opened;
use crate::tree::{stack_weight, Metric, Namer, Range};
use anyhow::Result;
use heapledger_analysis::calltree::{
    self, CallTreeBuilder, CollapseMode, Direction, NodeId, RoutineId, RoutineTable,
};
/// Frames by (parent, routine), looked up once a frame a stack: no need
/// for SipHash's defence against chosen keys.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// The weights that a flame graph's tooltips show: every metric the
/// profile has (allocations and bytes only, for a time range or a thread).
fn tooltip_metrics(o: &Opened, range: Option<&Range>) -> Vec<Metric> {
    if range.is_some() {
        return vec![Metric::Count, Metric::Bytes];
    }
    let mut m = vec![
        Metric::Count,
        Metric::Bytes,
        Metric::Peak,
        Metric::Leaked,
        Metric::Temporary,
        Metric::Lifetime,
    ];
    if o.profile
        .heapledger
        .as_ref()
        .is_some_and(|e| !e.time_lost.is_empty())
    {
        m.push(Metric::Waited);
    }
    m
}

/// For each frame of the flame graph of `weights` (`depth:x`, see
/// `export::flame_frames`), its inclusive weight by every metric of
/// [`tooltip_metrics`] (null where that metric has none there).
pub(super) fn flame_info(
    o: &Opened,
    cache: &mut SampleCache,
    weights: Weights,
    range: Option<&Range>,
) -> Result<serde_json::Value> {
    let frames = flame_frames_of(o, cache, &weights, range)?;
    let metrics = tooltip_metrics(o, range);
    let values = match weights.collapse {
        CollapseMode::None | CollapseMode::Direct => one_pass(
            o,
            &frames,
            &metrics,
            weights.inverted,
            weights.collapse == CollapseMode::Direct,
            weights.naming,
            range,
        )?,
        _ => per_tree(o, &frames, &metrics, weights, range)?,
    };
    let frames: serde_json::Map<String, serde_json::Value> = frames
        .iter()
        .zip(values)
        .map(|(f, v)| (f.key.clone(), serde_json::json!(v)))
        .collect();
    Ok(serde_json::json!({
        "metrics": metrics.iter().map(|m| m.name()).collect::<Vec<_>>(),
        "units": metrics.iter().map(|m| m.unit()).collect::<Vec<_>>(),
        "frames": frames,
    }))
}

/// Without collapsing: every stack walked down the trie of the frames once,
/// its weight by every metric added to each frame it passes. With `runs`
/// (direct collapsing), a run of one routine is one frame.
fn one_pass(
    o: &Opened,
    frames: &[FlameFrame],
    metrics: &[Metric],
    inverted: bool,
    runs: bool,
    naming: crate::tree::Naming,
    range: Option<&Range>,
) -> Result<Vec<Vec<Option<u64>>>> {
    let p = &o.profile;
    let mut table = RoutineTable::new();
    let mut children: HashMap<(u32, RoutineId), u32> =
        HashMap::with_capacity_and_hasher(frames.len(), Default::default());
    // Sorted folded lines can split one path into frames apart ("f",
    // then "f.cold", then "f" again under the same parent): each frame
    // stands for the first of its path (`canon`), which the walk reaches,
    // and shows its weights.
    let mut canon: Vec<u32> = vec![0; frames.len()];
    for (i, f) in frames.iter().enumerate().skip(1) {
        let r = table.intern(&f.name);
        let parent = canon[f.parent.unwrap_or(0)];
        canon[i] = *children.entry((parent, r)).or_insert(i as u32);
    }
    let m = metrics.len();
    let mut sums = vec![0u64; frames.len() * m];
    let mut namer = Namer::new(p, naming);
    let mut path: Vec<RoutineId> = Vec::new();
    let mut walk = Walk::default();
    let add = |stack: &[heapledger_profile::Addr], w: &[u64]| {
        if w.iter().all(|&v| v == 0) {
            return;
        }
        namer.path(stack, &mut |n| table.intern(n), &mut path);
        if runs {
            path.dedup();
        }
        let mut visit = |at: u32| {
            for (k, v) in w.iter().enumerate() {
                sums[at as usize * m + k] += v;
            }
        };
        visit(0);
        if inverted {
            let mut at = 0u32;
            for r in path.iter().rev() {
                match children.get(&(at, *r)) {
                    Some(&c) => {
                        visit(c);
                        at = c;
                    }
                    None => break,
                }
            }
            return;
        }
        for &c in walk.down(&path, &children) {
            visit(c);
        }
    };
    each_weighted(o, metrics, range, add)?;
    Ok((0..frames.len())
        .map(|i| {
            let c = canon[i] as usize;
            (0..m)
                .map(|k| {
                    let v = sums[c * m + k];
                    (i == 0 || v > 0).then_some(v)
                })
                .collect()
        })
        .collect())
}

/// A top-down walk of each stack down the drawn frames (`children`: a
/// frame's by (parent, routine); 0 is the root), made from the last
/// stack's: the store gives its stacks in its tree's order, each sharing
/// most of its outer frames with the one before, and so the frames its
/// walk reached.
#[derive(Default)]
struct Walk {
    /// The last path walked, and the frames its walk reached (one a
    /// routine, from the first, until no frame is drawn for one).
    last: Vec<RoutineId>,
    reached: Vec<u32>,
}

impl Walk {
    /// The frames `path` reaches below the root.
    fn down(&mut self, path: &[RoutineId], children: &HashMap<(u32, RoutineId), u32>) -> &[u32] {
        let shared = path
            .iter()
            .zip(&self.last)
            .take_while(|(a, b)| a == b)
            .count();
        // Where the last walk stopped on the shared routines, this one
        // stops too.
        let stopped = self.reached.len() < shared;
        self.reached.truncate(shared);
        if !stopped {
            let mut at = self.reached.last().copied().unwrap_or(0);
            for r in &path[shared..] {
                match children.get(&(at, *r)) {
                    Some(&c) => {
                        at = c;
                        self.reached.push(c);
                    }
                    None => break,
                }
            }
        }
        self.last.clear();
        self.last.extend_from_slice(path);
        &self.reached
    }
}

/// Every stack of the profile `o` with its weight by each of `metrics`
/// (with `range`, what it allocated then: allocations and bytes only),
/// then the leaks and the time lost, each weighed by its own metric
/// alone: `add(stack, weights)`, weights in the order of `metrics`.
fn each_weighted(
    o: &Opened,
    metrics: &[Metric],
    range: Option<&Range>,
    mut add: impl FnMut(&[heapledger_profile::Addr], &[u64]),
) -> Result<()> {
    let p = &o.profile;
    let m = metrics.len();
    let ns_per_tick = 1e9 / p.globals.ticks_per_second.max(1) as f64;
    let mut w = vec![0u64; m];
    let (mut row, mut next) = (0u32, 0usize);
    o.each_stack(|stack, infos| {
        let at = row;
        row += 1;
        match range {
            Some(r) => {
                while next < r.rows.len() && r.rows[next].0 < at {
                    next += 1;
                }
                let Some((_, a, b)) = r.rows.get(next).filter(|x| x.0 == at) else {
                    return;
                };
                for (k, metric) in metrics.iter().enumerate() {
                    let i = usize::from(*metric == Metric::Bytes);
                    w[k] = b[i].saturating_sub(a[i]);
                }
            }
            None => {
                for (k, metric) in metrics.iter().enumerate() {
                    w[k] = stack_weight(*metric, infos, ns_per_tick);
                }
            }
        }
        add(stack, &w);
    })?;
    if range.is_none() {
        if let Some(k) = metrics.iter().position(|&x| x == Metric::Leaked) {
            let mut runtime = p.runtime_leaks();
            runtime.sort_unstable();
            for (i, l) in p.leaks.iter().enumerate() {
                if runtime.binary_search(&i).is_err() {
                    w.fill(0);
                    w[k] = l.memory;
                    add(&l.stack, &w);
                }
            }
        }
        if let Some(k) = metrics.iter().position(|&x| x == Metric::Waited) {
            for t in p.heapledger.iter().flat_map(|e| &e.time_lost) {
                w.fill(0);
                w[k] = t.total_ns;
                add(&t.stack, &w);
            }
        }
    }
    Ok(())
}

/// With recursion collapsed: every metric's call tree from one replay of
/// the stacks, each frame found in each tree as the child of its parent's
/// node with its routine (a node rather than a stub). The stacks are read
/// once, with every metric's weights (a read of compileall's store takes
/// about a second).
fn per_tree(
    o: &Opened,
    frames: &[FlameFrame],
    metrics: &[Metric],
    weights: Weights,
    range: Option<&Range>,
) -> Result<Vec<Vec<Option<u64>>>> {
    let direction = match weights.inverted {
        true => Direction::BottomUp,
        false => Direction::TopDown,
    };
    let m = metrics.len();
    // The distinct stacks of routines, and their weights by each metric.
    let mut samples = calltree::Samples::new();
    let mut by_metric: Vec<Vec<u64>> = vec![Vec::new(); m];
    let mut namer = Namer::new(&o.profile, weights.naming);
    let mut path: Vec<RoutineId> = Vec::new();
    let mut failed = None;
    each_weighted(o, metrics, range, |stack, w| {
        if failed.is_some() || w.iter().all(|&v| v == 0) {
            return;
        }
        namer.path(stack, &mut |n| samples.intern(n), &mut path);
        match samples.push_stack(&path, 0) {
            Ok(index) => {
                for (k, column) in by_metric.iter_mut().enumerate() {
                    if column.len() <= index {
                        column.resize(index + 1, 0);
                    }
                    column[index] = column[index].saturating_add(w[k]);
                }
            }
            Err(e) => failed = Some(e),
        }
    })?;
    if let Some(e) = failed {
        return Err(e.into());
    }
    let mut values: Vec<Vec<Option<u64>>> = vec![Vec::with_capacity(m); frames.len()];
    let routines = samples.routines();
    // One tree in passes, with every metric's weights, and only the
    // frames' paths kept (each pass within a budget of nodes): the whole
    // collapsed tree can be 16 M nodes, 1.2 GB (compileall's callers'
    // view), and a tree per metric took 7 replays of the stacks (8 s).
    // A path split into two frames of one name (see `one_pass`) is one
    // path: each frame's path is the first frame's of its name under its
    // parent's path.
    const NO_PATH: u32 = u32::MAX;
    let mut path_of = vec![0u32; frames.len()];
    let mut paths: HashMap<(u32, RoutineId), u32> = HashMap::default();
    for (i, f) in frames.iter().enumerate().skip(1) {
        let above = path_of[f.parent.unwrap_or(0)];
        path_of[i] = match routines.get(&f.name) {
            Some(r) if above != NO_PATH => *paths.entry((above, r)).or_insert(i as u32),
            _ => NO_PATH,
        };
    }
    let mut builder = CallTreeBuilder::in_passes(
        weights.collapse,
        direction,
        routines,
        calltree::PASS_BUDGET,
        calltree::PASS_LEVELS,
    )
    .keeping_paths(paths)
    .with_more_weights(m.saturating_sub(1));
    let mut w = vec![0u64; m];
    let trees = loop {
        let mut failed = None;
        samples.each(|index, frames, _| {
            for (k, column) in by_metric.iter().enumerate() {
                w[k] = column.get(index).copied().unwrap_or(0);
            }
            if let Err(e) = builder.push_weights(frames, &w) {
                failed.get_or_insert(e);
            }
        });
        if let Some(e) = failed {
            return Err(e.into());
        }
        if !builder.end_pass(u64::MAX) {
            break builder.finish_pruned_each(u64::MAX);
        }
    };
    for tree in &trees {
        // A node that only stacks of 0 by this metric reach is not in its
        // tree (see `finish_pruned_each`).
        let weighs = |n: NodeId| {
            let node = &tree[n];
            node.traversed() > 0 || node.inclusive() > 0
        };
        let mut node: Vec<Option<NodeId>> = vec![None; frames.len()];
        values[0].push(Some(tree.total_weight()));
        for (i, f) in frames.iter().enumerate().skip(1) {
            let parent = f.parent.unwrap_or(0);
            let among = match parent {
                0 => Some(tree.roots()),
                p => node[p].map(|n| tree.children(n)),
            };
            let r = routines.get(&f.name);
            node[i] = among.zip(r).and_then(|(ids, r)| {
                ids.iter()
                    .copied()
                    .filter(|&c| tree[c].routine() == r && weighs(c))
                    .min_by_key(|&c| tree[c].is_stub())
            });
            values[i].push(node[i].map(|n| tree[n].inclusive()));
        }
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::{HashMap, Walk};
    use heapledger_analysis::calltree::{RoutineId, RoutineTable};

    /// A walk made from the last one reaches the frames a walk from the
    /// root reaches, for pseudo-random drawn frames and paths (many of
    /// them sharing outer routines, some stopping where no frame is
    /// drawn).
    #[test]
    fn a_walk_from_the_last_reaches_what_a_walk_from_the_root_does() {
        let mut table = RoutineTable::new();
        let r: Vec<RoutineId> = (0..4).map(|i| table.intern(&format!("r{i}"))).collect();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        for _ in 0..200 {
            // Drawn frames: a random tree, 1 to 30 frames.
            let mut children: HashMap<(u32, RoutineId), u32> = HashMap::default();
            let mut count = 1u32;
            for _ in 0..1 + next(30) {
                let parent = next(u64::from(count)) as u32;
                let routine = r[next(4) as usize];
                children.entry((parent, routine)).or_insert_with(|| {
                    count += 1;
                    count - 1
                });
            }
            let mut walk = Walk::default();
            let mut path: Vec<RoutineId> = Vec::new();
            for _ in 0..100 {
                // The next path keeps some of the last one's routines.
                path.truncate(next(path.len() as u64 + 1) as usize);
                for _ in 0..next(5) {
                    path.push(r[next(4) as usize]);
                }
                let mut expected = Vec::new();
                let mut at = 0u32;
                for routine in &path {
                    match children.get(&(at, *routine)) {
                        Some(&c) => {
                            expected.push(c);
                            at = c;
                        }
                        None => break,
                    }
                }
                assert_eq!(walk.down(&path, &children), expected.as_slice(), "{path:?}");
            }
        }
    }
}
