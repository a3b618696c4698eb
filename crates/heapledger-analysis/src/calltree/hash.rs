//! A fast hasher for keys that are integers already (node and routine ids):
//! one multiply per word and a rotation that brings the well-mixed high bits
//! down to where a hash table takes its bucket index. Not for untrusted keys
//! chosen to collide; profile data is not adversarial.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::RoutineId;

/// A `HashMap` keyed by ids.
pub(crate) type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct IdHasher(u64);

const K: u64 = 0x9e37_79b9_7f4a_7c15;

impl IdHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0 ^ word).wrapping_mul(K).rotate_left(26);
    }
}

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.add(u64::from(byte));
        }
    }

    fn write_u32(&mut self, word: u32) {
        self.add(u64::from(word));
    }

    fn write_u64(&mut self, word: u64) {
        self.add(word);
    }
}

/// The hash of a whole stack: four independent lanes of two frames each per
/// step, so that the multiplies do not wait on one another.
pub(crate) fn hash_frames(frames: &[RoutineId]) -> u64 {
    let mut lanes: [u64; 4] = [
        0x243f_6a88_85a3_08d3,
        0x1319_8a2e_0370_7344,
        0xa409_3822_299f_31d0,
        0x082e_fa98_ec4e_6c89,
    ];
    let mut chunks = frames.chunks_exact(8);
    for chunk in &mut chunks {
        for (lane, pair) in lanes.iter_mut().zip(chunk.chunks_exact(2)) {
            let word = pair[0].index() as u64 | (pair[1].index() as u64) << 32;
            *lane = (*lane ^ word).wrapping_mul(K).rotate_left(29);
        }
    }
    let mut hash = frames.len() as u64;
    for word in lanes
        .into_iter()
        .chain(chunks.remainder().iter().map(|frame| frame.index() as u64))
    {
        hash = (hash ^ word).wrapping_mul(K).rotate_left(29);
    }
    // Finish with a full avalanche (splitmix64's), as the table uses both ends.
    hash = (hash ^ (hash >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    hash = (hash ^ (hash >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    hash ^ (hash >> 31)
}
