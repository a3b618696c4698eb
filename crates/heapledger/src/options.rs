//! The plain option types of the commands, below everything that uses them:
//! `cli` parses the command line into them, `run` and the others take them.

use std::ffi::OsString;
use std::path::PathBuf;

#[derive(Clone, Copy, Debug, clap::ValueEnum, PartialEq, Eq)]
pub enum StackArg {
    /// DWARF CFI unwinding: right on code built without frame pointers.
    Dwarf,
    /// Frame-pointer walk: fast, right only on code built with frame pointers.
    Fp,
    /// No stacks: counts, sizes and live blocks only.
    None,
    /// The stack the program keeps itself when built with
    /// `-finstrument-functions` (its functions' entries and exits).
    EnterExit,
}

/// Plain options of `heapledger run`.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub program: OsString,
    pub args: Vec<OsString>,
    pub output: Option<PathBuf>,
    pub stack: StackArg,
    pub max_depth: u32,
    pub follow: bool,
    pub sample_every: Option<u64>,
    /// Time every block's lifetime (`lifetimes=exact`), not a sample of
    /// each stack's blocks.
    pub exact_lifetimes: bool,
    pub top: usize,
    pub quiet: bool,
    /// How long to wait, once the program has ended, for the processes it
    /// started that still run (followed children only).
    pub wait_children: std::time::Duration,
    /// Time between the checkpoints each process writes while it runs (the
    /// profile of a process killed by SIGKILL); zero: none.
    pub checkpoint_every: std::time::Duration,
    /// Start with stack capture off (`--backtrace off`): the program
    /// (`heapledger.h`) or `heapledger ctl` switches it on.
    pub backtrace_off: bool,
    /// Time between the snapshots each process stores by itself.
    pub snapshot_every: Option<std::time::Duration>,
    /// Requested bytes alive above which a process stores a snapshot.
    pub snapshot_when_above: Option<u64>,
    /// `--only-lib`: the libraries whose allocations alone are recorded.
    pub only_lib: Vec<String>,
    /// Lock waits recorded (time lost), each thread keeping its
    /// `waits_top` longest entries.
    pub waits: bool,
    pub waits_top: u32,
    /// Leave Python's pymalloc in place (no PYTHONMALLOC=malloc).
    pub pymalloc: bool,
    /// Python's own functions in the stacks (PYTHONPERFSUPPORT=1, for
    /// CPython 3.12 and later; `--no-python-frames`).
    pub python_frames: bool,
}
