//! A stored stack's frames: runs of ids of distinct addresses (see
//! [`super::addr`]), 2 or 4 bytes each.

use super::{addr, StackEntry};

/// Flags of `StackEntry::tail_word`: the own frames' ids, or the tail's,
/// take 4 bytes each (2 otherwise).
pub(super) const WIDE_OWN: u16 = 1 << 15;
pub(super) const WIDE_TAIL: u16 = 1 << 14;
pub(super) const TAIL_LEN: u16 = WIDE_TAIL - 1;

/// A run of stored frame ids: 2 bytes each while the process has fewer
/// than 65 536 distinct addresses (nearly every program: Python compiling
/// its library has 4 638, the benchmark's `stacks` 60), 4 bytes after.
/// Half a million stacks 21 frames deep took 42 MB of 4-byte ids.
#[derive(Clone, Copy)]
pub enum Ids {
    Narrow(&'static [u16]),
    Wide(&'static [u32]),
}

impl Ids {
    pub(super) const EMPTY: Ids = Ids::Narrow(&[]);

    /// The run of `n` ids at `p`, of the width `wide` says.
    pub(super) fn at(p: *const u8, n: u32, wide: bool) -> Ids {
        if n == 0 {
            return Ids::EMPTY;
        }
        // SAFETY: frames were written, aligned to their width, before
        // publication, and are never freed; a tail lies in an older
        // stack's frames.
        unsafe {
            if wide {
                Ids::Wide(core::slice::from_raw_parts(p as *const u32, n as usize))
            } else {
                Ids::Narrow(core::slice::from_raw_parts(p as *const u16, n as usize))
            }
        }
    }

    pub(super) fn len(self) -> usize {
        match self {
            Ids::Narrow(v) => v.len(),
            Ids::Wide(v) => v.len(),
        }
    }

    pub(super) fn wide(self) -> bool {
        matches!(self, Ids::Wide(_))
    }

    pub(super) fn ptr(self) -> *const u8 {
        match self {
            Ids::Narrow(v) => v.as_ptr() as *const u8,
            Ids::Wide(v) => v.as_ptr() as *const u8,
        }
    }

    /// The last `k` ids (`k` at most the length).
    pub(super) fn last(self, k: usize) -> Ids {
        match self {
            Ids::Narrow(v) => Ids::Narrow(&v[v.len() - k..]),
            Ids::Wide(v) => Ids::Wide(&v[v.len() - k..]),
        }
    }

    /// The frames' addresses.
    fn addrs(self) -> impl Iterator<Item = u64> {
        let (narrow, wide) = match self {
            Ids::Narrow(v) => (v, &[][..]),
            Ids::Wide(v) => (&[][..], v),
        };
        narrow
            .iter()
            .map(|&id| u32::from(id))
            .chain(wide.iter().copied())
            .map(addr)
    }

    /// Whether these are the frames of addresses `f`.
    #[inline(always)]
    pub(super) fn same(self, f: &[u64]) -> bool {
        self.len() == f.len()
            && match self {
                Ids::Narrow(v) => v.iter().zip(f).all(|(&id, &a)| addr(u32::from(id)) == a),
                Ids::Wide(v) => v.iter().zip(f).all(|(&id, &a)| addr(id) == a),
            }
    }
}

/// A stored stack's frames, leaf first: its own, then the outer ones it
/// shares with a stack stored before it. A new stack's outer frames are
/// mostly those of the stack captured before it: Python compiling its
/// library stored 18.6 million frames for 405 000 stacks, 46 deep, each
/// copied whole, most of them again and again.
#[derive(Clone, Copy)]
pub struct Frames {
    pub(super) own: Ids,
    pub(super) tail: Ids,
}

impl Frames {
    pub fn len(&self) -> usize {
        self.own.len() + self.tail.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The frames' addresses, leaf first.
    pub fn iter(&self) -> impl Iterator<Item = u64> {
        self.own.addrs().chain(self.tail.addrs())
    }

    /// Whether these are `f`, frame by frame.
    #[inline]
    pub fn is(&self, f: &[u64]) -> bool {
        let own = self.own.len();
        f.len() == self.len() && self.own.same(&f[..own]) && self.tail.same(&f[own..])
    }

    /// The last `k` frames (the outermost), where they lie in one stored
    /// run; None otherwise. (Sharing only part of them, the stack's tail
    /// where `k` is longer, made later stacks share ever shorter tails and
    /// copy the rest: Python compiling its library took 290 MB again.)
    pub(super) fn outer(&self, k: usize) -> Option<Ids> {
        if k <= self.tail.len() {
            Some(self.tail.last(k))
        } else if self.tail.len() == 0 && k <= self.own.len() {
            Some(self.own.last(k))
        } else {
            None
        }
    }

    /// Into `out` (cleared), as addresses: a loop per run (the dump and
    /// each checkpoint copy every stack; through `iter`'s chained adapters
    /// that copy showed in a profile of `stacks`' run).
    pub fn copy_to(&self, out: &mut alloc::vec::Vec<u64>) {
        out.clear();
        out.reserve(self.len());
        for part in [self.own, self.tail] {
            match part {
                Ids::Narrow(v) => out.extend(v.iter().map(|&id| addr(u32::from(id)))),
                Ids::Wide(v) => out.extend(v.iter().map(|&id| addr(id))),
            }
        }
    }
}

pub fn frames(e: &StackEntry) -> Frames {
    Frames {
        own: Ids::at(e.frames, e.len.into(), e.tail_word & WIDE_OWN != 0),
        tail: Ids::at(
            e.tail,
            (e.tail_word & TAIL_LEN).into(),
            e.tail_word & WIDE_TAIL != 0,
        ),
    }
}
