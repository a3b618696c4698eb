//! The prefix tree of a set of stacks given frame by frame: how a dump's
//! stacks are read (`decode`), and how the profile store lays out stacks
//! it is given one by one.

/// The root: above every stack's outermost frame; not stored.
pub const ROOT: u32 = 0;

/// The prefix tree of a set of stacks, numbered depth first (children by
/// frame): the stacks are sorted, and each adds the frames past the
/// prefix it shares with the one before. No lookup per frame: a million
/// stacks 21 frames deep took 1 s to insert into a map of (parent,
/// frame) pairs, a third of that sorted.
pub struct Built {
    /// Rows of the `node` blocks: levels up from the node before to the
    /// parent, and the frame.
    pub rows: Vec<(u32, u32)>,
    /// Each stack's node, in the order the stacks were given.
    pub nodes: Vec<u32>,
}

/// A frame's id: 16 bits where a dump's distinct addresses allow (half the
/// memory of every stack's frames), else 32.
pub trait FrameId: Copy + Eq + Into<u64> {}
impl FrameId for u16 {}
impl FrameId for u32 {}

/// Builds the tree of stacks given as frame ids, outermost first: stack
/// `i` is `frames[ends[i - 1]..ends[i]]`.
pub fn build<F: FrameId>(frames: &[F], ends: &[usize]) -> Built {
    let mut rows = Vec::new();
    let nodes = build_each(frames, ends, |up, _, f| rows.push((up as u32, f)));
    Built { rows, nodes }
}

/// [`build`], each node given to `node` as it is numbered (1, 2, ...):
/// levels up from the node before to its parent, its parent, its frame;
/// returns each stack's node.
pub fn build_each<F: FrameId>(
    frames: &[F],
    ends: &[usize],
    mut node: impl FnMut(u64, u32, u32),
) -> Vec<u32> {
    let stacks = Stacks { frames, ends };
    let stack = |i: usize| stacks.get(i);
    let mut order: Vec<u32> = (0..ends.len() as u32).collect();
    // Bits a frame takes in a sort key (one more value than the largest
    // id: 0 is past a stack's end): the fewer, the more frames a key holds
    // and the fewer passes over the stacks (each a cache miss a stack).
    let top = frames.iter().map(|&f| f.into()).max().unwrap_or(0);
    let bits = if top < u8::MAX as u64 {
        8
    } else if top < u16::MAX as u64 {
        16
    } else {
        32
    };
    sort_from(&mut order, 0, &stacks, bits, &mut Vec::new());
    let mut nodes = vec![ROOT; ends.len()];
    let mut numbered = 0u32;
    // The nodes of the stack before, outermost first.
    let mut path: Vec<u32> = Vec::new();
    let mut prev: &[F] = &[];
    for (k, &i) in order.iter().enumerate() {
        // The stacks come in no order of the memory they lie in: their
        // bounds and then their frames are fetched into the cache ahead,
        // so that their misses overlap while this one is compared. (Plain
        // reads ahead waited for the bounds' misses: decoding a dump of
        // half a million stacks 21 frames deep took 0.52 s so, 0.42 s with
        // these prefetches and the sort's.)
        if let Some(&far) = order.get(k + 16) {
            stacks.fetch_bounds(far as usize);
        }
        if let Some(&ahead) = order.get(k + 8) {
            stacks.fetch_frames(ahead as usize, 0);
        }
        let s = stack(i as usize);
        let shared = s.iter().zip(prev).take_while(|(a, b)| a == b).count();
        if shared < s.len() {
            // The node written last is the deepest of `path`.
            let mut up = (path.len() - shared) as u64;
            path.truncate(shared);
            for &f in &s[shared..] {
                numbered += 1;
                node(up, path.last().copied().unwrap_or(ROOT), f.into() as u32);
                up = 0;
                path.push(numbered);
            }
        } else {
            path.truncate(shared);
        }
        nodes[i as usize] = path.last().copied().unwrap_or(ROOT);
        prev = s;
    }
    nodes
}

/// The stacks as `build` takes them: stack `i` is
/// `frames[ends[i - 1]..ends[i]]`.
struct Stacks<'a, F> {
    frames: &'a [F],
    ends: &'a [usize],
}

impl<'a, F> Stacks<'a, F> {
    #[inline(always)]
    fn get(&self, i: usize) -> &'a [F] {
        &self.frames[if i == 0 { 0 } else { self.ends[i - 1] }..self.ends[i]]
    }

    /// Fetches stack `i`'s bounds ahead (see `build_each`).
    #[inline(always)]
    fn fetch_bounds(&self, i: usize) {
        prefetch(self.ends.as_ptr().wrapping_add(i.saturating_sub(1)));
    }

    /// Fetches stack `i`'s frames from `depth` on ahead, its bounds fetched
    /// before.
    #[inline(always)]
    fn fetch_frames(&self, i: usize, depth: usize) {
        prefetch(self.get(i).as_ptr().wrapping_add(depth));
    }
}

/// Asks for `p`'s cache line ahead of its use, without waiting for it.
#[inline(always)]
fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    #[allow(unsafe_code)]
    // SAFETY: a prefetch reads nothing the program sees and never faults,
    // whatever the address; SSE, which it needs, is in every x86-64 CPU.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Sorts stacks (by index) whose first `depth` frames are equal by the
/// frames from there on: by a key of the next few frames first, then each
/// run of equal keys by the frames after them. Each stack is read a few
/// frames at a time, in order: sorting a million stacks by comparing them
/// whole missed the cache on every comparison (1 s).
fn sort_from<F: FrameId>(
    order: &mut [u32],
    depth: usize,
    stacks: &Stacks<'_, F>,
    bits: u32,
    keys: &mut Vec<(u64, u32)>,
) {
    // Frames per key, and bits per frame (0 past a stack's end, so that a
    // stack sorts before the longer ones it begins).
    let per = (64 / bits) as usize;
    keys.clear();
    keys.reserve(order.len());
    for (k, &i) in order.iter().enumerate() {
        // Past the first pass, the stacks come in no order of their memory:
        // fetched ahead, as in `build_each`.
        if let Some(&far) = order.get(k + 16) {
            stacks.fetch_bounds(far as usize);
        }
        if let Some(&ahead) = order.get(k + 8) {
            stacks.fetch_frames(ahead as usize, depth);
        }
        let s = stacks.get(i as usize);
        let mut key = 0u64;
        for j in 0..per {
            let f = s.get(depth + j).map_or(0, |&f| f.into() + 1);
            key = (key << bits) | f;
        }
        keys.push((key, i));
    }
    keys.sort_unstable();
    for (o, (_, i)) in order.iter_mut().zip(keys.iter()) {
        *o = *i;
    }
    let runs: Vec<(usize, usize, u64)> = {
        let mut v = Vec::new();
        let mut a = 0;
        while a < keys.len() {
            let mut b = a + 1;
            while b < keys.len() && keys[b].0 == keys[a].0 {
                b += 1;
            }
            v.push((a, b, keys[a].0));
            a = b;
        }
        v
    };
    for (a, b, k) in runs {
        // Stacks that end within the key are equal: nothing to sort.
        if b - a > 1 && k & ((1u64 << bits) - 1) != 0 {
            sort_from(&mut order[a..b], depth + per, stacks, bits, keys);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Builds the tree of `stacks` and checks it: every stack's node walks
    /// up to its frames, parents come before their children, each node
    /// is one distinct prefix, and the rows say how far up each parent is.
    fn check<F: FrameId>(stacks: &[Vec<F>]) {
        let mut frames = Vec::new();
        let mut ends = Vec::new();
        for s in stacks {
            frames.extend_from_slice(s);
            ends.push(frames.len());
        }
        let mut parent = vec![ROOT];
        let mut frame = vec![0u64];
        let mut last = ROOT;
        let nodes = build_each(&frames, &ends, |up, p, f| {
            // `up` levels up from the node before stands the parent.
            let mut n = last;
            for _ in 0..up {
                n = parent[n as usize];
            }
            assert_eq!(n, p);
            assert!((p as usize) < parent.len());
            parent.push(p);
            frame.push(f as u64);
            last = parent.len() as u32 - 1;
        });
        assert_eq!(nodes.len(), stacks.len());
        for (s, &n) in stacks.iter().zip(&nodes) {
            let mut walked = Vec::new();
            let mut at = n;
            while at != ROOT {
                walked.push(frame[at as usize]);
                at = parent[at as usize];
            }
            walked.reverse();
            let want: Vec<u64> = s.iter().map(|&f| f.into()).collect();
            assert_eq!(walked, want);
        }
        let prefixes: std::collections::HashSet<Vec<u64>> = stacks
            .iter()
            .flat_map(|s| (1..=s.len()).map(move |k| s[..k].iter().map(|&f| f.into()).collect()))
            .collect();
        assert_eq!(parent.len() - 1, prefixes.len());
    }

    proptest! {
        /// Narrow ids from a few frames (long shared prefixes, stacks that
        /// begin others, empty and repeated stacks), and wide ones.
        #[test]
        fn each_stack_is_its_nodes_path(
            narrow in prop::collection::vec(prop::collection::vec(0u16..4, 0..30), 0..200),
            wide in prop::collection::vec(prop::collection::vec(0u32..100_000, 0..12), 0..50),
            tail in 0usize..40,
        ) {
            check(&narrow);
            // A few stacks sharing a long trunk, past one sort key's frames.
            let trunk: Vec<u16> = (0..tail as u16).collect();
            let mut deep: Vec<Vec<u16>> = narrow.iter().map(|s| {
                let mut t = trunk.clone();
                t.extend_from_slice(s);
                t
            }).collect();
            deep.extend(narrow.iter().take(3).cloned());
            check(&deep);
            check(&wide);
        }
    }
}
