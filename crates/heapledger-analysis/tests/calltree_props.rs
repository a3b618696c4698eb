//! The properties of `shared/reference/recursion-collapsing.md`, each checked on
//! 1000 random sample sets, plus a literal reference replay as an oracle.

use std::collections::{BTreeMap, HashSet};

use heapledger_analysis::calltree::{
    to_json, to_text, CallTree, CallTreeBuilder, CollapseMode, Direction, FlatProfile, NodeId,
    PrefixTree, RenderOptions, RoutineId, Samples,
};
use proptest::prelude::*;

const CASES: u32 = 1000;

/// Up to 16 samples of 1 to 12 frames over at most 6 routines (so that
/// recursion, direct and mutual, is common), weights 0 to 20.
fn raw_sample_sets() -> impl Strategy<Value = Vec<(Vec<u8>, u64)>> {
    (1u8..=6).prop_flat_map(|routines| {
        prop::collection::vec(
            (prop::collection::vec(0..routines, 1..=12), 0u64..=20),
            0..=16,
        )
    })
}

fn to_samples(raw: &[(Vec<u8>, u64)]) -> Samples {
    let mut samples = Samples::new();
    for (frames, weight) in raw {
        samples
            .push_names(frames.iter().map(|f| format!("f{f}")), *weight)
            .unwrap();
    }
    samples
}

/// `prefix` fed the raw samples one by one, each name interned as it
/// comes (the routine table grows between pushes), and that table.
fn fed_while_interning(
    raw: &[(Vec<u8>, u64)],
    mut prefix: PrefixTree,
) -> (PrefixTree, heapledger_analysis::calltree::RoutineTable) {
    let mut routines = heapledger_analysis::calltree::RoutineTable::new();
    for (frames, weight) in raw {
        let ids: Vec<RoutineId> = frames
            .iter()
            .map(|f| routines.intern(&format!("f{f}")))
            .collect();
        prefix.routines_grew(&routines);
        prefix.push(&ids, *weight).unwrap();
    }
    (prefix, routines)
}

fn all_trees(samples: &Samples) -> impl Iterator<Item = CallTree> + '_ {
    Direction::ALL.into_iter().flat_map(move |direction| {
        CollapseMode::ALL
            .into_iter()
            .map(move |mode| CallTree::build(samples, mode, direction))
    })
}

fn oriented(frames: &[RoutineId], direction: Direction) -> Vec<RoutineId> {
    let mut frames = frames.to_vec();
    if direction == Direction::BottomUp {
        frames.reverse();
    }
    frames
}

/// A node as the canonical comparison sees it: routines from the root, and
/// whether the last one is a stub.
type Key = (Vec<RoutineId>, bool);

#[derive(Debug, PartialEq, Eq)]
enum Counts {
    Node {
        direct: u64,
        indirect: u64,
        excl: u64,
    },
    Stub {
        target: Vec<RoutineId>,
        traversed: u64,
    },
}

/// Paths of routines to keep (`CallTreeBuilder::keeping_paths`): the
/// nodes of `trees` that `pick` picks in turn, with every path above
/// them; each path's number (from 1, parents first; 0 is the hidden root),
/// and the `(parent, routine) -> path` pairs.
#[allow(clippy::type_complexity)]
fn picked_paths(
    trees: &[&CallTree],
    pick: &[bool],
) -> (
    std::collections::HashMap<Vec<RoutineId>, u32>,
    Vec<((u32, RoutineId), u32)>,
) {
    let mut wanted: HashSet<Vec<RoutineId>> = HashSet::new();
    for tree in trees {
        for (k, id) in tree.node_ids().enumerate() {
            if pick[k % pick.len()] {
                let path = tree.path_routines(id);
                for n in 1..=path.len() {
                    wanted.insert(path[..n].to_vec());
                }
            }
        }
    }
    let mut sorted: Vec<Vec<RoutineId>> = wanted.into_iter().collect();
    sorted.sort();
    sorted.sort_by_key(|p| p.len());
    let mut ids: std::collections::HashMap<Vec<RoutineId>, u32> = Default::default();
    let mut paths = Vec::new();
    for (i, path) in sorted.iter().enumerate() {
        let parent = if path.len() == 1 {
            0
        } else {
            ids[&path[..path.len() - 1]]
        };
        ids.insert(path.clone(), i as u32 + 1);
        paths.push(((parent, *path.last().unwrap()), i as u32 + 1));
    }
    (ids, paths)
}

fn canonical(tree: &CallTree) -> BTreeMap<Key, Counts> {
    tree.node_ids()
        .map(|id| {
            let node = &tree[id];
            let counts = match node.stub_target() {
                Some(target) => Counts::Stub {
                    target: tree.path_routines(target),
                    traversed: node.traversed(),
                },
                None => Counts::Node {
                    direct: node.incl_direct(),
                    indirect: node.incl_indirect(),
                    excl: node.excl(),
                },
            };
            ((tree.path_routines(id), node.is_stub()), counts)
        })
        .collect()
}

/// The replay exactly as the reference page states it: linear scans of the
/// path, a set of credited nodes, nothing clever.
fn reference_replay(
    samples: &Samples,
    mode: CollapseMode,
    direction: Direction,
) -> BTreeMap<Key, Counts> {
    struct RefNode {
        routine: RoutineId,
        parent: Option<usize>,
        stub_target: Option<usize>,
        direct: u64,
        indirect: u64,
        excl: u64,
    }
    let mut nodes: Vec<RefNode> = Vec::new();
    let child = |nodes: &mut Vec<RefNode>, parent, routine, stub_target: Option<usize>| {
        let found = nodes.iter().position(|n| {
            n.parent == parent
                && n.routine == routine
                && n.stub_target.is_some() == stub_target.is_some()
        });
        if let Some(found) = found {
            assert_eq!(
                nodes[found].stub_target, stub_target,
                "a stub changed target"
            );
            return found;
        }
        nodes.push(RefNode {
            routine,
            parent,
            stub_target,
            direct: 0,
            indirect: 0,
            excl: 0,
        });
        nodes.len() - 1
    };
    for sample in samples.iter().filter(|sample| sample.weight > 0) {
        let weight = sample.weight;
        let frames = oriented(&sample.frames, direction);
        let mut path: Vec<usize> = Vec::new();
        let mut via_stub = false;
        let mut seen = HashSet::new();
        let mut crossed = HashSet::new();
        for (index, &f) in frames.iter().enumerate() {
            let cur = path.last().copied();
            let nearest = path.iter().rposition(|&n| nodes[n].routine == f);
            let target = if index == 0 {
                None
            } else {
                match mode {
                    CollapseMode::None => None,
                    CollapseMode::Direct => cur.filter(|&cur| nodes[cur].routine == f),
                    CollapseMode::Full => nearest.map(|h| path[h]),
                    CollapseMode::Conservative => nearest
                        .filter(|&h| {
                            path[h + 1..].iter().all(|&cut| {
                                path[..=h]
                                    .iter()
                                    .any(|&kept| nodes[kept].routine == nodes[cut].routine)
                            })
                        })
                        .map(|h| path[h]),
                }
            };
            if let Some(target) = target {
                let stub = child(&mut nodes, cur, f, Some(target));
                if crossed.insert(stub) {
                    nodes[stub].direct += weight;
                }
                via_stub = true;
                let at = path.iter().position(|&n| n == target).unwrap();
                path.truncate(at + 1);
            } else {
                let next = child(&mut nodes, cur, f, None);
                path.push(next);
            }
            let cur = *path.last().unwrap();
            if seen.insert(cur) {
                if via_stub {
                    nodes[cur].indirect += weight;
                } else {
                    nodes[cur].direct += weight;
                }
            }
        }
        nodes[*path.last().unwrap()].excl += weight;
    }
    let routes = |mut at: usize| {
        let mut route = vec![nodes[at].routine];
        while let Some(parent) = nodes[at].parent {
            route.push(nodes[parent].routine);
            at = parent;
        }
        route.reverse();
        route
    };
    (0..nodes.len())
        .map(|n| {
            let node = &nodes[n];
            let counts = match node.stub_target {
                Some(target) => Counts::Stub {
                    target: routes(target),
                    traversed: node.direct,
                },
                None => Counts::Node {
                    direct: node.direct,
                    indirect: node.indirect,
                    excl: node.excl,
                },
            };
            ((routes(n), node.stub_target.is_some()), counts)
        })
        .collect()
}

/// The final node of each sample (`None` for zero weight), replayed in `mode`.
fn final_nodes(samples: &Samples, mode: CollapseMode) -> (CallTree, Vec<Option<NodeId>>) {
    let mut builder = CallTreeBuilder::new(mode, Direction::TopDown, samples.routines());
    let last = samples
        .iter()
        .map(|sample| builder.push(&sample.frames, sample.weight).unwrap())
        .collect();
    (builder.finish(), last)
}

fn loop_erased(frames: &[RoutineId]) -> Vec<RoutineId> {
    let mut path: Vec<RoutineId> = Vec::new();
    for &f in frames {
        match path.iter().position(|&g| g == f) {
            Some(at) => path.truncate(at + 1),
            None => path.push(f),
        }
    }
    path
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    /// A tree built with only its nodes over a weight renders, with that
    /// limit or a higher one, exactly as the whole tree does (both ways,
    /// text and JSON), and totals the same.
    #[test]
    fn a_pruned_tree_renders_as_the_whole_one(raw in raw_sample_sets(), percent in 0u32..60) {
        let samples = to_samples(&raw);
        let total = samples.total_weight();
        for direction in Direction::ALL {
            let whole = CallTree::build(&samples, CollapseMode::None, direction);
            let limit = f64::from(percent);
            let min = (total as f64 * limit / 100.0 / 2.0).floor() as u64;
            let pruned = CallTree::build_pruned(&samples, direction, min);
            prop_assert_eq!(pruned.total_weight(), whole.total_weight());
            let opts = RenderOptions { limit_percent: limit, max_level: 64 };
            prop_assert_eq!(
                to_json(&pruned, samples.routines(), "w", &opts),
                to_json(&whole, samples.routines(), "w", &opts)
            );
            prop_assert_eq!(
                to_text(&pruned, samples.routines(), "w", &opts),
                to_text(&whole, samples.routines(), "w", &opts)
            );
        }
    }

    /// In every mode, a tree kept only where it weighs `min` or more holds
    /// exactly the whole tree's nodes of that weight (a stub: traversed),
    /// with the same numbers, and renders as the whole one with a limit
    /// of twice that.
    #[test]
    fn a_tree_kept_where_shown_has_the_whole_trees_numbers(raw in raw_sample_sets(), percent in 0u32..60) {
        let samples = to_samples(&raw);
        let total = samples.total_weight();
        let limit = f64::from(percent);
        let min = (total as f64 * limit / 100.0 / 2.0).floor() as u64;
        for direction in Direction::ALL {
            for mode in CollapseMode::ALL {
                let whole = CallTree::build(&samples, mode, direction);
                let kept = CallTree::build_shown(&samples, mode, direction, min);
                prop_assert_eq!(kept.total_weight(), whole.total_weight());
                let heavy = |id: NodeId| {
                    let node = &whole[id];
                    let weight = if node.is_stub() { node.traversed() } else { node.inclusive() };
                    whole.ancestors(id).all(|a| {
                        let n = &whole[a];
                        (if n.is_stub() { n.traversed() } else { n.inclusive() }) >= min
                    }) && weight >= min
                };
                let mut expected = canonical(&whole);
                for id in whole.node_ids().filter(|id| !heavy(*id)) {
                    expected.remove(&(whole.path_routines(id), whole[id].is_stub()));
                }
                prop_assert_eq!(canonical(&kept), expected, "{:?} {:?}", mode, direction);
                let opts = RenderOptions { limit_percent: limit, max_level: 64 };
                prop_assert_eq!(
                    to_text(&kept, samples.routines(), "w", &opts),
                    to_text(&whole, samples.routines(), "w", &opts)
                );
            }
        }
    }

    /// A collapsed tree built in passes with a tiny budget and few levels
    /// a pass (so that most trees take several), fed while the names are
    /// interned, is the whole builder's tree kept where it weighs `min` or
    /// more, in every mode and both ways, in at most one pass per node
    /// kept plus the few that shrink its window.
    #[test]
    fn a_tree_built_in_passes_is_the_whole_trees_shown_part(
        raw in raw_sample_sets(),
        percent in 0u32..60,
        budget in 2usize..12,
        levels in 1u16..4,
    ) {
        let total: u64 = raw.iter().map(|(_, w)| w).sum();
        let min = (total as f64 * f64::from(percent) / 100.0 / 2.0).floor() as u64;
        let samples = to_samples(&raw);
        for direction in Direction::ALL {
            for mode in CollapseMode::ALL {
                let mut routines = heapledger_analysis::calltree::RoutineTable::new();
                let mut b = CallTreeBuilder::in_passes(mode, direction, &routines, budget, levels);
                let mut passes = 0;
                let tree = loop {
                    passes += 1;
                    prop_assert!(passes < 200, "no end of passes");
                    for (frames, weight) in &raw {
                        let ids: Vec<RoutineId> = frames
                            .iter()
                            .map(|f| routines.intern(&format!("f{f}")))
                            .collect();
                        b.routines_grew(&routines);
                        b.push(&ids, *weight).unwrap();
                    }
                    prop_assert_eq!(b.total_weight(), total);
                    if !b.end_pass(min) {
                        break b.finish_pruned(min);
                    }
                };
                let whole = CallTree::build_shown(&samples, mode, direction, min);
                prop_assert_eq!(canonical(&tree), canonical(&whole), "{:?} {:?} in {} passes", mode, direction, passes);
                prop_assert_eq!(tree.total_weight(), whole.total_weight());
                let opts = RenderOptions { limit_percent: f64::from(percent), max_level: 64 };
                prop_assert_eq!(
                    to_text(&tree, samples.routines(), "w", &opts),
                    to_text(&whole, samples.routines(), "w", &opts)
                );
            }
        }
    }

    /// A tree built in passes that keeps given paths of routines (a
    /// flame graph's frames), and nothing for its weight, holds exactly
    /// the whole tree's nodes at those paths, with the same numbers.
    #[test]
    fn a_tree_built_in_passes_keeps_the_paths_asked_for(
        raw in raw_sample_sets(),
        pick in prop::collection::vec(any::<bool>(), 64),
        budget in 2usize..12,
    ) {
        let samples = to_samples(&raw);
        for direction in Direction::ALL {
            for mode in CollapseMode::ALL {
                let whole = CallTree::build(&samples, mode, direction);
                let (ids, paths) = picked_paths(&[&whole], &pick);
                let mut b = CallTreeBuilder::in_passes(mode, direction, samples.routines(), budget, 1)
                    .keeping_paths(paths);
                let mut passes = 0;
                let tree = loop {
                    passes += 1;
                    prop_assert!(passes < 200, "no end of passes");
                    for sample in samples.iter() {
                        b.push(&sample.frames, sample.weight).unwrap();
                    }
                    if !b.end_pass(u64::MAX) {
                        break b.finish_pruned(u64::MAX);
                    }
                };
                let mut expected = canonical(&whole);
                expected.retain(|(path, _), _| ids.contains_key(path));
                prop_assert_eq!(canonical(&tree), expected, "{:?} {:?}", mode, direction);
            }
        }
    }

    /// `Samples::each`, which makes each stack's frames from the last
    /// one's, gives every stack as `Samples::iter` does, in its order.
    #[test]
    fn each_sample_is_the_one_iter_gives(raw in raw_sample_sets()) {
        let samples = to_samples(&raw);
        let mut seen = Vec::new();
        samples.each(|index, frames, weight| seen.push((index, frames.to_vec(), weight)));
        let expected: Vec<_> = samples
            .iter()
            .enumerate()
            .map(|(index, s)| (index, s.frames, s.weight))
            .collect();
        prop_assert_eq!(seen, expected);
    }

    /// A builder that takes several weights a sample, in passes, keeping
    /// given paths, gives for each metric the tree that metric alone
    /// gives, its nodes no sample of that metric reached left at 0, and
    /// no own weights past the first metric's.
    #[test]
    fn a_tree_of_several_weights_is_each_metrics_tree(
        raw in raw_sample_sets(),
        more in prop::collection::vec(prop::collection::vec(0u64..=20, 16), 0..=3),
        pick in prop::collection::vec(any::<bool>(), 64),
        budget in 2usize..12,
    ) {
        let samples = to_samples(&raw);
        // Each metric's weight of each distinct stack (a metric's weight
        // may be 0 where another's is not).
        let mut columns: Vec<Vec<u64>> = vec![samples.iter().map(|s| s.weight).collect()];
        for m in &more {
            columns.push((0..samples.len()).map(|i| m[i % m.len()] * (i as u64 % 3)).collect());
        }
        for direction in Direction::ALL {
            for mode in CollapseMode::ALL {
                let alone: Vec<CallTree> = columns
                    .iter()
                    .map(|c| {
                        let mut s = samples.clone();
                        s.set_weights(c.clone());
                        CallTree::build(&s, mode, direction)
                    })
                    .collect();
                let (ids, paths) = picked_paths(&alone.iter().collect::<Vec<_>>(), &pick);
                let mut b = CallTreeBuilder::in_passes(mode, direction, samples.routines(), budget, 1)
                    .keeping_paths(paths)
                    .with_more_weights(more.len());
                let mut passes = 0;
                let trees = loop {
                    passes += 1;
                    prop_assert!(passes < 400, "no end of passes");
                    for (i, sample) in samples.iter().enumerate() {
                        let w: Vec<u64> = columns.iter().map(|c| c[i]).collect();
                        b.push_weights(&sample.frames, &w).unwrap();
                    }
                    if !b.end_pass(u64::MAX) {
                        break b.finish_pruned_each(u64::MAX);
                    }
                };
                prop_assert_eq!(trees.len(), columns.len());
                for (m, (tree, whole)) in trees.iter().zip(&alone).enumerate() {
                    let mut got = canonical(tree);
                    got.retain(|_, c| match c {
                        Counts::Stub { traversed, .. } => *traversed > 0,
                        Counts::Node { direct, indirect, .. } => *direct + *indirect > 0,
                    });
                    let mut expected = canonical(whole);
                    expected.retain(|(path, _), _| ids.contains_key(path));
                    if m > 0 {
                        for c in expected.values_mut() {
                            if let Counts::Node { excl, .. } = c {
                                *excl = 0;
                            }
                        }
                    }
                    prop_assert_eq!(got, expected, "metric {} {:?} {:?}", m, mode, direction);
                    prop_assert_eq!(tree.total_weight(), whole.total_weight());
                }
            }
        }
    }

    /// The prefix tree fed stack by stack (which `build_pruned` uses),
    /// without collapsing and with direct collapsing, gives the builder's
    /// whole tree kept where it weighs `min` or more (0: the whole tree
    /// `build` gives), both ways.
    #[test]
    fn a_prefix_tree_gives_the_builders_tree_kept_where_shown(raw in raw_sample_sets(), percent in 0u32..60) {
        let samples = to_samples(&raw);
        let total = samples.total_weight();
        let min = (total as f64 * f64::from(percent) / 100.0 / 2.0).floor() as u64;
        for direction in Direction::ALL {
            for mode in [CollapseMode::None, CollapseMode::Direct] {
                let empty = match mode {
                    CollapseMode::None => PrefixTree::new(direction),
                    _ => PrefixTree::direct_collapse(direction),
                };
                let (prefix, routines) = fed_while_interning(&raw, empty);
                prop_assert_eq!(prefix.total_weight(), total);
                let tree = prefix.into_tree(min);
                prop_assert_eq!(tree.mode(), mode);
                // Names are interned in the same order: the same ids.
                prop_assert_eq!(routines.len(), samples.routines().len());
                // The builder's whole tree, kept where it weighs `min` or more.
                let built = CallTree::build_shown(&samples, mode, direction, min);
                prop_assert_eq!(canonical(&tree), canonical(&built), "{:?} {:?}", mode, direction);
                prop_assert_eq!(tree.total_weight(), built.total_weight());
                if min == 0 {
                    let whole = CallTree::build(&samples, mode, direction);
                    prop_assert_eq!(canonical(&tree), canonical(&whole));
                }
                let opts = RenderOptions { limit_percent: f64::from(percent), max_level: 64 };
                prop_assert_eq!(
                    to_text(&tree, samples.routines(), "w", &opts),
                    to_text(&built, samples.routines(), "w", &opts)
                );
            }
        }
    }

    /// The prefix tree's folded lines are the whole tree's (no collapsing)
    /// nodes kept where they weigh `min` or more, each with its inclusive
    /// weight less its kept children's, and each lighter root as one
    /// frame, both ways.
    #[test]
    fn a_prefix_trees_lines_are_the_kept_nodes_own_weights(raw in raw_sample_sets(), percent in 0u32..60) {
        let samples = to_samples(&raw);
        let total = samples.total_weight();
        let min = (total as f64 * f64::from(percent) / 100.0 / 2.0).floor() as u64;
        for direction in Direction::ALL {
            let mut prefix = PrefixTree::new(direction);
            prefix.routines_grew(samples.routines());
            for sample in samples.iter() {
                prefix.push(&sample.frames, sample.weight).unwrap();
            }
            let mut lines = Vec::new();
            prefix.into_lines(min, |path, weight| lines.push((path.to_vec(), weight)));
            lines.sort();
            let whole = CallTree::build(&samples, CollapseMode::None, direction);
            let kept = |id: NodeId| whole.ancestors(id).all(|a| whole[a].inclusive() >= min);
            let mut expected = Vec::new();
            for id in whole.node_ids() {
                if kept(id) {
                    let below: u64 = whole
                        .children(id)
                        .iter()
                        .filter(|&&c| whole[c].inclusive() >= min)
                        .map(|&c| whole[c].inclusive())
                        .sum();
                    let own = whole[id].inclusive() - below;
                    if own > 0 {
                        expected.push((whole.path_routines(id), own));
                    }
                } else if whole[id].parent().is_none() && whole[id].inclusive() > 0 {
                    expected.push((vec![whole[id].routine()], whole[id].inclusive()));
                }
            }
            expected.sort();
            prop_assert_eq!(lines, expected, "{:?}", direction);
        }
    }

    /// A builder fed while the routines are still being interned (the
    /// table grows between pushes) builds the tree a full table gives.
    #[test]
    fn a_builder_fed_while_interning_builds_the_same_tree(raw in raw_sample_sets()) {
        let samples = to_samples(&raw);
        for direction in Direction::ALL {
            for mode in CollapseMode::ALL {
                let mut routines = heapledger_analysis::calltree::RoutineTable::new();
                let mut builder = CallTreeBuilder::new(mode, direction, &routines);
                for (frames, weight) in &raw {
                    let ids: Vec<RoutineId> =
                        frames.iter().map(|f| routines.intern(&format!("f{f}"))).collect();
                    builder.routines_grew(&routines);
                    builder.push(&ids, *weight).unwrap();
                }
                let fed = builder.finish();
                let whole = CallTree::build(&samples, mode, direction);
                let names = |tree: &CallTree, table: &heapledger_analysis::calltree::RoutineTable| {
                    canonical(tree)
                        .into_iter()
                        .map(|((path, stub), counts)| {
                            let path: Vec<String> =
                                path.iter().map(|r| table.name(*r).to_owned()).collect();
                            (path, stub, format!("{counts:?}"))
                        })
                        .collect::<Vec<_>>()
                };
                // Stub targets are paths of routine ids, the same in both
                // tables, since names are interned in the same order.
                prop_assert_eq!(names(&fed, &routines), names(&whole, samples.routines()));
            }
        }
    }

    #[test]
    fn the_replay_matches_the_reference_replay(raw in raw_sample_sets()) {
        let samples = to_samples(&raw);
        for direction in Direction::ALL {
            for mode in CollapseMode::ALL {
                let tree = CallTree::build(&samples, mode, direction);
                prop_assert_eq!(
                    canonical(&tree),
                    reference_replay(&samples, mode, direction),
                    "{} {}", direction, mode
                );
            }
        }
    }

    #[test]
    fn exclusive_counts_add_up_to_the_total(raw in raw_sample_sets()) {
        let samples = to_samples(&raw);
        for tree in all_trees(&samples) {
            let total = samples.total_weight();
            prop_assert_eq!(tree.total_weight(), total);
            let exclusive: u64 = tree.node_ids().map(|id| tree[id].excl()).sum();
            prop_assert_eq!(exclusive, total);
            let roots: u64 = tree.roots().iter().map(|&id| tree[id].inclusive()).sum();
            prop_assert_eq!(roots, total);
            for &root in tree.roots() {
                prop_assert_eq!(tree[root].incl_indirect(), 0);
                prop_assert!(!tree[root].is_stub());
            }
        }
    }

    #[test]
    fn inclusive_counts_are_bounded(raw in raw_sample_sets()) {
        let samples = to_samples(&raw);
        let total = samples.total_weight();
        for tree in all_trees(&samples) {
            for id in tree.node_ids() {
                let node = &tree[id];
                prop_assert!(node.incl_direct() + node.incl_indirect() <= total);
                prop_assert!(node.excl() <= node.inclusive() || node.is_stub());
                if let Some(parent) = node.parent() {
                    // A sample reaching a node (or crossing a stub) went through its parent.
                    prop_assert!(node.inclusive().max(node.traversed()) <= tree[parent].inclusive());
                }
            }
        }
    }

    #[test]
    fn no_collapse_is_the_additive_prefix_tree(raw in raw_sample_sets()) {
        let samples = to_samples(&raw);
        for direction in Direction::ALL {
            let tree = CallTree::build(&samples, CollapseMode::None, direction);
            let mut prefixes: BTreeMap<Vec<RoutineId>, (u64, u64)> = BTreeMap::new();
            for sample in samples.iter().filter(|sample| sample.weight > 0) {
                let frames = oriented(&sample.frames, direction);
                for len in 1..=frames.len() {
                    prefixes.entry(frames[..len].to_vec()).or_default().0 += sample.weight;
                }
                prefixes.get_mut(&frames).unwrap().1 += sample.weight;
            }
            let nodes: BTreeMap<Vec<RoutineId>, (u64, u64)> = tree
                .node_ids()
                .map(|id| (tree.path_routines(id), (tree[id].inclusive(), tree[id].excl())))
                .collect();
            prop_assert_eq!(nodes, prefixes);
            for id in tree.node_ids() {
                let node = &tree[id];
                prop_assert!(!node.is_stub());
                prop_assert_eq!(node.incl_indirect(), 0);
                let children: u64 = tree.children(id).iter().map(|&c| tree[c].inclusive()).sum();
                prop_assert_eq!(node.inclusive(), node.excl() + children);
            }
        }
    }

    #[test]
    fn full_collapse_paths_never_repeat_and_end_loop_erased(raw in raw_sample_sets()) {
        let samples = to_samples(&raw);
        let (tree, last) = final_nodes(&samples, CollapseMode::Full);
        for id in tree.node_ids().filter(|&id| !tree[id].is_stub()) {
            let path = tree.path_routines(id);
            let distinct: HashSet<_> = path.iter().collect();
            prop_assert_eq!(distinct.len(), path.len());
        }
        for (sample, last) in samples.iter().zip(last) {
            if let Some(last) = last {
                prop_assert_eq!(tree.path_routines(last), loop_erased(&sample.frames));
            }
        }
    }

    #[test]
    fn direct_collapse_paths_end_without_consecutive_repeats(raw in raw_sample_sets()) {
        let samples = to_samples(&raw);
        let (tree, last) = final_nodes(&samples, CollapseMode::Direct);
        for (sample, last) in samples.iter().zip(last) {
            if let Some(last) = last {
                let mut expected = sample.frames.to_vec();
                expected.dedup();
                prop_assert_eq!(tree.path_routines(last), expected);
            }
        }
    }

    #[test]
    fn conservative_collapse_paths_keep_every_name(raw in raw_sample_sets()) {
        let samples = to_samples(&raw);
        let (tree, last) = final_nodes(&samples, CollapseMode::Conservative);
        for (sample, last) in samples.iter().zip(last) {
            if let Some(last) = last {
                let path: HashSet<_> = tree.path_routines(last).into_iter().collect();
                let stack: HashSet<_> = sample.frames.iter().copied().collect();
                prop_assert_eq!(path, stack);
            }
        }
    }

    #[test]
    fn stubs_point_up_to_the_same_routine(raw in raw_sample_sets()) {
        let samples = to_samples(&raw);
        for tree in all_trees(&samples) {
            for id in tree.node_ids() {
                let node = &tree[id];
                let Some(target) = node.stub_target() else { continue };
                prop_assert!(tree.mode() != CollapseMode::None);
                prop_assert!(tree.children(id).is_empty());
                prop_assert_eq!(node.excl(), 0);
                prop_assert_eq!(node.inclusive(), 0);
                prop_assert!(node.traversed() > 0);
                let parent = node.parent().expect("a stub is never a root");
                prop_assert_eq!(node.level(), tree[parent].level() + 1);
                prop_assert_eq!(tree[target].routine(), node.routine());
                prop_assert!(!tree[target].is_stub());
                let nearest = tree.ancestors(parent).find(|&a| tree[a].routine() == node.routine());
                match tree.mode() {
                    CollapseMode::Direct => prop_assert_eq!(target, parent),
                    _ => prop_assert_eq!(Some(target), nearest),
                }
            }
        }
    }

    #[test]
    fn bottom_up_is_top_down_of_the_reversed_samples(raw in raw_sample_sets()) {
        let samples = to_samples(&raw);
        let mut reversed = Samples::new();
        for sample in samples.iter() {
            let names: Vec<_> = sample.frames.iter().rev().map(|&f| samples.routines().name(f)).collect();
            reversed.push_names(names, sample.weight).unwrap();
        }
        for mode in CollapseMode::ALL {
            let bottom_up = CallTree::bottom_up(&samples, mode);
            let top_down = CallTree::top_down(&reversed, mode);
            let all = RenderOptions::all();
            prop_assert_eq!(
                to_json(&bottom_up, samples.routines(), "w", &all).replace("bottom-up", "top-down"),
                to_json(&top_down, reversed.routines(), "w", &all)
            );
        }
    }

    #[test]
    fn merging_identical_stacks_changes_nothing(raw in raw_sample_sets(), copies in 1usize..4) {
        // Each raw sample pushed `copies` times, one by one into a builder, gives
        // the tree of the merged set (weights multiplied).
        let mut repeated = raw.clone();
        for copy in 1..copies {
            repeated.extend(raw.iter().skip(copy % 2).cloned());
        }
        let samples = to_samples(&repeated);
        for direction in Direction::ALL {
            for mode in CollapseMode::ALL {
                let mut builder = CallTreeBuilder::new(mode, direction, samples.routines());
                for (frames, weight) in &repeated {
                    let frames: Vec<RoutineId> = frames
                        .iter()
                        .map(|f| samples.routines().get(&format!("f{f}")).unwrap())
                        .collect();
                    builder.push(&frames, *weight).unwrap();
                }
                let merged = CallTree::build(&samples, mode, direction);
                prop_assert_eq!(canonical(&builder.finish()), canonical(&merged));
            }
        }
    }

    #[test]
    fn sample_order_does_not_matter(raw in raw_sample_sets()) {
        let samples = to_samples(&raw);
        let mut reordered = Samples::with_routines(samples.routines().clone());
        for sample in samples.iter().rev() {
            reordered.push(&sample.frames, sample.weight).unwrap();
        }
        for tree in all_trees(&samples) {
            let other = CallTree::build(&reordered, tree.mode(), tree.direction());
            prop_assert_eq!(canonical(&tree), canonical(&other));
        }
    }

    #[test]
    fn zero_weight_samples_change_nothing(
        raw in raw_sample_sets(),
        zeros in prop::collection::vec(prop::collection::vec(0u8..8, 1..=12), 1..=4),
    ) {
        let samples = to_samples(&raw);
        let mut padded_raw = raw.clone();
        for (at, frames) in zeros.into_iter().enumerate() {
            let at = (at * 3).min(padded_raw.len());
            padded_raw.insert(at, (frames, 0));
        }
        let padded = to_samples(&padded_raw);
        for tree in all_trees(&samples) {
            let other = CallTree::build(&padded, tree.mode(), tree.direction());
            let all = RenderOptions::all();
            prop_assert_eq!(
                to_json(&tree, samples.routines(), "w", &all),
                to_json(&other, padded.routines(), "w", &all)
            );
        }
    }

    #[test]
    fn flat_totals_count_each_routine_once_per_sample(raw in raw_sample_sets()) {
        let samples = to_samples(&raw);
        let flat = FlatProfile::from_samples(&samples);
        prop_assert_eq!(flat.total_weight(), samples.total_weight());
        for (routine, _) in samples.routines().iter() {
            let inclusive: u64 = samples
                .iter()
                .filter(|sample| sample.frames.contains(&routine))
                .map(|sample| sample.weight)
                .sum();
            let exclusive: u64 = samples
                .iter()
                .filter(|sample| sample.frames.last() == Some(&routine))
                .map(|sample| sample.weight)
                .sum();
            let row = flat.get(routine);
            prop_assert_eq!((row.inclusive, row.exclusive), (inclusive, exclusive));
        }
        let rows = flat.rows(samples.routines());
        prop_assert!(rows.windows(2).all(|pair| pair[0].inclusive >= pair[1].inclusive));
        prop_assert!(rows.iter().all(|row| row.inclusive > 0));
    }

    #[test]
    fn renderings_show_what_the_walk_shows(raw in raw_sample_sets(), limit in 0.0f64..50.0, depth in 1u32..8) {
        let samples = to_samples(&raw);
        let options = RenderOptions { limit_percent: limit, max_level: depth };
        for tree in all_trees(&samples) {
            let shown: Vec<NodeId> = tree
                .walk(samples.routines(), &options)
                .filter_map(|visit| match visit {
                    heapledger_analysis::calltree::Visit::Enter(id) => Some(id),
                    heapledger_analysis::calltree::Visit::Leave(_) => None,
                })
                .collect();
            for &id in &shown {
                let node = &tree[id];
                prop_assert!(node.level() <= depth);
                let weight = node.inclusive().max(node.traversed());
                prop_assert!(weight as f64 * 100.0 >= limit * tree.total_weight() as f64);
            }
            let text = heapledger_analysis::calltree::to_text(&tree, samples.routines(), "w", &options);
            prop_assert_eq!(text.lines().count(), 5 + shown.len());
            let json = to_json(&tree, samples.routines(), "w", &options);
            let value: serde_json::Value = serde_json::from_str(&json).unwrap();
            prop_assert_eq!(value["total"].as_u64(), Some(tree.total_weight()));
            prop_assert_eq!(json.matches(r#"{"routine":"#).count(), shown.len());
        }
    }
}
