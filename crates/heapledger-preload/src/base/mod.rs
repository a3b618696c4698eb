//! Layer 1, the leaves: what every other layer builds on, importing none of
//! them: the clock, the recorder's phase and how it degrades when memory
//! runs out, the configuration, locks, the private arena the recorder
//! allocates from, and the real functions the hooks forward to.

pub mod arena;
pub mod clock;
pub mod config;
pub mod degrade;
pub mod phase;
pub mod real;
pub mod sync;
