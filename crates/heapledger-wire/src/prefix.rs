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
    let stack = |i: usize| &frames[if i == 0 { 0 } else { ends[i - 1] }..ends[i]];
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
    sort_from(&mut order, 0, &stack, bits, &mut Vec::new());
    let mut nodes = vec![ROOT; ends.len()];
    let mut numbered = 0u32;
    // The nodes of the stack before, outermost first.
    let mut path: Vec<u32> = Vec::new();
    let mut prev: &[F] = &[];
    for (k, &i) in order.iter().enumerate() {
        // The stacks come in no order of the memory they lie in: a read of
        // one a few places ahead starts its cache miss while this one is
        // compared (0.28 s to 0.1 s for half a million stacks).
        if let Some(&ahead) = order.get(k + 8) {
            std::hint::black_box(stack(ahead as usize).first());
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

/// Sorts stacks (by index) whose first `depth` frames are equal by the
/// frames from there on: by a key of the next few frames first, then each
/// run of equal keys by the frames after them. Each stack is read a few
/// frames at a time, in order: sorting a million stacks by comparing them
/// whole missed the cache on every comparison (1 s).
fn sort_from<'a, F: FrameId + 'a>(
    order: &mut [u32],
    depth: usize,
    stack: &impl Fn(usize) -> &'a [F],
    bits: u32,
    keys: &mut Vec<(u64, u32)>,
) {
    // Frames per key, and bits per frame (0 past a stack's end, so that a
    // stack sorts before the longer ones it begins).
    let per = (64 / bits) as usize;
    keys.clear();
    keys.extend(order.iter().map(|&i| {
        let s = stack(i as usize);
        let mut k = 0u64;
        for j in 0..per {
            let f = s.get(depth + j).map_or(0, |&f| f.into() + 1);
            k = (k << bits) | f;
        }
        (k, i)
    }));
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
            sort_from(&mut order[a..b], depth + per, stack, bits, keys);
        }
    }
}
