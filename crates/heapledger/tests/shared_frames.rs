//! The recorder stores a new stack's outer frames once where the stack
//! captured before it holds them (`data/stacks.rs`, `intern_sharing`):
//! 256 stacks under a recursion 3 000 deep take no more recorder memory
//! than under one 10 deep (copied, they took 6 MB more), and each stack
//! still reads back whole.

mod common;

use common::{compile, Scratch, SITE_FLAGS};
use heapledger_profile::Profile;
use std::process::Command;

#[test]
fn stacks_that_share_their_outer_frames_store_them_once() {
    let dir = Scratch::new("shared-frames");
    let exe = dir.join("shared_outer");
    compile("cc", &["shared_outer.c"], SITE_FLAGS, &exe);
    let run = |depth: usize| -> Profile {
        let out = dir.join(&format!("p{depth}.json"));
        let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
            .args(["run", "-q", "--max-depth", "4096", "-o"])
            .arg(&out)
            .arg("--")
            .arg(&exe)
            .arg(depth.to_string())
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        Profile::from_path(&out).unwrap()
    };
    let memory = |p: &Profile| p.heapledger.as_ref().unwrap().internal_memory;
    let (shallow, deep) = (run(10), run(3000));
    for (p, depth) in [(&shallow, 10), (&deep, 3000)] {
        // 256 leaves, each its own stack: leaf, bottom, `down` depth + 1
        // times, main (and the C library's frames under main).
        let mut leaves: Vec<String> = Vec::new();
        for s in p.stacks.iter().filter(|s| s.infos.alloc.count > 0) {
            assert_eq!(s.infos.alloc.count, 1);
            let names: Vec<String> = s
                .stack
                .iter()
                .map(|&a| p.frame_name(a).into_owned())
                .collect();
            assert!(names[0].starts_with("leaf"), "{names:?}");
            assert_eq!(names[1], "bottom");
            let downs = names.iter().filter(|n| *n == "down").count();
            assert_eq!(downs, depth + 1, "{}", names[0]);
            assert!(names.iter().any(|n| n == "main"));
            leaves.push(names[0].clone());
        }
        leaves.sort();
        leaves.dedup();
        assert_eq!(leaves.len(), 256, "depth {depth}");
    }
    let (a, b) = (memory(&shallow), memory(&deep));
    assert!(
        b < a + 512 * 1024,
        "recorder memory {a} B at depth 10, {b} B at depth 3000"
    );
}
