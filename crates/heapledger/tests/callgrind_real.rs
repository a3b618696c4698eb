//! `heapledger export --format callgrind` on a profile store of a real program with self and mutual recursion
//! (`tests/programs/recursion.c`), read by Valgrind's `callgrind_annotate`:
//! each function's inclusive count is the number of allocations with that
//! function on the stack (`b`, only ever between two `a`, had 0).

mod common;

use common::*;
use std::process::Command;

#[test]
fn inclusive_counts_on_recursion_are_the_allocations_on_the_stack() {
    let dir = Scratch::new("callgrind-rec");
    let exe = dir.join("recursion");
    compile("cc", &["recursion.c"], SITE_FLAGS, &exe);
    let out = dir.join("p.sqlite");
    let o = heapledger_run("dwarf", &out, &exe, &[] as &[&str]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let cg = dir.join("callgrind.out");
    let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["export", "--format", "callgrind"])
        .arg(&out)
        .arg("-o")
        .arg(&cg)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let a = Command::new("callgrind_annotate")
        .args([
            "--inclusive=yes",
            "--show=AllocCnt",
            "--threshold=100",
            "--auto=no",
        ])
        .arg(&cg)
        // callgrind_annotate strips its working directory from `fl=` names
        // but not from `cfl=` ones: run it where no source lies.
        .current_dir("/")
        .output()
        .expect("callgrind_annotate (valgrind)");
    assert!(a.status.success());
    assert!(
        a.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&a.stderr)
    );
    let text = String::from_utf8_lossy(&a.stdout);
    let count = |function: &str| -> u64 {
        let suffix = format!("recursion.c:{function}");
        text.lines()
            .find(|l| l.split(" [").next().unwrap().trim_end().ends_with(&suffix))
            .and_then(|l| l.split_whitespace().next())
            .map(|n| n.replace(',', "").parse().unwrap())
            .unwrap_or_else(|| panic!("{function} not in:\n{text}"))
    };
    // r(3): 4 calls of leaf(100); a(4): a at depths 4, 2, 0 call leaf(10),
    // b at 3 and 1 lies on the stacks of the last two.
    assert_eq!(count("leaf"), 7, "{text}");
    assert_eq!(count("r"), 4, "{text}");
    assert_eq!(count("a"), 3, "{text}");
    assert_eq!(count("b"), 2, "{text}");
    assert_eq!(count("main"), 7, "{text}");
}
