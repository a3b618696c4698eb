//! `heapledger run`: start the program with the recorder preloaded, wait for it,
//! turn the dumps its processes left into profiles, print the summary.
//!
//! The program's standard streams and exit status pass through untouched;
//! heapledger's own messages go to stderr. While the program runs, heapledger
//! ignores SIGINT and SIGQUIT (as `time` does) so that Ctrl-C reaches the
//! program, which writes its profile as it dies.

use crate::convert::ProcessEnd;
use crate::dumps::{bytes_in, exe_name, plan_dumps, temp_dir, Plan, FORGET_PARSED_BYTES};
use crate::options::{RunOptions, StackArg};
use crate::preload::find_preload;
use crate::symbolizer::Work;
use anyhow::{bail, Context, Result};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The raw data's directory, removed as `run` returns unless kept.
struct RemoveOnDrop(PathBuf, bool);
impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if !self.1 {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// The program's pid while heapledger waits for it (0 otherwise).
static PROGRAM: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// SIGTERM or SIGHUP sent to heapledger (by `timeout`, a closing terminal, a
/// job runner) goes on to the program, which writes its profile as it
/// dies; heapledger, still waiting, then writes the profile. Killed itself,
/// heapledger would leave the program running and its data unread.
extern "C" fn pass_on(sig: libc::c_int) {
    let pid = PROGRAM.load(std::sync::atomic::Ordering::Relaxed);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(pid, sig) };
    }
}

/// While heapledger waits for the program: SIGINT and SIGQUIT ignored (the
/// terminal sends them to the program too, as `time` does), SIGTERM and
/// SIGHUP passed on to it. `None` puts the defaults back.
fn set_signals(program: Option<u32>) {
    let (quiet, pass) = match program {
        Some(pid) => {
            PROGRAM.store(pid as i32, std::sync::atomic::Ordering::Relaxed);
            (
                libc::SIG_IGN,
                pass_on as extern "C" fn(libc::c_int) as libc::sighandler_t,
            )
        }
        None => {
            PROGRAM.store(0, std::sync::atomic::Ordering::Relaxed);
            (libc::SIG_DFL, libc::SIG_DFL)
        }
    };
    // SAFETY: changing dispositions of four signals in this process; the
    // handler only calls kill.
    unsafe {
        libc::signal(libc::SIGINT, quiet);
        libc::signal(libc::SIGQUIT, quiet);
        libc::signal(libc::SIGTERM, pass);
        libc::signal(libc::SIGHUP, pass);
    }
}

/// Processes the program starts may outlive it (a daemon; `git commit`'s
/// detached maintenance run) and write their dumps only as they end. So that
/// heapledger knows when the last of them has ended, and never reads a dump
/// half-written, it makes itself their reaper: orphans of the program's tree
/// become heapledger's children rather than init's (PR_SET_CHILD_SUBREAPER).
fn become_subreaper() -> bool {
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0 }
}

/// Waits for `pid`, reaping the orphans handed to heapledger that end before
/// it (they would otherwise stay zombies until the program ends).
fn wait_reaping(pid: u32) -> std::io::Result<std::process::ExitStatus> {
    loop {
        let mut status = 0;
        // SAFETY: status is writable.
        let r = unsafe { libc::waitpid(-1, &mut status, 0) };
        if r == pid as i32 {
            return Ok(std::process::ExitStatus::from_raw(status));
        }
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }
}

/// Once the program has ended: waits up to `grace` for the processes of its
/// tree still running, reaping them as they end. Returns those still
/// running at the deadline (pid, name); empty when none is left.
fn wait_descendants(grace: std::time::Duration) -> Vec<(u32, String)> {
    let deadline = std::time::Instant::now() + grace;
    loop {
        let mut status = 0;
        // SAFETY: status is writable.
        let r = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if r > 0 {
            continue;
        }
        if r < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Vec::new(); // ECHILD: none left
        }
        if std::time::Instant::now() >= deadline {
            return children_of(std::process::id());
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// The running children of `parent` (pid, name), from /proc.
fn children_of(parent: u32) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.filter_map(|e| e.ok()) {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...; comm may hold spaces and parentheses.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let ppid = stat[close + 1..].split_whitespace().nth(1);
        if ppid.and_then(|p| p.parse::<u32>().ok()) == Some(parent) {
            out.push((pid, stat[open + 1..close].to_owned()));
        }
    }
    out.sort();
    out
}

/// Exit code the way a shell reports it: the code, or 128 + signal.
/// Why a program left no data, as far as heapledger can tell: the recorder
/// never ran in a statically linked or setuid program (the loader ignores
/// `LD_PRELOAD`), and a process killed by SIGKILL cannot write anything.
fn why_no_data(program: &std::ffi::OsStr, status: std::process::ExitStatus) -> String {
    use std::os::unix::fs::PermissionsExt;
    if status.signal() == Some(libc::SIGKILL) {
        return "it was killed by SIGKILL, which leaves no time to write it".into();
    }
    if let Some(path) = resolve_program(program) {
        if crate::elf::without_interpreter(&path) {
            return "it is statically linked: LD_PRELOAD cannot reach it".into();
        }
        if let Ok(meta) = std::fs::metadata(&path) {
            use std::os::unix::fs::MetadataExt;
            // SAFETY: no preconditions.
            let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
            let mode = meta.permissions().mode();
            // Only where it changes who the program runs as does the loader
            // run it in secure mode.
            if (mode & 0o4000 != 0 && meta.uid() != uid)
                || (mode & 0o2000 != 0 && meta.gid() != gid)
            {
                return "it is setuid or setgid: the loader ignores LD_PRELOAD for it".into();
            }
        }
    }
    if let Some(sig) = status.signal() {
        let name = heapledger_analysis::summary::signal_name(sig)
            .map_or_else(String::new, |n| format!(" ({n})"));
        return format!(
            "it was killed by signal {sig}{name} before it could write it, unless a line above says otherwise"
        );
    }
    "unless a line above says why: it may be statically linked or setuid, or have run such a program with exec".into()
}

/// The file `Command` runs for `program`: itself when it holds a slash,
/// else the first match on `PATH`.
fn resolve_program(program: &std::ffi::OsStr) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    if program.as_bytes().contains(&b'/') {
        return Some(PathBuf::from(program));
    }
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// A sanitizer's runtime the executable at `path` is linked with
/// (AddressSanitizer, ThreadSanitizer, LeakSanitizer): each refuses to run
/// unless it is the first library loaded ("ASan runtime does not come
/// first in initial library list"), which a preloaded library would take
/// from it.
fn sanitizer_runtime(path: &Path) -> Option<String> {
    const RUNTIMES: [&str; 6] = [
        "libasan.so",
        "libtsan.so",
        "liblsan.so",
        "libhwasan.so",
        "libclang_rt.asan",
        "libclang_rt.tsan",
    ];
    crate::elf::needed(path)
        .into_iter()
        .find(|n| RUNTIMES.iter().any(|r| n.starts_with(r)))
}

/// Whether the executable at `path` is a Go program (its build id's note
/// or its build information's section), whose runtime ends the process
/// with the `exit_group` system call itself, past every hook.
fn is_go(path: &Path) -> bool {
    crate::elf::sections(path)
        .iter()
        .any(|s| s == ".go.buildinfo" || s == ".note.go.buildid")
}

/// An allocator's own entry point that the executable at `path` names
/// (defines or calls), and the allocator: its calls bypass `malloc`.
fn own_allocator(path: &Path) -> Option<(&'static str, &'static str)> {
    const APIS: [(&str, &str); 7] = [
        ("mi_malloc", "mimalloc"),
        ("mi_malloc_aligned", "mimalloc"),
        ("_rjem_mallocx", "jemalloc"),
        ("_rjem_malloc", "jemalloc"),
        ("tc_malloc", "tcmalloc"),
        ("sn_rust_alloc", "snmalloc"),
        ("rpmalloc", "rpmalloc"),
    ];
    let names: Vec<&str> = APIS.iter().map(|a| a.0).collect();
    let f = crate::elf::names_any(path, &names)?;
    APIS.iter().find(|a| a.0 == f).copied()
}

fn shell_code(status: std::process::ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(c), _) => c as u8,
        (None, Some(s)) => (128 + s) as u8,
        _ => 1,
    }
}

/// Removes an earlier profile at `path`, so that the new one is written to a
/// new file rather than over it. On ext4, a file truncated and written again
/// is flushed to disk as it is closed (its `auto_da_alloc` safeguard for
/// programs that rewrite a file in place): for Python's 28 MB profile the
/// truncation took 7 ms and the close 11 ms, against nothing for a new file.
/// Called while the profile is being built. Only a plain file with no other
/// name and not read-only is removed: a link is written through and a
/// read-only file refuses the profile, as before.
fn clear_old_output(path: &Path) {
    use std::os::unix::fs::MetadataExt;
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if m.file_type().is_file() && m.nlink() == 1 && !m.permissions().readonly() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// The folder of the child processes' profiles of the profile at `out`:
/// `<stem>.children/` beside it.
fn children_dir(out: &Path) -> PathBuf {
    let stem = out
        .file_stem()
        .map_or_else(|| "heapledger".into(), |s| s.to_string_lossy().into_owned());
    out.with_file_name(format!("{stem}.children"))
}

/// Removes the child profiles an earlier run left in `dir` (a run's
/// `<stem>.children/`), so that the folder holds this run's and no other:
/// the pids differ from run to run, so nothing else replaces them. Only
/// what heapledger writes there is removed (`heapledger-*.json`, plain files
/// under the rules of [`clear_old_output`]), then the folder if that left
/// it empty; a folder that is a link, or holds anything else, stays.
fn clear_old_children(dir: &Path) {
    let is_dir = std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_dir());
    if !is_dir {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("heapledger-") && name.ends_with(".json") {
            clear_old_output(&e.path());
        }
    }
    // Fails, as it should, where anything is left.
    let _ = std::fs::remove_dir(dir);
}

/// Writes a profile whole or not at all; the error names the path.
fn write_profile(profile: &heapledger_profile::Profile, path: &Path) -> Result<()> {
    // `write_to` buffers (1 MiB) itself.
    crate::output::write_whole(path, |f| Ok(profile.write_to(f)?))
}

/// `HEAPLEDGER_PHASES=1`: how long each phase of `run` took, and the page
/// faults heapledger took in it, on stderr (for measuring heapledger's own fixed
/// cost; see `heapledger-bench`).
struct Phases(Option<(std::time::Instant, Vec<PhaseEnd>)>);

/// A phase's name, when it ended, heapledger's page faults by then, and
/// its resident memory then (MB).
type PhaseEnd = (&'static str, std::time::Instant, u64, u64);

/// This process's resident memory now, MB (0 where /proc does not say).
fn resident_mb() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split(' ')
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    pages * 4096 / (1 << 20)
}

/// heapledger's own resource use so far (its threads, not the program's).
fn own_usage() -> Option<libc::rusage> {
    // SAFETY: rusage is plain integers, for which zero is valid.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage only fills the struct it is given.
    (unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } == 0).then_some(ru)
}

fn faults(ru: &libc::rusage) -> u64 {
    (ru.ru_minflt + ru.ru_majflt) as u64
}

impl Phases {
    fn new() -> Phases {
        let on = std::env::var_os("HEAPLEDGER_PHASES").is_some_and(|v| v != "0");
        Phases(on.then(|| (std::time::Instant::now(), Vec::new())))
    }
    fn mark(&mut self, name: &'static str) {
        if let Some((_, v)) = &mut self.0 {
            let f = own_usage().map_or(0, |ru| faults(&ru));
            v.push((name, std::time::Instant::now(), f, resident_mb()));
        }
    }
    fn print(&self) {
        let Some((start, v)) = &self.0 else { return };
        let (mut last, mut last_faults) = (*start, 0);
        let mut line =
            String::from("heapledger: phases (ms, page faults, resident MB at the end):");
        for (name, t, f, rss) in v {
            line += &format!(
                " {name} {:.1} {} {rss}",
                (*t - last).as_secs_f64() * 1e3,
                f - last_faults
            );
            (last, last_faults) = (*t, *f);
        }
        if let Some(ru) = own_usage() {
            let ms = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
            line += &format!(
                "; heapledger's cpu (ms): user {:.0} sys {:.0}; peak memory {} MB, page faults {}",
                ms(ru.ru_utime),
                ms(ru.ru_stime),
                ru.ru_maxrss / 1024,
                faults(&ru)
            );
        }
        say!("{line}");
    }
}

pub fn run(o: &RunOptions) -> Result<u8> {
    let mut phases = Phases::new();
    let lib = find_preload()?;
    crate::output::check_writable(o.output.as_deref())?;
    let dir = temp_dir()?;
    let mut cleanup = RemoveOnDrop(dir.clone(), false);
    let mut preload = std::ffi::OsString::new();
    // A sanitizer's runtime must come first: before heapledger's, whose
    // hooks it then stands before (its allocator's calls never reach them:
    // nothing is recorded, and a line says why), so that the program runs
    // as it does alone rather than refusing to start.
    let sanitizer = resolve_program(&o.program).and_then(|p| sanitizer_runtime(&p));
    if let Some(runtime) = &sanitizer {
        preload.push(runtime);
        preload.push(":");
    }
    preload.push(lib);
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    let stack = match o.stack {
        StackArg::Dwarf => "dwarf",
        StackArg::Fp => "fp",
        StackArg::None => "none",
        StackArg::EnterExit => "enter-exit",
    };
    let mut opts = format!(
        "stack={stack},depth={},follow={},parent={},sample={}",
        o.max_depth,
        u8::from(o.follow),
        std::process::id(),
        o.sample_every.unwrap_or(0)
    );
    if o.exact_lifetimes {
        opts.push_str(",lifetimes=exact");
    }
    if o.backtrace_off {
        opts.push_str(",backtrace=0");
    }
    if !o.waits {
        opts.push_str(",waits=0");
    }
    opts.push_str(&format!(",waits_top={}", o.waits_top));
    if let Some(every) = o.snapshot_every.filter(|d| !d.is_zero()) {
        opts.push_str(&format!(",snapshot_every={}", every.as_millis().max(1)));
    }
    if let Some(above) = o.snapshot_when_above {
        opts.push_str(&format!(",snapshot_above={above}"));
    }
    let checkpoint_ms = o.checkpoint_every.as_millis();
    if checkpoint_ms > 0 {
        opts.push_str(&format!(",checkpoint={}", checkpoint_ms.max(1)));
    }
    if let Some(bad) = o.only_lib.iter().find(|l| l.is_empty() || l.contains(':')) {
        bail!("--only-lib `{bad}`: a library's name, path or glob, without `:`");
    }
    let reaper = o.follow && become_subreaper();
    // Only where every process is recorded (the maps of the processes
    // `--no-follow` leaves out would stay in /tmp, unread), and stacks are
    // unwound with DWARF (a frame-pointer walk passes over the trampolines,
    // which keep no frame pointer).
    let python_maps = o.python_frames
        && o.follow
        && o.stack == StackArg::Dwarf
        && std::env::var_os("PYTHONPERFSUPPORT").is_none();
    let run_start_unix_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let command = |program: &std::ffi::OsStr, script: Option<&Path>| {
        let mut c = Command::new(program);
        if o.only_lib.is_empty() {
            c.env_remove("HEAPLEDGER_ONLY_LIB");
        } else {
            c.env("HEAPLEDGER_ONLY_LIB", o.only_lib.join(":"));
        }
        // Python's objects reach malloc only without pymalloc (see
        // `--pymalloc`); a PYTHONMALLOC of the user's own stands.
        if !o.pymalloc && std::env::var_os("PYTHONMALLOC").is_none() {
            c.env("PYTHONMALLOC", "malloc");
        }
        // Python's own functions in the stacks (CPython 3.12 and later:
        // `--no-python-frames`); a PYTHONPERFSUPPORT of the user's own
        // stands, and so do the maps it makes.
        if python_maps {
            c.env("PYTHONPERFSUPPORT", "1");
        }
        c.args(script)
            .args(&o.args)
            .env("LD_PRELOAD", &preload)
            .env(heapledger_wire::ENV_DIR, &dir)
            .env(heapledger_wire::ENV_OPTS, &opts);
        c
    };
    let mut spawned = command(&o.program, None).spawn();
    if spawned
        .as_ref()
        .is_err_and(|e| e.raw_os_error() == Some(libc::ENOEXEC))
    {
        // A file of commands without `#!`: run by /bin/sh, as a shell and
        // `execvp` (and so heaptrack's script) run it.
        if let Some(script) = resolve_program(&o.program) {
            spawned = command("/bin/sh".as_ref(), Some(&script)).spawn();
        }
    }
    // A program that cannot start: one line, and the exit code `env`,
    // `timeout`, `nohup` and a shell give, 127 for no such program and 126
    // for one that cannot be run, so that a script tells them apart.
    let cannot_run = |why: &dyn std::fmt::Display, code: u8| {
        say!(
            "heapledger: cannot run {}: {why}",
            o.program.to_string_lossy()
        );
        Ok(code)
    };
    let child = match spawned {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return cannot_run(&"no such program", 127);
        }
        Err(_) if Path::new(&o.program).is_dir() => return cannot_run(&"it is a directory", 126),
        Err(e) => return cannot_run(&e, 126),
    };
    let pid = child.id();
    crate::fatal::program_started(pid);
    phases.mark("start");
    let converter = crate::symbolizer::Converter::start(pid);
    set_signals(Some(pid));
    let status = if reaper {
        wait_reaping(pid)
    } else {
        let mut child = child;
        child.wait()
    };
    let status = match status {
        Ok(s) => s,
        Err(e) => {
            set_signals(None);
            return Err(e).context("waiting for the program");
        }
    };
    crate::fatal::program_ended(shell_code(status));
    phases.mark("program");
    let still_running = if reaper {
        wait_descendants(o.wait_children)
    } else {
        Vec::new()
    };
    set_signals(None);
    crate::output::finish_on_interrupt(o.output.as_deref(), &dir);
    if !still_running.is_empty() {
        let names: Vec<String> = still_running
            .iter()
            .map(|(p, n)| format!("{n} ({p})"))
            .collect();
        let n = still_running.len();
        say!(
            "heapledger: not waiting longer for {n} process{} the program started, still running: {}; {} profile data is left out (--wait-children sets how long to wait)",
            if n == 1 { "" } else { "es" },
            names.join(", "),
            if n == 1 { "its" } else { "their" },
        );
    }
    phases.mark("children");
    let code = shell_code(status);
    let end = ProcessEnd {
        code: status.code(),
        signal: status.signal(),
    };

    // The main process's dump is decoded now, on the symbolizing thread
    // (whose memory is taken ahead); the others' as their profiles are
    // made (`convert_each`), one at a time.
    let running: Vec<u32> = still_running.iter().map(|(p, _)| *p).collect();
    let (plan, main, unreadable, empty) = {
        let dir = dir.clone();
        converter
            .call(move |symbols| -> Result<_> {
                // Large dumps are decoded without what was parsed of the
                // binaries beside them (libc's debug information: 16 MB of
                // `run`'s peak at half a million stacks); the addresses
                // looked up while the program ran keep their answers.
                if bytes_in(&dir) >= FORGET_PARSED_BYTES {
                    symbols.forget_parsed();
                }
                let mut plan = plan_dumps(&dir, &running)?;
                let (mut main, mut unreadable, mut empty) = (None, false, Vec::new());
                let mut others = Vec::new();
                for p in std::mem::take(&mut plan.pending) {
                    if main.is_none() && p.pid() == Some(pid) {
                        let l = p.load()?;
                        unreadable |= l.unreadable;
                        empty.extend(l.empty);
                        main = l.dump;
                    } else {
                        others.push(p);
                    }
                }
                plan.pending = others;
                Ok((plan, main, unreadable, empty))
            })
            .wait()??
    };
    let Plan {
        pending,
        snapshots,
        consumed,
    } = plan;
    crate::output::raw_files(&consumed);
    phases.mark("read");
    let Some(mut main) = main else {
        if unreadable {
            say!(
                "heapledger: no readable profile data of {} (see above)",
                o.program.to_string_lossy()
            );
            return Ok(if code == 0 { 1 } else { code });
        }
        if let Some(runtime) = &sanitizer {
            say!(
                "heapledger: {} is built with a sanitizer, whose runtime ({runtime}) must be loaded first and whose allocator then stands before heapledger's: nothing of it can be recorded (profile a build without -fsanitize)",
                o.program.to_string_lossy(),
            );
            return Ok(if code == 0 { 1 } else { code });
        }
        if empty.contains(&pid)
            && status.signal().is_none()
            && resolve_program(&o.program).is_some_and(|p| is_go(&p))
        {
            say!(
                "heapledger: {} is a Go program, whose runtime ends the process with the exit_group system call itself, past every hook: the recorder had no time to write its data and no profile was made (a run longer than --checkpoint-every, {} s, keeps what its last checkpoint saw)",
                o.program.to_string_lossy(),
                o.checkpoint_every.as_secs_f64(),
            );
            return Ok(if code == 0 { 1 } else { code });
        }
        if empty.contains(&pid) && status.signal().is_none() {
            // It replaced itself with a program that ran without the
            // recorder: what it did is as it would be alone, and there is
            // nothing of it to profile. Its exit code stands.
            say!(
                "heapledger: {} replaced itself with a program that ran without the recorder (its environment no longer named it, as after `env -i` or clearenv): no profile",
                o.program.to_string_lossy(),
            );
            return Ok(code);
        }
        say!(
            "heapledger: {} left no profile data ({})",
            o.program.to_string_lossy(),
            why_no_data(&o.program, status)
        );
        return Ok(if code == 0 { 1 } else { code });
    };
    if main.cmdline.is_empty() {
        // The recorder could not read it (a seccomp filter that refuses
        // `open`, as a sandboxed program's may): the command `run` started.
        main.cmdline = std::iter::once(&o.program)
            .chain(&o.args)
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        if main.exe.is_empty() {
            main.exe = o.program.to_string_lossy().into_owned();
        }
    }
    let out = o
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("heapledger-{}-{pid}.sqlite", exe_name(&main))));
    // `-o NAME.json`: MALT's JSON, as `export --format malt` writes it,
    // with the children's profiles in a folder beside it; anything else:
    // the profile store, every process in one file.
    let as_json = out.extension().is_some_and(|e| e == "json");
    crate::output::finish_on_interrupt(Some(&out), &dir);
    let n_children = pending.len();
    let mut job = vec![(Work::Ready(Box::new(main)), end)];
    job.extend(
        pending
            .into_iter()
            .map(|p| (Work::Later(p), ProcessEnd::default())),
    );
    // Snapshots after the processes (the store keeps them apart; a JSON
    // profile has no place for them).
    let n_snapshots = if as_json { 0 } else { snapshots.len() };
    if as_json && !snapshots.is_empty() {
        say!(
            "heapledger: {} snapshot(s) left out: a JSON profile holds one moment (write the profile store, -o NAME.sqlite)",
            snapshots.len()
        );
    } else {
        job.extend(
            snapshots
                .into_iter()
                .map(|d| (Work::Ready(Box::new(d)), ProcessEnd::default())),
        );
    }
    // Made one at a time on the symbolizing thread and written as they
    // come (`convert_each`): the main process first, kept for the summary.
    let n_rest = job.len() - 1;
    let (made, profiles) = std::sync::mpsc::sync_channel(1);
    let converting = converter.convert_each(job, !as_json, made);
    clear_old_output(&out);
    // Children of a JSON profile: beside it, in <stem>.children/, which
    // keeps no file of an earlier run.
    let child_dir = children_dir(&out);
    if as_json {
        clear_old_children(&child_dir);
    }
    let child_dir = (as_json && n_children > 0).then_some(child_dir);
    let profile = match profiles.recv() {
        Ok(Some(m)) => m.profile,
        _ => {
            converting.wait()?;
            bail!("internal error: no profile was built");
        }
    };
    crate::prefault::release_free();
    phases.mark("convert");
    // The file is written while the summary is worked out (both only read
    // the main profile); the summary is printed first, then any write
    // error. The writer gives the other processes' names and pids.
    let (written, summary) = std::thread::scope(|scope| {
        let writer = {
            let (profile, out, child_dir) = (&profile, &out, &child_dir);
            scope.spawn(move || {
                let mut children: Vec<(String, u32)> = Vec::new();
                let mut got = 0;
                if as_json {
                    write_profile(profile, out)?;
                    crate::output::main_written(out);
                    for m in profiles.iter() {
                        got += 1;
                        let (Some(m), Some(cdir)) = (m, child_dir) else {
                            continue;
                        };
                        let name = format!("heapledger-{}-{}.json", m.exe, m.pid);
                        write_profile(&m.profile, &cdir.join(name))?;
                        children.push((m.exe, m.pid));
                    }
                    if got != n_rest {
                        bail!("internal error: {got} of {n_rest} processes' profiles were made");
                    }
                } else {
                    let got = std::cell::Cell::new(0);
                    let names = std::cell::RefCell::new(&mut children);
                    let rest = profiles
                        .iter()
                        .inspect(|_| got.set(got.get() + 1))
                        .flatten()
                        .map(|m| {
                            names.borrow_mut().push((m.exe, m.pid));
                            Ok(m.profile)
                        })
                        .chain(std::iter::from_fn(|| {
                            let n = got.replace(n_rest);
                            (n != n_rest).then(|| {
                                Err(anyhow::anyhow!(
                                    "internal error: {n} of {n_rest} processes' profiles were made"
                                ))
                            })
                        }));
                    crate::output::write_store_each(out, profile, rest)?;
                    crate::output::main_written(out);
                }
                Ok::<Vec<(String, u32)>, anyhow::Error>(children)
            })
        };
        let summary = (!o.quiet).then(|| {
            heapledger_analysis::summary::Summary::from_profile(
                &profile,
                &heapledger_analysis::summary::SummaryOptions { top: o.top },
            )
            .to_string()
        });
        let written = writer.join().unwrap_or_else(|_| {
            Err(anyhow::anyhow!(
                "internal error: writing the profile failed"
            ))
        });
        (written, summary)
    });
    let (write_error, children) = match written {
        Ok(c) => (None, c),
        Err(e) => (Some(e), Vec::new()),
    };
    // The conversion has ended (its profiles all taken, or the writer gone).
    let _ = converting.wait();
    phases.mark("write");
    phases.print();
    let failed = write_error.is_some();
    if let Some(summary) = summary {
        say_part!("{summary}");
    }
    if let Some(e) = &write_error {
        // Without the profile, its raw data stays for `heapledger recover`
        // (written elsewhere, or once there is room), as where heapledger
        // runs out of memory (`fatal`).
        if crate::fatal::profile_was_written() {
            say!("heapledger: {e:#}");
        } else {
            cleanup.1 = true;
            say!("heapledger: {e:#}; the raw data is kept: `heapledger recover -o DIR` makes the profile");
        }
    }
    // The summary says so too; without it, one line.
    let unhooked = profile
        .heapledger
        .as_ref()
        .and_then(|e| e.unhooked.as_ref());
    if let (true, Some(u)) = (o.quiet, unhooked) {
        say!(
            "heapledger: {} defines {} itself, before heapledger's: those calls are not in the profile",
            heapledger_profile::basename(&u.by),
            u.functions.join(", ")
        );
    }
    // An allocator the program calls by its own names (linked in under a
    // prefix, as Rust's mimalloc and jemallocator crates do), which never
    // reaches malloc: nothing says so otherwise, and the profile looks
    // merely small.
    if let Some((f, which)) = resolve_program(&o.program).and_then(|p| own_allocator(&p)) {
        say!(
            "heapledger: {} calls {f}, {which}'s own function rather than malloc: what that allocator serves is not in the profile",
            o.program.to_string_lossy()
        );
    }
    if !o.quiet {
        if !failed {
            say!("heapledger: profile written to {}", out.display());
        }
        if n_snapshots > 0 && !failed {
            say!(
                "heapledger: {n_snapshots} snapshot(s) in the profile (`heapledger report {} --snapshot LABEL` shows one)",
                out.display()
            );
        }
        if let Some(cdir) = child_dir {
            say!(
                "heapledger: {n_children} child process profile(s) in {}",
                cdir.display()
            );
        } else if !failed && n_children > 0 {
            say!(
                "heapledger: {n_children} more process{} in the profile: {} (`heapledger report {} --pid PID` shows one)",
                if n_children == 1 { "" } else { "es" },
                children
                    .iter()
                    .take(8)
                    .map(|(exe, pid)| format!("{exe} ({pid})"))
                    .chain((n_children > 8).then(|| format!("{} more", n_children - 8)))
                    .collect::<Vec<_>>()
                    .join(", "),
                out.display()
            );
        }
        // Last, and only after a run that went well: where a run fails,
        // the one line that says why stays the only one.
        if !failed {
            crate::recover::mention_leftovers();
        }
    }
    // The perf maps CPython wrote because heapledger asked it to are read:
    // they go, as the raw data does (kept where the profile could not be
    // written, for `heapledger recover`).
    if python_maps && !failed {
        let main = profile.heapledger.as_ref().map(|e| e.pid);
        for pid in main.into_iter().chain(children.iter().map(|c| c.1)) {
            heapledger_symbols::perfmap::remove_python_map(pid, run_start_unix_ns);
        }
    }
    // Only now, as heapledger is about to exit: freeing the dumps, the profile
    // and the parsed debug information takes tens of milliseconds, which
    // would take a core from writing the profile, and then delay the exit
    // (Python's 3 M strings: 6 to 10 ms for the profile alone). They are
    // freed on the symbolizing thread, unless heapledger's exit comes first.
    converter.drop_there(profile);
    drop(converter);
    if failed {
        return Ok(crate::fatal::code_without_profile(code));
    }
    Ok(code)
}
