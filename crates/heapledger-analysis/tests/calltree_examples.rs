//! Every example of `shared/reference/recursion-collapsing.md` (E1–E6 and the
//! degenerate cases) in every mode, with exact rows, and the text and JSON
//! renderings of the manual's tables.
//!
//! Rows are listed in output order (children by inclusive weight, then name,
//! stubs last): `level routine incl_direct incl_indirect excl` for a node and
//! `level routine... -> target_level (traversed)` for a stub.

use heapledger_analysis::calltree::{
    to_json, to_text, write_flat_json, write_flat_text, CallTree, CallTreeBuilder, CallTreeError,
    CollapseMode, Direction, FlatProfile, FlatProfileBuilder, RenderOptions, Samples, Visit,
};
use CollapseMode::{Conservative, Direct, Full};

const E1: &str = "
    1: main r
    1: main r s
    1: main r r
    1: main r r s
    1: main r r r
    1: main r r r s
";
const E2: &str = "1: main a b c b a d c";
const E3: &str = "1: main a a a b";
const E4: &str = "1: main a b a b";
const E5: &str = "
    1: main r
    2: main r s
    3: main r r
    4: main r r s
    5: main r r r
    6: main r r r s
";

fn samples(text: &str) -> Samples {
    Samples::from_text(text).expect("valid fixture")
}

fn rows_of(tree: &CallTree, samples: &Samples) -> Vec<String> {
    let routines = samples.routines();
    tree.walk(routines, &RenderOptions::all())
        .filter_map(|visit| match visit {
            Visit::Enter(id) => Some(id),
            Visit::Leave(_) => None,
        })
        .map(|id| {
            let node = &tree[id];
            let name = routines.name(node.routine());
            match node.stub_target() {
                Some(target) => format!(
                    "{} {name}... -> {} ({})",
                    node.level(),
                    tree[target].level(),
                    node.traversed()
                ),
                None => format!(
                    "{} {name} {} {} {}",
                    node.level(),
                    node.incl_direct(),
                    node.incl_indirect(),
                    node.excl()
                ),
            }
        })
        .collect()
}

#[track_caller]
fn check(text: &str, direction: Direction, modes: &[CollapseMode], expected: &[&str]) {
    let samples = samples(text);
    for &mode in modes {
        let tree = CallTree::build(&samples, mode, direction);
        assert_eq!(
            rows_of(&tree, &samples),
            expected,
            "{direction} tree, {mode} collapse, of {text}"
        );
    }
}

#[track_caller]
fn check_top_down(text: &str, modes: &[CollapseMode], expected: &[&str]) {
    check(text, Direction::TopDown, modes, expected);
}

#[test]
fn e1_no_collapse_is_the_plain_prefix_tree() {
    check_top_down(
        E1,
        &[CollapseMode::None],
        &[
            "1 main 6 0 0",
            "2 r 6 0 1",
            "3 r 4 0 1",
            "4 r 2 0 1",
            "5 s 1 0 1",
            "4 s 1 0 1",
            "3 s 1 0 1",
        ],
    );
}

#[test]
fn e1_collapsed_is_the_manuals_table() {
    check_top_down(
        E1,
        &[Direct, Conservative, Full],
        &["1 main 6 0 0", "2 r 6 0 3", "3 s 1 2 3", "3 r... -> 2 (4)"],
    );
}

#[test]
fn e2_without_full_collapse_is_a_chain() {
    check_top_down(
        E2,
        &[CollapseMode::None, Direct, Conservative],
        &[
            "1 main 1 0 0",
            "2 a 1 0 0",
            "3 b 1 0 0",
            "4 c 1 0 0",
            "5 b 1 0 0",
            "6 a 1 0 0",
            "7 d 1 0 0",
            "8 c 1 0 1",
        ],
    );
}

#[test]
fn e2_full_collapse_is_the_manuals_table() {
    check_top_down(
        E2,
        &[Full],
        &[
            "1 main 1 0 0",
            "2 a 1 0 0",
            "3 b 1 0 0",
            "4 c 1 0 0",
            "5 b... -> 3 (1)",
            "4 a... -> 2 (1)",
            "3 d 0 1 0",
            "4 c 0 1 1",
        ],
    );
}

#[test]
fn e3_direct_recursion() {
    check_top_down(
        E3,
        &[CollapseMode::None],
        &[
            "1 main 1 0 0",
            "2 a 1 0 0",
            "3 a 1 0 0",
            "4 a 1 0 0",
            "5 b 1 0 1",
        ],
    );
    // The third `a` reuses the stub; the sample crosses it once.
    check_top_down(
        E3,
        &[Direct, Conservative, Full],
        &["1 main 1 0 0", "2 a 1 0 0", "3 b 0 1 1", "3 a... -> 2 (1)"],
    );
}

#[test]
fn e4_indirect_recursion() {
    check_top_down(
        E4,
        &[CollapseMode::None, Direct],
        &[
            "1 main 1 0 0",
            "2 a 1 0 0",
            "3 b 1 0 0",
            "4 a 1 0 0",
            "5 b 1 0 1",
        ],
    );
    check_top_down(
        E4,
        &[Conservative],
        &[
            "1 main 1 0 0",
            "2 a 1 0 0",
            "3 b 1 0 1",
            "4 a 1 0 0",
            "5 b... -> 3 (1)",
        ],
    );
    // The last `b` lands again on the already credited b@3.
    check_top_down(
        E4,
        &[Full],
        &["1 main 1 0 0", "2 a 1 0 0", "3 b 1 0 1", "4 a... -> 2 (1)"],
    );
}

#[test]
fn e5_weights() {
    check_top_down(
        E5,
        &[CollapseMode::None],
        &[
            "1 main 21 0 0",
            "2 r 21 0 1",
            "3 r 18 0 3",
            "4 r 11 0 5",
            "5 s 6 0 6",
            "4 s 4 0 4",
            "3 s 2 0 2",
        ],
    );
    check_top_down(
        E5,
        &[Direct, Conservative, Full],
        &[
            "1 main 21 0 0",
            "2 r 21 0 9",
            "3 s 2 10 12",
            "3 r... -> 2 (18)",
        ],
    );
}

#[test]
fn e6_flat_totals_count_a_routine_once_per_sample() {
    let e1 = samples(E1);
    let flat = FlatProfile::from_samples(&e1);
    let rows: Vec<_> = flat
        .rows(e1.routines())
        .into_iter()
        .map(|row| {
            (
                e1.routines().name(row.routine),
                row.inclusive,
                row.exclusive,
            )
        })
        .collect();
    assert_eq!(rows, [("r", 6, 3), ("main", 6, 0), ("s", 3, 3)]);
    assert_eq!(flat.total_weight(), 6);

    let e2 = samples(E2);
    let flat = FlatProfile::from_samples(&e2);
    let rows: Vec<_> = flat
        .rows(e2.routines())
        .into_iter()
        .map(|row| {
            (
                e2.routines().name(row.routine),
                row.inclusive,
                row.exclusive,
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("c", 1, 1),
            ("a", 1, 0),
            ("b", 1, 0),
            ("d", 1, 0),
            ("main", 1, 0)
        ]
    );
}

#[test]
fn e6_flat_renderings() {
    let e1 = samples(E1);
    let flat = FlatProfile::from_samples(&e1);
    let mut text = Vec::new();
    write_flat_text(
        &mut text,
        &flat,
        e1.routines(),
        "samples",
        &RenderOptions::default(),
    )
    .unwrap();
    assert_eq!(
        String::from_utf8(text).unwrap(),
        "\
Flat profile, total samples 6

  samples  samples
Inclusive     Self  Routine
---------  -------  -------
        6        3  r
        6        0  main
        3        3  s
"
    );
    let mut json = Vec::new();
    write_flat_json(&mut json, &flat, e1.routines(), "samples").unwrap();
    assert_eq!(
        String::from_utf8(json).unwrap(),
        r#"{"metric":"samples","total":6,"routines":[{"routine":"r","inclusive":6,"self":3},{"routine":"main","inclusive":6,"self":0},{"routine":"s","inclusive":3,"self":3}]}"#
    );
}

#[test]
fn empty_samples_are_rejected_and_change_nothing() {
    let mut samples = samples(E1);
    let before = (samples.len(), samples.sample_count());
    assert_eq!(samples.push(&[], 5), Err(CallTreeError::EmptySample));
    assert_eq!(
        samples.push_names(Vec::<&str>::new(), 5),
        Err(CallTreeError::EmptySample)
    );
    assert_eq!((samples.len(), samples.sample_count()), before);

    let mut builder = CallTreeBuilder::new(Full, Direction::TopDown, samples.routines());
    assert_eq!(builder.push(&[], 5), Err(CallTreeError::EmptySample));
    assert_eq!(builder.finish().node_count(), 0);

    let mut flat = FlatProfileBuilder::new(samples.routines());
    assert_eq!(flat.push(&[], 5), Err(CallTreeError::EmptySample));
    assert_eq!(flat.finish().total_weight(), 0);

    let err = Samples::from_text("1: main\n3:\n").unwrap_err();
    assert!(
        matches!(err, CallTreeError::BadLine { line: 2, .. }),
        "{err}"
    );
    assert!(
        err.to_string().starts_with("sample line 2: empty sample"),
        "{err}"
    );
}

#[test]
fn unknown_routines_and_bad_lines_are_rejected() {
    let mut other = Samples::new();
    let (a, b) = (other.intern("a"), other.intern("b"));
    let mut one = Samples::new();
    one.intern("only");
    assert_eq!(
        one.push(&[a, b], 1),
        Err(CallTreeError::UnknownRoutine { id: 1, known: 1 })
    );
    let mut builder = CallTreeBuilder::new(Full, Direction::TopDown, one.routines());
    assert!(builder.push(&[b], 1).is_err());
    for bad in ["main r", "x: main", "-1: main"] {
        let err = Samples::from_text(bad).unwrap_err();
        assert!(
            matches!(err, CallTreeError::BadLine { line: 1, .. }),
            "{err}"
        );
    }
    assert_eq!(
        Samples::from_text("# comment\n\n2: main\n")
            .unwrap()
            .total_weight(),
        2
    );
}

#[test]
fn a_single_frame_is_a_root_with_its_weight() {
    check_top_down("1: main", &CollapseMode::ALL, &["1 main 1 0 1"]);
    check(
        "1: main",
        Direction::BottomUp,
        &CollapseMode::ALL,
        &["1 main 1 0 1"],
    );
}

#[test]
fn main_main_collapses_under_direct_and_above() {
    check_top_down(
        "1: main main",
        &[CollapseMode::None],
        &["1 main 1 0 0", "2 main 1 0 1"],
    );
    check_top_down(
        "1: main main",
        &[Direct, Conservative, Full],
        &["1 main 1 0 1", "2 main... -> 1 (1)"],
    );
}

#[test]
fn the_first_frame_is_never_a_stub() {
    // Each sample starts from no node: `r` and `a` are roots in every mode.
    check_top_down(
        "2: r r\n1: a r a",
        &[Full],
        &[
            "1 r 2 0 2",
            "2 r... -> 1 (2)",
            "1 a 1 0 1",
            "2 r 1 0 0",
            "3 a... -> 1 (1)",
        ],
    );
}

#[test]
fn zero_weight_samples_change_nothing() {
    let plain = samples(E2);
    let mut padded = samples(E2);
    padded.push_names(["main", "x", "y"], 0).unwrap();
    padded.push_names(["main", "a", "a", "b", "a"], 0).unwrap();
    for direction in [Direction::TopDown, Direction::BottomUp] {
        for mode in CollapseMode::ALL {
            let expected = CallTree::build(&plain, mode, direction);
            let tree = CallTree::build(&padded, mode, direction);
            assert_eq!(rows_of(&tree, &padded), rows_of(&expected, &plain));
            assert_eq!(tree.node_count(), expected.node_count());
        }
    }
    let flat = FlatProfile::from_samples(&padded);
    let x = padded.routines().get("x").unwrap();
    assert_eq!(flat.get(x).inclusive, 0);
    assert!(flat
        .rows(padded.routines())
        .iter()
        .all(|row| row.routine != x));
}

#[test]
fn bottom_up_e1_replays_the_samples_leaf_first() {
    check(
        E1,
        Direction::BottomUp,
        &[CollapseMode::None],
        &[
            "1 r 3 0 0",
            "2 r 2 0 0",
            "3 main 1 0 1",
            "3 r 1 0 0",
            "4 main 1 0 1",
            "2 main 1 0 1",
            "1 s 3 0 0",
            "2 r 3 0 0",
            "3 r 2 0 0",
            "4 main 1 0 1",
            "4 r 1 0 0",
            "5 main 1 0 1",
            "3 main 1 0 1",
        ],
    );
    check(
        E1,
        Direction::BottomUp,
        &[Direct, Conservative, Full],
        &[
            "1 r 3 0 0",
            "2 main 1 2 3",
            "2 r... -> 1 (2)",
            "1 s 3 0 0",
            "2 r 3 0 0",
            "3 main 1 2 3",
            "3 r... -> 2 (2)",
        ],
    );
}

#[test]
fn bottom_up_e2_erases_loops_from_the_leaf_side() {
    check(
        E2,
        Direction::BottomUp,
        &[Full],
        &[
            "1 c 1 0 0",
            "2 b 0 1 0",
            "3 a 0 1 0",
            "4 main 0 1 1",
            "2 d 1 0 0",
            "3 a 1 0 0",
            "4 b 1 0 0",
            "5 c... -> 1 (1)",
        ],
    );
}

#[test]
fn text_of_e1_follows_the_manuals_layout() {
    let e1 = samples(E1);
    let tree = CallTree::top_down(&e1, Full);
    assert_eq!(
        to_text(&tree, e1.routines(), "samples", &RenderOptions::default()),
        "\
Call tree: top-down, full collapse, total samples 6

    samples  samples
In or Under  In Only  Level  Routine
-----------  -------  -----  -------
          6        0      1  main
          6        3      2    r
      1 (2)        3      3      s
                          3      r...
"
    );
}

#[test]
fn text_of_e2_follows_the_manuals_layout() {
    let e2 = samples(E2);
    let tree = CallTree::top_down(&e2, Full);
    assert_eq!(
        to_text(
            &tree,
            e2.routines(),
            "allocations",
            &RenderOptions::default()
        ),
        "\
Call tree: top-down, full collapse, total allocations 1

allocations  allocations
In or Under      In Only  Level  Routine
-----------  -----------  -----  -------
          1            0      1  main
          1            0      2    a
          1            0      3      b
          1            0      4        c
                              5          b...
                              4        a...
      0 (1)            0      3      d
      0 (1)            1      4        c
"
    );
}

#[test]
fn text_limit_hides_light_nodes_and_max_level_cuts_deep_ones() {
    let e5 = samples(E5);
    let tree = CallTree::top_down(&e5, CollapseMode::None);
    let shown = |options: RenderOptions| -> Vec<String> {
        to_text(&tree, e5.routines(), "bytes", &options)
            .lines()
            .skip(5)
            .map(|line| line.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect()
    };
    // 10% of 21 is 2.1: s@3 (2) goes.
    let limited = RenderOptions {
        limit_percent: 10.0,
        max_level: 64,
    };
    assert_eq!(
        shown(limited),
        [
            "21 0 1 main",
            "21 1 2 r",
            "18 3 3 r",
            "11 5 4 r",
            "6 6 5 s",
            "4 4 4 s"
        ]
    );
    let shallow = RenderOptions {
        limit_percent: 0.0,
        max_level: 3,
    };
    assert_eq!(
        shown(shallow),
        ["21 0 1 main", "21 1 2 r", "18 3 3 r", "2 2 3 s"]
    );
    // The default (1%) shows everything here; 0 too.
    assert_eq!(shown(RenderOptions::default()).len(), 7);
    assert_eq!(shown(RenderOptions::all()).len(), 7);

    // A stub is hidden when the weight that crossed it is under the limit.
    let full = CallTree::top_down(&e5, Full);
    let text = to_text(
        &full,
        e5.routines(),
        "bytes",
        &RenderOptions {
            limit_percent: 90.0,
            max_level: 64,
        },
    );
    assert!(text.ends_with("21        9      2    r\n"), "{text}");
    assert!(!text.contains("r..."), "{text}");
}

#[test]
fn json_of_e1_full() {
    let e1 = samples(E1);
    let tree = CallTree::top_down(&e1, Full);
    let json = to_json(&tree, e1.routines(), "samples", &RenderOptions::default());
    assert_eq!(
        json,
        concat!(
            r#"{"mode":"full","direction":"top-down","metric":"samples","total":6,"roots":["#,
            r#"{"routine":"main","level":1,"incl_direct":6,"incl_indirect":0,"excl":0,"children":["#,
            r#"{"routine":"r","level":2,"incl_direct":6,"incl_indirect":0,"excl":3,"children":["#,
            r#"{"routine":"s","level":3,"incl_direct":1,"incl_indirect":2,"excl":3,"children":[]},"#,
            r#"{"routine":"r","stub_to":2,"traversed":4}]}]}]}"#
        )
    );
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        value["roots"][0]["children"][0]["children"][1]["stub_to"],
        2
    );
}

#[test]
fn json_of_e2_full_parses_and_escapes_names() {
    let mut e2 = samples(E2);
    e2.push_names(["main", "say \"hi\"\n"], 1).unwrap();
    let tree = CallTree::top_down(&e2, Full);
    let json = to_json(&tree, e2.routines(), "bytes \"B\"", &RenderOptions::all());
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    let expected: serde_json::Value = serde_json::from_str(
        r#"{
            "mode": "full", "direction": "top-down", "metric": "bytes \"B\"", "total": 2,
            "roots": [{
                "routine": "main", "level": 1, "incl_direct": 2, "incl_indirect": 0, "excl": 0,
                "children": [
                    {"routine": "a", "level": 2, "incl_direct": 1, "incl_indirect": 0, "excl": 0,
                     "children": [
                        {"routine": "b", "level": 3, "incl_direct": 1, "incl_indirect": 0, "excl": 0,
                         "children": [
                            {"routine": "c", "level": 4, "incl_direct": 1, "incl_indirect": 0,
                             "excl": 0, "children": [{"routine": "b", "stub_to": 3, "traversed": 1}]},
                            {"routine": "a", "stub_to": 2, "traversed": 1}
                        ]},
                        {"routine": "d", "level": 3, "incl_direct": 0, "incl_indirect": 1, "excl": 0,
                         "children": [
                            {"routine": "c", "level": 4, "incl_direct": 0, "incl_indirect": 1,
                             "excl": 1, "children": []}
                        ]}
                     ]},
                    {"routine": "say \"hi\"\n", "level": 2, "incl_direct": 1, "incl_indirect": 0,
                     "excl": 1, "children": []}
                ]
            }]
        }"#,
    )
    .unwrap();
    assert_eq!(value, expected);
}

#[test]
fn an_empty_tree_renders() {
    let empty = Samples::new();
    let tree = CallTree::top_down(&empty, Full);
    assert_eq!(tree.node_count(), 0);
    assert_eq!(
        to_json(&tree, empty.routines(), "bytes", &RenderOptions::default()),
        r#"{"mode":"full","direction":"top-down","metric":"bytes","total":0,"roots":[]}"#
    );
    assert!(
        to_text(&tree, empty.routines(), "bytes", &RenderOptions::default()).ends_with("-------\n")
    );
}

#[test]
fn builder_returns_the_node_that_got_the_exclusive_weight() {
    let e2 = samples(E2);
    let mut builder = CallTreeBuilder::new(Full, Direction::TopDown, e2.routines());
    let sample = e2.get(0);
    let last = builder.push(&sample.frames, 1).unwrap().unwrap();
    assert_eq!(builder.push(&sample.frames, 0), Ok(None));
    let tree = builder.finish();
    let names: Vec<_> = tree
        .path_routines(last)
        .into_iter()
        .map(|id| e2.routines().name(id))
        .collect();
    assert_eq!(names, ["main", "a", "d", "c"]);
    assert_eq!(tree[last].excl(), 1);
}

#[test]
fn identical_stacks_are_stored_once_with_their_weights_summed() {
    let mut samples = samples(E5);
    samples.push_names(["main", "r", "s"], 10).unwrap();
    samples.push_names(["main", "r", "r"], 0).unwrap();
    assert_eq!(samples.len(), 6);
    assert_eq!(samples.sample_count(), 8);
    assert_eq!(samples.total_weight(), 31);
    let weights: Vec<u64> = samples.iter().map(|sample| sample.weight).collect();
    assert_eq!(weights, [1, 12, 3, 4, 5, 6]);
    // The same tree as replaying the samples one by one.
    let tree = CallTree::top_down(&samples, Full);
    let mut builder = CallTreeBuilder::new(Full, Direction::TopDown, samples.routines());
    for line in E5.lines().filter(|line| !line.trim().is_empty()) {
        let (weight, frames) = line.trim().split_once(':').unwrap();
        let frames: Vec<_> = frames
            .split_whitespace()
            .map(|name| samples.routines().get(name).unwrap())
            .collect();
        builder.push(&frames, weight.parse().unwrap()).unwrap();
    }
    let s = ["main", "r", "s"].map(|name| samples.routines().get(name).unwrap());
    builder.push(&s, 10).unwrap();
    assert_eq!(
        rows_of(&tree, &samples),
        rows_of(&builder.finish(), &samples)
    );
    assert_eq!(
        rows_of(&tree, &samples),
        [
            "1 main 31 0 0",
            "2 r 31 0 9",
            "3 s 12 10 22",
            "3 r... -> 2 (18)"
        ]
    );
}
