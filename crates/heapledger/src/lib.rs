//! The `heapledger` command: runs programs under the recorder, turns its raw
//! dumps into profiles, and reports on profiles.
//!
//! Each module imports only those on the lines below its own:
//!
//! ```text
//! cli                      parses arguments into options, dispatches
//! run   tree   export   check   diff   the commands
//! profiles                 opening a profile (a store's process, or JSON)
//! recover                  turns an interrupted run's raw data into profiles
//! symbolizer               symbolizes beside the running program
//! convert   live           raw dumps into profiles; stacks seen while it runs
//! output                   where profiles go, written whole or not at all
//! dumps                    the raw data's directory, and reading it
//! options preload maps date prefault series fatal   leaves
//! ```

/// `eprintln!` that cannot fail: a message heapledger could not write (its
/// stderr a pipe closed early, as in `heapledger run -- prog 2>&1 | head`) is
/// dropped. `eprintln!` panics there, which ended a run before it removed
/// the raw data, and with exit 134 instead of the program's code.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        let _ = ::std::writeln!(::std::io::stderr(), $($arg)*);
    }};
}

/// `println!` that cannot fail (see [`say!`]): `heapledger check ... | head`
/// keeps its verdict's exit code.
#[macro_export]
macro_rules! tell {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        let _ = ::std::writeln!(::std::io::stdout(), $($arg)*);
    }};
}

/// `eprint!` that cannot fail (see [`say!`]).
#[macro_export]
macro_rules! say_part {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        let _ = ::std::write!(::std::io::stderr(), $($arg)*);
    }};
}

pub mod check;
pub mod cli;
pub mod convert;
pub mod ctl;
pub mod date;
pub mod diff;
pub mod dumps;
pub mod elf;
pub mod export;
pub mod fatal;
pub mod leaks;
pub mod live;
pub mod maps;
pub mod options;
pub mod output;
pub mod pprof;
pub mod prefault;
pub mod preload;
pub mod profiles;
pub mod recover;
pub mod run;
pub mod series;
pub mod symbolizer;
pub mod tree;
pub mod view;
pub mod waits;
