//! Writes and reads a large synthetic profile and prints the rates, against
//! serde_json's own speed on the same bytes as a baseline.
//!
//!     cargo run --release -p heapledger-profile --example bench_io [STACKS]

use std::time::Instant;

use heapledger_profile::{Addr, InstrEntry, Profile, Run, StackInfos, StackStat, StringTable};

fn main() {
    let stacks: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000);
    let mut p = Profile::new(Run::new("heapledger-bench", "bench", "./bench"));
    let mut strings = StringTable::new();
    let file = strings.intern("/src/bench.c");
    let binary = strings.intern("/usr/bin/bench");
    for f in 0..10_000u64 {
        let function = strings.intern(&format!("function_{f}"));
        p.sites.instr.insert(
            Addr::native(0x400000 + f * 16),
            InstrEntry {
                file,
                function,
                line: Some(f as u32),
                binary,
            },
        );
    }
    p.sites.strings = strings.into_strings();
    for s in 0..stacks {
        let frames = (0..20)
            .map(|d| Addr::native(0x400000 + ((s * 7 + d * 13) % 10_000) * 16))
            .collect();
        let mut infos = StackInfos::default();
        infos.alloc.add(s % 4096);
        infos.free.add(s % 4096);
        p.stacks
            .push(StackStat::new(format!("0x{s:x}"), frames, infos));
    }

    let start = Instant::now();
    let mut bytes = Vec::new();
    p.write_to(&mut bytes).unwrap();
    let write = start.elapsed().as_secs_f64();

    let start = Instant::now();
    let back = Profile::from_slice(&bytes).unwrap();
    let read = start.elapsed().as_secs_f64();
    assert_eq!(back.stacks.len(), p.stacks.len());

    let start = Instant::now();
    let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    let baseline_read = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let mut again = Vec::new();
    serde_json::to_writer(&mut again, &value).unwrap();
    let baseline_write = start.elapsed().as_secs_f64();

    let mb = bytes.len() as f64 / 1e6;
    println!("{stacks} stacks x 20 frames: {mb:.1} MB of JSON");
    println!(
        "write {:>7.3} s  {:>6.0} MB/s  ({:.2}x serde_json::Value)",
        write,
        mb / write,
        write / baseline_write
    );
    println!(
        "read  {:>7.3} s  {:>6.0} MB/s  ({:.2}x serde_json::Value)",
        read,
        mb / read,
        read / baseline_read
    );
}
