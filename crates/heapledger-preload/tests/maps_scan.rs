//! `src/data/maps.rs`: the line of `/proc/self/maps` that holds an address,
//! found in text fed in pieces of any size.

#[path = "../src/data/maps.rs"]
mod maps;

use maps::{mapping_of, MapsScan};

const TEXT: &str = "\
55d0c0a00000-55d0c0a21000 r--p 00000000 08:01 1234   /usr/bin/prog
7f12a0000000-7f12a0801000 rw-p 00000000 00:00 0 \n\
7f12a0801000-7f12a0802000 ---p 00000000 00:00 0 \n\
7ffd1c000000-7ffd1c021000 rw-p 00000000 00:00 0                          [stack]
";

#[test]
fn finds_the_line_whatever_the_pieces() {
    let cases = [
        (0x7f12a0000000, Some((0x7f12a0000000, 0x7f12a0801000))),
        (0x7f12a0800fff, Some((0x7f12a0000000, 0x7f12a0801000))),
        (0x7f12a0801000, Some((0x7f12a0801000, 0x7f12a0802000))),
        (0x7ffd1c020ff8, Some((0x7ffd1c000000, 0x7ffd1c021000))),
        (0x55d0c0a21000, None),
        (0x1000, None),
    ];
    let bytes = TEXT.as_bytes();
    for (addr, want) in cases {
        for piece in 1..=bytes.len() {
            let mut scan = MapsScan::new(addr);
            let got = bytes.chunks(piece).find_map(|c| scan.feed(c));
            assert_eq!(got, want, "{addr:#x} in pieces of {piece}");
        }
    }
}

#[test]
fn reads_this_process_maps() {
    let local = 0u64;
    let at = &local as *const u64 as u64;
    let (lo, hi) = mapping_of(at).expect("the test's stack is mapped");
    assert!(lo <= at && at < hi, "{lo:#x}..{hi:#x} holds {at:#x}");
    assert_eq!(mapping_of(8), None);
}
