//! The level of requested bytes and its peak (`src/data/level.rs`): moves
//! from several threads at once take effect in one order, so the peak is
//! the highest level any move left, and every move knows whether it set it.

#![allow(dead_code)]

#[path = "../src/data/level.rs"]
mod level;
#[path = "../src/base/sync.rs"]
mod sync;
/// The recorder's layout, for the paths inside (`crate::base::sync`).
mod base {
    pub(crate) use super::sync;
}

#[test]
fn the_peak_is_the_highest_level_of_one_order() {
    let threads: Vec<_> = (0..4i64)
        .map(|t| {
            std::thread::spawn(move || {
                let (mut highest, mut set) = (0i64, 0u64);
                for i in 0..200_000i64 {
                    let size = 1 + (i * 7 + t) % 97;
                    let m = level::apply(size);
                    highest = highest.max(m.level);
                    if m.set_peak() {
                        assert_eq!(m.peak_after, m.level as u64);
                        assert!(m.peak_after > m.peak_before);
                        set += 1;
                    } else {
                        assert!(m.level <= m.peak_after as i64);
                    }
                    let m = level::apply(-size);
                    assert!(!m.set_peak());
                }
                (highest, set)
            })
        })
        .collect();
    let results: Vec<(i64, u64)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let (level, peak) = level::read();
    assert_eq!(level, 0);
    let highest = results.iter().map(|r| r.0).max().unwrap();
    assert_eq!(
        peak, highest as u64,
        "the peak is not the highest level left"
    );
    assert!(results.iter().map(|r| r.1).sum::<u64>() >= 1);
}
