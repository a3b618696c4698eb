//! The profile store (issue 30): one file per run holding every process,
//! read by every reader; damaged or foreign stores refused in one line.

mod common;

use common::*;
use std::path::Path;
use std::process::Command;

fn heapledger(dir: &Scratch, args: &[&str]) -> (Option<i32>, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(args)
        .current_dir(dir.join(""))
        .output()
        .expect("cannot run heapledger");
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A shell that runs the test program twice: three processes, one file.
#[test]
fn one_run_gives_one_file_with_every_process() {
    let dir = Scratch::new("store-run");
    let exe = dir.join("basic");
    compile("cc", &["basic.c"], SITE_FLAGS, &exe);
    let script = format!("{0} && {0}", exe.display());
    let (code, _, err) = heapledger(&dir, &["run", "--", "sh", "-c", &script]);
    assert_eq!(code, Some(0), "{err}");
    let files: Vec<String> = std::fs::read_dir(dir.join(""))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("heapledger-"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let file = &files[0];
    assert!(file.ends_with(".sqlite"), "{file}");
    assert!(
        err.contains("2 more processes in the profile: basic ("),
        "{err}"
    );

    // The main process by default, the others listed in one line.
    let (code, out, err) = heapledger(&dir, &["report", file]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with("Program          sh -c"), "{out}");
    let others: Vec<&str> = err.lines().collect();
    assert_eq!(others.len(), 1, "{err}");
    assert!(others[0].contains("2 other processes"), "{err}");

    // One of them by pid: the test program, whose numbers are exact.
    let pid: String = others[0]
        .split("basic (")
        .nth(1)
        .unwrap()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    let (code, out, err) = heapledger(&dir, &["report", file, "--pid", &pid]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains(&format!("pid {pid}")), "{out}");
    assert!(out.contains("basic"), "{out}");
    let json = dir.join("child.json");
    let (code, _, err) = heapledger(
        &dir,
        &[
            "export",
            file,
            "--pid",
            &pid,
            "--format",
            "malt",
            "-o",
            json.to_str().unwrap(),
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    let p = heapledger_profile::Profile::from_path(&json).unwrap();
    let line = site_line("basic.c", "small");
    let small = site(&p, "alloc_small", line);
    assert!(
        small.alloc.count > 0,
        "no alloc_small in the child's profile"
    );

    // All of them merged: twice the child's allocations at that site.
    let all = dir.join("all.json");
    let (code, _, err) = heapledger(
        &dir,
        &[
            "export",
            file,
            "--all",
            "--format",
            "malt",
            "-o",
            all.to_str().unwrap(),
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    let merged = heapledger_profile::Profile::from_path(&all).unwrap();
    let both = site(&merged, "alloc_small", line);
    assert_eq!(both.alloc.count, 2 * small.alloc.count);
    assert_eq!(both.alloc.sum, 2 * small.alloc.sum);
    assert!(
        merged.run.command.starts_with("3 processes merged"),
        "{}",
        merged.run.command
    );

    // No such process: one line that lists those there are.
    let (code, _, err) = heapledger(&dir, &["tree", file, "--pid", "1"]);
    assert_eq!(code, Some(2));
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("holds no process 1 (its processes: "), "{err}");
}

/// Every reader on `file` fails with one line naming it and saying `words`.
fn refused(dir: &Scratch, file: &Path, words: &[&str]) {
    let f = file.to_str().unwrap();
    for args in [
        vec!["report", f],
        vec!["tree", f],
        vec!["export", "--format", "malt", "-o", "out.json", f],
    ] {
        let (code, out, err) = heapledger(dir, &args);
        assert!(matches!(code, Some(c) if c != 0), "{args:?}: {code:?}");
        assert!(!err.contains("panicked"), "{err}");
        assert_eq!(out, "");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        let name = file.file_name().unwrap().to_string_lossy();
        assert!(err.contains(name.as_ref()), "{err}");
        for w in words {
            assert!(err.contains(w), "{args:?}: does not say `{w}`: {err}");
        }
        assert!(!dir.join("out.json").exists());
    }
}

#[test]
fn damaged_and_foreign_stores_are_refused_in_one_line() {
    let dir = Scratch::new("store-bad");
    let exe = dir.join("basic");
    compile("cc", &["basic.c"], SITE_FLAGS, &exe);
    let good = dir.join("good.sqlite");
    let o = heapledger_run("dwarf", &good, &exe, &[] as &[&str]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let bytes = std::fs::read(&good).unwrap();

    // Cut short: SQLite sees a damaged database.
    let cut = dir.join("cut.sqlite");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    refused(&dir, &cut, &["damaged"]);

    // Another program's database.
    let foreign = dir.join("foreign.sqlite");
    let c = rusqlite::Connection::open(&foreign).unwrap();
    c.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);")
        .unwrap();
    drop(c);
    refused(&dir, &foreign, &["not a heapledger profile"]);

    // A later version of the store.
    let newer = dir.join("newer.sqlite");
    std::fs::write(&newer, &bytes).unwrap();
    let c = rusqlite::Connection::open(&newer).unwrap();
    c.execute("UPDATE meta SET value = '99' WHERE key = 'version'", [])
        .unwrap();
    drop(c);
    refused(&dir, &newer, &["version 99", "re-record"]);

    // A block whose bytes were overwritten.
    let block = dir.join("block.sqlite");
    std::fs::write(&block, &bytes).unwrap();
    let c = rusqlite::Connection::open(&block).unwrap();
    c.execute(
        "UPDATE block SET data = x'28b52ffd0000' WHERE kind = 'stack'",
        [],
    )
    .unwrap();
    drop(c);
    refused(&dir, &block, &["damaged"]);

    // Variables that are not there, or not zstd: only the readers that
    // show them refuse (report does not read them).
    for (name, damage) in [
        ("novars.sqlite", "DELETE FROM variables"),
        ("badvars.sqlite", "UPDATE variables SET data = x'00112233'"),
    ] {
        let f = dir.join(name);
        std::fs::write(&f, &bytes).unwrap();
        let c = rusqlite::Connection::open(&f).unwrap();
        c.execute(damage, []).unwrap();
        drop(c);
        let fs = f.to_str().unwrap();
        let (code, _, err) = heapledger(&dir, &["export", "--format", "malt", "-o", "v.json", fs]);
        assert_eq!(code, Some(2), "{name}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(name) && err.contains("is damaged"), "{err}");
        assert!(!err.contains("cannot write"), "{err}");
        assert!(!dir.join("v.json").exists());
        let (code, _, err) = heapledger(&dir, &["report", fs]);
        assert_eq!(code, Some(0), "{name}: {err}");
    }

    // The good one reads.
    let (code, out, err) = heapledger(&dir, &["report", good.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("basic"), "{out}");
}

/// A JSON profile (MALT's layout, as heapledger wrote before the store and
/// `export --format malt` writes now) is read as it is.
#[test]
fn a_json_profile_still_reads() {
    let dir = Scratch::new("store-json");
    let exe = dir.join("basic");
    compile("cc", &["basic.c"], SITE_FLAGS, &exe);
    let (p, _) = profile_of("dwarf", &dir, &exe, &[] as &[&str]);
    let (code, a, err) = heapledger(&dir, &["report", "p.json"]);
    assert_eq!(code, Some(0), "{err}");
    let (code, b, err) = heapledger(&dir, &["report", "p.sqlite"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(a, b);
    assert!(!p.stacks.is_empty());
}

/// Issue 30's acceptance: a program killed by SIGKILL mid-run leaves a
/// valid profile holding its allocations up to its last checkpoint, marked
/// as such in the store, the profile and the summary; `run` exits as the
/// program did (128 + 9).
#[test]
fn a_program_killed_by_sigkill_leaves_its_last_checkpoint() {
    let dir = Scratch::new("store-kill");
    let exe = dir.join("checkpoint");
    compile("cc", &["checkpoint.c"], SITE_FLAGS, &exe);
    let store = dir.join("p.sqlite");
    let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["run", "--checkpoint-every", "0.1", "-o"])
        .arg(&store)
        .arg("--")
        .arg(&exe)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(137), "{err}");
    assert!(err.contains("Checkpoint       the process could not write its profile at its end: this is its checkpoint "), "{err}");
    assert!(
        err.contains("killed by signal 9") || err.contains("SIGKILL"),
        "{err}"
    );

    // The store says so, for sqlite3 users too.
    let c = rusqlite::Connection::open(&store).unwrap();
    let (complete, seq, secs): (bool, i64, f64) = c
        .query_row(
            "SELECT complete, checkpoint_seq, checkpoint_seconds FROM process WHERE is_main",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert!(!complete);
    assert!(seq >= 1, "{seq}");
    assert!(secs > 0.0 && secs < 10.0, "{secs}");
    drop(c);

    // Its numbers, exact at each site, through the store and the export.
    let json = dir.join("p.json");
    let e = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["export", "--format", "malt", "-o"])
        .arg(&json)
        .arg(&store)
        .output()
        .unwrap();
    assert!(e.status.success(), "{}", String::from_utf8_lossy(&e.stderr));
    assert!(String::from_utf8_lossy(&e.stderr).contains("was killed"));
    let p = heapledger_profile::Profile::from_path(&json).unwrap();
    assert!(p.heapledger.as_ref().unwrap().checkpoint.is_some());
    let at = |f: &str| {
        let s = p
            .stacks
            .iter()
            .filter(|s| s.stack.iter().any(|a| frame(&p, *a).0 == f))
            .fold((0, 0, 0, 0), |t, s| {
                (
                    t.0 + s.infos.alloc.count,
                    t.1 + s.infos.alloc.sum,
                    t.2 + s.infos.free.count,
                    t.3 + s.infos.alive_req,
                )
            });
        s
    };
    assert_eq!(at("kept_site"), (10, 12370, 0, 12370));

    // `report --json` says it too, with the same numbers.
    let r = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["report", "--json"])
        .arg(&store)
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let j: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(j["format"], "heapledger-report");
    assert_eq!(j["program"]["exit_signal"], 9);
    assert_eq!(j["program"]["exit_code"], serde_json::Value::Null);
    assert!(j["program"]["checkpoint"]["seq"].as_u64().unwrap() >= 1);
    assert_eq!(j["calls"]["calloc"]["bytes"], 10371);
    // Its five, and the two of 0 bytes of its wait for a checkpoint.
    assert_eq!(j["calls"]["free"]["count"], 7);
    assert_eq!(j["alive_at_exit"]["by_the_program"]["bytes"], 12370 + 10371);
    assert_eq!(j["peak"]["requested_bytes"], 12370 + 10371);
    let top = &j["top_sites_by_bytes"][0];
    assert_eq!(top["function"], "kept_site");
    assert_eq!(top["bytes"], 12370);
    assert_eq!(at("freed_site"), (5, 11725, 5, 0));
    assert_eq!(at("zeroed_site"), (3, 10371, 0, 10371));
}

/// `--all` reads each process's stacks from the store as the reader sums
/// them, not every stack at once: what it gives is what merging the whole
/// profiles gives. The two programs are one source built at fixed
/// addresses with a function renamed, so that its addresses mean a
/// function of each (the second's frames move to addresses of their own).
#[test]
fn processes_merged_as_their_stacks_are_read_are_the_whole_merge() {
    use heapledger::profiles::{open, Load, Opened, Pick};
    let dir = Scratch::new("store-merge");
    let flags: Vec<&str> = SITE_FLAGS.iter().copied().chain(["-no-pie"]).collect();
    let renamed: Vec<&str> = flags
        .iter()
        .copied()
        .chain(["-Dalloc_small=alloc_tiny"])
        .collect();
    let (a, b) = (dir.join("basic"), dir.join("renamed"));
    compile("cc", &["basic.c"], &flags, &a);
    compile("cc", &["basic.c"], &renamed, &b);
    let script = format!("{} && {}", a.display(), b.display());
    let store = dir.join("p.sqlite");
    let (code, _, err) = heapledger(
        &dir,
        &[
            "run",
            "-o",
            store.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    assert_eq!(code, Some(0), "{err}");

    let stacks = |o: &Opened| {
        let mut v = Vec::new();
        o.each_stack(|s, i| v.push((s.to_vec(), i.clone())))
            .unwrap();
        v
    };
    let whole = open(&store, Pick::All, Load::Whole).unwrap();
    let streamed = open(&store, Pick::All, Load::Streamed).unwrap();
    assert!(streamed.streams_stacks() && !whole.streams_stacks());
    assert_eq!(whole.merged, 3);
    assert_eq!(streamed.merged, 3);
    let (ws, ss) = (stacks(&whole), stacks(&streamed));
    assert!(!ws.is_empty());
    assert_eq!(ws, ss, "the stacks");
    // Frames of the second program moved: one address meant two functions.
    let synthetic = |o: &Opened| {
        o.profile
            .sites
            .instr
            .keys()
            .filter(|a| a.value() >= 0xffff_8000_0000_0000)
            .count()
    };
    assert!(synthetic(&streamed) > 0, "no frame had to move");
    assert!(ss
        .iter()
        .any(|(s, _)| s.iter().any(|a| a.value() >= 0xffff_8000_0000_0000)));
    assert_eq!(whole.globals().unwrap(), streamed.globals().unwrap());

    // The rest of the merged profile: the same, but for the stacks and the
    // variables it holds itself.
    let whole_ids: std::collections::HashSet<&str> = whole
        .profile
        .stacks
        .iter()
        .map(|s| s.stack_id.as_str())
        .collect();
    assert_eq!(
        whole_ids.len(),
        ws.len(),
        "the whole merge's stack ids repeat"
    );
    let mut w = whole.profile.clone();
    let mut s = streamed.profile.clone();
    w.stacks.stats.clear();
    w.mem_stats.global_variables.clear();
    s.mem_stats.global_variables.clear();
    assert_eq!(w.stacks.count, ss.len() as u64);
    assert_eq!(w.domains, s.domains, "the totals");
    assert_eq!(w.leaks, s.leaks);
    assert_eq!(w.sites, s.sites);
    assert_eq!(w, s);

    // The MALT export numbers the merged stacks once (each process's
    // started from 1).
    let out = dir.join("all.json");
    let (code, _, err) = heapledger(
        &dir,
        &[
            "export",
            store.to_str().unwrap(),
            "--all",
            "--format",
            "malt",
            "-o",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    let merged = heapledger_profile::Profile::from_path(&out).unwrap();
    let ids: std::collections::HashSet<&str> =
        merged.stacks.iter().map(|s| s.stack_id.as_str()).collect();
    assert_eq!(ids.len(), merged.stacks.stats.len(), "stack ids repeat");
    assert_eq!(merged.stacks.stats.len(), ss.len());
}
