//! Fuzzing the dump decoder with proptest: a valid dump damaged by byte
//! mutations (bit flips, bytes set, inserted, deleted, runs copied, cuts),
//! and random records after the magic. Whatever the bytes, `decode` returns
//! (never panics), its error is one short line, and the memory it takes
//! stays within a bound of the input's size.
//!
//! `HEAPLEDGER_FUZZ_CASES=N` runs N cases per property instead of the
//! default (kept to a few seconds for CI).

#[path = "../../heapledger-profile/tests/counting/mod.rs"]
mod counting;
#[path = "../../heapledger-profile/tests/mutations/mod.rs"]
mod mutations;

use counting::peak_of;
use heapledger_wire::*;
use mutations::{apply, cases, mutation};
use proptest::prelude::*;

struct VecSink(Vec<u8>);
impl Sink for VecSink {
    fn put(&mut self, b: &[u8]) {
        self.0.extend_from_slice(b);
    }
}

/// The magic and a header record.
fn header() -> Vec<u8> {
    let mut e = Encoder::new(VecSink(Vec::new()));
    e.tag(Tag::Header);
    for v in [VERSION, 42, 1, 1, 256, 0, 64, 1_000_000_000, 5, 900, 77] {
        e.u(v);
    }
    e.bytes(b"/bin/prog");
    e.bytes(b"prog\0-x\0");
    e.sink.0
}

/// A dump with every kind of record.
fn sample() -> Vec<u8> {
    let mut e = Encoder {
        sink: VecSink(header()),
    };
    e.checkpoint(&Checkpoint {
        seq: 2,
        ticks: 1_000_000,
    });
    e.tag(Tag::Module);
    for v in [0x400000, 0x401000, 0] {
        e.u(v);
    }
    e.bytes(b"/bin/prog");
    e.bytes(&[0xab; 20]);
    e.tag(Tag::Maps);
    e.bytes(b"00400000-00401000 r-xp 00000000 08:01 1 /bin/prog\n");
    let stacks: [&[u64]; 4] = [
        &[0x401010, 0x401100, 0x7f00_0000_2000],
        &[0x401020, 0x401100, 0x7f00_0000_2000],
        &[0x401030, 0x401040, 0x401020, 0x401100, 0x7f00_0000_2000],
        &[0x401050],
    ];
    let mut prev: &[u64] = &[];
    for (id, frames) in stacks.iter().enumerate() {
        e.stack(id as u64, frames, prev);
        prev = frames;
        let mut c = StackCounters::default();
        c.totals.alloc.add(10 * (id as u64 + 1));
        c.totals.free.add(10);
        c.alive = 5;
        c.max_alive = 40;
        e.stack_counters(id as u64, &c);
    }
    for (tag, first, ops) in [(Tag::Thread, 1, 30), (Tag::EndedThreads, 3, 60)] {
        e.tag(tag);
        e.u(first);
        e.u(ops);
        for f in 0..AllocFn::COUNT as u64 {
            e.u(f);
            e.u(f * 100);
            e.u(f * 7);
        }
    }
    for (size, n) in [(10, 3), (20, 1), (4096, 2)] {
        e.tag(Tag::Size);
        e.u(size);
        e.u(n);
    }
    e.tag(Tag::ReallocJump);
    for v in [16, 32, 4] {
        e.u(v);
    }
    e.tag(Tag::Leak);
    for v in [2, 1, 30] {
        e.u(v);
    }
    e.globals(&Globals {
        peak_requested: 100,
        peak_ticks: 50,
        max_threads: 2,
        ..Default::default()
    });
    e.tag(Tag::Unhooked);
    e.bytes(b"malloc\0free\0");
    e.bytes(b"/bin/prog");
    e.tag(Tag::End);
    e.sink.0
}

/// Gives at most 7 bytes a read.
struct Trickle<'a>(&'a [u8]);

impl std::io::Read for Trickle<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let n = out.len().min(7).min(self.0.len());
        out[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }
}

/// Decodes `bytes`: no panic, a one-line error, memory within bounds; and
/// read a few bytes at a time (`decode_read`, as `run` reads a dump), the
/// same dump or the same error.
fn decode_checked(bytes: &[u8]) -> Result<(), TestCaseError> {
    let whole = decode(bytes).map(|d| format!("{d:?}"));
    let read = decode_read(Trickle(bytes), bytes.len() as u64).map(|d| format!("{d:?}"));
    prop_assert_eq!(whole, read);
    // What a dump of this size can decode to: its records (a few times
    // its bytes) and the frames stacks share with the one before.
    let bound = 64 * 1024 + 512 * bytes.len();
    // Read a window at a time: the same, and a window of a page at least.
    let (_, peak) = peak_of(|| decode_read(Trickle(bytes), bytes.len() as u64).map(|_| ()));
    prop_assert!(
        peak <= bound + 8192,
        "reading {} bytes took {peak}",
        bytes.len()
    );
    let (result, peak) = peak_of(|| decode(bytes).map(|d| d.stacks.len()));
    prop_assert!(
        peak <= bound,
        "decoding {} bytes took {peak} bytes (bound {bound})",
        bytes.len()
    );
    if let Err(e) = result {
        let msg = e.to_string();
        prop_assert!(!msg.contains('\n') && msg.len() < 200, "{msg}");
    }
    Ok(())
}

#[test]
fn the_sample_decodes() {
    let d = decode(&sample()).unwrap();
    assert_eq!(d.stacks.len(), 4);
    assert_eq!(d.tree.depth(d.stacks[2].node), 5);
    assert_eq!(d.leaks.len(), 1);
    assert_eq!(d.unhooked, ["malloc", "free"]);
}

proptest! {
    #![proptest_config(cases(3000))]

    #[test]
    fn mutated_dumps(mutations in prop::collection::vec(mutation(), 1..6)) {
        decode_checked(&apply(sample(), &mutations))?;
    }

    #[test]
    fn random_records(body in prop::collection::vec(any::<u8>(), 0..400)) {
        // A valid header first, most of the time, so that records are read.
        let mut bytes = if body.first().is_some_and(|b| b % 4 != 0) {
            header()
        } else {
            MAGIC.to_vec()
        };
        bytes.extend(body);
        decode_checked(&bytes)?;
    }
}

/// A record that claims more frames than any stack has, or more than the
/// bytes left, is refused before anything is reserved for it.
#[test]
fn declared_counts_are_checked_first() {
    for n in [u64::MAX, 1 << 40, MAX_STACK_FRAMES as u64 + 1, 1000] {
        let mut e = Encoder {
            sink: VecSink(header()),
        };
        e.tag(Tag::Stack);
        e.u(1);
        e.u(n);
        e.u(0);
        e.tag(Tag::End);
        let (r, peak) = peak_of(|| decode(&e.sink.0).map(|_| ()));
        assert!(
            matches!(r, Err(DecodeError::BadRecord { tag: 4, .. })),
            "{n}: {r:?}"
        );
        assert!(peak < 64 * 1024, "{n} frames declared: {peak} bytes taken");
    }
}

/// Stats records that name the first stack again and again are found in
/// constant time (a search from the end took quadratic time).
#[test]
fn many_stats_records_take_linear_time() {
    let mut e = Encoder {
        sink: VecSink(header()),
    };
    let mut prev: Vec<u64> = Vec::new();
    for id in 0..100_000u64 {
        let frames = [id + 1];
        e.stack(id, &frames, &prev);
        prev = frames.to_vec();
    }
    for _ in 0..100_000 {
        e.stack_counters(0, &StackCounters::default());
    }
    e.tag(Tag::End);
    let start = std::time::Instant::now();
    let d = decode(&e.sink.0).unwrap();
    assert_eq!(d.stacks.len(), 100_000);
    assert!(
        start.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
}
