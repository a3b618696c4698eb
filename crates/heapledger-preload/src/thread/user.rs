//! What a thread keeps of the program's own (`heapledger.h`'s time-lost
//! API, timelog.md): its traceback (frames it pushed and has not popped,
//! `data::traceback`) and its time logs.
//!
//! A log is the thread's own: every time-lost event of the thread (its lock
//! waits, the program's `heapledger_time_lost*` calls) goes to each of its
//! active logs, keyed by kind, the thread's traceback then, and another
//! thread's traceback where given, regrouped and kept to its top entries as
//! the recorder's own per-thread log is (`data::timelog::TimeLog`). Each
//! entry holds a reference on both tracebacks, given back when it is merged
//! into another, evicted, cleared or destroyed.

use crate::data::timelog::{Key, TimeLog};
use crate::data::traceback::{self, NONE};
use alloc::boxed::Box;
use alloc::vec::Vec;

/// A log the program made (`heapledger_timelog_create`).
pub struct UserLog {
    pub log: TimeLog,
}

/// The program's own part of a thread's state.
pub struct User {
    /// The top of its traceback ([`NONE`]: empty), on which it holds one
    /// reference.
    pub top: u32,
    /// Its logs, in order of creation, each boxed: its address is the
    /// program's handle, which must not move as the list grows.
    #[allow(clippy::vec_box)]
    pub logs: Vec<Box<UserLog>>,
}

impl User {
    pub fn new() -> User {
        User {
            top: NONE,
            logs: Vec::new(),
        }
    }

    /// Pushes `frame` (a code address, or a label's); false without memory.
    pub fn push(&mut self, frame: u64) -> bool {
        match traceback::push(self.top, frame) {
            Some(n) => {
                self.top = n;
                true
            }
            None => false,
        }
    }

    /// Pops the top frame; false where none was pushed.
    pub fn pop(&mut self) -> bool {
        if self.top == NONE {
            return false;
        }
        let under = traceback::parent(self.top);
        traceback::retain(under);
        traceback::release(self.top);
        self.top = under;
        true
    }

    /// A reference on the current traceback ([`NONE`] where empty).
    pub fn snapshot(&self) -> u32 {
        traceback::retain(self.top);
        self.top
    }

    /// An event of `kind` and `ns`, with another thread's traceback
    /// `other` ([`NONE`]: none), in every log.
    pub fn record(&mut self, kind: u8, other: u32, ns: u64) {
        for l in &mut self.logs {
            traceback::retain(self.top);
            traceback::retain(other);
            let key = Key {
                kind,
                stack: self.top,
                other,
            };
            if let Some(k) = l.log.record(key, ns) {
                release_key(k);
            }
        }
    }

    /// The log at `handle`, if one of this thread's.
    pub fn log(&mut self, handle: usize) -> Option<&mut UserLog> {
        self.logs
            .iter_mut()
            .find(|l| core::ptr::eq::<UserLog>(&***l, handle as *const UserLog))
            .map(|l| &mut **l)
    }

    /// Destroys the log at `handle`; false where it is none of this
    /// thread's.
    pub fn destroy(&mut self, handle: usize) -> bool {
        let Some(i) = self
            .logs
            .iter()
            .position(|l| core::ptr::eq::<UserLog>(&**l, handle as *const UserLog))
        else {
            return false;
        };
        let mut l = self.logs.remove(i);
        l.clear();
        true
    }

    /// The thread ends: its logs go, and its traceback's reference.
    pub fn ends(&mut self) {
        for mut l in self.logs.drain(..) {
            l.clear();
        }
        traceback::release(self.top);
        self.top = NONE;
    }
}

impl UserLog {
    /// Empties the log, giving back its references.
    pub fn clear(&mut self) {
        for k in self.log.clear() {
            release_key(k);
        }
    }
}

/// Gives back the references of a key no longer held.
pub fn release_key(k: Key) {
    traceback::release(k.stack);
    traceback::release(k.other);
}
