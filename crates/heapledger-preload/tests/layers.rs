//! The recorder's layers (see the top of `src/lib.rs`): every file of
//! `src/` sits in the folder of its layer, names with `crate::` only its own
//! layer and the ones below, and stays under `MAX_LINES` lines. A path up
//! to a higher layer is allowed only below a comment that says why it is
//! kept (`// cycle kept: ...` or `// import kept: ...`), and every such
//! comment must keep one. And every lock of the recorder is taken across
//! `fork` (below).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// The layers, bottom first; `lib.rs` stands above them all.
const LAYERS: [&str; 5] = ["base", "data", "thread", "process", "hooks"];
const TOP: usize = LAYERS.len();
const MAX_LINES: usize = 600;
const MARKERS: [&str; 2] = ["// cycle kept:", "// import kept:"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

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

/// The layer a file of `src/` belongs to (its first folder), or None.
fn layer_of_file(rel: &Path) -> Option<usize> {
    let mut parts = rel.components();
    let first = parts.next()?.as_os_str().to_str()?;
    if parts.next().is_none() {
        return (first == "lib.rs").then_some(TOP);
    }
    LAYERS.iter().position(|l| *l == first)
}

/// A line without its comment (outside string literals).
fn code_of(line: &str) -> &str {
    let b = line.as_bytes();
    let mut in_str = false;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' if in_str => i += 1,
            b'"' => in_str = !in_str,
            b'/' if !in_str && b.get(i + 1) == Some(&b'/') => return &line[..i],
            _ => {}
        }
        i += 1;
    }
    line
}

fn ident(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The first path segments after each `crate::` in `code`, the members of
/// a `crate::{a, b::c}` group included.
fn crate_paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().next_back();
        rest = &rest[i + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut start = 0;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        out.push(ident(group[start..j].trim()).to_string());
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.push(ident(group[start..j].trim()).to_string());
                        start = j + 1;
                    }
                    _ => {}
                }
            }
        } else {
            out.push(ident(rest).to_string());
        }
    }
    out.retain(|s| !s.is_empty());
    out
}

/// Whether `line` holds a marker: a plain comment (not a doc comment)
/// that starts with one, alone on its line or after code.
fn is_marker(line: &str) -> bool {
    let comment = &line[code_of(line).len()..];
    MARKERS.iter().any(|m| comment.starts_with(m))
}

/// Whether line `i` is kept by a marker: on the line itself, or in the
/// comment lines right above it.
fn kept_at(lines: &[&str], i: usize) -> Option<usize> {
    let has = |l: &str| is_marker(l);
    if has(lines[i]) {
        return Some(i);
    }
    let mut j = i;
    while j > 0 && lines[j - 1].trim_start().starts_with("//") {
        j -= 1;
        if has(lines[j]) {
            return Some(j);
        }
    }
    None
}

#[test]
fn no_layer_names_a_higher_one() {
    let root = src();
    let mut all = Vec::new();
    files(&root, &mut all);
    all.sort();
    let mut wrong = Vec::new();
    let mut kept = Vec::new();
    let mut markers_used: BTreeMap<(PathBuf, usize), bool> = BTreeMap::new();
    for path in &all {
        let rel = path.strip_prefix(&root).unwrap().to_path_buf();
        let Some(layer) = layer_of_file(&rel) else {
            wrong.push(format!(
                "{}: in no layer (put it in one of {LAYERS:?})",
                rel.display()
            ));
            continue;
        };
        let text = fs::read_to_string(path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        if lines.len() > MAX_LINES {
            wrong.push(format!(
                "{}: {} lines, more than {MAX_LINES}: split it along a seam",
                rel.display(),
                lines.len()
            ));
        }
        for (i, line) in lines.iter().enumerate() {
            if is_marker(line) {
                markers_used.entry((rel.clone(), i)).or_insert(false);
            }
            for seg in crate_paths(code_of(line)) {
                let to = LAYERS.iter().position(|l| *l == seg).unwrap_or(TOP);
                if to <= layer {
                    continue;
                }
                let what = format!(
                    "{}:{}: layer {} ({}) names `crate::{seg}`, layer {}",
                    rel.display(),
                    i + 1,
                    layer + 1,
                    LAYERS.get(layer).unwrap_or(&"lib"),
                    to + 1
                );
                match kept_at(&lines, i) {
                    Some(m) => {
                        markers_used.insert((rel.clone(), m), true);
                        kept.push(what);
                    }
                    None => wrong.push(what),
                }
            }
        }
    }
    for ((file, line), used) in &markers_used {
        if !used {
            wrong.push(format!(
                "{}:{}: a `kept` comment above no import from a higher layer",
                file.display(),
                line + 1
            ));
        }
    }
    assert!(wrong.is_empty(), "layer rule broken:\n{}", wrong.join("\n"));
    // The exceptions are few, and each says why where it is.
    assert!(
        kept.len() <= 2,
        "more kept exceptions than before:\n{}",
        kept.join("\n")
    );
}

#[test]
fn the_parser_sees_what_it_must() {
    assert_eq!(
        crate_paths("use crate::{base::x, data::{y, z}, hooks};"),
        ["base", "data", "hooks"]
    );
    assert_eq!(
        crate_paths("let a = crate::thread::tls::tls();"),
        ["thread"]
    );
    assert_eq!(crate_paths("let a = foocrate::x;"), Vec::<String>::new());
    assert_eq!(
        code_of("let s = \"a//b\"; // crate::hooks"),
        "let s = \"a//b\"; "
    );
    assert!(is_marker("    // cycle kept: why"));
    assert!(is_marker("use crate::hooks::x; // import kept: why"));
    assert!(!is_marker("//! the marker (`// cycle kept:`)"));
    assert_eq!(layer_of_file(Path::new("lib.rs")), Some(TOP));
    assert_eq!(layer_of_file(Path::new("data/live/mod.rs")), Some(1));
    assert_eq!(layer_of_file(Path::new("stray.rs")), None);
}

/// Every lock of the recorder is taken across `fork` (`process/fork.rs`),
/// so that a child never finds one held by a thread it did not inherit and
/// waits for it for ever: each `static` spin lock in `src/` is named in
/// `locks()` there, or says on the line above it why not (`// fork: ...`).
#[test]
fn every_lock_is_taken_across_fork() {
    let src = src();
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
