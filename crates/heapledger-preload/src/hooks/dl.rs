//! dlopen and dlclose: the modules the unwinder knows are refreshed after
//! each.

use super::enter::enter;
use crate::base::{config, real};
use crate::data::modules;
use crate::process::start;
use crate::thread::side;
use core::ffi::{c_char, c_int, c_void};
use heapledger_wire::StackMode;

/// # Safety
/// Called as dlopen.
#[no_mangle]
pub unsafe extern "C" fn dlopen(name: *const c_char, flags: c_int) -> *mut c_void {
    let h = match real::dlopen() {
        // SAFETY: the real dlopen.
        Some(f) => unsafe { f(name, flags) },
        None => core::ptr::null_mut(),
    };
    after_module_change();
    h
}

/// # Safety
/// Called as dlclose.
#[no_mangle]
pub unsafe extern "C" fn dlclose(h: *mut c_void) -> c_int {
    let r = match real::dlclose() {
        // SAFETY: the real dlclose.
        Some(f) => unsafe { f(h) },
        None => -1,
    };
    after_module_change();
    r
}

fn after_module_change() {
    if start::ready() && crate::data::only::active() {
        side::roomy(|_| {
            if let Some(_h) = enter() {
                crate::data::only::refresh();
            }
        })
    }
    if config_dwarf() {
        side::roomy(|_| {
            if let Some(_h) = enter() {
                // SAFETY: errno preserved by the guard.
                modules::refresh(false);
            }
        })
    }
}

fn config_dwarf() -> bool {
    start::ready() && config::get().stack_mode == StackMode::Dwarf
}
