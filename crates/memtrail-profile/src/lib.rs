//! memtrail-profile
