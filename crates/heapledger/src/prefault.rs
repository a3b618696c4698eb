//! Taking the page faults of building the profile while the program runs.
//!
//! Once the program has ended, `heapledger run` decodes its dump and builds the
//! profile, and every byte of that is fresh memory: after Python building
//! 3 M strings (16 000 stacks, 1.3 M frames), 11 500 page faults, about 46 MB,
//! at 3 to 4 µs each on these machines: 35 to 45 ms of the 150 the user
//! waits after the program. The symbolizing thread knows, from the stacks it
//! reads while the program runs (`crate::live`), about how much that will be,
//! and has a core to itself most of the time: it takes those pages ahead,
//! into its own malloc arena, where the dump is decoded and the profile is
//! built afterwards (`crate::symbolizer`). With it, on that run, decoding
//! the dump takes no page fault instead of 3 700 and building the profile
//! 720 instead of 7 800, and the time from the program's end to the profile
//! written went from 147 to 92 ms (medians of 8 runs each, alternating).
//!
//! The pages are taken by allocating and touching blocks and freeing them
//! again; two settings of the C library's malloc keep them in the arena
//! (this process's malloc, not the program's): the top of a heap is not
//! given back to the kernel below 2 GiB (`M_TRIM_THRESHOLD`), and blocks
//! below 8 MiB come from the heap rather than from a fresh mapping each
//! (`MMAP_THRESHOLD`; larger ones go back to the system when freed). The
//! estimate is what a profile takes per frame and per stack (measured on
//! Python's); a profile estimated past `MAX` gets no more, so that a wrong
//! guess costs a little memory and processor time and never much. (The
//! profile writer's own buffer is not in it: it is taken on another
//! thread, whose arena this one cannot fill.)

/// Bytes the dump and the profile take per frame: the decoded frame (8),
/// the profile's address (16) and a little of the rest (Python's profile
/// of 16 000 stacks and 1.3 M frames took 46 MB).
const PER_FRAME: u64 = 32;
/// And per stack: its vectors, counters and id.
const PER_STACK: u64 = 512;
/// Never more than this ahead: what one heap of a thread's malloc arena
/// holds (64 MiB on 64-bit glibc) less room for its other blocks. Past
/// one heap, freeing the blocks gives whole heaps back to the kernel
/// (whatever `M_TRIM_THRESHOLD` says), so the pages taken ahead were lost
/// and only raised the process's peak: a profile of 500 000 stacks took
/// 512 MB ahead, a peak of 525 MB while the program ran, then 148 MB.
const MAX: u64 = 48 << 20;
/// Blocks from this size on come from mappings of their own, given back
/// when freed; smaller ones from the heap, whose freed pages are kept for
/// the next. A fixed threshold (glibc otherwise raises it to the largest
/// block freed so far, up to 32 MiB): a profile's largest vectors (the
/// decoded frames, the tree, the counters) go back to the system when
/// done, rather than staying as holes in the heap beside the next phase's.
/// Python compiling its library: `heapledger run` peaked at 217 to 223 MB
/// with glibc's threshold, 179 MB with this one, for 100 000 page faults
/// instead of 75 000 (about 0.1 s).
const MMAP_THRESHOLD: i32 = 8 << 20;
/// Blocks this large are taken and touched, then freed together.
const BLOCK: usize = 256 << 10;
/// Not worth the trouble below this.
const MIN: u64 = 4 << 20;

const PAGE: usize = 4096;

/// Memory taken ahead in the calling thread's arena.
#[derive(Default)]
pub struct Prefault {
    /// Bytes taken so far.
    done: u64,
    /// The malloc settings are made (once, on first use).
    set: bool,
}

impl Prefault {
    /// The bytes the profile of `stacks` stacks of `frames` frames in all
    /// will need after the program.
    pub fn estimate(stacks: u64, frames: u64) -> u64 {
        frames
            .saturating_mul(PER_FRAME)
            .saturating_add(stacks.saturating_mul(PER_STACK))
    }

    /// Makes sure `bytes` of the calling thread's arena are populated and
    /// free. Call it from the thread that will use them.
    ///
    /// A profile that will need more than `MAX` gets none, and what was
    /// taken while it looked smaller goes back: its building takes
    /// seconds, of which the pages taken ahead save tens of milliseconds,
    /// while they stay beside its own largest vectors (which come from
    /// mappings of their own, past `MMAP_THRESHOLD`). Python compiling its
    /// library peaked at 186 to 192 MB with 40 MB taken before its profile
    /// looked large, 179 MB with none.
    pub fn ensure(&mut self, bytes: u64) {
        if bytes < MIN || bytes <= self.done {
            return;
        }
        if !self.set {
            // SAFETY: mallopt only changes malloc's parameters; both values
            // are within its limits (the mmap threshold's is 32 MiB).
            let ok = unsafe {
                libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX) == 1
                    && libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
            };
            self.set = true;
            if !ok {
                // Freed blocks may go back to the kernel: nothing to gain.
                self.done = MAX;
                return;
            }
        }
        if bytes > MAX {
            if self.done > 0 && self.done < MAX {
                give_back();
            }
            self.done = MAX;
            return;
        }
        // All of it, not only what is new: malloc hands out the blocks
        // freed last time first, already populated (touching them again
        // costs no fault), then new ones.
        let n = bytes.div_ceil(BLOCK as u64) as usize;
        let mut blocks = Vec::with_capacity(n);
        for _ in 0..n {
            // SAFETY: plain malloc; the block is freed below.
            let p = unsafe { libc::malloc(BLOCK) } as *mut u8;
            if p.is_null() {
                break;
            }
            for at in (0..BLOCK).step_by(PAGE) {
                // SAFETY: inside the block just allocated.
                unsafe { p.add(at).write_volatile(0) };
            }
            blocks.push(p);
        }
        // Last taken, first freed: each joins the free top of the heap.
        for p in blocks.into_iter().rev() {
            // SAFETY: allocated above, freed once.
            unsafe { libc::free(p.cast()) };
        }
        self.done = bytes;
    }
}

/// Gives the free top of the calling thread's arena back to the kernel:
/// `malloc_trim` does not trim a thread's arena, whose heaps shrink only
/// when a block next to their free top is freed and that top is past
/// `M_TRIM_THRESHOLD` (set high above, to keep the pages): lowered back to
/// glibc's default, then a block taken and freed there.
fn give_back() {
    // SAFETY: mallopt only changes a malloc parameter (glibc's default
    // value); the block is plain malloc, freed once.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, 128 << 10);
        let p = libc::malloc(BLOCK);
        libc::free(p);
    }
}

/// Gives the free pages of every malloc arena back to the kernel, between
/// building the profile and writing it: the dump's decoding and the
/// profile's building free much of what they took, in holes the writer
/// (another thread, another arena) does not reuse.
pub fn release_free() {
    // SAFETY: no preconditions.
    unsafe { libc::malloc_trim(0) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_is_what_stacks_and_frames_take() {
        assert_eq!(Prefault::estimate(0, 0), 0);
        assert_eq!(
            Prefault::estimate(16_000, 1_300_000),
            1_300_000 * PER_FRAME + 16_000 * PER_STACK
        );
        assert_eq!(Prefault::estimate(u64::MAX, 1), u64::MAX);
    }

    /// A profile that will need more than `MAX` gets nothing ahead.
    #[test]
    fn a_large_profile_gets_nothing_ahead() {
        std::thread::spawn(|| {
            let mut pf = Prefault::default();
            pf.ensure(MAX + 1);
            assert_eq!(pf.done, MAX);
            pf.ensure(MAX);
            assert_eq!(pf.done, MAX);
        })
        .join()
        .unwrap();
    }

    /// Memory taken ahead is reused: a later allocation of that size in the
    /// same thread takes (almost) no page fault.
    #[test]
    fn the_pages_taken_ahead_are_used_later() {
        fn faults() -> i64 {
            // SAFETY: rusage is plain integers, for which zero is valid.
            let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: getrusage only fills the struct it is given.
            unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
            ru.ru_minflt
        }
        std::thread::spawn(|| {
            let mut pf = Prefault::default();
            pf.ensure(16 << 20);
            assert_eq!(pf.done, 16 << 20);
            let before = faults();
            // Many vectors, as a profile's stacks are.
            let v: Vec<Vec<u64>> = (0..4000).map(|i| vec![i; 400]).collect();
            let taken = faults() - before;
            assert_eq!(v.len(), 4000);
            // 12.8 MB would be 3 100 faults from fresh memory.
            assert!(taken < 300, "{taken} page faults");
        })
        .join()
        .unwrap();
    }
}
