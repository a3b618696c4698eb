//! No input makes the reader panic: the sample cut at many offsets, damaged
//! bytes, and random bytes all give an error (or, by chance, a profile).

mod common;

use heapledger_profile::{Profile, ProfileError};

/// A small deterministic generator (xorshift64*), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = common::sample_bytes();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    // Every offset of the first 4 KiB (all the small sections), then 200 random ones.
    let mut cuts: Vec<usize> = (0..4096).collect();
    cuts.extend((0..200).map(|_| rng.below(bytes.len())));
    for cut in cuts {
        let err = Profile::from_slice(&bytes[..cut]).unwrap_err();
        assert!(
            matches!(
                err,
                ProfileError::Truncated { .. } | ProfileError::Empty { .. }
            ),
            "cut at {cut}: {err}"
        );
    }
}

#[test]
fn damaged_bytes_never_panic() {
    let bytes = common::sample_bytes();
    let mut rng = Rng(42);
    for _ in 0..200 {
        let mut damaged = bytes.clone();
        for _ in 0..=rng.below(4) {
            let at = rng.below(damaged.len());
            damaged[at] = rng.next() as u8;
        }
        let _ = Profile::from_slice(&damaged);
    }
}

#[test]
fn random_bytes_are_errors() {
    let mut rng = Rng(7);
    const ALPHABET: &[u8] = b"{}[]\":,0123456789.-eEtrufalsn \n\\abcx\x00\xff";
    for round in 0..3000 {
        let len = rng.below(200);
        let bytes: Vec<u8> = if round % 2 == 0 {
            (0..len).map(|_| rng.next() as u8).collect()
        } else {
            (0..len)
                .map(|_| ALPHABET[rng.below(ALPHABET.len())])
                .collect()
        };
        assert!(Profile::from_slice(&bytes).is_err(), "{bytes:?} parsed");
    }
}
