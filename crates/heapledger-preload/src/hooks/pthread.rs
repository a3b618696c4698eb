//! pthread_getattr_np, watched for the sake of `thread::bounds`.

use crate::base::real;
use crate::thread::tls;
use core::ffi::c_int;

/// Forwards, noting on this thread which thread the call is about, so that
/// a thread whose first event comes from inside it takes its stack bounds
/// elsewhere (see `bounds::stack_bounds`).
///
/// # Safety
/// Called as pthread_getattr_np.
#[no_mangle]
pub unsafe extern "C" fn pthread_getattr_np(
    th: libc::pthread_t,
    attr: *mut libc::pthread_attr_t,
) -> c_int {
    let t = tls::tls();
    let outer = t.getattr_of.replace(th);
    let r = match real::pthread_getattr_np() {
        // SAFETY: the real function, with the caller's arguments.
        Some(f) => unsafe { f(th, attr) },
        None => libc::ENOSYS,
    };
    t.getattr_of.set(outer);
    r
}
