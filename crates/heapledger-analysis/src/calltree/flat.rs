//! The flat per-routine table: inclusive and self weight, each routine counted
//! once per sample however often it recurses.
//!
//! Computed from the samples, never from a collapsed tree, as pprof, perf and
//! the Firefox profiler do. It is the same for both directions and every mode.

use super::routine::check_frames;
use super::{CallTreeError, RoutineId, RoutineTable, Samples};

/// One routine's totals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlatRow {
    /// The routine.
    pub routine: RoutineId,
    /// Weight of the samples whose stack holds the routine (each sample once).
    pub inclusive: u64,
    /// Weight of the samples whose leaf frame is the routine ("self").
    pub exclusive: u64,
}

/// Per-routine totals over a set of samples.
#[derive(Clone, Debug)]
pub struct FlatProfile {
    inclusive: Vec<u64>,
    exclusive: Vec<u64>,
    total_weight: u64,
}

impl FlatProfile {
    /// The totals of `samples`.
    pub fn from_samples(samples: &Samples) -> FlatProfile {
        let mut builder = FlatProfileBuilder::new(samples.routines());
        samples.each(|_, frames, weight| {
            builder
                .push(frames, weight)
                .expect("a sample set holds only valid samples");
        });
        builder.finish()
    }

    /// The totals of one routine (zero for a routine no sample holds).
    pub fn get(&self, routine: RoutineId) -> FlatRow {
        let index = routine.index();
        FlatRow {
            routine,
            inclusive: self.inclusive.get(index).copied().unwrap_or(0),
            exclusive: self.exclusive.get(index).copied().unwrap_or(0),
        }
    }

    /// The sum of the weights of all samples (saturating).
    pub fn total_weight(&self) -> u64 {
        self.total_weight
    }

    /// The routines held by a sample of non-zero weight, by inclusive weight
    /// descending, then by self weight descending, then by name.
    pub fn rows(&self, routines: &RoutineTable) -> Vec<FlatRow> {
        let mut rows: Vec<FlatRow> = routines
            .iter()
            .take(self.inclusive.len())
            .map(|(routine, _)| self.get(routine))
            .filter(|row| row.inclusive > 0)
            .collect();
        rows.sort_unstable_by(|a, b| {
            b.inclusive
                .cmp(&a.inclusive)
                .then(b.exclusive.cmp(&a.exclusive))
                .then_with(|| routines.name(a.routine).cmp(routines.name(b.routine)))
        });
        rows
    }
}

/// Builds a [`FlatProfile`] from samples streamed in one at a time.
#[derive(Debug)]
pub struct FlatProfileBuilder {
    inclusive: Vec<u64>,
    exclusive: Vec<u64>,
    /// Per routine, the last sample that counted it.
    stamps: Vec<u64>,
    stamp: u64,
    total_weight: u64,
}

impl FlatProfileBuilder {
    /// A builder for samples whose routines come from `routines`.
    pub fn new(routines: &RoutineTable) -> Self {
        let count = routines.len();
        FlatProfileBuilder {
            inclusive: vec![0; count],
            exclusive: vec![0; count],
            stamps: vec![0; count],
            stamp: 0,
            total_weight: 0,
        }
    }

    /// Counts one sample, frames root first. A zero-weight sample is ignored.
    ///
    /// # Errors
    ///
    /// [`CallTreeError::EmptySample`] for no frames, and
    /// [`CallTreeError::UnknownRoutine`] for a routine not in the table; nothing
    /// is counted then.
    pub fn push(&mut self, frames: &[RoutineId], weight: u64) -> Result<(), CallTreeError> {
        check_frames(frames, self.inclusive.len())?;
        if weight == 0 {
            return Ok(());
        }
        self.stamp += 1;
        self.total_weight = self.total_weight.saturating_add(weight);
        for routine in frames {
            let index = routine.index();
            if self.stamps[index] != self.stamp {
                self.stamps[index] = self.stamp;
                self.inclusive[index] = self.inclusive[index].saturating_add(weight);
            }
        }
        if let Some(leaf) = frames.last() {
            let count = &mut self.exclusive[leaf.index()];
            *count = count.saturating_add(weight);
        }
        Ok(())
    }

    /// The finished table.
    pub fn finish(self) -> FlatProfile {
        FlatProfile {
            inclusive: self.inclusive,
            exclusive: self.exclusive,
            total_weight: self.total_weight,
        }
    }
}
