//! Every lock of the recorder is taken across `fork` (`process/fork.rs`),
//! so that a child never finds one held by a thread it did not inherit and
//! waits for it for ever: each `static` spin lock in `src/` is named in
//! `locks()` there, or says on the line above it why not (`// fork: ...`).

use std::fs;
use std::path::{Path, PathBuf};

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn every_lock_is_taken_across_fork() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let fork = fs::read_to_string(src.join("process/fork.rs")).unwrap();
    let listed = &fork[fork.find("fn locks()").unwrap()..fork.find("const LOCKS").unwrap()];
    let mut all = Vec::new();
    files(&src, &mut all);
    let mut missing = Vec::new();
    let mut seen = 0;
    for f in &all {
        let text = fs::read_to_string(f).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            let t = l.trim_start();
            let Some(rest) = t
                .strip_prefix("pub static ")
                .or_else(|| t.strip_prefix("pub(crate) static "))
                .or_else(|| t.strip_prefix("static "))
            else {
                continue;
            };
            let Some((name, ty)) = rest.split_once(':') else {
                continue;
            };
            let ty = ty.trim_start();
            let spin = ty.starts_with("SpinLock<")
                || ty.starts_with("crate::base::sync::SpinLock<")
                || ty.starts_with("RawSpin ")
                || ty.starts_with("RawSpin=");
            if !spin {
                continue;
            }
            seen += 1;
            let name = name.trim();
            let said = i > 0 && lines[i - 1].trim_start().starts_with("// fork:");
            let named = listed.contains(&format!("{name}.raw()"))
                || listed.contains(&format!("::{name},"))
                || listed.contains(&format!("&{name},"));
            if !said && !named {
                missing.push(format!("{}:{}: {name}", f.display(), i + 1));
            }
        }
    }
    assert!(
        seen >= 10,
        "found only {seen} locks: the scan no longer matches"
    );
    assert!(
        missing.is_empty(),
        "locks not taken across fork (add them to process/fork.rs's locks(), or say why not above them with `// fork: ...`):\n{}",
        missing.join("\n")
    );
}
