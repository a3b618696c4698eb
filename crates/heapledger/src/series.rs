//! The checkpoint series of a process (`heapledger_wire::SERIES_MAGIC`),
//! from the recorder's stack ids to the profile's stacks.

use heapledger_profile::{Changed, CompactStacks, Series, SeriesCounts, SeriesPoint};
use heapledger_wire::Dump;
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

/// The series of `d`'s checkpoints (taken from it), each stack by its
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
    // Up to the checkpoint the profile stops at, where it does.
    let upto = d.checkpoint.map_or(u64::MAX, |c| c.seq);
    let mut records = heapledger_wire::series_record_refs(&raw)
        .take_while(|r| r.seq <= upto)
        .peekable();
    if records.peek().is_none() {
        return Series::default();
    }
    let tps = d.ticks_per_second.max(1) as f64;
    let seconds = |ticks: u64| ticks.saturating_sub(d.start_ticks) as f64 / tps;
    let mut merged_ids: HashMap<u64, SeriesCounts> = HashMap::default();
    let mut by_index: Vec<SeriesCounts> = vec![[0; 4]; stacks.len()];
    let mut points = Vec::new();
    for r in records {
        let mut changed: Vec<u32> = Vec::new();
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
            changed.push(at as u32);
        }
        changed.sort_unstable();
        changed.dedup();
        points.push(SeriesPoint {
            seconds: seconds(r.ticks),
            changed: changed
                .into_iter()
                .map(|at| (at, by_index[at as usize]))
                .collect(),
        });
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
