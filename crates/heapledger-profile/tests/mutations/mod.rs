//! Byte mutations for the fuzzing tests of every reader (profiles, dumps):
//! bits flipped, bytes set, inserted or deleted, runs copied, cuts; and the
//! number of cases, which `HEAPLEDGER_FUZZ_CASES` raises.
#![allow(dead_code)]

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::Config;

#[derive(Clone, Debug)]
pub enum Mutation {
    Flip(Index, u8),
    Set(Index, u8),
    Insert(Index, Vec<u8>),
    Delete(Index, usize),
    Copy(Index, Index, usize),
    Cut(Index),
}

pub fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<Index>(), 0u8..8).prop_map(|(i, b)| Mutation::Flip(i, b)),
        3 => (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
        2 => (any::<Index>(), prop::collection::vec(any::<u8>(), 1..12))
            .prop_map(|(i, v)| Mutation::Insert(i, v)),
        2 => (any::<Index>(), 1usize..16).prop_map(|(i, n)| Mutation::Delete(i, n)),
        1 => (any::<Index>(), any::<Index>(), 1usize..64)
            .prop_map(|(a, b, n)| Mutation::Copy(a, b, n)),
        1 => any::<Index>().prop_map(Mutation::Cut),
    ]
}

/// `bytes` with the mutations applied, in order.
pub fn apply(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        if bytes.is_empty() {
            break;
        }
        let len = bytes.len();
        match m {
            Mutation::Flip(i, bit) => bytes[i.index(len)] ^= 1 << bit,
            Mutation::Set(i, b) => bytes[i.index(len)] = *b,
            Mutation::Insert(i, v) => {
                let at = i.index(len + 1);
                bytes.splice(at..at, v.iter().copied());
            }
            Mutation::Delete(i, n) => {
                let at = i.index(len);
                bytes.drain(at..(at + n).min(len));
            }
            Mutation::Copy(from, to, n) => {
                let from = from.index(len);
                let run: Vec<u8> = bytes[from..(from + n).min(len)].to_vec();
                let to = to.index(len + 1);
                bytes.splice(to..to, run);
            }
            Mutation::Cut(i) => bytes.truncate(i.index(len)),
        }
    }
    bytes
}

pub fn cases(default: u32) -> Config {
    let n = std::env::var("HEAPLEDGER_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    Config {
        cases: n,
        failure_persistence: None,
        ..Config::default()
    }
}
