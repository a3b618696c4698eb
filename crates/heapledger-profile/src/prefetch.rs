//! Asking for memory ahead of its use: for the readers that go through
//! hundreds of thousands of stacks in an order that is not their memory's
//! (each a cache miss), so that a few misses overlap instead of each
//! waiting in turn.

/// Asks for `p`'s cache line, without waiting for it. Any address will do.
#[inline(always)]
#[allow(unsafe_code)]
pub fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing the program sees and never faults,
    // whatever the address; SSE, which it needs, is in every x86-64 CPU.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
