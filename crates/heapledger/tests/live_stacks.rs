//! `heapledger run` reads the recorder's stack table while the program runs
//! (`heapledger::live`), to symbolize early. These tests drive a program step by
//! step and check what the reader sees at each step: exactly the stacks
//! published so far, each address once, symbolizing to the right lines.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use heapledger::live::LiveStacks;
use heapledger_symbols::{MappedModule, Symbols};
use support::*;

fn line_of(src: &str, marker: &str) -> u32 {
    let text = std::fs::read_to_string(programs_dir().join(src)).unwrap();
    text.lines().position(|l| l.contains(marker)).unwrap() as u32 + 1
}

/// (function, line) of the innermost frame of each address.
fn sites(maps: &str, addrs: &[u64]) -> Vec<(String, Option<u32>)> {
    let modules: Vec<MappedModule> = heapledger::maps::parse(maps)
        .filter(|m| m.executable() && m.path.starts_with('/'))
        .map(|m| MappedModule {
            path: m.path.into(),
            start: m.start,
            end: m.end,
            file_offset: m.offset,
            build_id: None,
        })
        .collect();
    heapledger_symbols::symbolize(&modules, addrs)
        .into_iter()
        .flatten()
        .map(|r| {
            let f = &r.frames[0];
            (f.function.clone().unwrap_or_default(), f.line)
        })
        .collect()
}

#[test]
fn reads_the_stacks_published_so_far_while_the_program_runs() {
    let dir = TempDir::new("live");
    let exe = compile("live_steps.c", dir.path(), &[]);
    let preload = heapledger::preload::find_preload().unwrap();
    let dumps = dir.join("dumps");
    std::fs::create_dir(&dumps).unwrap();
    let mut child = Command::new(&exe)
        .env("LD_PRELOAD", &preload)
        .env(heapledger_wire::ENV_DIR, &dumps)
        .env(heapledger_wire::ENV_OPTS, "stack=dwarf")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut to_child = child.stdin.take().unwrap();
    let mut from_child = BufReader::new(child.stdout.take().unwrap());
    let mut wait_for = |step: &str| {
        let mut line = String::new();
        from_child.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), step);
    };
    let symbol = Symbols::symbol_address(&preload, heapledger_wire::REGISTRY_SYMBOL)
        .expect("the recorder exports its stack registry");
    let name = heapledger::preload::PRELOAD_NAME;
    let maps = || std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let first = (
        "first_site".to_owned(),
        Some(line_of("live_steps.c", "FIRST_LINE")),
    );
    let second = (
        "second_site".to_owned(),
        Some(line_of("live_steps.c", "SECOND_LINE")),
    );

    wait_for("step1");
    let m = maps();
    let Some(mut reader) = LiveStacks::locate(pid, &m, name, symbol) else {
        // Only a machine that forbids reading a child's memory (some
        // container profiles) may get here; `heapledger run` then symbolizes
        // after exit, which every other test covers.
        let denied = std::fs::File::open(format!("/proc/{pid}/mem")).is_err();
        writeln!(to_child, "go").unwrap();
        writeln!(to_child, "go").unwrap();
        let _ = child.wait();
        assert!(
            denied,
            "registry not found, though the child's memory is readable"
        );
        eprintln!("skipped: this machine forbids reading a child's memory");
        return;
    };
    assert!(reader.same_image(&m, name));
    let step1 = reader.new_addresses().expect("table readable");
    let at1 = sites(&m, &step1);
    assert!(at1.contains(&first), "first_site not among {at1:?}");
    assert!(
        !at1.contains(&second),
        "second_site read before it ran: {at1:?}"
    );
    let mut distinct = step1.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), step1.len(), "an address handed out twice");

    writeln!(to_child, "go").unwrap();
    wait_for("step2");
    let step2 = reader.new_addresses().expect("table readable");
    let at2 = sites(&maps(), &step2);
    assert!(at2.contains(&second), "second_site not among {at2:?}");
    assert!(
        step2.iter().all(|a| !step1.contains(a)),
        "addresses of step 1 handed out again"
    );
    assert_eq!(reader.new_addresses(), Some(Vec::new()), "nothing new");

    writeln!(to_child, "go").unwrap();
    assert!(child.wait().unwrap().success());
    // The process is gone: reading fails, it does not panic.
    assert_eq!(reader.new_addresses(), None);
}

#[test]
fn no_registry_without_the_recorder() {
    // This test process has no recorder mapped.
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let symbol = Symbols::symbol_address(
        &heapledger::preload::find_preload().unwrap(),
        heapledger_wire::REGISTRY_SYMBOL,
    )
    .unwrap();
    assert!(LiveStacks::locate(
        std::process::id(),
        &maps,
        heapledger::preload::PRELOAD_NAME,
        symbol
    )
    .is_none());
    // Nor from a file that has no such symbol.
    assert_eq!(
        Symbols::symbol_address(Path::new("/bin/true"), heapledger_wire::REGISTRY_SYMBOL),
        None
    );
}

#[test]
fn without_reading_the_program_the_profile_is_the_same() {
    // Where the stacks cannot be read while the program runs (HEAPLEDGER_LIVE=0
    // stands for a machine that forbids it), binaries are parsed ahead and
    // everything is symbolized after exit: the same stacks and sites.
    let dir = TempDir::new("live-off");
    let exe = compile("exit_live.c", dir.path(), &[]);
    let stacks = |live: &str| -> Vec<String> {
        let out = dir.join(format!("p-{live}.json"));
        let o = Cmd::new(&exe)
            .env("HEAPLEDGER_LIVE", live)
            .run_heapledger(&out, &[]);
        assert_eq!(o.shell_code(), 7, "{}", o.stderr);
        let p = load_profile(&out);
        let mut v: Vec<String> = p
            .stacks
            .iter()
            .map(|s| {
                let site = p
                    .resolve_addr(s.stack[0])
                    .map(|x| format!("{}:{}", x.file, x.line.unwrap_or(0)))
                    .unwrap_or_default();
                format!("{} @ {site}", describe_stack(&p, &s.stack))
            })
            .collect();
        v.sort();
        v
    };
    let live = stacks("1");
    let after = stacks("0");
    assert!(
        live.iter().any(|s| s.contains("make_live_blocks")),
        "{live:#?}"
    );
    assert_eq!(live, after);
}
