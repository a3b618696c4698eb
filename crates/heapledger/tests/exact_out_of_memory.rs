//! A program that runs out of address space on purpose
//! (`tests/programs/out_of_memory.c`: `RLIMIT_AS` at 256 MB, 16-byte
//! blocks until malloc fails, then 64 KiB blocks) and handles the failure
//! runs to its end under heapledger as alone, in every stack mode and with
//! sampling: the recorder degrades (it stops recording, gives its tables
//! back, and says so in the profile and the summary) instead of aborting.
//! Before, it died of SIGABRT ("memory allocation of N bytes failed")
//! and left no profile.

mod common;

use common::*;
use std::process::{Command, Output};

/// The recorder's own mappings (its library, its reserve for the profile,
/// its static tables) count against the limit: the program gets at most
/// this share fewer blocks than alone (docs/recorder.md gives the counts).
const FEWER_AT_MOST: f64 = 0.10;

/// (16-byte blocks, 64 KiB blocks) from the program's output.
fn counts(out: &Output) -> (u64, u64) {
    let text = String::from_utf8_lossy(&out.stdout);
    let value = |prefix: &str| -> u64 {
        let line = text
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no line {prefix:?} in {text:?}"));
        line[prefix.len()..].trim().parse().unwrap()
    };
    (value("16-byte blocks:"), value("64 KiB blocks:"))
}

fn run(args: &[&str], out: &std::path::Path, exe: &std::path::Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["run", "-q"])
        .args(args)
        .arg("-o")
        .arg(out)
        .arg("--")
        .arg(exe)
        .output()
        .expect("cannot run heapledger")
}

#[test]
fn a_program_out_of_address_space_runs_as_alone_and_the_profile_says_recording_degraded() {
    let dir = Scratch::new("oom");
    let exe = dir.join("out_of_memory");
    compile("cc", &["out_of_memory.c"], SITE_FLAGS, &exe);
    let plain = Command::new(&exe).output().unwrap();
    assert_eq!(plain.status.code(), Some(0), "{plain:?}");
    let (small, large) = counts(&plain);
    assert!(small > 1_000_000 && large > 1000, "{small} {large}");

    let modes: [(&str, &[&str]); 4] = [
        ("dwarf", &["--stack", "dwarf"]),
        ("fp", &["--stack", "fp"]),
        ("none", &["--stack", "none"]),
        ("sampled", &["--sample-every", "4K"]),
    ];
    for (name, args) in modes {
        let out = dir.join(&format!("{name}.json"));
        let traced = run(args, &out, &exe);
        let stderr = String::from_utf8_lossy(&traced.stderr);
        assert_eq!(traced.status.code(), Some(0), "{name}: {stderr}");
        assert_eq!(
            stderr, "",
            "{name}: heapledger -q and the program say nothing"
        );
        let (s, l) = counts(&traced);
        eprintln!("{name}: 16-byte blocks {s} (alone {small}), 64 KiB blocks {l} (alone {large})");
        // Every line of output is the plain run's, but for the numbers.
        let shape = |o: &Output| {
            String::from_utf8_lossy(&o.stdout).replace(|c: char| c.is_ascii_digit(), "")
        };
        assert_eq!(shape(&traced), shape(&plain), "{name}: output");
        for (got, alone, what) in [(s, small, "16-byte"), (l, large, "64 KiB")] {
            assert!(
                got <= alone && got as f64 >= alone as f64 * (1.0 - FEWER_AT_MOST),
                "{name}: {got} {what} blocks under heapledger, {alone} alone"
            );
        }

        let text = std::fs::read_to_string(&out).unwrap();
        // (A value, not the text: the C library has a `_null_auth`.)
        fn has_null(v: &serde_json::Value) -> bool {
            match v {
                serde_json::Value::Null => true,
                serde_json::Value::Array(a) => a.iter().any(has_null),
                serde_json::Value::Object(m) => m.values().any(has_null),
                _ => false,
            }
        }
        assert!(
            !has_null(&serde_json::from_str(&text).unwrap()),
            "{name}: MALT's reader takes no null"
        );
        let p = heapledger_profile::Profile::from_path(&out).unwrap();
        let ext = p.heapledger.as_ref().unwrap();
        assert_eq!(ext.exit.code, Some(0), "{name}");
        let d = ext
            .degraded
            .as_ref()
            .unwrap_or_else(|| panic!("{name}: the profile does not say recording degraded"));
        let stop = d.recording_stopped.as_ref().expect("recording stopped");
        assert!(
            [
                heapledger_profile::degrade_cause::RECORDER_MEMORY,
                heapledger_profile::degrade_cause::PROGRAM_MEMORY
            ]
            .contains(&stop.cause.as_str()),
            "{name}: {d:?}"
        );
        // The 64 KiB round, at least, came after the stop.
        assert!(d.calls_not_recorded >= l, "{name}: {d:?}");
        assert!(stop.time > 0 && stop.time <= p.run.runtime, "{name}: {d:?}");
        // Recorded up to the stop: the first round's first blocks at least.
        assert!(
            p.call_totals().malloc.count > 0,
            "{name}: nothing recorded before the stop"
        );

        let summary = Command::new(env!("CARGO_BIN_EXE_heapledger"))
            .arg("report")
            .arg(&out)
            .output()
            .unwrap();
        let summary = String::from_utf8_lossy(&summary.stdout);
        let line = summary
            .lines()
            .find(|l| l.starts_with("Recording degraded: recording stopped at "))
            .unwrap_or_else(|| panic!("{name}: no degraded line in\n{summary}"));
        assert!(line.contains("after that not recorded"), "{line}");
    }
}

/// Blocks `run_out_of_memory` keeps: about 24 MB of records for
/// heapledger to decode, far past its limit.
const RUN_OOM_BLOCKS: u64 = 1_000_000;

/// heapledger itself out of memory: its address space is limited once the
/// program runs (`prlimit` on heapledger's process alone, its growth
/// through one malloc arena), and the program then leaves a million
/// blocks to convert. One line says so; heapledger exits with the
/// program's code; there is no file at the output path, nor a temporary
/// one; the raw data stays, and `heapledger recover`, with memory, makes
/// the profile from it, every block there. Before, heapledger died of
/// SIGABRT ("memory allocation of N bytes failed" and a backtrace, exit
/// 134), and the dumps it had read were already gone.
#[test]
fn heapledger_out_of_memory_says_so_keeps_the_exit_code_and_the_raw_data() {
    let dir = Scratch::new("run-oom");
    let exe = dir.join("run_out_of_memory");
    compile("cc", &["run_out_of_memory.c"], SITE_FLAGS, &exe);
    let tmpdir = dir.join("tmp");
    std::fs::create_dir(&tmpdir).unwrap();
    let go = dir.join("go");
    let out = dir.join("p.sqlite");
    let child = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["run", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&exe)
        .arg(&go)
        .arg(RUN_OOM_BLOCKS.to_string())
        .env("TMPDIR", &tmpdir)
        .env("GLIBC_TUNABLES", "glibc.malloc.arena_max=1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("cannot run heapledger");
    let raw_files = || -> Vec<std::path::PathBuf> {
        std::fs::read_dir(&tmpdir)
            .into_iter()
            .flatten()
            .flatten()
            .flat_map(|d| std::fs::read_dir(d.path()).into_iter().flatten().flatten())
            .map(|f| f.path())
            .collect()
    };
    // The program has started recording (its dump file exists), and
    // heapledger its symbolizing thread (three threads: the main one, the
    // command's, that one), which a limit set before would keep from
    // starting (then "cannot start a thread", which ends the same way).
    let threads = || {
        std::fs::read_dir(format!("/proc/{}/task", child.id()))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    let started = std::time::Instant::now();
    while raw_files().is_empty() || threads() < 3 {
        assert!(
            started.elapsed().as_secs() < 60,
            "the program did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let vm_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmSize");
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: reads the limit of the test's own child.
    let r = unsafe {
        libc::prlimit(
            child.id() as libc::pid_t,
            libc::RLIMIT_AS,
            std::ptr::null(),
            &mut old,
        )
    };
    assert_eq!(r, 0, "prlimit: {}", std::io::Error::last_os_error());
    // The soft limit only, lowered (no privilege needed).
    let limit = libc::rlimit {
        rlim_cur: ((vm_kb + 1024) * 1024).min(old.rlim_max),
        rlim_max: old.rlim_max,
    };
    // SAFETY: lowers the limit of the test's own child.
    let r = unsafe {
        libc::prlimit(
            child.id() as libc::pid_t,
            libc::RLIMIT_AS,
            &limit,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(r, 0, "prlimit: {}", std::io::Error::last_os_error());
    std::fs::write(&go, "").unwrap();
    let o = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        o.status.code(),
        Some(3),
        "the program's exit code: {stderr}"
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        format!("allocated {RUN_OOM_BLOCKS}\n")
    );
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.starts_with("heapledger: out of memory (an allocation of ")
            && stderr.contains("`heapledger recover`"),
        "{stderr}"
    );
    assert!(!out.exists(), "a profile at the output path");
    let partial: Vec<_> = std::fs::read_dir(dir.join(""))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(partial.is_empty(), "a temporary file is left: {partial:?}");
    assert!(!raw_files().is_empty(), "the raw data is gone");

    let recovered = dir.join("recovered");
    std::fs::create_dir(&recovered).unwrap();
    let r = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["recover", "--in"])
        .arg(&tmpdir)
        .arg("-o")
        .arg(&recovered)
        .env("TMPDIR", &tmpdir)
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let stores: Vec<_> = std::fs::read_dir(&recovered)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(stores.len(), 1, "{stores:?}");
    let json = dir.join("recovered.json");
    export_malt(&stores[0], None, &json);
    let p = read_profile(&json);
    let s = site(&p, "block", site_line("run_out_of_memory.c", "block"));
    assert_eq!(s.alloc.count, RUN_OOM_BLOCKS, "{s:?}");
    assert_eq!(s.alive_req, 24 * RUN_OOM_BLOCKS as i64, "{s:?}");
    assert!(raw_files().is_empty(), "recover left raw data");
}
