//! The `heapledger` command: runs programs under the recorder, turns its raw
//! dumps into profiles, and reports on profiles.
//!
//! Each module imports only those on the lines below its own:
//!
//! ```text
//! cli                      parses arguments into options, dispatches
//! run   tree               the commands
//! symbolizer               symbolizes beside the running program
//! convert   live           raw dumps into profiles; stacks seen while it runs
//! options preload maps date prefault   leaves
//! ```

pub mod cli;
pub mod convert;
pub mod date;
pub mod live;
pub mod maps;
pub mod options;
pub mod prefault;
pub mod preload;
pub mod run;
pub mod symbolizer;
pub mod tree;
