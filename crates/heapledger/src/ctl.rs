//! `heapledger ctl PID COMMAND`: steers a program recording under
//! `heapledger run` through the page its recorder shares for it
//! (`DIR/PID.ctl` in the run's directory, which the process's environment
//! names; the recorder's side is `process::control` in the preload):
//! the command goes in, `asked` goes up, and the recorder's thread, which
//! looks at the page at least every 50 ms, writes its answer and sets
//! `answered`. No signal is sent, so the program's own signal handlers
//! never see one.

use anyhow::{anyhow, bail, Result};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// heapledger.h, as `heapledger header` prints it.
pub const HEADER: &str = include_str!("../../heapledger-preload/include/heapledger.h");

// The page's layout: the preload's `process::control` (the same numbers).
const PAGE: usize = 4096;
const MAGIC: u64 = 0x4c54_4348_4c50_4148;
const COMMAND_AT: usize = 64;
const COMMAND_MAX: usize = 256;
const REPLY_AT: usize = 512;

/// How long a process that records is given to make its page.
const PAGE_WAIT: Duration = Duration::from_secs(2);

/// How long an answer may take (a snapshot of a large program is written
/// while the program waits at most a few seconds).
const PATIENCE: Duration = Duration::from_secs(60);

/// The run's directory of process `pid`, from its environment.
fn run_dir(pid: u32) -> Result<PathBuf> {
    let env = match std::fs::read(format!("/proc/{pid}/environ")) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!("no process {pid}"),
        Err(e) => bail!("cannot read the environment of process {pid}: {e}"),
    };
    let key = format!("{}=", heapledger_wire::ENV_DIR);
    env.split(|&b| b == 0)
        .find_map(|v| v.strip_prefix(key.as_bytes()))
        .map(|d| PathBuf::from(String::from_utf8_lossy(d).into_owned()))
        .ok_or_else(|| anyhow!("process {pid} is not running under `heapledger run`"))
}

/// Checks a command before it is sent: one line, a known verb.
fn checked(command: &str) -> Result<()> {
    let mut words = command.splitn(2, ' ');
    let ok = matches!(
        (words.next(), words.next()),
        (Some("backtrace"), Some("on" | "off"))
            | (Some("snapshot"), _)
            | (Some("stats" | "reset"), None)
    );
    if !ok || command.len() >= COMMAND_MAX || command.contains(['\n', '\0']) {
        bail!("unknown command `{command}` (backtrace on|off, snapshot [LABEL], reset, stats)");
    }
    Ok(())
}

pub fn ctl(pid: u32, command: &str) -> Result<u8> {
    checked(command)?;
    let dir = run_dir(pid)?;
    let path = dir.join(format!("{pid}.ctl"));
    // A process makes its page once it has run 100 ms (the recorder's
    // `control::PAGE_AFTER_NS`): a younger one is waited for a little.
    let start = Instant::now();
    let file = loop {
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
        {
            Ok(f) => break f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if start.elapsed() > PAGE_WAIT {
                    bail!("process {pid} takes no commands (it does not record, or its C library leaves the recorder no thread)");
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => bail!("cannot open {}: {e}", path.display()),
        }
    };
    let fd = file.as_raw_fd();
    // SAFETY: a descriptor of ours; the lock goes with it.
    if unsafe { libc::flock(fd, libc::LOCK_EX) } != 0 {
        bail!("cannot lock {}", path.display());
    }
    if file.metadata()?.len() < PAGE as u64 {
        bail!("process {pid} takes no commands (its page is not ready)");
    }
    // SAFETY: a shared mapping of the page, unmapped below; the recorder
    // writes it only through the words and areas read here.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        bail!("cannot map {}", path.display());
    }
    let p = p as *mut u8;
    let answer = exchange(pid, p, command);
    // SAFETY: our mapping.
    unsafe { libc::munmap(p as *mut _, PAGE) };
    let answer = answer?;
    let (status, rest) = answer.split_once([' ', '\n']).unwrap_or((&answer, ""));
    if status != "ok" {
        bail!("process {pid}: {rest}");
    }
    let rest = rest.trim();
    match command.split(' ').next() {
        Some("snapshot") => tell!(
            "snapshot {} of process {pid} taken (`heapledger report PROFILE --pid {pid} --snapshot {}` once it ends)",
            rest.trim_start_matches("snapshot "),
            rest.trim_start_matches("snapshot ")
        ),
        Some("reset") => tell!("counters of process {pid} reset"),
        _ => tell!("{rest}"),
    }
    Ok(0)
}

fn exchange(pid: u32, p: *mut u8, command: &str) -> Result<String> {
    // SAFETY: aligned words of the mapped page.
    let word = |i: usize| unsafe { &*(p.add(8 * i) as *const AtomicU64) };
    if word(0).load(Ordering::Acquire) != MAGIC {
        bail!("process {pid} takes no commands (its page is not heapledger's)");
    }
    let seq = word(1)
        .load(Ordering::Relaxed)
        .max(word(2).load(Ordering::Acquire))
        + 1;
    // SAFETY: within the page; the command fits (`checked`).
    unsafe {
        std::ptr::copy_nonoverlapping(command.as_ptr(), p.add(COMMAND_AT), command.len());
        *p.add(COMMAND_AT + command.len()) = 0;
    }
    word(1).store(seq, Ordering::Release);
    let start = Instant::now();
    while word(2).load(Ordering::Acquire) != seq {
        // SAFETY: signal 0 only checks that the process exists.
        if unsafe { libc::kill(pid as libc::pid_t, 0) } != 0 {
            bail!("process {pid} ended before it answered");
        }
        if start.elapsed() > PATIENCE {
            bail!(
                "process {pid} did not answer within {} s",
                PATIENCE.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    // SAFETY: within the page, NUL-terminated by the recorder.
    let reply = unsafe { std::slice::from_raw_parts(p.add(REPLY_AT), PAGE - REPLY_AT) };
    let end = reply.iter().position(|&b| b == 0).unwrap_or(reply.len());
    Ok(String::from_utf8_lossy(&reply[..end]).into_owned())
}
