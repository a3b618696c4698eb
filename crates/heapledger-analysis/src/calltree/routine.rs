//! Routines: what one frame of a sample stands for, interned once.

use std::collections::HashMap;

use super::CallTreeError;

/// A routine interned in a [`RoutineTable`]: a function, or a function and a
/// source line, as the caller chose its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RoutineId(u32);

impl RoutineId {
    /// Stands for no routine (the hidden root of a tree); never interned.
    pub(crate) const NONE: RoutineId = RoutineId(u32::MAX);

    /// The position of this routine in its table.
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

/// Interned routine names; one [`RoutineId`] per distinct name.
#[derive(Clone, Debug, Default)]
pub struct RoutineTable {
    names: Vec<Box<str>>,
    ids: HashMap<Box<str>, RoutineId>,
}

impl RoutineTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// The id of `name`, added to the table if it is new.
    ///
    /// # Panics
    ///
    /// If the table already holds `u32::MAX` routines.
    pub fn intern(&mut self, name: &str) -> RoutineId {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let index = u32::try_from(self.names.len())
            .ok()
            .filter(|&index| index < u32::MAX)
            .expect("routine table is full");
        let id = RoutineId(index);
        self.names.push(name.into());
        self.ids.insert(name.into(), id);
        id
    }

    /// The id of `name`, if it was interned.
    pub fn get(&self, name: &str) -> Option<RoutineId> {
        self.ids.get(name).copied()
    }

    /// The name of `id`.
    ///
    /// # Panics
    ///
    /// If `id` does not come from this table (or an equal or larger one).
    pub fn name(&self, id: RoutineId) -> &str {
        &self.names[id.index()]
    }

    /// How many routines the table holds.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether the table holds no routine.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Every routine with its name, in id order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (RoutineId, &str)> + '_ {
        self.names
            .iter()
            .enumerate()
            .map(|(index, name)| (RoutineId(index as u32), &**name))
    }
}

/// Checks that a sample has a frame and that each frame is one of the first
/// `known` routines of a table.
pub(crate) fn check_frames(frames: &[RoutineId], known: usize) -> Result<(), CallTreeError> {
    if frames.is_empty() {
        return Err(CallTreeError::EmptySample);
    }
    match frames.iter().find(|id| id.index() >= known) {
        Some(id) => Err(CallTreeError::UnknownRoutine { id: id.0, known }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_gives_one_id_per_name() {
        let mut table = RoutineTable::new();
        let main = table.intern("main");
        let r = table.intern("r");
        assert_eq!(table.intern("main"), main);
        assert_ne!(main, r);
        assert_eq!(table.name(r), "r");
        assert_eq!(table.get("r"), Some(r));
        assert_eq!(table.get("s"), None);
        assert_eq!(table.len(), 2);
        assert_eq!(table.iter().collect::<Vec<_>>(), [(main, "main"), (r, "r")]);
    }
}
