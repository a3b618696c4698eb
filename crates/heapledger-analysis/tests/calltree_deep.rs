//! A single sample 100 000 frames deep, in every mode and direction: building,
//! walking, rendering, JSON output and dropping must not recurse per level (a
//! test thread has a 2 MiB stack, far too small for that).

use heapledger_analysis::calltree::{
    to_json, to_text, CallTree, CollapseMode, Direction, RenderOptions, Samples, Visit,
};

const DEPTH: usize = 100_000;

fn one_sample(names: impl IntoIterator<Item = String>) -> Samples {
    let mut samples = Samples::new();
    samples.push_names(names, 7).unwrap();
    samples
}

/// `f0 f1 ... f99999`: no recursion, a chain in every mode.
fn distinct() -> Samples {
    one_sample((0..DEPTH).map(|i| format!("f{i}")))
}

/// `main r r r ...`: direct recursion 99 999 deep.
fn direct_recursion() -> Samples {
    one_sample(std::iter::once("main".to_owned()).chain((1..DEPTH).map(|_| "r".to_owned())))
}

/// `a b c a b c ...`: mutual recursion.
fn cycle() -> Samples {
    one_sample((0..DEPTH).map(|i| ["a", "b", "c"][i % 3].to_owned()))
}

fn max_level(tree: &CallTree) -> u32 {
    tree.node_ids()
        .map(|id| tree[id].level())
        .max()
        .unwrap_or(0)
}

#[test]
fn a_sample_100_000_frames_deep_builds_in_every_mode() {
    let deep = DEPTH as u32;
    // (node count, deepest level) in none, direct, conservative and full mode,
    // top-down then bottom-up.
    type Expected = [[(usize, u32); 4]; 2];
    let cases: [(&str, Samples, Expected); 3] = [
        ("distinct", distinct(), [[(DEPTH, deep); 4]; 2]),
        (
            "direct recursion",
            direct_recursion(),
            // main, r, r...; bottom-up: r, r..., main.
            [
                [(DEPTH, deep), (3, 3), (3, 3), (3, 3)],
                [(DEPTH, deep), (3, 2), (3, 2), (3, 2)],
            ],
        ),
        // Conservative: a b c a b, then c... back to c@3; full: a b c, then a....
        (
            "cycle",
            cycle(),
            [[(DEPTH, deep), (DEPTH, deep), (6, 6), (4, 4)]; 2],
        ),
    ];
    for (name, samples, expected) in cases {
        for (direction, expected) in Direction::ALL.into_iter().zip(expected) {
            for (mode, (nodes, level)) in CollapseMode::ALL.into_iter().zip(expected) {
                let tree = CallTree::build(&samples, mode, direction);
                assert_eq!(
                    (tree.node_count(), max_level(&tree)),
                    (nodes, level),
                    "{name}, {direction}, {mode}"
                );
                let exclusive: u64 = tree.node_ids().map(|id| tree[id].excl()).sum();
                assert_eq!(exclusive, 7);
                let visits = tree.walk(samples.routines(), &RenderOptions::all()).count();
                assert_eq!(visits, 2 * nodes);
                drop(tree);
            }
        }
    }
}

#[test]
fn a_sample_100_000_frames_deep_renders_and_serializes() {
    let samples = distinct();
    let routines = samples.routines();
    let tree = CallTree::top_down(&samples, CollapseMode::Full);
    let all = RenderOptions::all();

    let text = to_text(&tree, routines, "bytes", &all);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5 + DEPTH);
    assert_eq!(
        lines[5].split_whitespace().collect::<Vec<_>>(),
        ["7", "0", "1", "f0"]
    );
    let last: Vec<_> = lines.last().unwrap().split_whitespace().collect();
    assert_eq!(last, ["7", "7", "100000", "f99999"]);
    // Indentation stops growing at level 64, so the text stays linear in depth.
    assert!(text.len() < 200 * DEPTH, "{} bytes", text.len());

    let json = to_json(&tree, routines, "bytes", &all);
    let mut expected = String::from(
        r#"{"mode":"full","direction":"top-down","metric":"bytes","total":7,"roots":["#,
    );
    for i in 0..DEPTH {
        let excl = if i + 1 == DEPTH { 7 } else { 0 };
        expected.push_str(&format!(
            r#"{{"routine":"f{i}","level":{},"incl_direct":7,"incl_indirect":0,"excl":{excl},"children":["#,
            i + 1
        ));
    }
    expected.push_str(&"]}".repeat(DEPTH));
    expected.push_str("]}");
    assert!(json == expected, "the JSON of the deep chain differs");

    // The default options cut the chain at level 64.
    let walk: Vec<Visit> = tree.walk(routines, &RenderOptions::default()).collect();
    assert_eq!(walk.len(), 2 * 64);
    let shown = to_text(&tree, routines, "bytes", &RenderOptions::default());
    assert_eq!(shown.lines().count(), 5 + 64);

    // A deep tree with stubs and indirect counts renders too.
    let cycle = cycle();
    for mode in CollapseMode::ALL {
        let tree = CallTree::bottom_up(&cycle, mode);
        let json = to_json(&tree, cycle.routines(), "bytes", &all);
        assert_eq!(json.matches(r#"{"routine":"#).count(), tree.node_count());
        let text = to_text(&tree, cycle.routines(), "bytes", &all);
        assert_eq!(text.lines().count(), 5 + tree.node_count());
    }
}
