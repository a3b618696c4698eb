//! memtrail-symbols
