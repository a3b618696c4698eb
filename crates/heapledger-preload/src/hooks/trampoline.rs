//! The exported entry points' trampolines.
//!
//! Each hook that records a stack is entered through a naked trampoline that
//! pushes a standard frame record (saved rbp, return address) and passes its
//! address to the implementation. The unwinder starts from that record, so
//! capturing the caller's stack depends on no compiler setting (frame
//! pointers or not, inlining, tail calls) in this library.

/// Pushes the registers named, in order, each with its unwind rule (the
/// canonical frame address 8 bytes further), for naked entries that keep
/// their arguments around a call.
macro_rules! push_cfi {
    ($($reg:literal),*) => {
        concat!($("push ", $reg, "\n.cfi_adjust_cfa_offset 8\n",)*)
    };
}

/// Pops the registers named, in order (the reverse of their `push_cfi!`).
macro_rules! pop_cfi {
    ($($reg:literal),*) => {
        concat!($("pop ", $reg, "\n.cfi_adjust_cfa_offset -8\n",)*)
    };
}

/// The body of a trampoline: builds a frame record (rbp pushed, rbp = rsp),
/// passes its address in `$reg` (the argument after the function's own) to
/// `{imp}`, and returns what it returns. Stack capture starts from this
/// record, so every entry point builds it the same way.
macro_rules! frame_and_call {
    ($reg:literal) => {
        concat!(
            "push rbp\n",
            ".cfi_adjust_cfa_offset 8\n",
            ".cfi_rel_offset rbp, 0\n",
            "mov rbp, rsp\n",
            "mov ",
            $reg,
            ", rsp\n",
            "call {imp}\n",
            "pop rbp\n",
            ".cfi_adjust_cfa_offset -8\n",
            ".cfi_restore rbp\n",
            "ret",
        )
    };
}

macro_rules! trampoline {
    ($name:ident, $imp:ident, $reg:literal, ($($arg:ident: $ty:ty),*) $($ret:tt)*) => {
        /// # Safety
        /// Called as the C function of the same name.
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) $($ret)* {
            core::arch::naked_asm!(
                ".cfi_startproc",
                frame_and_call!($reg),
                ".cfi_endproc",
                imp = sym $imp,
            )
        }
    };
}

/// The same for six-argument functions: the record's address goes as a
/// seventh argument, on the stack.
macro_rules! trampoline6 {
    ($name:ident, $imp:ident, ($($arg:ident: $ty:ty),*) $($ret:tt)*) => {
        /// # Safety
        /// Called as the C function of the same name.
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) $($ret)* {
            core::arch::naked_asm!(
                ".cfi_startproc",
                "push rbp",
                ".cfi_adjust_cfa_offset 8",
                ".cfi_rel_offset rbp, 0",
                "mov rbp, rsp",
                "sub rsp, 8",
                ".cfi_adjust_cfa_offset 8",
                "push rbp",
                ".cfi_adjust_cfa_offset 8",
                "call {imp}",
                "add rsp, 16",
                ".cfi_adjust_cfa_offset -16",
                "pop rbp",
                ".cfi_adjust_cfa_offset -8",
                ".cfi_restore rbp",
                "ret",
                ".cfi_endproc",
                imp = sym $imp,
            )
        }
    };
}
