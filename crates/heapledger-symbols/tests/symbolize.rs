//! End-to-end tests: C and C++ programs are compiled and run at test time;
//! they print return addresses from known call sites (with `__LINE__`) and
//! their executable mappings, and the addresses are symbolized after the
//! process has exited, as heapledger does.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use blazesym::helper::read_elf_build_id;
use common::*;
use heapledger_symbols::{symbolize, Frame, MappedModule, Resolved};

fn function_only(name: &str) -> Frame {
    Frame {
        function: Some(name.to_owned()),
        file: None,
        line: None,
    }
}

fn unknown(binary: &Path) -> Resolved {
    Resolved {
        binary: binary.to_owned(),
        frames: vec![Frame::default()],
    }
}

/// Builds and runs `prog.c` with `flags`, returns (program, report).
fn build_and_run_c(name: &str, flags: &[&str]) -> (PathBuf, Report) {
    let dir = scratch_dir(name);
    let program = compile("cc", &["prog.c", "probe.c"], flags, &dir, "prog");
    let report = run_program(&program, &[]);
    (program.canonicalize().unwrap(), report)
}

/// Checks the `plain` and `inlined` call sites of `prog.c`, built with `-g`.
fn check_c_with_debug_info(name: &str, flags: &[&str]) {
    let (program, report) = build_and_run_c(name, flags);
    let plain = &report.return_addresses["plain"];
    let inlined = &report.return_addresses["inlined"];

    let resolved = symbolize(&report.modules, &[plain.addr, inlined.addr]);
    let [Some(plain_resolved), Some(inlined_resolved)] = &resolved[..] else {
        panic!("unresolved: {resolved:?}");
    };

    assert_eq!(plain_resolved.binary, program);
    assert_frames(&plain_resolved.frames, &["plain"], "prog.c", &plain.lines);

    // The always_inline callees are innermost, each at its own line, then the
    // function they were inlined into, at the line of the (inlined) call.
    assert_eq!(inlined_resolved.binary, program);
    assert_frames(
        &inlined_resolved.frames,
        &["inner", "middle", "with_inline"],
        "prog.c",
        &inlined.lines,
    );
}

#[test]
fn c_with_debug_info_optimized() {
    check_c_with_debug_info("c_o2", &["-g", "-O2"]);
}

#[test]
fn c_with_debug_info_unoptimized() {
    check_c_with_debug_info("c_o0", &["-g", "-O0"]);
}

#[test]
fn c_with_frame_pointers() {
    check_c_with_debug_info("c_fp", &["-g", "-O2", "-fno-omit-frame-pointer"]);
}

#[test]
fn c_without_debug_info_uses_the_symbol_table() {
    let (program, report) = build_and_run_c("c_nodebug", &["-O2"]);
    let plain = &report.return_addresses["plain"];
    let inlined = &report.return_addresses["inlined"];

    let resolved = symbolize(&report.modules, &[plain.addr, inlined.addr]);
    let expected = |function| {
        Some(Resolved {
            binary: program.clone(),
            frames: vec![function_only(function)],
        })
    };
    // Without DWARF the inlined functions are invisible.
    assert_eq!(resolved, [expected("plain"), expected("with_inline")]);
}

#[test]
fn cpp_names_are_demangled() {
    let dir = scratch_dir("cpp");
    for (flags, with_debug) in [(&["-g", "-O2"][..], true), (&["-O2"][..], false)] {
        let program = compile("c++", &["prog.cpp", "probe.c"], flags, &dir, "prog");
        let report = run_program(&program, &[]);
        let method = &report.return_addresses["method"];
        let resolved = resolve_one(&report.modules, method.addr);
        let name = "ns::Klass::method(int)";
        if with_debug {
            assert_frames(&resolved.frames, &[name], "prog.cpp", &method.lines);
        } else {
            assert_eq!(resolved.frames, [function_only(name)]);
        }
    }
}

#[test]
fn rust_names_are_demangled() {
    let dir = scratch_dir("rust");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    for (flags, with_debug) in [(&["-g", "-O"][..], true), (&["-O"][..], false)] {
        let program = dir.join("prog");
        run(Command::new(&rustc)
            .args(flags)
            .arg("-o")
            .arg(&program)
            .arg(programs_dir().join("prog.rs")));
        let report = run_program(&program, &[]);
        let resolved = resolve_one(&report.modules, report.symbols["area"]);
        assert_eq!(resolved.frames.len(), 1, "{resolved:?}");
        let frame = &resolved.frames[0];
        // Demangled, without the legacy-mangling hash suffix.
        assert_eq!(
            frame.function.as_deref(),
            Some("prog::shapes::Circle::area"),
            "{frame:?}"
        );
        if with_debug {
            assert_eq!(basename(frame), Some("prog.rs"), "{frame:?}");
            assert!(frame.line.is_some(), "{frame:?}");
        }
    }
}

/// The build id of the system's libc, if a separate debug file for it is
/// installed under /usr/lib/debug.
fn libc_has_system_debug_info(libc: &Path) -> bool {
    let Ok(Some(id)) = read_elf_build_id(libc) else {
        return false;
    };
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    Path::new("/usr/lib/debug/.build-id")
        .join(&hex[..2])
        .join(format!("{}.debug", &hex[2..]))
        .exists()
}

#[test]
fn shared_libraries() {
    let dir = scratch_dir("shared");
    let lib = compile(
        "cc",
        &["lib.c"],
        &["-g", "-O2", "-shared", "-fPIC"],
        &dir,
        "libtest.so",
    );
    let program = compile("cc", &["prog.c", "probe.c"], &["-g", "-O2"], &dir, "prog");
    let report = run_program(&program, &[&lib]);
    let lib_ra = &report.return_addresses["lib"];

    // A function in a test library.
    let resolved = resolve_one(&report.modules, lib_ra.addr);
    assert_eq!(resolved.binary, lib.canonicalize().unwrap());
    assert_frames(&resolved.frames, &["lib_function"], "lib.c", &lib_ra.lines);

    // libc's malloc (`__libc_malloc` in its debug info, `malloc` in .dynsym).
    let resolved = resolve_one(&report.modules, report.symbols["malloc"]);
    assert!(
        resolved.binary.to_string_lossy().contains("libc.so"),
        "{resolved:?}"
    );
    let frame = resolved.frames.last().unwrap();
    assert!(
        frame.function.as_deref().unwrap().contains("malloc"),
        "{resolved:?}"
    );
    if libc_has_system_debug_info(&resolved.binary) {
        // Found through .gnu_debuglink + /usr/lib/debug/.build-id.
        assert_eq!(basename(frame), Some("malloc.c"), "{resolved:?}");
        assert!(frame.line.is_some(), "{resolved:?}");
    } else {
        eprintln!("no system debug info for libc; skipping its line check");
    }
}

/// A separate debug file named by `.gnu_debuglink`, beside the binary or
/// in its `.debug` subdirectory.
#[test]
fn separate_debug_info_via_debuglink() {
    let dir = scratch_dir("split");
    let program = compile("cc", &["prog.c", "probe.c"], &["-g", "-O2"], &dir, "prog");
    let debug = dir.join("prog.debug");
    run(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&program)
        .arg(&debug));
    run(Command::new("strip").arg("--strip-debug").arg(&program));
    run(Command::new("objcopy")
        .arg(format!("--add-gnu-debuglink={}", debug.display()))
        .arg(&program));

    let report = run_program(&program, &[]);
    let inlined = &report.return_addresses["inlined"];

    // The debug file next to the binary is found through .gnu_debuglink.
    let resolved = resolve_one(&report.modules, inlined.addr);
    assert_frames(
        &resolved.frames,
        &["inner", "middle", "with_inline"],
        "prog.c",
        &inlined.lines,
    );

    // So is one in the `.debug` subdirectory, as GDB finds it (Yocto's
    // layout); blazesym alone does not look there.
    let beside = dir.join(".debug");
    fs::create_dir(&beside).unwrap();
    fs::rename(&debug, beside.join("prog.debug")).unwrap();
    let resolved = resolve_one(&report.modules, inlined.addr);
    assert_frames(
        &resolved.frames,
        &["inner", "middle", "with_inline"],
        "prog.c",
        &inlined.lines,
    );

    // Without it, the symbol table left by `strip --strip-debug` still
    // names the function.
    fs::remove_dir_all(&beside).unwrap();
    let resolved = resolve_one(&report.modules, inlined.addr);
    assert_eq!(resolved.frames, [function_only("with_inline")]);

    // Fully stripped: nothing names it, but the binary is still reported.
    run(Command::new("strip").arg("--strip-all").arg(&program));
    let resolved = resolve_one(&report.modules, inlined.addr);
    assert_eq!(resolved, unknown(&program.canonicalize().unwrap()));
}

#[test]
fn build_id_must_match() {
    let (program, report) = build_and_run_c("build_id", &["-g", "-O2"]);
    let plain = &report.return_addresses["plain"];
    let build_id = read_elf_build_id(&program)
        .unwrap()
        .expect("the toolchain emits build ids")
        .into_owned();
    let with_build_id = |build_id: Vec<u8>| -> Vec<MappedModule> {
        report
            .modules
            .iter()
            .map(|m| MappedModule {
                build_id: (m.path == program).then(|| build_id.clone()),
                ..m.clone()
            })
            .collect()
    };

    let resolved = resolve_one(&with_build_id(build_id.clone()), plain.addr);
    assert_frames(&resolved.frames, &["plain"], "prog.c", &plain.lines);

    let mut other_id = build_id;
    other_id[0] ^= 0xff;
    let resolved = resolve_one(&with_build_id(other_id), plain.addr);
    assert_eq!(resolved, unknown(&program));
}

#[test]
fn unusable_binaries_yield_unknown_functions() {
    let dir = scratch_dir("unusable");
    let not_elf = dir.join("not-elf.so");
    fs::write(&not_elf, "this is not an ELF file\n".repeat(1000)).unwrap();
    let empty = dir.join("empty.so");
    fs::write(&empty, "").unwrap();
    let missing = dir.join("missing.so");
    let module = |path: &Path, start: u64| MappedModule {
        path: path.to_owned(),
        start,
        end: start + 0x1000,
        file_offset: 0,
        build_id: None,
    };
    let modules = [
        module(&not_elf, 0x10000),
        module(&empty, 0x20000),
        module(&missing, 0x30000),
    ];
    let resolved = symbolize(&modules, &[0x10010, 0x20010, 0x30010, 0x30fff]);
    assert_eq!(
        resolved,
        [
            Some(unknown(&not_elf)),
            Some(unknown(&empty)),
            Some(unknown(&missing)),
            Some(unknown(&missing)),
        ]
    );
}

#[test]
fn deleted_binary_needs_a_build_id() {
    let (program, report) = build_and_run_c("deleted", &["-g", "-O2"]);
    let plain = &report.return_addresses["plain"];
    let build_id = read_elf_build_id(&program)
        .unwrap()
        .map(|id| id.into_owned());
    let deleted = PathBuf::from(format!("{} (deleted)", program.display()));
    let mut modules = report.modules.clone();
    let module = modules.iter_mut().find(|m| m.path == program).unwrap();
    module.path = deleted.clone();

    // Unverifiable: whatever is at the path now may be another binary.
    assert_eq!(resolve_one(&modules, plain.addr), unknown(&deleted));

    // Same build id: it is the same binary after all.
    modules
        .iter_mut()
        .find(|m| m.path == deleted)
        .unwrap()
        .build_id = build_id;
    let resolved = resolve_one(&modules, plain.addr);
    assert_eq!(resolved.binary, deleted);
    assert_frames(&resolved.frames, &["plain"], "prog.c", &plain.lines);
}

#[test]
fn unknown_addresses_and_empty_input() {
    assert!(symbolize(&[], &[]).is_empty());
    assert_eq!(symbolize(&[], &[0x1234]), [None]);

    let module = MappedModule {
        path: "/nonexistent/lib.so".into(),
        start: 0x1000,
        end: 0x2000,
        file_offset: 0,
        build_id: None,
    };
    let modules = [module.clone()];
    assert!(symbolize(&modules, &[]).is_empty());
    // `end` is exclusive.
    assert_eq!(
        symbolize(&modules, &[0, 0xfff, 0x2000, u64::MAX]),
        [const { None }; 4]
    );
}

#[test]
fn batches_keep_the_input_order() {
    let (_, report) = build_and_run_c("order", &["-g", "-O2"]);
    let plain = report.return_addresses["plain"].addr;
    let inlined = report.return_addresses["inlined"].addr;
    let malloc = report.symbols["malloc"];
    let addrs = [inlined, 1, malloc, plain, inlined, malloc, plain];

    let batched = symbolize(&report.modules, &addrs);
    let one_by_one: Vec<_> = addrs
        .iter()
        .map(|&addr| symbolize(&report.modules, &[addr]).pop().unwrap())
        .collect();
    assert_eq!(batched, one_by_one);
    assert!(batched[1].is_none());
    assert_eq!(batched[0].as_ref().unwrap().frames.len(), 3);
}

/// Executable mappings of a live `python3` (or, without one, of this test).
fn python_or_own_modules() -> Vec<MappedModule> {
    let maps = Command::new("python3")
        .args(["-c", "print(open('/proc/self/maps').read())"])
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8(output.stdout).unwrap())
        .unwrap_or_else(|| fs::read_to_string("/proc/self/maps").unwrap());
    parse_maps(&maps)
}

#[test]
fn thousands_of_addresses_are_fast() {
    let modules = python_or_own_modules();
    const COUNT: u64 = 5000;
    // Spread addresses evenly over all the executable code.
    let total: u64 = modules.iter().map(|m| m.end - m.start).sum();
    let mut addrs = Vec::new();
    for module in &modules {
        let count = (module.end - module.start) * COUNT / total;
        let step = (module.end - module.start) / count.max(1);
        addrs.extend((0..count).map(|i| module.start + i * step));
    }

    let start = Instant::now();
    let resolved = symbolize(&modules, &addrs);
    let elapsed = start.elapsed();

    let named = resolved
        .iter()
        .flatten()
        .filter(|r| r.frames.last().unwrap().function.is_some())
        .count();
    let with_lines = resolved
        .iter()
        .flatten()
        .filter(|r| r.frames[0].line.is_some())
        .count();
    let binaries: Vec<_> = modules.iter().map(|m| m.path.display()).collect();
    eprintln!(
        "symbolized {} addresses ({named} named, {with_lines} with lines) in {elapsed:?} over {binaries:?}",
        addrs.len()
    );
    assert!(resolved.iter().all(Option::is_some));
    // How many get names depends on the symbols installed (a distribution's
    // stripped python3 only has .dynsym), so only check that some do.
    assert!(named > 0);
    // Generous bound: debug builds of blazesym are much slower than release.
    let limit = if cfg!(debug_assertions) { 30.0 } else { 2.0 };
    assert!(elapsed.as_secs_f64() < limit, "took {elapsed:?}");
}
