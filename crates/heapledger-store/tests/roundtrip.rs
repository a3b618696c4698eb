//! A profile written to the store reads back the same, field by field.

use heapledger_profile::Profile;
use heapledger_store::{ProcessMeta, Store, Writer};
use std::path::Path;

/// The profile with its stacks in a canonical order and without their ids
/// (the store keeps neither: stacks come back in the order of the prefix
/// tree, numbered in that order).
fn canonical(mut p: Profile) -> Profile {
    p.stacks.stats.sort_by(|a, b| {
        a.stack
            .cmp(&b.stack)
            .then_with(|| a.infos.alloc.sum.cmp(&b.infos.alloc.sum))
    });
    for s in &mut p.stacks.stats {
        s.stack_id.clear();
    }
    p
}

/// MALT 1.6.2's own sample profile.
fn malt_sample() -> Profile {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../heapledger-profile/tests/fixtures/malt-1.6.2-sample/profile.json");
    Profile::from_path(&fixture).unwrap()
}

fn round_trip(p: &Profile, dir: &Path) -> Profile {
    let path = dir.join("p.sqlite");
    let mut w = Writer::create(&path).unwrap();
    w.add_process(
        p,
        ProcessMeta {
            is_main: true,
            checkpoint: None,
        },
    )
    .unwrap();
    w.finish().unwrap();
    let s = Store::open(&path).unwrap();
    let procs = s.processes().unwrap();
    assert_eq!(procs.len(), 1);
    s.profile(procs[0].pid).unwrap()
}

#[test]
fn malts_own_sample_reads_back_unchanged() {
    let p = malt_sample();
    let dir = tempfile::tempdir().unwrap();
    let back = canonical(round_trip(&p, dir.path()));
    let p = canonical(p);
    assert_eq!(back.stacks, p.stacks);
    assert_eq!(back.leaks, p.leaks);
    assert_eq!(back.sites, p.sites);
    assert_eq!(back, p);
}

/// A large profile given by path (`HEAPLEDGER_STORE_PROFILE`), for measuring.
#[test]
fn a_given_profile_reads_back_unchanged() {
    let Some(path) = std::env::var_os("HEAPLEDGER_STORE_PROFILE") else {
        return;
    };
    let t = std::time::Instant::now();
    let p = Profile::from_path(Path::new(&path)).unwrap();
    eprintln!("json read {:?}", t.elapsed());
    let dir = tempfile::tempdir().unwrap();
    let t = std::time::Instant::now();
    let path = dir.path().join("p.sqlite");
    let mut w = Writer::create(&path).unwrap();
    w.add_process(
        &p,
        ProcessMeta {
            is_main: true,
            checkpoint: None,
        },
    )
    .unwrap();
    w.finish().unwrap();
    eprintln!(
        "store write {:?}, {} bytes",
        t.elapsed(),
        std::fs::metadata(&path).unwrap().len()
    );
    let t = std::time::Instant::now();
    let s = Store::open(&path).unwrap();
    let back = s.profile(s.processes().unwrap()[0].pid).unwrap();
    eprintln!("store read {:?}", t.elapsed());
    assert!(canonical(back) == canonical(p));
    if let Some(keep) = std::env::var_os("HEAPLEDGER_STORE_KEEP") {
        std::fs::copy(&path, keep).unwrap();
    }
}

/// Stacks over several blocks of rows, the last one partial and not a
/// whole number of the writer's tiles (`put_blocks`): each reads back with
/// its own counters.
#[test]
fn stacks_over_several_blocks_read_back_unchanged() {
    let mut p = malt_sample();
    let base = std::mem::take(&mut p.stacks.stats);
    let n = 2 * heapledger_store::BLOCK_ROWS + 13;
    for i in 0..n {
        let mut s = base[i % base.len()].clone();
        // A frame of its own at the bottom, so that every stack differs.
        s.stack.push(heapledger_profile::Addr::native(
            0x7000_0000 + 16 * i as u64,
        ));
        s.infos.alloc.count += i as u64;
        s.infos.alloc.sum += 3 * i as u64;
        p.stacks.push(s);
    }
    let dir = tempfile::tempdir().unwrap();
    let back = canonical(round_trip(&p, dir.path()));
    let p = canonical(p);
    assert_eq!(back.stacks.stats.len(), n);
    assert_eq!(back.stacks, p.stacks);
}

/// The variables of a binary that several processes load are written
/// once, and only a reader that asks for them reads them.
#[test]
fn a_binarys_variables_are_kept_once_and_read_on_demand() {
    let mut p = malt_sample();
    assert!(p.mem_stats.global_variables.len() > 1);
    let ext = |pid| {
        let mut e = heapledger_profile::HeapledgerExt::new("dwarf", 64);
        e.pid = pid;
        Some(e)
    };
    p.heapledger = ext(4241);
    let mut q = p.clone();
    q.heapledger = ext(4242);
    // One binary's list differs in the second process: a row of its own.
    let (changed, vars) = q.mem_stats.global_variables.get_index_mut(0).unwrap();
    let changed = changed.clone();
    let mut other = (**vars).clone();
    other[0].size += 1;
    *vars = std::sync::Arc::new(other);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.sqlite");
    let mut w = Writer::create(&path).unwrap();
    w.add_process(&p, ProcessMeta::default()).unwrap();
    w.add_process(&q, ProcessMeta::default()).unwrap();
    w.finish().unwrap();

    let c = rusqlite::Connection::open(&path).unwrap();
    let rows: usize = c
        .query_row("SELECT count(*) FROM variables", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, p.mem_stats.global_variables.len() + 1);
    drop(c);

    let s = Store::open(&path).unwrap();
    for (pid, want) in [(4241, &p), (4242, &q)] {
        let (head, _) = s.head(pid).unwrap();
        assert!(head.mem_stats.global_variables.is_empty());
        assert_eq!(head.mem_stats.size_map, want.mem_stats.size_map);
        let g = s.globals(pid).unwrap();
        assert_eq!(g, want.mem_stats.global_variables, "process {pid}");
    }
    assert_ne!(
        s.globals(4242).unwrap()[&changed],
        p.mem_stats.global_variables[&changed]
    );
}

/// A store of version 2 kept each process's variables in its `memStats`
/// section: they read back from there.
#[test]
fn a_version_2_stores_variables_read_back() {
    let p = malt_sample();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.sqlite");
    let mut w = Writer::create(&path).unwrap();
    w.add_process(&p, ProcessMeta::default()).unwrap();
    w.finish().unwrap();
    // Made into version 2's layout: the whole memStats in its section.
    let pid = p.heapledger.as_ref().map_or(0, |e| e.pid);
    let c = rusqlite::Connection::open(&path).unwrap();
    let json = serde_json::to_vec(&p.mem_stats).unwrap();
    let blob = zstd::bulk::compress(&json, 3).unwrap();
    c.execute_batch(
        "UPDATE meta SET value = '2' WHERE key = 'version';
         DELETE FROM variables; DELETE FROM section WHERE name = 'variablesOf';",
    )
    .unwrap();
    c.execute(
        "UPDATE section SET data = ?1 WHERE pid = ?2 AND name = 'memStats'",
        rusqlite::params![blob, pid],
    )
    .unwrap();
    drop(c);
    let s = Store::open(&path).unwrap();
    let (head, _) = s.head(pid).unwrap();
    assert!(head.mem_stats.global_variables.is_empty());
    assert_eq!(head.mem_stats.size_map, p.mem_stats.size_map);
    assert_eq!(s.globals(pid).unwrap(), p.mem_stats.global_variables);
    assert_eq!(canonical(s.profile(pid).unwrap()), canonical(p));
}

/// Rows of variables made ahead (`encode_variables`, `add_variables`) are
/// the ones the processes holding those lists take.
#[test]
fn variables_written_ahead_are_the_processes_rows() {
    let p = malt_sample();
    let pid = p.heapledger.as_ref().map_or(0, |e| e.pid);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.sqlite");
    let mut w = Writer::create(&path).unwrap();
    for (binary, vars) in &p.mem_stats.global_variables {
        let row = heapledger_store::encode_variables(binary, vars).unwrap();
        w.add_variables(binary, vars, &row).unwrap();
    }
    w.add_process(&p, ProcessMeta::default()).unwrap();
    w.finish().unwrap();
    let c = rusqlite::Connection::open(&path).unwrap();
    let rows: usize = c
        .query_row("SELECT count(*) FROM variables", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, p.mem_stats.global_variables.len());
    drop(c);
    let s = Store::open(&path).unwrap();
    assert_eq!(s.globals(pid).unwrap(), p.mem_stats.global_variables);
}
