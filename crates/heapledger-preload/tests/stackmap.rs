//! A thread's compact counters per stack (`src/data/stackmap.rs`) stay
//! exact: against the dump's full counters (`MinMaxSum`), over counts past
//! 2^32, sizes of 4 GiB and more, and merges.

#![allow(dead_code, unused_imports)]

extern crate alloc;

/// Stacks the stand-in stack table holds.
const STACKS: usize = 64;

include!("support/stackmap_env.rs");

impl Rng {
    fn size(&mut self) -> u64 {
        match self.next() % 8 {
            0 => 0,
            1 => u32::MAX as u64 + self.next() % 3,
            2 => (1 << 40) + self.next() % 1000,
            _ => self.next() % 5000,
        }
    }
    fn weight(&mut self) -> u64 {
        match self.next() % 16 {
            0 => u32::MAX as u64 - self.next() % 3,
            1 => (1 << 33) + self.next() % 7,
            _ => 1 + self.next() % 20,
        }
    }
}

/// One stack's counters, applied to the compact map and to a model.
fn apply(r: &mut Rng, map: &mut StackMap, model: &mut [Totals], id: u32) {
    let mut c = map.get(id).unwrap();
    let t = &mut model[id as usize];
    let (size, w) = (r.size(), r.weight());
    match r.next() % 7 {
        0 | 1 => {
            c.add_alloc(size, w, size.wrapping_mul(w));
            t.alloc.add_weighted(size, w, size.wrapping_mul(w));
        }
        2 | 3 => {
            c.add_free(size, w, size);
            t.free.add_weighted(size, w, size);
        }
        4 => {
            c.add_lifetime(size, w, size.wrapping_mul(w));
            t.lifetime.add_weighted(size, w, size.wrapping_mul(w));
        }
        5 => {
            c.add_zeros(w);
            t.zeros += w;
            c.add_realloc(size as i64 - 7);
            t.realloc_count += 1;
            t.realloc_delta += size as i64 - 7;
        }
        _ => {
            let unmap = r.next().is_multiple_of(2);
            c.add_map(size, unmap);
            match unmap {
                true => t.munmap.add(size),
                false => t.mmap.add(size),
            }
        }
    }
}

fn totals(map: &StackMap, id: u32) -> Totals {
    map.full(map.find(id).unwrap()).t
}

#[test]
fn compact_counters_equal_the_full_ones() {
    let mut r = Rng(0x1234_5678_9abc_def1);
    let mut map = StackMap::new();
    let mut model = vec![Totals::default(); 64];
    for _ in 0..200_000 {
        let id = (r.next() % 64) as u32;
        apply(&mut r, &mut map, &mut model, id);
    }
    for id in 0..64 {
        assert_eq!(totals(&map, id), model[id as usize], "stack {id}");
    }
}

/// An entry's bytes alive are what it allocated less what it freed.
#[test]
fn bytes_alive_follow_the_sums() {
    let mut m = StackMap::new();
    let mut s = m.get(7).unwrap();
    s.add_alloc(100, 1, 100);
    s.add_alloc(50, 1, 50);
    s.add_free(100, 1, 100);
    assert_eq!(s.ps.alive(), 50);
    s.add_free(50, 1, 50);
    s.add_free(8, 1, 8); // a block of another thread's, freed here
    assert_eq!(s.ps.alive(), -8);
    assert_eq!(m.full(0).alive, -8);
}

#[test]
fn small_counts_need_no_rare_record_and_read_back() {
    let mut map = StackMap::new();
    let mut c = map.get(5).unwrap();
    c.add_alloc(100, 1, 100);
    c.add_alloc(7, 1, 7);
    c.add_free(100, 1, 100);
    c.add_lifetime(50, 1, 50);
    assert!(c.allocs_below(3) && !c.allocs_below(2));
    let t = totals(&map, 5);
    let mms = |count, min, max, sum| MinMaxSum {
        count,
        min,
        max,
        sum,
    };
    assert_eq!(t.alloc, mms(2, 7, 100, 107));
    assert_eq!(t.free, mms(1, 100, 100, 100));
    assert_eq!(t.lifetime, mms(1, 50, 50, 50));
    assert_eq!(t.mmap, MinMaxSum::default());
}

#[test]
fn merged_maps_equal_the_merged_totals() {
    let mut r = Rng(0x0ddb_a11c_afe0_1234);
    let (mut a, mut b) = (StackMap::new(), StackMap::new());
    let mut model = vec![Totals::default(); 64];
    let mut model_b = vec![Totals::default(); 64];
    for i in 0..100_000 {
        let id = (r.next() % 64) as u32;
        if i % 2 == 0 {
            apply(&mut r, &mut a, &mut model, id);
        } else {
            apply(&mut r, &mut b, &mut model_b, id);
        }
    }
    let mut merged = StackMap::new();
    for m in [&a, &b] {
        for (id, at) in m.iter() {
            assert!(merged.absorb(id, &m.full(at), 0));
        }
    }
    for id in 0..64 {
        let mut want = model[id as usize];
        want.merge(&model_b[id as usize]);
        let got = merged.find(id).map(|at| merged.full(at).t);
        assert_eq!(got.unwrap_or_default(), want, "stack {id}");
    }
    // A full entry stored back reads the same.
    let f: Full = merged.full(merged.find(3).unwrap());
    let mut again = StackMap::new();
    assert!(again.absorb(3, &f, 0));
    assert_eq!(again.full(0).t, f.t);
}
