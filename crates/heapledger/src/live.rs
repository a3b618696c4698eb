//! Reading the recorder's stack table out of the running program.
//!
//! Symbolizing a profile is mostly parsing the debug information of the code
//! its stacks pass through, and `heapledger run` would otherwise do all of it
//! after the program ended, while the user waits. The recorder exports where
//! its table of distinct stacks lies (`heapledger_wire::StackRegistry`); this
//! module reads the stacks published since its last look with
//! `process_vm_readv`, so that the symbolizing thread can look their
//! addresses up while the program still runs.
//!
//! Reading another process's memory is allowed here because the program is
//! heapledger's own child (the kernel applies the ptrace check). When anything
//! fails (a kernel or container that forbids it, a program that is statically
//! linked or not yet exec'd, a registry that does not parse) the reader gives
//! up and the stacks are symbolized from the dump as before: this is only a
//! head start, never a source of data for the profile.

use crate::maps;
use heapledger_wire::StackRegistry;
/// Addresses: no need for SipHash's defence against chosen keys (a program
/// with a million deep stacks hashes twenty million frames here).
type HashSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

/// Frame counts above this are not a stack the recorder wrote (its depth
/// limit is at most 4096).
const MAX_FRAMES: u64 = 4096;

/// Remote pieces per `process_vm_readv` call (the kernel takes up to 1024).
const IOVECS: usize = 512;

/// The stack table of one program image (an `exec` starts a new one).
pub struct LiveStacks {
    pid: libc::pid_t,
    /// Start of the recorder's first mapping, which identifies the image.
    image: u64,
    registry: StackRegistry,
    /// Stacks read so far: ids below this.
    seen: u32,
    /// Chunk addresses read so far.
    chunks: Vec<u64>,
    /// Lookup addresses (return address minus one) already handed out.
    addrs: HashSet<u64>,
    /// Frames of the stacks read so far.
    frames: u64,
}

impl LiveStacks {
    /// Finds the registry of the recorder mapped in `pid`, given the text of
    /// its `/proc/PID/maps` and the address of the registry symbol in the
    /// recorder's file; `None` while the recorder is not mapped or not
    /// relocated yet, or when its memory cannot be read.
    pub fn locate(pid: u32, maps: &str, preload_name: &str, symbol: u64) -> Option<LiveStacks> {
        // A shared object's first segment is mapped from file offset 0 at
        // its load address, which its symbol addresses are relative to.
        let image = maps::parse(maps)
            .find(|m| m.path.ends_with(preload_name) && m.offset == 0)?
            .start;
        let pid = libc::pid_t::try_from(pid).ok()?;
        let mut raw = [0u8; StackRegistry::SIZE];
        if !read(pid, &mut [(image.checked_add(symbol)?, &mut raw[..])]) {
            return None;
        }
        // Its pointers are zero until the loader has relocated the recorder.
        let registry = StackRegistry::parse(&raw).filter(|r| r.dir != 0 && r.count != 0)?;
        Some(LiveStacks {
            pid,
            image,
            registry,
            seen: 0,
            chunks: Vec::new(),
            addrs: HashSet::default(),
            frames: 0,
        })
    }

    /// Whether `maps` still shows the image this reader was made for.
    pub fn same_image(&self, maps: &str, preload_name: &str) -> bool {
        maps::parse(maps)
            .find(|m| m.path.ends_with(preload_name) && m.offset == 0)
            .is_some_and(|m| m.start == self.image)
    }

    /// Stacks and frames read so far.
    pub fn read_so_far(&self) -> (u64, u64) {
        (u64::from(self.seen), self.frames)
    }

    /// Lookup addresses of the stacks published since the last call, each
    /// address once per image; `None` if the table cannot be read.
    pub fn new_addresses(&mut self) -> Option<Vec<u64>> {
        let r = self.registry;
        let mut count = [0u8; 4];
        if !read(self.pid, &mut [(r.count, &mut count[..])]) {
            return None;
        }
        let limit = (u64::from(r.max_chunks) << r.chunk_bits).min(u64::from(u32::MAX)) as u32;
        let count = u32::from_le_bytes(count).min(limit);
        let per_chunk = 1u32 << r.chunk_bits;
        let mut out = Vec::new();
        while self.seen < count {
            let chunk_no = (self.seen >> r.chunk_bits) as usize;
            while self.chunks.len() <= chunk_no {
                let mut p = [0u8; 8];
                let at = r.dir + 8 * self.chunks.len() as u64;
                if !read(self.pid, &mut [(at, &mut p[..])]) || p == [0; 8] {
                    return None;
                }
                self.chunks.push(u64::from_le_bytes(p));
            }
            let first = self.seen % per_chunk;
            let n = (count - self.seen).min(per_chunk - first);
            let size = r.entry_size as usize;
            let mut entries = vec![0u8; n as usize * size];
            let at = self.chunks[chunk_no] + u64::from(first) * size as u64;
            if !read(self.pid, &mut [(at, &mut entries[..])]) {
                return None;
            }
            let stacks: Vec<(u64, u64)> = entries
                .chunks_exact(size)
                .map(|e| {
                    let f = r.frames_offset as usize;
                    let l = r.len_offset as usize;
                    let frames = u64::from_le_bytes(e[f..f + 8].try_into().unwrap_or([0; 8]));
                    let len = u32::from_le_bytes(e[l..l + 4].try_into().unwrap_or([0; 4]));
                    (frames, u64::from(len))
                })
                .filter(|&(frames, len)| frames != 0 && len > 0)
                .collect();
            if stacks.iter().any(|&(_, len)| len > MAX_FRAMES) {
                return None;
            }
            for group in stacks.chunks(IOVECS) {
                let total: u64 = group.iter().map(|s| s.1).sum();
                let mut bytes: Vec<u8> = vec![0; total as usize * 8];
                let mut pieces = Vec::with_capacity(group.len());
                let mut rest = &mut bytes[..];
                for &(frames, len) in group {
                    let (piece, tail) = rest.split_at_mut(len as usize * 8);
                    pieces.push((frames, piece));
                    rest = tail;
                }
                if !read(self.pid, &mut pieces) {
                    return None;
                }
                self.frames += total;
                out.extend(
                    bytes
                        .chunks_exact(8)
                        .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])).wrapping_sub(1))
                        .filter(|&a| self.addrs.insert(a)),
                );
            }
            self.seen += n;
        }
        Some(out)
    }
}

/// Fills each buffer from the memory of `pid` at its address; false unless
/// every byte was read.
fn read(pid: libc::pid_t, pieces: &mut [(u64, &mut [u8])]) -> bool {
    let mut local = Vec::with_capacity(pieces.len());
    let mut remote = Vec::with_capacity(pieces.len());
    let mut want = 0usize;
    for (addr, buf) in pieces.iter_mut() {
        local.push(libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        });
        remote.push(libc::iovec {
            iov_base: *addr as usize as *mut libc::c_void,
            iov_len: buf.len(),
        });
        want += buf.len();
    }
    // SAFETY: every local iovec points into a live, writable buffer of its
    // length; remote addresses are only read by the kernel, which checks
    // them against the other process's mappings.
    let got = unsafe {
        libc::process_vm_readv(
            pid,
            local.as_ptr(),
            local.len() as libc::c_ulong,
            remote.as_ptr(),
            remote.len() as libc::c_ulong,
            0,
        )
    };
    got >= 0 && got as usize == want
}
