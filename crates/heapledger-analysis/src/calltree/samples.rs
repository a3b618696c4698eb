//! A set of weighted samples with the routine table they refer to.

use super::routine::check_frames;
use super::trie::{Trie, NONE};
use super::{CallTreeError, RoutineId, RoutineTable};

/// One sample (in a [`Samples`] set: one distinct stack with the summed weight
/// of its samples): frames root first, and a weight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    /// Routines from the outermost frame (`main`) to the leaf.
    pub frames: Vec<RoutineId>,
    /// A count or an amount (bytes), in the unit of the chosen metric.
    pub weight: u64,
}

/// Weighted samples and their routine table, the stacks stored as a prefix
/// tree of routines (a [`Trie`]: stacks that share their outer frames
/// share their nodes), each read back whole by [`get`](Self::get).
///
/// Identical stacks are stored once, with the sum of their weights: a replay
/// depends on the frames alone, so every tree and table is the same as for the
/// separate samples, and building them costs per distinct stack. Every stored
/// stack is valid: non-empty, with routines from [`routines`](Self::routines).
/// Zero-weight samples are kept here; the trees and the flat profile ignore them.
#[derive(Clone, Debug, Default)]
pub struct Samples {
    routines: RoutineTable,
    trie: Trie,
    /// Per node, the stack that ends there (its index), or `NONE`.
    stack_at: Vec<u32>,
    /// Per stack, in the order first added: its last node ...
    ends: Vec<u32>,
    /// ... and its weight.
    weights: Vec<u64>,
    frame_count: usize,
    sample_count: u64,
    /// Frames of the sample being added by name.
    scratch: Vec<RoutineId>,
}

impl Samples {
    /// No samples and an empty routine table.
    pub fn new() -> Self {
        Self::default()
    }

    /// No samples yet, over an existing routine table.
    pub fn with_routines(routines: RoutineTable) -> Self {
        Self {
            routines,
            ..Self::default()
        }
    }

    /// Parses the text form `weight: frame frame ...`, one sample per line, root
    /// first, frames separated by whitespace. Blank lines and lines starting with
    /// `#` are skipped.
    ///
    /// ```
    /// use heapledger_analysis::calltree::Samples;
    /// let samples = Samples::from_text("1: main r\n2: main r s\n").unwrap();
    /// assert_eq!(samples.len(), 2);
    /// assert_eq!(samples.total_weight(), 3);
    /// ```
    ///
    /// # Errors
    ///
    /// [`CallTreeError::BadLine`] for a line without `:`, with a weight that is
    /// not an unsigned integer, or without frames.
    pub fn from_text(text: &str) -> Result<Samples, CallTreeError> {
        let mut samples = Samples::new();
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |reason: &str| CallTreeError::BadLine {
                line: index + 1,
                reason: reason.to_owned(),
            };
            let (weight, frames) = line
                .split_once(':')
                .ok_or_else(|| bad("expected `weight: frame frame ...`"))?;
            let weight = weight
                .trim()
                .parse()
                .map_err(|_| bad("the weight is not an unsigned integer"))?;
            samples
                .push_names(frames.split_whitespace(), weight)
                .map_err(|err| bad(&err.to_string()))?;
        }
        Ok(samples)
    }

    /// The routine table the samples refer to.
    pub fn routines(&self) -> &RoutineTable {
        &self.routines
    }

    /// Interns a routine name in this set's table.
    pub fn intern(&mut self, name: &str) -> RoutineId {
        self.routines.intern(name)
    }

    /// Adds a sample given by routine ids, root first.
    ///
    /// # Errors
    ///
    /// [`CallTreeError::EmptySample`] for no frames and
    /// [`CallTreeError::UnknownRoutine`] for an id not in this set's table;
    /// nothing is added then.
    pub fn push(&mut self, frames: &[RoutineId], weight: u64) -> Result<(), CallTreeError> {
        self.push_stack(frames, weight).map(|_| ())
    }

    /// [`Self::push`], answering the index of the sample's stack in the
    /// set (see [`Self::get`]).
    ///
    /// # Errors
    ///
    /// As [`Self::push`].
    pub fn push_stack(
        &mut self,
        frames: &[RoutineId],
        weight: u64,
    ) -> Result<usize, CallTreeError> {
        check_frames(frames, self.routines.len())?;
        self.sample_count += 1;
        if self.stack_at.is_empty() {
            self.stack_at.push(NONE); // the root's
        }
        let stack_at = &mut self.stack_at;
        let at = self.trie.walk(frames, || stack_at.push(NONE));
        match self.stack_at[at as usize] {
            NONE => {
                let index = u32::try_from(self.ends.len())
                    .ok()
                    .filter(|&index| index != NONE)
                    .expect("more than u32::MAX - 1 distinct stacks");
                self.stack_at[at as usize] = index;
                self.ends.push(at);
                self.weights.push(weight);
                self.frame_count += frames.len();
                Ok(index as usize)
            }
            index => {
                let sum = &mut self.weights[index as usize];
                *sum = sum.saturating_add(weight);
                Ok(index as usize)
            }
        }
    }

    /// Gives the stacks other weights: `weights[i]` to stack `i` (by
    /// another metric, say), in place of the summed ones.
    ///
    /// # Panics
    ///
    /// If `weights` does not hold one weight per stack.
    pub fn set_weights(&mut self, weights: Vec<u64>) {
        assert_eq!(weights.len(), self.len(), "one weight per stack");
        self.weights = weights;
    }

    /// Adds a sample given by routine names, root first, interning them.
    ///
    /// # Errors
    ///
    /// [`CallTreeError::EmptySample`] for no frames; nothing is added then.
    pub fn push_names<I>(&mut self, frames: I, weight: u64) -> Result<(), CallTreeError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        scratch.extend(
            frames
                .into_iter()
                .map(|name| self.routines.intern(name.as_ref())),
        );
        let result = self.push(&scratch, weight);
        self.scratch = scratch;
        result
    }

    /// How many samples were added, identical stacks included.
    pub fn sample_count(&self) -> u64 {
        self.sample_count
    }

    /// How many distinct stacks the set holds.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// How many frames the distinct stacks hold together.
    pub fn frame_count(&self) -> usize {
        self.frame_count
    }

    /// How many nodes the prefix tree of the stacks has.
    pub fn node_count(&self) -> usize {
        self.trie.len() - 1
    }

    /// Whether the set holds no stack.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The sum of all weights (saturating).
    pub fn total_weight(&self) -> u64 {
        self.weights
            .iter()
            .fold(0u64, |sum, &weight| sum.saturating_add(weight))
    }

    /// Stack `index` with the sum of its samples' weights.
    ///
    /// # Panics
    ///
    /// If `index >= self.len()`.
    pub fn get(&self, index: usize) -> Sample {
        Sample {
            frames: self.trie.frames(self.ends[index]),
            weight: self.weights[index],
        }
    }

    /// Every distinct stack (its index, frames root first, summed weight),
    /// in the order first added, as [`Self::iter`] gives them, without a
    /// vector each: each stack's frames are made from those of the one
    /// before, from where the two part. Stacks read from the profile
    /// store come in the order of its tree, and share most of their frames
    /// with the one before.
    pub fn each(&self, mut f: impl FnMut(usize, &[RoutineId], u64)) {
        // The last stack's nodes, root first: a child is numbered after its
        // parent, so their numbers increase.
        let mut nodes: Vec<u32> = Vec::new();
        let mut frames: Vec<RoutineId> = Vec::new();
        let mut below: Vec<u32> = Vec::new();
        for (index, &end) in self.ends.iter().enumerate() {
            below.clear();
            let mut at = end;
            let keep = loop {
                if at == 0 {
                    break 0;
                }
                match nodes.binary_search(&at) {
                    Ok(position) => break position + 1,
                    Err(_) => {
                        below.push(at);
                        at = self.trie.parents[at as usize];
                    }
                }
            };
            nodes.truncate(keep);
            frames.truncate(keep);
            for &n in below.iter().rev() {
                nodes.push(n);
                frames.push(self.trie.routines[n as usize]);
            }
            f(index, &frames, self.weights[index]);
        }
    }

    /// Every distinct stack with its summed weight, in the order first added.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = Sample> + ExactSizeIterator + '_ {
        (0..self.len()).map(|index| self.get(index))
    }
}
