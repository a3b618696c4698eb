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

/// A name the program gave (a snapshot's label, a kind of wait), as the
/// recorder keeps it: printable ASCII (anything else as `_`), at most
/// `max` bytes, `default` where empty.
pub fn printable(name: &[u8], max: usize, default: &str) -> alloc::string::String {
    let mut clean: alloc::string::String = name
        .iter()
        .take(max)
        .map(|&c| {
            if c.is_ascii_graphic() || c == b' ' {
                c as char
            } else {
                '_'
            }
        })
        .collect();
    if clean.is_empty() {
        clean.push_str(default);
    }
    clean
}
