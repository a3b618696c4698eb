//! memtrail-wire
