//! The `heapledger` command: runs programs under the recorder, turns its raw
//! dumps into profiles, and reports on profiles.

pub mod cli;
pub mod convert;
pub mod date;
pub mod live;
pub mod maps;
pub mod prefault;
pub mod run;
pub mod symbolizer;
pub mod tree;
