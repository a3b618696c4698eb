//! A checkpoint's cost in the recorder's memory: the threads' counters are
//! encoded while the threads are held into a file of their own, not copied
//! whole (112 bytes a stack and its index), which made the recorder's
//! largest block on programs of many stacks (Python compiling its library:
//! 232 MB at most for 184 MB at its end), nor kept encoded in memory (about
//! 40 bytes a stack: 72 bytes a stack here with the series' record).

mod common;

use common::{compile, Scratch, SITE_FLAGS};
use heapledger_profile::Profile;
use std::process::Command;

#[test]
fn a_checkpoint_takes_less_than_a_copy_of_the_counters() {
    let dir = Scratch::new("checkpoint-memory");
    // The benchmark's `stacks`: 65 536 distinct stacks 21 frames deep,
    // then a pause with all of them known.
    let exe = dir.join("stacks");
    compile(
        "cc",
        &["../../../heapledger-bench/workloads/stacks.c"],
        SITE_FLAGS,
        &exe,
    );
    let run = |every: &str| -> Profile {
        let out = dir.join(&format!("p{every}.json"));
        let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
            .args(["run", "-q", "--checkpoint-every", every, "-o"])
            .arg(&out)
            .arg("--")
            .arg(&exe)
            .args(["65536", "65536", "600"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        Profile::from_path(&out).unwrap()
    };
    let memory = |p: &Profile| {
        let h = p.heapledger.as_ref().unwrap();
        (h.internal_memory, h.internal_memory_peak)
    };
    // Without checkpoints, and with several while every stack is known.
    let (none, some) = (run("0"), run("0.1"));
    let stacks = some
        .stacks
        .iter()
        .filter(|s| s.infos.alloc.count > 0)
        .count();
    assert!(stacks >= 65536, "{stacks} stacks");
    let (end, most) = memory(&some);
    let (end0, most0) = memory(&none);
    assert!(
        some.stacks.len() == none.stacks.len(),
        "{} stacks, {} without checkpoints",
        some.stacks.len(),
        none.stacks.len()
    );
    // A copy of the counters alone took 112 bytes a stack, plus its index
    // (131 with the test's earlier program); the encoded counters in memory
    // 72; in a file, 9.
    let per_stack = (most - end) as f64 / stacks as f64;
    assert!(
        per_stack < 40.0,
        "checkpoints took {per_stack:.0} B a stack: {most} B at most, {end} B at the end \
         (without checkpoints: {most0} B at most, {end0} B at the end)"
    );
}
