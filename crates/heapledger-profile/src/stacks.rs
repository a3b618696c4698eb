//! `stacks` and `leaks`: per-stack counters and the blocks alive at exit.
//!
//! A stack is a list of [`Addr`], innermost (leaf) first. MALT keeps one
//! [`StackStat`] per distinct stack; a free call site gets its own entry when
//! frees are unwound (MALT does), while heapledger by default charges a free to
//! the stack that allocated the block (see `HeapledgerExt::frees_unwound`).

use serde::{Deserialize, Serialize};

use crate::addr::Addr;

/// `stacks`: every stack with its counters.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Stacks {
    /// One entry per distinct stack.
    pub stats: Vec<StackStat>,
    /// The number of entries in `stats`, as MALT writes it.
    pub count: u64,
}

impl Stacks {
    /// Appends a stack and keeps `count` in step.
    pub fn push(&mut self, stat: StackStat) {
        self.stats.push(stat);
        self.count = self.stats.len() as u64;
    }

    /// Iterates over the stacks.
    pub fn iter(&self) -> std::slice::Iter<'_, StackStat> {
        self.stats.iter()
    }

    /// The stacks that allocated at least once (free-only entries skipped).
    pub fn allocating(&self) -> impl Iterator<Item = &StackStat> + '_ {
        self.stats.iter().filter(|s| s.infos.alloc.count > 0)
    }

    /// How many stacks there are.
    pub fn len(&self) -> usize {
        self.stats.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.stats.is_empty()
    }
}

impl<'a> IntoIterator for &'a Stacks {
    type Item = &'a StackStat;
    type IntoIter = std::slice::Iter<'a, StackStat>;
    fn into_iter(self) -> Self::IntoIter {
        self.stats.iter()
    }
}

/// One stack and its counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StackStat {
    /// Frames, innermost first; each a return address minus one.
    pub stack: Vec<Addr>,
    /// Any key unique within the file (MALT writes an address).
    pub stack_id: String,
    /// The counters.
    pub infos: StackInfos,
}

impl StackStat {
    /// A stack with the given id and counters.
    pub fn new(stack_id: impl Into<String>, stack: Vec<Addr>, infos: StackInfos) -> StackStat {
        StackStat {
            stack,
            stack_id: stack_id.into(),
            infos,
        }
    }

    /// The innermost frame: the code that called the allocator.
    pub fn leaf(&self) -> Option<Addr> {
        self.stack.first().copied()
    }
}

/// `stacks.stats[].infos`: what happened at one stack.
///
/// Signed fields are `ssize_t` in MALT and may be written negative.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StackInfos {
    /// Allocations of 0 bytes.
    pub count_zeros: i64,
    /// Most bytes this stack held alive at once.
    pub max_alive_req: i64,
    /// Bytes this stack still held at exit.
    pub alive_req: i64,
    /// Allocations (sizes in bytes).
    pub alloc: MinMaxSum,
    /// Frees (sizes in bytes).
    pub free: MinMaxSum,
    /// `mmap` calls (sizes in bytes).
    pub mmap: MinMaxSum,
    /// `munmap` calls (sizes in bytes).
    pub munmap: MinMaxSum,
    /// Lifetimes of the blocks freed, in ticks.
    pub lifetime: MinMaxSum,
    /// Bytes this stack held when the whole process reached its peak.
    pub global_peak: i64,
    /// `realloc` calls.
    pub realloc_count: u64,
    /// Sum of `new - old` sizes over `realloc` calls (`size_t` in MALT).
    pub realloc_sum_delta: i64,
    /// Temporary blocks: freed by the thread that allocated them before it
    /// allocated anything else (heaptrack's definition). heapledger's
    /// addition, written only where not 0 (MALT's files have none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub temporary: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// `{count, min, max, sum}` of a series of values; all 0 when empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct MinMaxSum {
    /// How many values.
    pub count: u64,
    /// The smallest (0 when `count` is 0).
    pub min: u64,
    /// The largest.
    pub max: u64,
    /// The sum (saturating).
    pub sum: u64,
}

impl MinMaxSum {
    /// Adds one value.
    pub fn add(&mut self, value: u64) {
        if self.count == 0 {
            self.min = value;
            self.max = value;
        } else {
            self.min = self.min.min(value);
            self.max = self.max.max(value);
        }
        self.count += 1;
        self.sum = self.sum.saturating_add(value);
    }

    /// Merges another series into this one.
    pub fn merge(&mut self, other: &MinMaxSum) {
        if other.count == 0 {
            return;
        }
        if self.count == 0 {
            *self = *other;
            return;
        }
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.count = self.count.saturating_add(other.count);
        self.sum = self.sum.saturating_add(other.sum);
    }
}

/// `leaks[]`: blocks still allocated at exit that share one stack.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Leak {
    /// Where they were allocated, innermost first.
    pub stack: Vec<Addr>,
    /// How many blocks.
    pub count: u64,
    /// Their total size in bytes.
    pub memory: u64,
}

/// A block alive at exit, with its pointer (see [`LeakBlocks`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LeakBlock {
    /// Its entry in `leaks` (which holds its stack).
    pub leak: u32,
    /// Its address in the process.
    pub ptr: u64,
    /// Its size in bytes.
    pub size: u64,
}

/// The blocks alive at exit one by one, as the recorder wrote them: at
/// most 2^20 (the rest counted in `omitted`); none in a checkpoint, a
/// JSON profile or a merge of processes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeakBlocks {
    /// By leak, then by address.
    pub blocks: Vec<LeakBlock>,
    /// Blocks alive past the recorder's limit, not written one by one.
    pub omitted: u64,
}

/// The run's checkpoints as a series (`heapledger run` keeps it in the
/// profile store, never in the JSON): at each point, the counters of every
/// stack that changed since the point before, as they stand then. A stack's
/// counters at a point are those of its last entry at or before it (none:
/// zeros), so that what the run did between two points is their
/// difference. The last point is the profile's end.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Series {
    /// In the order taken.
    pub points: Vec<SeriesPoint>,
}

/// One point of a [`Series`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SeriesPoint {
    /// Seconds after the process started.
    pub seconds: f64,
    /// (index of the stack in the profile's stacks, its counters: see
    /// [`SeriesCounts`]), by index.
    pub changed: Changed,
}

/// The stacks of a [`SeriesPoint`], each with its counters, packed as
/// varints: about 10 bytes a stack instead of 40 (Python compiling its
/// library changed 570 000 at its checkpoints: 22 MB at the peak of
/// `heapledger run`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Changed {
    bytes: Vec<u8>,
    len: usize,
}

impl Changed {
    /// Adds stack `at` with its counters `c`.
    pub fn push(&mut self, at: u32, c: &SeriesCounts) {
        for mut v in std::iter::once(u64::from(at)).chain(c.iter().copied()) {
            while v >= 0x80 {
                self.bytes.push(v as u8 | 0x80);
                v >>= 7;
            }
            self.bytes.push(v as u8);
        }
        self.len += 1;
    }

    /// How many stacks.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no stack changed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The stack and counters starting at byte `pos`, and the next's `pos`.
    fn read(&self, mut pos: usize) -> (u32, SeriesCounts, usize) {
        let mut v = [0u64; 5];
        for x in &mut v {
            let mut shift = 0;
            while let Some(&b) = self.bytes.get(pos) {
                pos += 1;
                if shift < 64 {
                    *x |= u64::from(b & 0x7f) << shift;
                }
                shift += 7;
                if b < 0x80 {
                    break;
                }
            }
        }
        (v[0] as u32, [v[1], v[2], v[3], v[4]], pos)
    }

    /// The entry that starts at `pos` (one [`Changed::iter`] gave).
    pub fn at(&self, pos: usize) -> (u32, SeriesCounts) {
        let (at, c, _) = self.read(pos);
        (at, c)
    }

    /// Each entry in order, with where it starts.
    pub fn iter(&self) -> impl Iterator<Item = (usize, (u32, SeriesCounts))> + '_ {
        let mut pos = 0;
        (0..self.len).map(move |_| {
            let start = pos;
            let (at, c, next) = self.read(pos);
            pos = next;
            (start, (at, c))
        })
    }
}

impl FromIterator<(u32, SeriesCounts)> for Changed {
    fn from_iter<I: IntoIterator<Item = (u32, SeriesCounts)>>(it: I) -> Self {
        let mut c = Changed::default();
        for (at, counts) in it {
            c.push(at, &counts);
        }
        c.bytes.shrink_to_fit();
        c
    }
}

/// What each thread allocated at each stack, for the views of one thread
/// (kept in the profile store, never in the JSON); empty where one thread
/// allocated. Packed as varints, a thread's rows at a time (four threads
/// over half a million stacks: 2 million rows, about 10 MB so and 48 as
/// tuples).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ThreadStacks {
    /// Each push's rows: (the thread's index in `Profile::threads`, their
    /// first byte, how many), as pushed.
    threads: Vec<(u32, usize, usize)>,
    /// Each row: its stack's distance from the row before's (an index in
    /// the profile's stacks), allocations, bytes allocated.
    bytes: Vec<u8>,
    /// Threads whose rows were not kept (the recorder's budget).
    pub unkept: u64,
}

impl ThreadStacks {
    /// Adds rows of `thread`: (stack, allocations, bytes), stacks rising.
    /// (A thread's rows may come in several pushes: readers add them up.)
    pub fn push_thread(&mut self, thread: u32, rows: impl IntoIterator<Item = (u32, u64, u64)>) {
        let start = self.bytes.len();
        let (mut n, mut prev) = (0, 0u32);
        for (stack, count, bytes) in rows {
            for mut v in [u64::from(stack - prev), count, bytes] {
                while v >= 0x80 {
                    self.bytes.push(v as u8 | 0x80);
                    v >>= 7;
                }
                self.bytes.push(v as u8);
            }
            prev = stack;
            n += 1;
        }
        if n > 0 {
            self.threads.push((thread, start, n));
        }
    }

    /// [`push_thread`](Self::push_thread) of rows in any order: sorted
    /// in place, a stack's rows added up into one; `rows` is left empty.
    pub fn push_thread_unsorted(&mut self, thread: u32, rows: &mut Vec<(u32, u64, u64)>) {
        rows.sort_unstable_by_key(|r| r.0);
        rows.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                kept.1 += later.1;
                kept.2 += later.2;
            }
            same
        });
        self.push_thread(thread, rows.drain(..));
    }

    /// Rows in all.
    pub fn len(&self) -> usize {
        self.threads.iter().map(|t| t.2).sum()
    }

    /// Whether no thread has rows.
    pub fn is_empty(&self) -> bool {
        self.threads.is_empty()
    }

    /// Each push's thread and rows: (stack, allocations, bytes), by stack.
    pub fn threads(
        &self,
    ) -> impl Iterator<Item = (u32, impl Iterator<Item = (u32, u64, u64)> + '_)> + '_ {
        let bytes = &self.bytes;
        self.threads.iter().map(move |&(t, start, n)| {
            let mut pos = start;
            let mut next = move || {
                let mut v = 0u64;
                let mut shift = 0;
                while let Some(&b) = bytes.get(pos) {
                    pos += 1;
                    if shift < 64 {
                        v |= u64::from(b & 0x7f) << shift;
                    }
                    shift += 7;
                    if b < 0x80 {
                        break;
                    }
                }
                v
            };
            let mut stack = 0u32;
            let rows = (0..n).map(move |_| {
                stack = stack.wrapping_add(next() as u32);
                (stack, next(), next())
            });
            (t, rows)
        })
    }

    /// Every row: (thread, stack, allocations, bytes), as pushed.
    pub fn iter(&self) -> impl Iterator<Item = (u32, u32, u64, u64)> + '_ {
        self.threads()
            .flat_map(|(t, rows)| rows.map(move |(s, c, b)| (t, s, c, b)))
    }
}

/// A stack's totals at a point of a [`Series`]: allocations, bytes
/// allocated, frees, bytes freed.
pub type SeriesCounts = [u64; 4];

/// How many outer frames two stacks (innermost first) share: stacks read
/// in the order of their tree share long outer parts, which a reader of
/// one stack after another need not look at again.
pub fn shared_outer_frames(stack: &[Addr], last: &[Addr]) -> usize {
    stack
        .iter()
        .rev()
        .zip(last.iter().rev())
        .take_while(|(a, b)| a == b)
        .count()
}

#[cfg(test)]
mod tests {
    #[test]
    fn changed_stacks_read_back_as_pushed() {
        let rows: Vec<(u32, super::SeriesCounts)> = vec![
            (0, [0, 0, 0, 0]),
            (127, [1, 128, 1, 16_384]),
            (u32::MAX, [u64::MAX, 1 << 63, 5, u64::MAX - 1]),
        ];
        let c: super::Changed = rows.iter().copied().collect();
        assert_eq!(c.len(), 3);
        let read: Vec<_> = c.iter().map(|(_, r)| r).collect();
        assert_eq!(read, rows);
        for (pos, r) in c.iter() {
            assert_eq!(c.at(pos), r);
        }
    }

    use super::*;

    #[test]
    fn min_max_sum_follows_malt() {
        let mut m = MinMaxSum::default();
        assert_eq!((m.min, m.max), (0, 0));
        m.add(64);
        m.add(32);
        m.add(128);
        assert_eq!(
            m,
            MinMaxSum {
                count: 3,
                min: 32,
                max: 128,
                sum: 224
            }
        );
        let mut n = MinMaxSum::default();
        n.merge(&m);
        n.merge(&MinMaxSum::default());
        assert_eq!(n, m);
    }

    #[test]
    fn push_keeps_count() {
        let mut s = Stacks::default();
        s.push(StackStat::new(
            "0x1",
            vec![Addr::native(1)],
            StackInfos::default(),
        ));
        assert_eq!(s.count, 1);
        assert_eq!(s.stats[0].leaf(), Some(Addr::native(1)));
    }

    #[test]
    fn thread_rows_read_back_as_pushed() {
        let mut t = super::ThreadStacks::default();
        t.push_thread(0, [(3, 1, 16), (7, 2, 1 << 40)]);
        t.push_thread(2, std::iter::empty());
        t.push_thread(5, [(0, u64::MAX, u64::MAX), (u32::MAX, 1, 0)]);
        assert_eq!(t.len(), 4);
        assert_eq!(
            t.iter().collect::<Vec<_>>(),
            [
                (0, 3, 1, 16),
                (0, 7, 2, 1 << 40),
                (5, 0, u64::MAX, u64::MAX),
                (5, u32::MAX, 1, 0)
            ]
        );
        assert_eq!(t.threads().map(|(t, _)| t).collect::<Vec<_>>(), [0, 5]);
    }
}
