//! Code a JIT compiled is named from the perf map its runtime wrote
//! (`/tmp/perf-PID.map`: node `--perf-basic-prof`, python `-X perf`,
//! Java's perf-map-agent): `programs/jit_perfmap.c` calls through a stub in
//! anonymous memory that its map names as V8 would, and node itself where
//! it is installed.

mod common;
mod support;

use common::*;

/// Removes the perf map a run left (`/tmp/perf-PID.map`), PID the first
/// line of the program's output.
struct MapOf(String);

impl Drop for MapOf {
    fn drop(&mut self) {
        if let Ok(pid) = self.0.trim().parse::<u32>() {
            let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
        }
    }
}

/// Runs `command` under heapledger in `dir` (V8 writes its log,
/// `isolate-*-v8.log`, where it runs), which must succeed and print its
/// pid first; returns the profile, read through the MALT export, and what
/// removes the perf map it left.
fn run_in(dir: &Scratch, command: &[&std::ffi::OsStr]) -> (heapledger_profile::Profile, MapOf) {
    run_with(dir, &[], command)
}

/// `run_in` with options for `heapledger run`.
fn run_with(
    dir: &Scratch,
    options: &[&str],
    command: &[&std::ffi::OsStr],
) -> (heapledger_profile::Profile, MapOf) {
    let out = dir.join("p.sqlite");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["run", "-q", "-o"])
        .arg(&out)
        .args(options)
        .arg("--")
        .args(command)
        .current_dir(dir.join("."))
        .output()
        .unwrap();
    let map = MapOf(String::from_utf8_lossy(&o.stdout).into_owned());
    assert!(o.status.success(), "{o:?}");
    let json = dir.join("p.json");
    export_malt(&out, None, &json);
    (read_profile(&json), map)
}

/// `jit_perfmap` (the C program with a one-stub JIT) built and recorded
/// in a fresh scratch directory, with its arguments: the directory (the
/// store is `p.sqlite` there), the profile, and what removes its map.
fn jit_stub(tag: &str, args: &[&str]) -> (Scratch, heapledger_profile::Profile, MapOf) {
    let dir = Scratch::new(tag);
    let exe = dir.join("jit_perfmap");
    compile("cc", &["jit_perfmap.c"], SITE_FLAGS, &exe);
    let (p, stdout) = profile_of("dwarf", &dir, &exe, args);
    (dir, p, MapOf(stdout))
}

/// `heapledger ARGS`, its output.
fn heapledger<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn a_jit_frame_is_named_from_the_perf_map() {
    let (dir, p, _map) = jit_stub("jit", &["25"]);
    let alloc = site_line("jit_perfmap.c", "jit_alloc");
    let call = site_line("jit_perfmap.c", "jit_call");
    let stacks = stacks_at(&p, "alloc_from_jit", alloc);
    assert_eq!(stacks.len(), 1, "{stacks:?}");
    assert_eq!(stacks[0].infos.alloc.count, 25);
    let frames: Vec<(String, Option<u32>)> =
        stacks[0].stack.iter().map(|&a| frame(&p, a)).collect();
    let at = frames
        .iter()
        .position(|(f, _)| is_fn(f, "alloc_from_jit"))
        .expect("no alloc_from_jit frame");
    assert_eq!(
        frames[at + 1],
        ("renderRows".to_owned(), Some(27)),
        "{}",
        describe(&p, &stacks[0].stack)
    );
    assert!(
        is_fn(&frames[at + 2].0, "main") && frames[at + 2].1 == Some(call),
        "{}",
        describe(&p, &stacks[0].stack)
    );
    // The summary's table of JIT functions: each stack's innermost JIT
    // frame, here the stub's 25 calls of 48 bytes; no other.
    let report = heapledger(&["report".as_ref(), dir.join("p.sqlite").as_os_str()]);
    let text = String::from_utf8_lossy(&report.stdout);
    let table: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("Top Python and JIT functions by bytes"))
        .skip(2)
        .take_while(|l| !l.is_empty())
        .collect();
    assert_eq!(table.len(), 1, "{text}");
    assert!(
        table[0]
            .trim_start()
            .starts_with("1.2 KiB (1200 B)     25 "),
        "{}",
        table[0]
    );
    assert!(
        table[0].ends_with("renderRows  /srv/app/view.js:27  ([jit])"),
        "{}",
        table[0]
    );
}

/// A JIT function named like C++ (`<module>`, as CPython names a module's
/// code) keeps its name in `go tool pprof`: pprof takes a name with
/// `<...>` whose system name is the same for a demangled C++ name, and
/// strips it to nothing (`<unknown>`); the export gives JIT functions a
/// system name of their own.
#[test]
fn go_tool_pprof_keeps_a_python_module_frame_s_name() {
    support::require_tool("go", "golang-go");
    let (dir, p, _map) = jit_stub("jit-pprof", &["25", "python"]);
    let names: Vec<String> = p
        .stacks
        .iter()
        .flat_map(|s| s.stack.iter().map(|&a| p.frame_name(a).into_owned()))
        .collect();
    assert!(names.iter().any(|n| n == "<module>"), "{names:?}");
    let pb = dir.join("p.pb.gz");
    let o = heapledger(&[
        "export".as_ref(),
        dir.join("p.sqlite").as_os_str(),
        "--format".as_ref(),
        "pprof".as_ref(),
        "-o".as_ref(),
        pb.as_os_str(),
    ]);
    assert!(o.status.success(), "{o:?}");
    let o = std::process::Command::new("go")
        .args(["tool", "pprof", "-traces"])
        .arg(&pb)
        .env("PPROF_TMPDIR", dir.join("."))
        .output()
        .unwrap();
    let traces = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{o:?}");
    let trace = traces
        .split("-----------+")
        .find(|t| t.contains("alloc_from_jit"))
        .unwrap_or_else(|| panic!("{traces}"));
    let lines: Vec<&str> = trace.lines().map(str::trim).collect();
    let at = lines
        .iter()
        .position(|l| l.ends_with("alloc_from_jit"))
        .unwrap();
    assert_eq!(lines[at + 1], "<module>", "{trace}");
}

/// `--jit-only`: each stack as its JIT frames and the function that
/// allocated, the rest left out (as memray shows Python stacks); only
/// where the output is a tree of stacks.
#[test]
fn jit_only_keeps_the_jit_frames_and_the_allocating_function() {
    let (dir, _, _map) = jit_stub("jit-only", &["25", "python"]);
    let store = dir.join("p.sqlite");
    let store_s = store.to_str().unwrap();
    let o = heapledger(&[
        "export",
        store_s,
        "--format",
        "folded",
        "--metric",
        "count",
        "--jit-only",
        "-o",
        "-",
    ]);
    assert!(o.status.success(), "{o:?}");
    // A profile with JIT frames: no note that it has none.
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("no Python or JIT"),
        "{o:?}"
    );
    let folded = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = folded.lines().collect();
    // The stub's stacks: main and the loader's frames left out.
    assert!(lines.contains(&"<module>;alloc_from_jit 25"), "{folded}");
    // Every allocation is still there, and no other stack has a frame in
    // `main` (native frames other than the allocating one are left out).
    let total = |text: &str| -> u64 {
        text.lines()
            .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
            .sum()
    };
    let o = heapledger(&[
        "export", store_s, "--format", "folded", "--metric", "count", "-o", "-",
    ]);
    let whole = String::from_utf8_lossy(&o.stdout);
    assert_eq!(total(&folded), total(&whole));
    assert!(whole.lines().any(|l| l.contains("main;")), "{whole}");
    assert!(!folded.lines().any(|l| l.contains("main;")), "{folded}");
    // A profile without JIT frames says so.
    let (native, _, _map) = jit_stub("jit-only-native", &["25", "nomap"]);
    let o = heapledger(&[
        "tree".as_ref(),
        native.join("p.sqlite").as_os_str(),
        "--jit-only".as_ref(),
    ]);
    assert!(o.status.success(), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .starts_with("heapledger: no Python or JIT function in this profile"),
        "{o:?}"
    );
    let o = heapledger(&["export", store_s, "--format", "malt", "--jit-only"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr).trim(),
        "error: --jit-only applies to --format folded, flamegraph and speedscope, not malt"
    );
}

/// Without a perf map, the stub's frame is in no binary and has no name:
/// it is named by its address, and the MALT export still gives it an
/// entry in `sites.instr`, which MALT's reader looks every frame up in
/// (it crashed on a Node program's export before).
#[test]
fn a_frame_in_no_binary_has_a_site_in_the_malt_export() {
    let (dir, p, _map) = jit_stub("jit-nomap", &["25", "nomap"]);
    let alloc = site_line("jit_perfmap.c", "jit_alloc");
    let stacks = stacks_at(&p, "alloc_from_jit", alloc);
    assert_eq!(stacks.len(), 1, "{stacks:?}");
    let frames: Vec<(String, Option<u32>)> =
        stacks[0].stack.iter().map(|&a| frame(&p, a)).collect();
    let at = frames
        .iter()
        .position(|(f, _)| is_fn(f, "alloc_from_jit"))
        .expect("no alloc_from_jit frame");
    let stub = stacks[0].stack[at + 1];
    assert_eq!(frames[at + 1].0, format!("{stub} (??)"));
    // The export `profile_of` read: every frame of every stack, thread and
    // leak has its entry.
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("p.json")).unwrap()).unwrap();
    let instr = json["sites"]["instr"].as_object().unwrap();
    let frames_of = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_owned())
            .collect()
    };
    let mut all: Vec<String> = Vec::new();
    for s in json["stacks"]["stats"].as_array().unwrap() {
        all.extend(frames_of(&s["stack"]));
    }
    for t in json["threads"].as_array().unwrap() {
        all.extend(frames_of(&t["stackMem"]["stack"]));
    }
    for l in json["leaks"].as_array().unwrap() {
        all.extend(frames_of(&l["stack"]));
    }
    let missing: Vec<&String> = all.iter().filter(|a| !instr.contains_key(*a)).collect();
    assert!(missing.is_empty(), "frames without a site: {missing:?}");
    assert!(instr.contains_key(&stub.to_string()));
}

/// Node with `--perf-basic-prof --interpreted-frames-native-stack`: the
/// JavaScript functions that asked for a Buffer's memory, with their file
/// and line. Skipped where node is not installed.
#[test]
fn node_functions_are_named() {
    if std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("node_functions_are_named skipped: no node");
        return;
    }
    let dir = Scratch::new("jit-node");
    let script = dir.join("buffers.js");
    std::fs::write(
        &script,
        "function makeBuffers(n) {\n\
         \x20 const a = [];\n\
         \x20 for (let i = 0; i < n; i++) a.push(Buffer.allocUnsafeSlow(100000 + i));\n\
         \x20 return a.length;\n\
         }\n\
         let t = 0;\n\
         for (let k = 0; k < 20; k++) t += makeBuffers(50);\n\
         console.log(process.pid);\n",
    )
    .unwrap();
    let (p, _map) = run_in(
        &dir,
        &[
            "node".as_ref(),
            "--perf-basic-prof".as_ref(),
            "--interpreted-frames-native-stack".as_ref(),
            script.as_os_str(),
        ],
    );
    // The 1 000 Buffers (100 000 to 100 049 bytes: nothing else node
    // allocates is that size), each under the function that made them, at
    // the line it is defined on. Found by size, not by node's own
    // functions, which a build without symbols leaves unnamed.
    let has = |s: &heapledger_profile::StackStat, what: &dyn Fn(&str, Option<u32>) -> bool| {
        s.stack.iter().any(|&a| {
            let (f, line) = frame(&p, a);
            what(&f, line)
        })
    };
    let buffers: Vec<_> = p
        .stacks
        .iter()
        .filter(|s| s.infos.alloc.min >= 100_000 && s.infos.alloc.max < 100_050)
        .collect();
    assert_eq!(
        buffers.iter().map(|s| s.infos.alloc.count).sum::<u64>(),
        1000
    );
    let under: u64 = buffers
        .iter()
        .filter(|s| has(s, &|f, line| f.ends_with("makeBuffers") && line == Some(1)))
        .map(|s| s.infos.alloc.count)
        .sum();
    assert_eq!(
        under,
        1000,
        "{}",
        buffers
            .iter()
            .map(|s| describe(&p, &s.stack))
            .collect::<Vec<_>>()
            .join("\n\n")
    );
}

/// A Python of 3.12 or later, where one is found: on `PATH`
/// (`python3.13`, `python3.12`, `python3`) or under pyenv.
fn python_with_perf_trampolines() -> Option<std::path::PathBuf> {
    let mut candidates: Vec<std::path::PathBuf> =
        ["python3.14", "python3.13", "python3.12", "python3"]
            .iter()
            .map(std::path::PathBuf::from)
            .collect();
    if let Some(home) = std::env::var_os("HOME") {
        let versions = std::path::Path::new(&home).join(".pyenv/versions");
        if let Ok(dir) = std::fs::read_dir(versions) {
            let mut found: Vec<_> = dir
                .flatten()
                .map(|e| e.path().join("bin/python3"))
                .collect();
            found.sort();
            candidates.extend(found.into_iter().rev());
        }
    }
    candidates.into_iter().find(|py| {
        std::process::Command::new(py)
            .args(["-c", "import sys; sys.exit(0 if sys.version_info >= (3, 12) and sys.platform == 'linux' else 1)"])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// The Python functions of each stack that allocated through `make_rows`
/// in a script run by `python` (3.12 or later) under `heapledger run
/// OPTIONS -- python PYTHON_ARGS script`, innermost first; and the
/// script's pid.
fn python_chains(
    python: &std::path::Path,
    options: &[&str],
    python_args: &[&str],
) -> (Vec<Vec<String>>, u32, serde_json::Value) {
    let dir = Scratch::new("jit-python");
    let script = dir.join("rows.py");
    std::fs::write(
        &script,
        "import os\n\
         print(os.getpid())\n\
         def make_rows(n):\n\
         \x20   return [str(i) * 3 for i in range(n)]\n\
         def outer():\n\
         \x20   return sum(len(make_rows(2000)) for _ in range(20))\n\
         outer()\n",
    )
    .unwrap();
    let mut command: Vec<&std::ffi::OsStr> = vec![python.as_os_str()];
    command.extend(python_args.iter().map(std::ffi::OsStr::new));
    command.push(script.as_os_str());
    let (p, map) = run_with(&dir, options, &command);
    let pid = map.0.trim().parse().expect("the script's pid");
    let script_path = script.to_string_lossy().into_owned();
    let chains = p
        .stacks
        .iter()
        .filter(|s| s.infos.alloc.count > 0)
        .map(|s| {
            s.stack
                .iter()
                .filter_map(|&a| {
                    let site = p.resolve_addr(a)?;
                    (site.file == script_path).then(|| site.function.to_owned())
                })
                .collect::<Vec<String>>()
        })
        .filter(|c| c.first().is_some_and(|f| f == "make_rows"))
        .collect();
    let report = heapledger(&[
        "report".as_ref(),
        "--json".as_ref(),
        dir.join("p.sqlite").as_os_str(),
    ]);
    assert!(report.status.success(), "{report:?}");
    (chains, pid, serde_json::from_slice(&report.stdout).unwrap())
}

/// Each chain reads `make_rows`, the generator, `outer`, the module.
fn assert_whole_chains(chains: &[Vec<String>]) {
    assert!(!chains.is_empty(), "no stack through make_rows");
    // (The generator's name is qualified, `outer.<locals>.<genexpr>`.)
    for c in chains {
        assert!(
            c.len() == 4
                && c[0] == "make_rows"
                && c[1].ends_with("<genexpr>")
                && c[2] == "outer"
                && c[3] == "<module>",
            "{chains:?}"
        );
    }
}

/// CPython 3.12 and later under `-X perf`: each Python function runs
/// through a trampoline of its own, which keeps no frame pointer and has
/// no unwind information. The recorder knows its code, so that a stack
/// goes on through every Python function: `make_rows` under `outer` under
/// the module, each with its file (before, stacks ended at the innermost
/// Python function). Skipped where no such Python is found.
#[test]
fn python_functions_under_x_perf() {
    let Some(python) = python_with_perf_trampolines() else {
        eprintln!("python_functions_under_x_perf skipped: no Python 3.12 or later");
        return;
    };
    let (chains, _, _) = python_chains(&python, &[], &["-X", "perf"]);
    assert_whole_chains(&chains);
}

/// The same without `-X perf`: `heapledger run` gives the program
/// PYTHONPERFSUPPORT=1, and removes the perf map CPython wrote once it
/// has read it; `--no-python-frames` leaves it out (stacks end in the
/// interpreter's C functions, none of them in the script).
#[test]
fn python_functions_by_default_and_not_with_no_python_frames() {
    let Some(python) = python_with_perf_trampolines() else {
        eprintln!("python_functions_by_default skipped: no Python 3.12 or later");
        return;
    };
    let (chains, pid, j) = python_chains(&python, &[], &[]);
    assert_whole_chains(&chains);
    // The summary names the script's function that allocated most.
    let top = &j["top_jit_functions_by_bytes"][0];
    assert_eq!(top["function"], "make_rows", "{j}");
    assert!(
        top["location"].as_str().unwrap().ends_with("rows.py"),
        "{top}"
    );
    let map = format!("/tmp/perf-{pid}.map");
    assert!(
        !std::path::Path::new(&map).exists(),
        "{map} was left behind"
    );
    let (chains, pid, j) = python_chains(&python, &["--no-python-frames"], &[]);
    assert!(chains.is_empty(), "{chains:?}");
    assert_eq!(
        j["top_jit_functions_by_bytes"],
        serde_json::json!([]),
        "{j}"
    );
    assert!(!std::path::Path::new(&format!("/tmp/perf-{pid}.map")).exists());
    // Nor with --no-follow, whose unrecorded children would leave maps, nor
    // where no DWARF unwinding would step through the trampolines.
    for options in [
        &["--no-follow"][..],
        &["--stack", "fp"],
        &["--stack", "none"],
    ] {
        let (chains, pid, _) = python_chains(&python, options, &[]);
        assert!(chains.is_empty(), "{options:?}: {chains:?}");
        assert!(!std::path::Path::new(&format!("/tmp/perf-{pid}.map")).exists());
    }
}
