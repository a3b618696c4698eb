//! The checkpoint series of a process (`heapledger_wire::SERIES_MAGIC`),
//! from the recorder's stack ids to the profile's stacks.

use heapledger_profile::{Changed, CompactStacks, Series, SeriesCounts, SeriesPoint};
use heapledger_wire::{Dump, SeriesRecordRef};
type HashMap<K, V, S = foldhash::fast::RandomState> = std::collections::HashMap<K, V, S>;

/// The profile's stack (its index) of each recorder stack id: by index
/// where the ids are dense (the recorder numbers its stacks from 0), 4
/// bytes a stack; hashed otherwise (a map of half a million took 17 MB).
pub enum IdMap {
    Dense(Vec<u32>),
    Sparse(HashMap<u64, usize, foldhash::fast::RandomState>),
}

impl IdMap {
    /// For stacks of these ids (`max`: the largest, `n`: how many).
    pub fn new(max: u64, n: usize) -> IdMap {
        if max < 4 * n as u64 + 1024 {
            IdMap::Dense(vec![u32::MAX; max as usize + 1])
        } else {
            IdMap::Sparse(HashMap::with_capacity_and_hasher(n, Default::default()))
        }
    }

    pub fn insert(&mut self, id: u64, at: usize) {
        match self {
            IdMap::Dense(v) => {
                if let Some(x) = v.get_mut(id as usize) {
                    *x = at as u32;
                }
            }
            IdMap::Sparse(m) => {
                m.insert(id, at);
            }
        }
    }

    pub fn get(&self, id: u64) -> Option<usize> {
        match self {
            IdMap::Dense(v) => v
                .get(usize::try_from(id).ok()?)
                .filter(|&&x| x != u32::MAX)
                .map(|&x| x as usize),
            IdMap::Sparse(m) => m.get(&id).copied(),
        }
    }
}

/// Most checkpoints a profile's series keeps. A longer run keeps one
/// checkpoint in k (its last among them) with the stacks that changed at
/// the ones left out, so that every stack's counters at a kept point are
/// still those it had then (`Thinning`): at the default 2 s, 1 024 points
/// are 34 minutes, and a 10-hour run keeps a point every 36 s. A run with
/// 16 384 stacks always busy wrote 1 246 checkpoints into 38 MB of
/// profile; 18 000 (10 hours) would have taken about 550 MB.
pub const MAX_POINTS: usize = 1024;

/// Which of a series' `n` records become points, and the stacks changed
/// since the last point (pushed to `changed` as records are read).
struct Thinning {
    n: usize,
    every: usize,
    changed: Vec<u32>,
}

impl Thinning {
    fn new(n: usize) -> Thinning {
        Thinning {
            n,
            every: n.div_ceil(MAX_POINTS).max(1),
            changed: Vec::new(),
        }
    }

    /// After record `i`'s rows: where it is kept (the last record, and
    /// every `every`-th counting back from it), the stacks changed since
    /// the last point, each once, in order.
    fn point(&mut self, i: usize) -> Option<std::vec::Drain<'_, u32>> {
        if !(self.n - 1 - i).is_multiple_of(self.every) {
            return None;
        }
        self.changed.sort_unstable();
        self.changed.dedup();
        Some(self.changed.drain(..))
    }
}

/// The series of `d`'s checkpoints (taken from it, at most `MAX_POINTS`), each stack by its
/// index in `stacks` (`id_map`: a recorder stack id's index), and a last
/// point at the profile's end with the stacks that changed since the last
/// checkpoint. Recorded stacks that became one profile stack add up.
///
/// Each profile stack's counters are kept in an array; those of recorded
/// stacks that became one (rare) by id as well, to take the difference
/// each brings. Half a million stacks changed at four checkpoints take
/// 0.2 s here, where hash maps of every id took 1.3 s.
/// `merged`: the profile stacks (sorted) that more than one recorded
/// stack became.
pub fn of(d: &mut Dump, id_map: &IdMap, stacks: &CompactStacks, merged: &[usize]) -> Series {
    let raw = std::mem::take(&mut d.series);
    let file = d.series_file.take();
    // Up to the checkpoint the profile stops at, where it does.
    let upto = d.checkpoint.map_or(u64::MAX, |c| c.seq);
    // Each record in turn, from the bytes or the file.
    let each = |f: &mut dyn FnMut(SeriesRecordRef<'_>)| match &file {
        Some(path) => {
            if let Ok(file) = std::fs::File::open(path) {
                heapledger_wire::each_series_record(file, |r| {
                    let go = r.seq <= upto;
                    if go {
                        f(r);
                    }
                    go
                });
            }
        }
        None => heapledger_wire::series_record_refs(&raw)
            .take_while(|r| r.seq <= upto)
            .for_each(f),
    };
    let mut n = 0;
    each(&mut |_| n += 1);
    if n == 0 {
        return Series::default();
    }
    let tps = d.ticks_per_second.max(1) as f64;
    let seconds = |ticks: u64| ticks.saturating_sub(d.start_ticks) as f64 / tps;
    let mut merged_ids: HashMap<u64, SeriesCounts> = HashMap::default();
    let mut by_index: Vec<SeriesCounts> = vec![[0; 4]; stacks.len()];
    let mut points = Vec::new();
    let mut thin = Thinning::new(n);
    let mut i = 0;
    let mut last_ticks = 0;
    each(&mut |r| {
        // Records appended since they were counted (a process that was
        // still running) are left out: the count decided the points.
        if i >= n {
            return;
        }
        last_ticks = r.ticks;
        for (id, c) in r.rows() {
            let Some(at) = id_map.get(id) else { continue };
            let sum = &mut by_index[at];
            if merged.binary_search(&at).is_ok() {
                let old = merged_ids.insert(id, c).unwrap_or_default();
                for k in 0..4 {
                    sum[k] = sum[k].wrapping_add(c[k].wrapping_sub(old[k]));
                }
            } else {
                *sum = c;
            }
            thin.changed.push(at as u32);
        }
        if let Some(changed) = thin.point(i) {
            points.push(SeriesPoint {
                seconds: seconds(r.ticks),
                changed: changed.map(|at| (at, by_index[at as usize])).collect(),
            });
        }
        i += 1;
    });
    // Fewer records than counted (the file changed between the readings):
    // the stacks changed since the last point still get one.
    if i < n && !thin.changed.is_empty() {
        thin.every = 1;
        if let Some(changed) = thin.point(thin.n - 1) {
            points.push(SeriesPoint {
                seconds: seconds(last_ticks),
                changed: changed.map(|at| (at, by_index[at as usize])).collect(),
            });
        }
    }
    drop(merged_ids);
    // The end: the profile's own counters.
    let end = match d.checkpoint {
        Some(c) => seconds(c.ticks),
        None => seconds(d.end_ticks),
    };
    let changed: Changed = by_index
        .iter()
        .enumerate()
        .filter_map(|(at, last)| {
            let now = stacks.alloc_free(at);
            (*last != now).then_some((at as u32, now))
        })
        .collect();
    if points.last().is_none_or(|p| p.seconds < end) || !changed.is_empty() {
        points.push(SeriesPoint {
            seconds: end.max(points.last().map_or(0.0, |p| p.seconds)),
            changed,
        });
    }
    Series { points }
}

#[cfg(test)]
mod tests {
    use super::*;
    use heapledger_profile::StackInfos;
    use heapledger_wire::SERIES_MAGIC;

    fn u(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push(v as u8 | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    /// A series file of `n` records, each changing a few of `k` stacks
    /// (ids 0..k), counters growing; and each record's counters of every
    /// stack as they stand after it.
    fn series_file(n: usize, k: usize) -> (Vec<u8>, Vec<Vec<SeriesCounts>>) {
        let mut file = Vec::new();
        let mut now = vec![[0u64; 4]; k];
        let mut after = Vec::new();
        let mut x = 12345u64;
        for seq in 1..=n as u64 {
            let mut ids: Vec<usize> = (0..3)
                .map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (x >> 33) as usize % k
                })
                .collect();
            ids.sort_unstable();
            ids.dedup();
            let mut e = Vec::new();
            u(&mut e, seq);
            u(&mut e, seq * 1000);
            let mut prev = 0i64;
            for &id in &ids {
                let c = &mut now[id];
                c[0] += 1;
                c[1] += 16 * seq;
                c[2] += seq % 2;
                c[3] += 16 * (seq % 2);
                let d = id as i64 - prev;
                u(&mut e, ((d << 1) ^ (d >> 63)) as u64);
                prev = id as i64;
                for v in *c {
                    u(&mut e, v);
                }
            }
            file.extend_from_slice(&SERIES_MAGIC);
            file.extend_from_slice(&(e.len() as u32).to_le_bytes());
            file.extend_from_slice(&e);
            after.push(now.clone());
        }
        (file, after)
    }

    /// Each stack's counters at every point: its last row at or before it.
    fn replay(s: &Series, k: usize) -> Vec<(f64, Vec<SeriesCounts>)> {
        let mut now = vec![[0u64; 4]; k];
        s.points
            .iter()
            .map(|p| {
                for (_, (at, c)) in p.changed.iter() {
                    now[at as usize] = c;
                }
                (p.seconds, now.clone())
            })
            .collect()
    }

    #[test]
    fn a_long_series_keeps_at_most_max_points_each_exact_at_its_time() {
        let k = 40;
        let mut stacks = CompactStacks::new(vec![u32::MAX], vec![Default::default()]);
        for _ in 0..k {
            stacks.push(0, 0, &StackInfos::default());
        }
        let mut ids = IdMap::new(k as u64, k);
        for id in 0..k {
            ids.insert(id as u64, id);
        }
        for n in [10, MAX_POINTS, MAX_POINTS + 1, 3 * MAX_POINTS + 7, 18_000] {
            let (file, after) = series_file(n, k);
            let mut d = Dump::default();
            d.series = file;
            d.ticks_per_second = 1000;
            d.end_ticks = (n as u64 + 1) * 1000;
            let s = of(&mut d, &ids, &stacks, &[]);
            // The same, read from the file as it goes.
            let path = std::env::temp_dir().join(format!(
                "heapledger-series-test-{}-{n}.series",
                std::process::id()
            ));
            std::fs::write(&path, series_file(n, k).0).unwrap();
            let mut f = Dump::default();
            f.series_file = Some(path.clone());
            f.ticks_per_second = 1000;
            f.end_ticks = d.end_ticks;
            let from_file = of(&mut f, &ids, &stacks, &[]);
            std::fs::remove_file(&path).unwrap();
            assert_eq!(from_file, s, "{n}");
            // The checkpoints kept, then the end (its stacks' counters are
            // the profile's, all 0 here).
            let kept = s.points.len() - 1;
            assert!(kept <= MAX_POINTS, "{n}: {kept} points");
            assert_eq!(kept, n.div_ceil(n.div_ceil(MAX_POINTS)), "{n}");
            let points = replay(&s, k);
            // The last checkpoint is kept; every kept point reads as the
            // whole series read at that checkpoint.
            assert_eq!(points[kept - 1].0, n as f64, "{n}");
            for (seconds, counts) in &points[..kept] {
                let seq = *seconds as usize;
                assert_eq!(counts, &after[seq - 1], "{n}: at checkpoint {seq}");
            }
            if n <= MAX_POINTS {
                assert_eq!(kept, n);
            }
        }
    }
}
