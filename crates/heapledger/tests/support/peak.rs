//! A child's own peak resident memory, for the tests that bound what a
//! reader takes (included by `support` and by `common`).
//!
//! Not `wait4`'s `ru_maxrss`: Linux counts in it the memory of the process
//! the child was spawned from, up to the child's `exec` (the kernel keeps
//! the larger of the old and the new address space's peaks). Spawned from
//! a test harness, a small reader "took" the harness's tens of MB: checked
//! with a parent holding 200 MB, `/bin/true` reported 218 MB. The peak is
//! read instead from `/proc/PID/status` (`VmHWM`, the peak of the address
//! space the child has now), every 2 ms (every 0.2 ms in its first 50 ms)
//! once the child runs its own program.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// How a measured child ended.
pub struct Ended {
    /// The raw status from `wait4`.
    pub status: i32,
    /// Its peak resident memory, KiB: the last `VmHWM` read while it ran
    /// its own program (a growth in its last 2 ms is missed), else
    /// `ru_maxrss` where it ended before any reading.
    pub peak_kib: i64,
    pub wall: Duration,
}

/// A field of `/proc/PID/status`, KiB.
fn status_kib(pid: libc::pid_t, field: &str) -> Option<i64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Waits for `child`, whose program's name starts with `comm` (as
/// `/proc/PID/comm` has it: before that, the child is still the
/// harness's copy), measuring its peak. Kills it, and fails the test
/// with `what`, after `limit` or past 1 GiB resident.
pub fn wait_with_peak(child: &Child, comm: &str, limit: Duration, what: &str) -> Ended {
    let pid = child.id() as libc::pid_t;
    let start = Instant::now();
    let mut peak: Option<i64> = None;
    loop {
        let mut status = 0;
        // SAFETY: a plain struct for the kernel to fill; our own child.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        assert!(r >= 0, "{what}: wait4: {}", std::io::Error::last_os_error());
        if r == pid {
            return Ended {
                status,
                peak_kib: peak.unwrap_or(usage.ru_maxrss),
                wall: start.elapsed(),
            };
        }
        let own =
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.starts_with(comm));
        if own {
            if let Some(hwm) = status_kib(pid, "VmHWM:") {
                peak = Some(peak.map_or(hwm, |p| p.max(hwm)));
            }
        }
        let rss = if own {
            status_kib(pid, "VmRSS:").unwrap_or(0)
        } else {
            0
        };
        if start.elapsed() > limit || rss > 1 << 20 {
            // SAFETY: our child, not yet reaped.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let mut status = 0;
            unsafe { libc::waitpid(pid, &mut status, 0) };
            panic!(
                "{what}: still ran after {:?} holding {rss} KiB: killed",
                start.elapsed()
            );
        }
        // Often at first, so that a short run is read at least once.
        let pause = if start.elapsed() < Duration::from_millis(50) {
            Duration::from_micros(200)
        } else {
            Duration::from_millis(2)
        };
        std::thread::sleep(pause);
    }
}

/// Spawns `cmd`, a heapledger command, and waits for it measuring its peak
/// ([`wait_with_peak`], `what` the command as Debug shows it).
#[allow(clippy::zombie_processes)] // reaped by `wait_with_peak`
pub fn heapledger_with_peak(mut cmd: Command, limit: Duration) -> (Ended, String) {
    let what = format!("{cmd:?}");
    let child = cmd.spawn().unwrap_or_else(|e| panic!("{what}: {e}"));
    (wait_with_peak(&child, "heapledger", limit, &what), what)
}
