//! Analyses over profiles: call trees with recursion collapsing and the text
//! summary. Pure functions over `heapledger-profile` data; no I/O of their own.

pub mod calltree;
pub mod over_time;
pub mod summary;
pub mod temporary;
pub mod waits;
