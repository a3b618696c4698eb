//! The interned string table of `sites.strings`.
//!
//! MALT stores every file, function and binary name once, in `sites.strings`,
//! and `sites.instr` refers to them by index; index 0 is always `"??"`, the
//! name of anything unknown. [`StringTable`] builds such a table while a
//! profile is being written, handing out a [`StringId`] per distinct string.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// An index into `sites.strings`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StringId(pub u32);

impl StringId {
    /// The id of `"??"`, MALT's name for anything unknown.
    pub const UNKNOWN: StringId = StringId(0);

    /// The index into `sites.strings`.
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

/// What MALT writes for an unknown file, function or binary.
pub const UNKNOWN: &str = "??";

/// Interns strings, so that each is stored once; `"??"` is always id 0.
#[derive(Debug, Clone)]
pub struct StringTable {
    strings: Vec<String>,
    ids: HashMap<String, StringId>,
}

impl Default for StringTable {
    fn default() -> Self {
        StringTable::new()
    }
}

impl StringTable {
    /// A table holding only `"??"` (id 0).
    pub fn new() -> StringTable {
        let mut table = StringTable {
            strings: Vec::new(),
            ids: HashMap::new(),
        };
        table.intern(UNKNOWN);
        table
    }

    /// Continues an existing `sites.strings` list, so new names can be added to
    /// a profile that was read. Index 0 is forced to `"??"` if the list is
    /// empty; duplicates keep their first id.
    pub fn from_strings(strings: Vec<String>) -> StringTable {
        if strings.is_empty() {
            return StringTable::new();
        }
        let mut ids = HashMap::with_capacity(strings.len());
        for (i, s) in strings.iter().enumerate() {
            let id = StringId(u32::try_from(i).unwrap_or(u32::MAX));
            ids.entry(s.clone()).or_insert(id);
        }
        StringTable { strings, ids }
    }

    /// The id of `s`, adding it if it is new.
    pub fn intern(&mut self, s: &str) -> StringId {
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        // More than 4 billion distinct names cannot be written by MALT either;
        // saturate rather than wrap around onto other names.
        let id = StringId(u32::try_from(self.strings.len()).unwrap_or(u32::MAX));
        self.strings.push(s.to_owned());
        self.ids.insert(s.to_owned(), id);
        id
    }

    /// The string of `id`, if it exists.
    pub fn get(&self, id: StringId) -> Option<&str> {
        self.strings.get(id.index()).map(String::as_str)
    }

    /// How many strings the table holds (including `"??"`).
    pub fn len(&self) -> usize {
        self.strings.len()
    }

    /// Never true: the table always holds `"??"`.
    pub fn is_empty(&self) -> bool {
        self.strings.is_empty()
    }

    /// The strings, in id order, ready for `sites.strings`.
    pub fn into_strings(self) -> Vec<String> {
        self.strings
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_is_zero_and_interning_is_stable() {
        let mut t = StringTable::new();
        assert_eq!(t.intern("??"), StringId::UNKNOWN);
        let a = t.intern("main");
        let b = t.intern("make");
        assert_eq!(t.intern("main"), a);
        assert_ne!(a, b);
        assert_eq!(t.get(b), Some("make"));
        assert_eq!(t.len(), 3);
        assert_eq!(t.into_strings(), vec!["??", "main", "make"]);
    }

    #[test]
    fn continues_an_existing_table() {
        let mut t = StringTable::from_strings(vec!["??".into(), "a".into()]);
        assert_eq!(t.intern("a"), StringId(1));
        assert_eq!(t.intern("b"), StringId(2));
        assert_eq!(
            StringTable::from_strings(Vec::new()).get(StringId(0)),
            Some("??")
        );
    }
}
