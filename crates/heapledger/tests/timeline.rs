//! Memory over time (issue 31): a program of known shape
//! (programs/plateaus.c) shows its plateaus in requested and resident
//! memory at the right times, within a bucket, and a 5 ms spike in a 3 s
//! run as a bucket's maximum, charged to the site that allocated it; the
//! rates add up to the profile's totals; the summary draws it.

mod common;

use common::*;
use heapledger_profile::timeline::{bandwidth, memory};
use std::process::Command;

const MB: u64 = 1 << 20;

#[test]
fn plateaus_and_a_spike_show_at_their_times() {
    let dir = Scratch::new("timeline");
    let exe = dir.join("plateaus");
    compile("cc", &["plateaus.c"], SITE_FLAGS, &exe);
    let (p, _) = profile_of("dwarf", &dir, &exe, &[] as &[&str]);
    let t = &p.timeline.memory_timeline;
    let tps = p.globals.ticks_per_second as f64;
    let step = t.per_points as f64 / tps;
    assert!(step > 0.0 && step <= 0.01, "buckets of {step} s");
    let n = t.values.len();
    assert!(
        (3.0..3.1 + step).contains(&(n as f64 * step)),
        "{n} buckets of {step} s for a 3 s run"
    );
    let low = &p.heapledger.as_ref().unwrap().timeline_low_requested;
    assert_eq!(low.len(), n);
    // Bucket i covers [i * step, (i + 1) * step); those wholly inside
    // (from, to), with a bucket's margin for the program's own timing.
    let inside = |from: f64, to: f64| -> Vec<usize> {
        (0..n)
            .filter(|&i| i as f64 * step >= from + step && (i + 1) as f64 * step <= to - step)
            .collect()
    };
    let req = |i: usize| t.values[i][memory::REQUESTED];
    let rss = |i: usize| t.values[i][memory::PHYSICAL];
    let shape = |i: usize| {
        format!(
            "bucket {i} ({:.3} s): requested {}..{}, resident {}",
            i as f64 * step,
            low[i],
            req(i),
            rss(i)
        )
    };
    for (from, to, held) in [
        (0.0, 0.2, 0),
        (0.2, 0.5, 10),
        (0.5, 0.7, 0),
        (0.7, 0.8, 50),
        // (From 1.1 s: the 50 MB are freed once written, late on a busy
        // machine.)
        (1.1, 2.5, 0),
        // (The spike: 5 ms plus the writing of 20 MB, longer on a busy
        // machine.)
        (2.5 + 0.2, 3.0, 0),
    ] {
        let buckets = inside(from, to);
        assert!(!buckets.is_empty(), "no bucket inside {from}..{to} s");
        // Resident memory reaches what is held once the block is written
        // (which may end after the plateau on a busy machine: the free
        // waits for it).
        let most = (0..n)
            .filter(|&i| i as f64 * step >= from && i as f64 * step <= to + 0.3)
            .max_by_key(|&i| rss(i))
            .unwrap();
        assert!(
            rss(most) >= held * MB,
            "resident below what is held in {from}..{to} s: {}",
            shape(most)
        );
        for i in buckets {
            // Exactly the blocks held, give or take the C library's own
            // few bytes.
            let want = held * MB;
            assert!(
                low[i] >= want && req(i) <= want + 64 * 1024,
                "{from}..{to} s should hold {held} MB: {}",
                shape(i)
            );
            // Blocks alive: the one held, or none.
            assert_eq!(
                t.values[i][memory::SEGMENTS],
                u64::from(held > 0),
                "{from}..{to} s: {}",
                shape(i)
            );
            // (Resident memory follows as the block is written: checked
            // above.)
            if held == 0 {
                assert!(
                    rss(i) < 10 * MB,
                    "resident memory not given back: {}",
                    shape(i)
                );
            }
        }
    }
    // The spike: one bucket near 2.5 s reaches 20 MB, set by `hold`.
    let spike: Vec<usize> = (0..n)
        .filter(|&i| req(i) >= 20 * MB)
        .filter(|&i| i as f64 * step > 1.0)
        .collect();
    assert!(
        !spike.is_empty(),
        "the 5 ms spike of 20 MB is not in any bucket"
    );
    let first = spike[0];
    assert!(
        ((first as f64 * step) - 2.5).abs() < 2.0 * step + 0.05,
        "the spike shows at {} s, not 2.5 s",
        first as f64 * step
    );
    let (function, line) = frame(&p, t.callsite[first]);
    assert!(
        is_fn(&function, "hold") && line == Some(site_line("plateaus.c", "hold")),
        "the spike's bucket names {function}:{line:?}, not hold"
    );
    assert_eq!(t.peak[memory::REQUESTED], 50 * MB);

    // The rates add up to the allocations and frees of the profile.
    let b = &p.timeline.memory_bandwidth.values;
    let sum = |k: usize| b.iter().map(|v| v[k]).sum::<u64>();
    let calls = p.call_totals();
    let malloc = calls.iter().iter().find(|(n, _)| *n == "malloc").unwrap().1;
    assert_eq!(sum(bandwidth::ALLOC_COUNT), malloc.count);
    assert_eq!(sum(bandwidth::ALLOC_MEM), malloc.sum);
    assert_eq!(sum(bandwidth::FREE_COUNT), 3);
    assert_eq!(sum(bandwidth::FREE_MEM), 80 * MB);

    // The scatter (MALT's): the three blocks by time and size, and by size
    // and lifetime, each at the lower bound of its power-of-two cell.
    let sot = &p.scatter.size_over_time;
    let mut cells: Vec<(u64, u64, u64)> = sot.points.iter().map(|q| (q.y, q.x, q.v)).collect();
    cells.sort();
    let cell_of = |v: u64| 1u64 << (63 - v.leading_zeros());
    let at = |secs: f64| (secs * tps) as u64;
    assert_eq!(
        cells.iter().map(|c| (c.0, c.2)).collect::<Vec<_>>(),
        [
            (cell_of(10 * MB), 1),
            (cell_of(20 * MB), 1),
            (cell_of(50 * MB), 1)
        ],
        "{cells:?}"
    );
    // Time cells are at most 1/64 of the run wide.
    let width = sot.infos.x_axis.max / 64;
    for (c, secs) in cells.iter().zip([0.2, 2.5, 0.7]) {
        assert!(
            c.1 <= at(secs + 0.05) && c.1 + width >= at(secs),
            "allocation at {secs} s in the cell from {} ticks, {width} wide",
            c.1
        );
    }
    let los = &p.scatter.lifetime_over_size;
    let mut cells: Vec<(u64, u64, u64)> = los.points.iter().map(|q| (q.x, q.y, q.v)).collect();
    cells.sort();
    assert_eq!(cells.len(), 3, "{cells:?}");
    for (c, (mb, lived)) in cells.iter().zip([(10, 0.3), (20, 0.005), (50, 0.1)]) {
        assert_eq!((c.0, c.2), (cell_of(mb * MB), 1), "{cells:?}");
        // Lived about `lived` s (the 20 MB block: the writing of it too).
        assert!(
            c.1 <= at(lived + 0.2) && 2 * c.1 > at(lived - 0.05),
            "{mb} MB lived {lived} s, not in the cell from {} ticks",
            c.1
        );
    }

    // The summary draws it, and says it in JSON.
    let store = dir.join("p.sqlite");
    let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .arg("report")
        .arg(&store)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    let drawn: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("Memory over time"))
        .take(3)
        .collect();
    assert_eq!(drawn.len(), 3, "{text}");
    assert!(
        drawn[1].trim_start().starts_with("requested") && drawn[1].contains('█'),
        "{text}"
    );
    assert!(drawn[2].trim_start().starts_with("resident"), "{text}");
    let j = report_json(&store);
    let cols = j["over_time"]["requested_bytes"].as_array().unwrap();
    assert_eq!(cols.iter().filter_map(|v| v.as_u64()).max(), Some(50 * MB));
}
