//! The text summary printed by `memtrail run` and `memtrail report`.
