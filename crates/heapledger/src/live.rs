//! Reading the recorder's stack table out of the running program.
//!
//! Symbolizing a profile is mostly parsing the debug information of the code
//! its stacks pass through, and `heapledger run` would otherwise do all of it
//! after the program ended, while the user waits. The recorder exports where
//! its table of distinct stacks and their distinct frame addresses lie
//! (`heapledger_wire::StackRegistry`); this module reads the stacks and
//! addresses published since its last look with `process_vm_readv`, so
//! that the symbolizing thread can look the addresses up while the
//! program still runs.
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
    /// The address table's chunks, and its addresses read so far.
    addr_chunks: Vec<u64>,
    addrs_seen: u32,
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
            addr_chunks: Vec::new(),
            addrs_seen: 0,
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
    /// address once per image; `None` if the tables cannot be read.
    pub fn new_addresses(&mut self) -> Option<Vec<u64>> {
        let r = self.registry;
        let count = read_count(self.pid, r.count, r.max_chunks, r.chunk_bits)?;
        let per_chunk = 1u32 << r.chunk_bits;
        // The stacks' own frames, counted (what building the profile will
        // take: see `crate::prefault`).
        while self.seen < count {
            let chunk_no = (self.seen >> r.chunk_bits) as usize;
            read_dir(self.pid, r.dir, chunk_no, &mut self.chunks)?;
            let first = self.seen % per_chunk;
            let n = (count - self.seen).min(per_chunk - first);
            let size = r.entry_size as usize;
            let mut entries = vec![0u8; n as usize * size];
            let at = self.chunks[chunk_no] + u64::from(first) * size as u64;
            if !read(self.pid, &mut [(at, &mut entries[..])]) {
                return None;
            }
            let l = r.len_offset as usize;
            for e in entries.chunks_exact(size) {
                let len = u16::from_le_bytes(e[l..l + 2].try_into().unwrap_or([0; 2]));
                if u64::from(len) > MAX_FRAMES {
                    return None;
                }
                self.frames += u64::from(len);
            }
            self.seen += n;
        }
        // The distinct addresses written since the last look.
        let addrs = read_count(self.pid, r.addr_count, r.addr_max_chunks, r.addr_chunk_bits)?;
        let per_chunk = 1u32 << r.addr_chunk_bits;
        let mut out = Vec::new();
        while self.addrs_seen < addrs {
            let chunk_no = (self.addrs_seen >> r.addr_chunk_bits) as usize;
            read_dir(self.pid, r.addr_dir, chunk_no, &mut self.addr_chunks)?;
            let first = self.addrs_seen % per_chunk;
            let n = (addrs - self.addrs_seen).min(per_chunk - first);
            let mut bytes = vec![0u8; n as usize * 8];
            let at = self.addr_chunks[chunk_no] + u64::from(first) * 8;
            if !read(self.pid, &mut [(at, &mut bytes[..])]) {
                return None;
            }
            out.extend(
                bytes
                    .chunks_exact(8)
                    .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])).wrapping_sub(1))
                    .filter(|&a| self.addrs.insert(a)),
            );
            self.addrs_seen += n;
        }
        Some(out)
    }
}

/// A table's 4-byte count at `at`, at most what its directory can hold.
fn read_count(pid: libc::pid_t, at: u64, max_chunks: u32, chunk_bits: u32) -> Option<u32> {
    let mut count = [0u8; 4];
    if !read(pid, &mut [(at, &mut count[..])]) {
        return None;
    }
    let limit = (u64::from(max_chunks) << chunk_bits).min(u64::from(u32::MAX)) as u32;
    Some(u32::from_le_bytes(count).min(limit))
}

/// Makes sure `chunks` holds the directory at `dir` up to chunk `no`
/// (published chunks are never moved).
fn read_dir(pid: libc::pid_t, dir: u64, no: usize, chunks: &mut Vec<u64>) -> Option<()> {
    while chunks.len() <= no {
        let mut p = [0u8; 8];
        let at = dir + 8 * chunks.len() as u64;
        if !read(pid, &mut [(at, &mut p[..])]) || p == [0; 8] {
            return None;
        }
        chunks.push(u64::from_le_bytes(p));
    }
    Some(())
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
