//! Reading a dump back, in the CLI process.
//!
//! Nothing here trusts the dump: a length or count is checked against the
//! bytes left before anything is reserved for it, a stack may not be longer
//! than [`MAX_STACK_FRAMES`] nor all of them together hold more than
//! [`max_frames`] of the dump's size (a stack stores the frames it shares with the one
//! before once, so a few bytes may stand for many frames), and a damaged or
//! cut dump is an error, never a panic.

use crate::tree::{unpack_counters, COUNTER_FIELDS};
use crate::*;
use std::collections::HashMap;
use std::fmt;

/// The most frames one stack record may have: 16 times the deepest stack
/// the recorder takes (`--max-depth` is at most 4096).
pub const MAX_STACK_FRAMES: usize = 1 << 16;

/// The most frames a dump's stacks may hold in all whatever its size (1 GiB
/// decoded): a hundred times those of a Python run with 16 000 stacks.
pub const MAX_FRAMES: usize = 1 << 27;

/// Frames a dump may hold per byte of it, past [`MAX_FRAMES`]: a stack
/// shares its outer frames with the one before, so a record of a few dozen
/// bytes (its counters) stands for up to `--max-depth` frames; 16 per byte
/// is what stacks 256 deep that differ only near their leaf come to
/// (Python compiling 11 700 files: 2.7 M stacks, 159 M frames in a dump
/// of 165 MB, about 1 per byte). What decoding may take stays bounded by
/// the dump's size: 128 bytes of frames per byte.
pub const FRAMES_PER_BYTE: usize = 16;

/// The most frames the stacks of a dump of `len` bytes may hold.
pub fn max_frames(len: usize) -> usize {
    MAX_FRAMES.max(len.saturating_mul(FRAMES_PER_BYTE))
}

/// The most [`Tag::Label`] records a dump may hold.
pub const MAX_LABELS: usize = 1 << 20;

/// What [`Tag::StackUse`] says: a thread's deepest stack in use.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StackUse {
    /// Its number (u64::MAX: the ended threads' row).
    pub thread: u64,
    /// The bytes of its stack in use.
    pub bytes: u64,
    /// The id of that stack in the dump's stacks, if it has counters there.
    pub stack: u64,
    /// Its frames (return addresses, leaf first).
    pub frames: Vec<u64>,
}

/// What [`Tag::Wait`] says: waits of one kind (0 mutex, 1 rwlock read,
/// 2 rwlock write, 3 condition variable, 4 join, 5 semaphore) at one
/// stack, with the holder's stack where known (empty otherwise).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Wait {
    pub thread: u64,
    pub kind: u64,
    pub count: u64,
    pub total_ns: u64,
    pub max_ns: u64,
    pub stack: Vec<u64>,
    pub holder: Vec<u64>,
}

/// The most [`Tag::Wait`] records a dump may hold (64 a thread, for the
/// 1 024 threads kept and the row of the others).
const MAX_WAITS: usize = 64 * 1025 + 64;

/// Everything a dump holds, decoded.
#[derive(Clone, Debug, Default)]
pub struct Dump {
    pub version: u64,
    pub pid: u32,
    pub ppid: u32,
    pub stack_mode: Option<StackMode>,
    pub max_depth: u32,
    pub sample_every: u64,
    /// Blocks of each stack in each thread timed one by one before its
    /// lifetimes are sampled (u64::MAX: every block timed).
    pub lifetime_head: u64,
    pub ticks_per_second: u64,
    pub start_ticks: u64,
    pub end_ticks: u64,
    pub start_unix_ns: u64,
    pub exe: String,
    pub cmdline: Vec<String>,
    pub modules: Vec<ModuleRec>,
    pub maps: String,
    pub stacks: Vec<StackRec>,
    /// The frames of every stack, once each (see [`StackRec`]).
    pub tree: FrameTree,
    /// The stacks' counters, packed (see [`Dump::counters`]).
    packed: Vec<u8>,
    pub threads: Vec<ThreadRec>,
    pub sizes: Vec<(u64, u64)>,
    pub realloc_jumps: Vec<(u64, u64, u64)>,
    pub leaks: Vec<LeakRec>,
    pub globals: Globals,
    /// Allocator functions the program resolved outside heapledger (see
    /// [`Tag::Unhooked`]), and the object that defines them ("" for the
    /// executable).
    pub unhooked: Vec<String>,
    pub unhooked_by: String,
    /// How the recorder degraded, where it did ([`Tag::Degraded`]).
    pub degraded: Option<Degraded>,
    /// The peaks of resident and virtual memory, bytes ([`Tag::Memory`];
    /// 0 where the kernel did not say).
    pub peak_rss: u64,
    pub peak_virtual: u64,
    /// Set when the process was forked from another ([`Tag::Forked`]).
    pub forked: Option<Forked>,
    /// Set when the program reset the counters ([`Tag::Reset`]).
    pub reset: Option<Reset>,
    /// The threads' logs of time lost waiting ([`Tag::Wait`]).
    pub waits: Vec<Wait>,
    /// The kinds of wait the program named: code, name ([`Tag::WaitKind`]).
    pub wait_kinds: Vec<(u64, String)>,
    /// How the process ended, when the recorder saw it ([`Tag::Exit`]).
    pub ending: Option<Ending>,
    /// The object that defines the `malloc` the recorder called ("": not
    /// recorded).
    pub allocator: String,
    /// Set in a checkpoint, written while the process ran
    /// ([`Tag::Checkpoint`]); None in a final dump.
    pub checkpoint: Option<Checkpoint>,
    /// Set in a snapshot's checkpoint: its label ([`Tag::Snapshot`]).
    pub snapshot: Option<String>,
    /// Memory over time ([`Tag::Timeline`]): the buckets' length (ns) and
    /// the buckets, from the process's start.
    pub timeline: Option<(u64, Vec<TimelinePoint>)>,
    /// The scatter's counts ([`Tag::Scatter`]): allocations by (time key,
    /// size cell), freed blocks by (size cell, lifetime cell).
    pub scatter: [Vec<(u64, u64, u64)>; 2],
    /// The labels the program gave frames ([`Tag::Label`]): id, text.
    pub labels: Vec<(u64, String)>,
    /// Each thread's deepest stack ([`Tag::StackUse`]).
    pub stack_use: Vec<StackUse>,
    /// The blocks alive at the end ([`Tag::LeakBlock`]): stack id, address,
    /// size; and how many more there were ([`Tag::LeakBlocksOmitted`]).
    pub leak_blocks: Vec<(u64, u64, u64)>,
    pub leak_blocks_omitted: u64,
    /// The checkpoint series beside the dump (`P.series`, see
    /// [`SERIES_MAGIC`]), as written (read with [`series_records`]): not
    /// in the dump itself; the reader of the run's files sets it, or
    /// `series_file` instead.
    pub series: Vec<u8>,
    /// The file of that series, read as it is used
    /// ([`each_series_record`]) where `series` is empty.
    pub series_file: Option<std::path::PathBuf>,
    /// What each thread allocated at each stack ([`Tag::ThreadStack`]).
    pub thread_stacks: ThreadRows,
    /// Threads whose rows were not kept ([`Tag::ThreadStacksUnkept`]).
    pub thread_stacks_unkept: u64,
    /// Threads' tables handed over while they ran, and their entries
    /// ([`Tag::HandOvers`]).
    pub hand_overs: (u64, u64),
}

/// The rows of [`Tag::ThreadStack`] records (thread number, stack id,
/// allocations, bytes), kept as their records' numbers: four threads
/// going round half a million stacks wrote two million, 14 MB so and 64
/// as tuples.
#[derive(Debug, Clone, Default)]
pub struct ThreadRows {
    bytes: Vec<u8>,
    len: usize,
}

impl ThreadRows {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Each row, as written: (thread number, stack id, allocations, bytes).
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64, u64, u64)> + '_ {
        let mut r = Reader::new(&self.bytes[..]);
        // (Checked as they were kept.)
        let mut u = move || r.u().unwrap_or_default();
        (0..self.len).map(move |_| (u(), u(), u(), u()))
    }

    /// Gives the memory back.
    pub fn clear(&mut self) {
        *self = ThreadRows::default();
    }
}

impl Dump {
    /// The counters of stack `i` (of [`Dump::stacks`]).
    pub fn counters(&self, i: usize) -> StackCounters {
        match self.stacks[i].counters_at {
            u32::MAX => StackCounters::default(),
            at => unpack_counters(&self.packed, at as usize),
        }
    }

    /// The frames of stack `i`, leaf first, into `out` (cleared).
    pub fn frames(&self, i: usize, out: &mut Vec<u64>) {
        self.tree.frames(self.stacks[i].node, out)
    }

    /// The bytes the stacks' counters take packed (about what the profile's
    /// take, packed alike).
    pub fn counters_bytes(&self) -> usize {
        self.packed.len()
    }

    /// Lets go of the stacks, their frames and counters.
    pub fn drop_stacks(&mut self) {
        self.stacks = Vec::new();
        self.tree = FrameTree::default();
        self.packed = Vec::new();
    }
}

/// One executable mapping of a module the process had loaded at some point.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModuleRec {
    pub start: u64,
    pub end: u64,
    pub file_offset: u64,
    pub path: String,
    pub build_id: Vec<u8>,
}

/// A distinct stack: its frames are its node's path in [`Dump::tree`]
/// (read with [`FrameTree::frames`]: return addresses, leaf first, the
/// first the return address into the function that called the
/// allocator), its counters [`Dump::counters`].
#[derive(Clone, Copy, Debug)]
pub struct StackRec {
    pub id: u64,
    /// Its innermost frame's node ([`ROOT`] for a stack without frames).
    pub node: u32,
    /// Where its counters are packed in `Dump::packed` (`u32::MAX`: none
    /// were written: all zero).
    counters_at: u32,
}

#[derive(Clone, Debug, Default)]
pub struct ThreadRec {
    pub number: u64,
    /// 0 for one thread; for a row of ended threads merged
    /// ([`Tag::EndedThreads`]), how many it stands for.
    pub merged: u64,
    pub mem_ops: u64,
    /// (count, sum, ticks) per [`AllocFn`].
    pub stats: [(u64, u64, u64); AllocFn::COUNT],
}

#[derive(Clone, Debug, Default)]
pub struct LeakRec {
    pub stack: u64,
    pub count: u64,
    pub bytes: u64,
}

/// Why a dump could not be read.
#[derive(Debug, PartialEq, Eq)]
pub enum DecodeError {
    NotADump,
    Truncated,
    UnsupportedVersion(u64),
    BadRecord {
        tag: u8,
        offset: usize,
    },
    /// The stacks hold more than [`max_frames`] of the dump's size.
    TooManyFrames {
        offset: usize,
    },
    /// The file could not be read.
    Io(std::io::ErrorKind),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::NotADump => write!(f, "not a heapledger dump"),
            DecodeError::Truncated => {
                write!(f, "dump is truncated (the process died while writing it, or could not write it whole)")
            }
            DecodeError::UnsupportedVersion(v) => write!(
                f,
                "dump format version {v} is not supported (expected {VERSION})"
            ),
            DecodeError::BadRecord { tag, offset } => {
                write!(f, "bad record (tag {tag}) at byte {offset}")
            }
            DecodeError::Io(e) => write!(f, "cannot read the dump: {e}"),
            DecodeError::TooManyFrames { offset } => write!(
                f,
                "the stacks hold more frames in all than a recorder writes (more than {MAX_FRAMES}, and {FRAMES_PER_BYTE} per byte of the dump) at byte {offset}"
            ),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Where a [`Reader`]'s bytes come from: a slice held whole, or a file
/// read a window at a time ([`FileInput`]).
trait Input {
    /// The bytes held now.
    fn held(&self) -> &[u8];
    /// Holds more, keeping the held bytes from `keep` on and dropping
    /// those before (where worth it): at least `want` more past the held
    /// ones, or what is left of the input. Returns how many bytes were
    /// dropped from the front; None at the end of the input.
    fn more(&mut self, keep: usize, want: usize) -> Result<Option<usize>, DecodeError>;
    /// The input's offset of the first byte held.
    fn offset(&self) -> u64;
    /// The input's length.
    fn len(&self) -> u64;
}

impl Input for &[u8] {
    #[inline(always)]
    fn held(&self) -> &[u8] {
        self
    }
    fn more(&mut self, _: usize, _: usize) -> Result<Option<usize>, DecodeError> {
        Ok(None)
    }
    fn offset(&self) -> u64 {
        0
    }
    fn len(&self) -> u64 {
        <[u8]>::len(self) as u64
    }
}

/// A file read a window at a time: a dump is decoded without its bytes
/// held whole (four threads over half a million stacks: 56 MB, beside
/// what is decoded, at `heapledger run`'s peak).
struct FileInput<R> {
    file: R,
    held: Vec<u8>,
    offset: u64,
    len: u64,
}

/// What a [`FileInput`] reads at a time.
const WINDOW: usize = 1 << 20;

impl<R: std::io::Read> Input for FileInput<R> {
    #[inline(always)]
    fn held(&self) -> &[u8] {
        &self.held
    }
    fn more(&mut self, keep: usize, want: usize) -> Result<Option<usize>, DecodeError> {
        let dropped = if keep >= WINDOW / 2 {
            self.held.drain(..keep);
            self.offset += keep as u64;
            keep
        } else {
            0
        };
        let have = self.held.len();
        // A window, or what the file has left where that is less (a small
        // dump takes its own size); past the length it had, a page.
        let left = self.len.saturating_sub(self.offset + have as u64);
        let chunk = usize::try_from(left).unwrap_or(WINDOW).clamp(4096, WINDOW);
        let target = have + want.max(chunk);
        self.held.resize(target, 0);
        let mut at = have;
        while at < target {
            match self.file.read(&mut self.held[at..]) {
                Ok(0) => break,
                Ok(n) => at += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.held.truncate(at);
                    return Err(DecodeError::Io(e.kind()));
                }
            }
        }
        self.held.truncate(at);
        // A file that grows while it is read (a process still writing its
        // dump) is read up to the length it had.
        self.len = self.len.max(self.offset + at as u64);
        Ok((at > have).then_some(dropped))
    }
    fn offset(&self) -> u64 {
        self.offset
    }
    fn len(&self) -> u64 {
        self.len
    }
}

struct Reader<I> {
    input: I,
    pos: usize,
    /// Where the record being read starts: its bytes stay held.
    mark: usize,
}

impl<I: Input> Reader<I> {
    fn new(input: I) -> Self {
        Reader {
            input,
            pos: 0,
            mark: 0,
        }
    }
    /// The input's offset of the next byte.
    fn at(&self) -> usize {
        (self.input.offset() + self.pos as u64) as usize
    }
    /// Bytes left in the input.
    fn left(&self) -> u64 {
        self.input.len().saturating_sub(self.at() as u64)
    }
    /// Starts a record: its bytes stay held until the next.
    fn start(&mut self) {
        self.mark = self.pos;
    }
    /// The bytes of the record being read so far.
    fn record(&self) -> &[u8] {
        &self.input.held()[self.mark..self.pos]
    }
    /// Holds at least `n` bytes from `pos`, or fails as the input ends.
    #[cold]
    fn fill(&mut self, n: usize) -> Result<(), DecodeError> {
        while self.input.held().len() - self.pos < n {
            match self.input.more(self.mark, n)? {
                Some(dropped) => {
                    self.pos -= dropped;
                    self.mark -= dropped;
                }
                None => return Err(DecodeError::Truncated),
            }
        }
        Ok(())
    }
    #[inline(always)]
    fn byte(&mut self) -> Result<u8, DecodeError> {
        if self.pos >= self.input.held().len() {
            self.fill(1)?;
        }
        let b = self.input.held()[self.pos];
        self.pos += 1;
        Ok(b)
    }
    #[inline(always)]
    fn u(&mut self) -> Result<u64, DecodeError> {
        // Ten bytes held (a number's most): no refill, no check a byte.
        if let Some(w) = self.input.held().get(self.pos..self.pos + 10) {
            if w[0] < 0x80 {
                self.pos += 1;
                return Ok(u64::from(w[0]));
            }
            let mut v = 0u64;
            for (k, &b) in w.iter().enumerate() {
                // (7 k is 63 at most: the tenth byte's bits past 64 go.)
                v |= u64::from(b & 0x7f) << (7 * k);
                if b & 0x80 == 0 {
                    self.pos += k + 1;
                    return Ok(v);
                }
            }
            self.pos += 10;
            return Err(DecodeError::BadRecord {
                tag: 0,
                offset: self.at(),
            });
        }
        self.u_slow()
    }
    #[inline(never)]
    fn u_slow(&mut self) -> Result<u64, DecodeError> {
        let mut v = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.byte()?;
            if shift < 64 {
                v |= ((b & 0x7f) as u64) << shift;
            }
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(DecodeError::BadRecord {
            tag: 0,
            offset: self.at(),
        })
    }
    /// A count, then that many frames (at most [`MAX_STACK_FRAMES`]), of a
    /// record of `tag`.
    fn frames(&mut self, tag: Tag) -> Result<Vec<u64>, DecodeError> {
        let n = self.u()?;
        if n > MAX_STACK_FRAMES as u64 || n > self.left() {
            return Err(DecodeError::BadRecord {
                tag: tag as u8,
                offset: self.at(),
            });
        }
        (0..n).map(|_| self.u()).collect()
    }
    #[inline(always)]
    fn i(&mut self) -> Result<i64, DecodeError> {
        let z = self.u()?;
        Ok(((z >> 1) as i64) ^ -((z & 1) as i64))
    }
    fn bytes(&mut self) -> Result<&[u8], DecodeError> {
        let n = self.u()?;
        if n > self.left() {
            return Err(DecodeError::Truncated);
        }
        let n = n as usize;
        self.fill(n)?;
        let s = &self.input.held()[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn string(&mut self) -> Result<String, DecodeError> {
        Ok(String::from_utf8_lossy(self.bytes()?).into_owned())
    }
}

/// One record of a checkpoint series (see [`SERIES_MAGIC`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SeriesRecord {
    pub seq: u64,
    pub ticks: u64,
    /// (stack id, its counters), by id.
    pub stacks: Vec<(u64, [u64; SERIES_FIELDS])>,
}

/// Decodes a checkpoint series: its whole records, in the order written.
/// A record cut short ends it (the process was killed while appending);
/// one that is damaged ends it too, as does anything that is not one.
pub fn decode_series(buf: &[u8]) -> Vec<SeriesRecord> {
    series_records(buf).collect()
}

/// The records of a checkpoint series one by one (see [`decode_series`]):
/// one decoded at a time.
pub fn series_records(buf: &[u8]) -> impl Iterator<Item = SeriesRecord> + '_ {
    series_record_refs(buf).map(|r| SeriesRecord {
        seq: r.seq,
        ticks: r.ticks,
        stacks: r.rows().collect(),
    })
}

/// A record of a checkpoint series, checked whole, its rows read as they
/// are asked for ([`SeriesRecordRef::rows`]): a record of half a million
/// stacks is 20 MB decoded.
#[derive(Clone, Copy, Debug)]
pub struct SeriesRecordRef<'a> {
    pub seq: u64,
    pub ticks: u64,
    /// The rows' bytes.
    rows: &'a [u8],
}

impl<'a> SeriesRecordRef<'a> {
    /// (stack id, its counters), by id.
    pub fn rows(&self) -> impl Iterator<Item = (u64, [u64; SERIES_FIELDS])> + 'a {
        let mut r = Reader::new(self.rows);
        let mut id = 0i64;
        std::iter::from_fn(move || {
            if r.left() == 0 {
                return None;
            }
            // Checked whole when the record was read: no error here.
            let d = r.u().ok()?;
            id = id.wrapping_add(((d >> 1) as i64) ^ -((d & 1) as i64));
            let mut c = [0u64; SERIES_FIELDS];
            for v in &mut c {
                *v = r.u().ok()?;
            }
            Some((id as u64, c))
        })
    }
}

/// [`series_records`] without decoding the rows (each record is checked
/// whole first).
pub fn series_record_refs(buf: &[u8]) -> impl Iterator<Item = SeriesRecordRef<'_>> + '_ {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        if buf.len() - at < 8 || buf[at..at + 4] != SERIES_MAGIC {
            return None;
        }
        let len = u32::from_le_bytes(buf[at + 4..at + 8].try_into().expect("4 bytes")) as usize;
        let payload = buf.get(at + 8..at + 8 + len)?;
        at += 8 + len;
        let rec = series_record(payload);
        if rec.is_none() {
            at = buf.len();
        }
        rec
    })
}

/// A series record's payload, checked whole.
fn series_record(payload: &[u8]) -> Option<SeriesRecordRef<'_>> {
    let mut r = Reader::new(payload);
    let mut one = || -> Result<SeriesRecordRef<'_>, DecodeError> {
        let (seq, ticks) = (r.u()?, r.u()?);
        let rows = &payload[r.pos..];
        while r.pos < payload.len() {
            for _ in 0..1 + SERIES_FIELDS {
                r.u()?;
            }
        }
        Ok(SeriesRecordRef { seq, ticks, rows })
    };
    one().ok()
}

/// [`series_record_refs`] over a file read as it goes: each record in
/// turn, in one buffer reused, to `each`, until it returns false, the file
/// ends, or a record is cut short or damaged. A 10-hour run's series is
/// hundreds of MB; its largest record (one per stack changed) is what
/// this holds.
pub fn each_series_record(
    file: impl std::io::Read,
    mut each: impl FnMut(SeriesRecordRef<'_>) -> bool,
) {
    use std::io::Read;
    let mut r = std::io::BufReader::with_capacity(1 << 16, file);
    let mut buf = Vec::new();
    loop {
        let mut head = [0u8; 8];
        if r.read_exact(&mut head).is_err() || head[..4] != SERIES_MAGIC {
            return;
        }
        let len = u32::from_le_bytes(head[4..].try_into().expect("4 bytes")) as usize;
        buf.clear();
        match (&mut r).take(len as u64).read_to_end(&mut buf) {
            Ok(n) if n == len => {}
            _ => return,
        }
        match series_record(&buf) {
            Some(rec) if each(rec) => {}
            _ => return,
        }
    }
}

/// Decodes a whole dump.
pub fn decode(buf: &[u8]) -> Result<Dump, DecodeError> {
    let (d, frames) = parse(Reader::new(buf))?;
    Ok(frames.into_tree(d))
}

/// [`decode`], the dump's bytes let go before its stacks' tree is built
/// (half a million stacks: a 40 MB dump, and a tree that takes as much to
/// build).
pub fn decode_owned(buf: Vec<u8>) -> Result<Dump, DecodeError> {
    let (d, frames) = parse(Reader::new(&buf[..]))?;
    drop(buf);
    Ok(frames.into_tree(d))
}

/// [`decode`] of a dump read from `file` (`len` bytes long, or more if it
/// grows), a window of a megabyte at a time: its bytes are never held
/// whole.
pub fn decode_read(file: impl std::io::Read, len: u64) -> Result<Dump, DecodeError> {
    let input = FileInput {
        file,
        held: Vec::new(),
        offset: 0,
        len,
    };
    let (d, frames) = parse(Reader::new(input))?;
    Ok(frames.into_tree(d))
}

/// Every stack's frames as ids of distinct addresses, outermost first
/// (stack `i` ends at `ends[i]`), before their tree is built.
struct StackFrames {
    ids: Ids,
    ends: Vec<usize>,
    addrs: Vec<u64>,
}

impl StackFrames {
    fn into_tree(self, mut d: Dump) -> Dump {
        let StackFrames { ids, ends, addrs } = self;
        let (tree, nodes) = match &ids {
            Ids::Narrow(v) => FrameTree::build(v, &ends, addrs),
            Ids::Wide(v) => FrameTree::build(v, &ends, addrs),
        };
        drop((ids, ends));
        for (s, n) in d.stacks.iter_mut().zip(nodes) {
            s.node = n;
        }
        d.tree = tree;
        d
    }
}

/// Every stack's frame ids, in 16 bits while the dump's distinct
/// addresses fit (Python compiling its library: 18.6 million frames of
/// 4 638 addresses, 37 MB instead of 74), widened to 32 once they do not.
enum Ids {
    Narrow(Vec<u16>),
    Wide(Vec<u32>),
}

impl Ids {
    fn len(&self) -> usize {
        match self {
            Ids::Narrow(v) => v.len(),
            Ids::Wide(v) => v.len(),
        }
    }

    fn get(&self, i: usize) -> u32 {
        match self {
            Ids::Narrow(v) => u32::from(v[i]),
            Ids::Wide(v) => v[i],
        }
    }

    /// Room for `n` more, grown by a quarter at a time, not doubled: the
    /// largest vector of the decoder (Python compiling its library: 74 MB
    /// of 32-bit ids, which doubling took to 128 MB).
    fn reserve(&mut self, n: usize) {
        fn room<T>(v: &mut Vec<T>, n: usize) {
            if v.capacity() - v.len() < n {
                v.reserve_exact(n.max(v.capacity() / 4));
            }
        }
        match self {
            Ids::Narrow(v) => room(v, n),
            Ids::Wide(v) => room(v, n),
        }
    }

    /// Appends the ids at `from..to` again.
    fn repeat(&mut self, from: usize, to: usize) {
        match self {
            Ids::Narrow(v) => v.extend_from_within(from..to),
            Ids::Wide(v) => v.extend_from_within(from..to),
        }
    }

    #[inline]
    fn push(&mut self, id: u32) {
        if let Ids::Narrow(v) = self {
            match u16::try_from(id) {
                Ok(id) => return v.push(id),
                Err(_) => {
                    let mut wide = Vec::new();
                    wide.reserve_exact(v.len() + v.len() / 4);
                    wide.extend(v.iter().map(|&f| u32::from(f)));
                    *self = Ids::Wide(wide);
                }
            }
        }
        if let Ids::Wide(v) = self {
            v.push(id);
        }
    }

    fn shrink_to_fit(&mut self) {
        match self {
            Ids::Narrow(v) => v.shrink_to_fit(),
            Ids::Wide(v) => v.shrink_to_fit(),
        }
    }
}

fn parse<I: Input>(mut r: Reader<I>) -> Result<(Dump, StackFrames), DecodeError> {
    let mut magic = [0u8; MAGIC.len()];
    for k in 0..MAGIC.len() {
        magic[k] = match r.byte() {
            Ok(b) => b,
            Err(DecodeError::Truncated) if MAGIC.starts_with(&magic[..k]) => {
                return Err(DecodeError::Truncated)
            }
            Err(DecodeError::Truncated) => return Err(DecodeError::NotADump),
            Err(e) => return Err(e),
        };
    }
    if magic != *MAGIC {
        return Err(DecodeError::NotADump);
    }
    let mut d = Dump::default();
    let mut seen_header = false;
    // Where the last stack of each id is in `d.stacks`, and their frames.
    let mut stack_at: HashMap<u64, usize> = HashMap::new();
    // Stacks entered in `stack_at` so far.
    let mut mapped = 0usize;
    let mut frames_in_all = 0usize;
    let frame_cap = max_frames(r.input.len() as usize);
    // Every stack's frames as ids of distinct addresses, outermost first
    // (stack `i` ends at `ends[i]`); the last stack's frames, and its leaf;
    // its frames not shared, leaf first.
    let mut ids = Ids::Narrow(Vec::new());
    let mut ends: Vec<usize> = Vec::new();
    let mut addrs: Vec<u64> = Vec::new();
    let mut addr_ids: HashMap<u64, u32, foldhash::fast::FixedState> = HashMap::default();
    let (mut prev_len, mut prev_leaf) = (0usize, 0u64);
    let mut own: Vec<u64> = Vec::new();
    loop {
        r.start();
        let at = r.at();
        let t = r.byte()?;
        let tag = Tag::from_u8(t).ok_or(DecodeError::BadRecord { tag: t, offset: at })?;
        match tag {
            Tag::Header => {
                d.version = r.u()?;
                if d.version != VERSION {
                    return Err(DecodeError::UnsupportedVersion(d.version));
                }
                d.pid = r.u()? as u32;
                d.ppid = r.u()? as u32;
                d.stack_mode = StackMode::from_u8(r.u()? as u8);
                d.max_depth = r.u()? as u32;
                d.sample_every = r.u()?;
                d.lifetime_head = r.u()?;
                d.ticks_per_second = r.u()?;
                d.start_ticks = r.u()?;
                d.end_ticks = r.u()?;
                d.start_unix_ns = r.u()?;
                d.exe = r.string()?;
                let cmd = r.bytes()?;
                // Each argument ends with a NUL (/proc/self/cmdline); an
                // empty argument is an empty string between two.
                let cmd = cmd.strip_suffix(&[0]).unwrap_or(cmd);
                d.cmdline = if cmd.is_empty() {
                    Vec::new()
                } else {
                    cmd.split(|&b| b == 0)
                        .map(|s| String::from_utf8_lossy(s).into_owned())
                        .collect()
                };
                seen_header = true;
            }
            Tag::Module => d.modules.push(ModuleRec {
                start: r.u()?,
                end: r.u()?,
                file_offset: r.u()?,
                path: r.string()?,
                build_id: r.bytes()?.to_vec(),
            }),
            Tag::Maps => d.maps = r.string()?,
            Tag::Stack => {
                let id = r.u()?;
                let n = r.u()?;
                let shared = r.u()?;
                let bad = DecodeError::BadRecord { tag: t, offset: at };
                // Each frame not shared takes a byte at least.
                let left = r.left();
                if n > MAX_STACK_FRAMES as u64
                    || shared > n
                    || shared > prev_len as u64
                    || n - shared > left
                {
                    return Err(bad);
                }
                let (n, shared) = (n as usize, shared as usize);
                frames_in_all += n;
                if frames_in_all > frame_cap {
                    return Err(DecodeError::TooManyFrames { offset: at });
                }
                // The frames not shared, leaf first, each a difference from
                // the one before (the first from the previous stack's leaf);
                // kept as ids of distinct addresses, outermost first, after
                // the previous stack's outer `shared` frames. The tree is
                // built from them at the end.
                let prev = ends.last().map_or(0, |&e| e - prev_len);
                let mut last = prev_leaf;
                own.clear();
                for _ in 0..n - shared {
                    last = last.wrapping_add(r.i()? as u64);
                    own.push(last);
                }
                ids.reserve(n);
                ids.repeat(prev, prev + shared);
                for &f in own.iter().rev() {
                    let next = addrs.len() as u32;
                    let id = *addr_ids.entry(f).or_insert(next);
                    if id == next {
                        addrs.push(f);
                    }
                    ids.push(id);
                }
                prev_leaf = match n {
                    0 => 0,
                    _ => addrs[ids.get(ids.len() - 1) as usize],
                };
                prev_len = n;
                ends.push(ids.len());
                d.stacks.push(StackRec {
                    id,
                    node: ROOT,
                    counters_at: u32::MAX,
                });
            }
            Tag::StackStats => {
                let id = r.u()?;
                // The counters are kept as the record has them: its numbers
                // are `tree::pack_counters`' (the same order and encoding),
                // checked here, copied below (read into their struct and
                // packed again, they took 9% of decoding).
                let from = r.record().len();
                for _ in 0..COUNTER_FIELDS {
                    r.u()?;
                }
                // Stats follow their stack record: the last of that id,
                // which the recorder writes just before them (the map of
                // every id is made only for a dump that does otherwise: it
                // took 16 MB for half a million stacks).
                let i = match d.stacks.last() {
                    Some(s) if s.id == id => Some(d.stacks.len() - 1),
                    _ => {
                        for (i, s) in d.stacks.iter().enumerate().skip(mapped) {
                            stack_at.insert(s.id, i);
                        }
                        mapped = d.stacks.len();
                        stack_at.get(&id).copied()
                    }
                };
                let bad = || DecodeError::BadRecord { tag: t, offset: at };
                let i = i.ok_or_else(bad)?;
                d.stacks[i].counters_at = u32::try_from(d.packed.len()).map_err(|_| bad())?;
                d.packed.extend_from_slice(&r.record()[from..]);
            }
            Tag::Thread | Tag::EndedThreads => {
                let (number, merged) = match tag {
                    Tag::Thread => (r.u()?, 0),
                    _ => (u64::MAX, r.u()?),
                };
                let mut th = ThreadRec {
                    number,
                    merged,
                    mem_ops: r.u()?,
                    ..Default::default()
                };
                for s in th.stats.iter_mut() {
                    *s = (r.u()?, r.u()?, r.u()?);
                }
                d.threads.push(th);
            }
            Tag::Size => d.sizes.push((r.u()?, r.u()?)),
            Tag::ReallocJump => d.realloc_jumps.push((r.u()?, r.u()?, r.u()?)),
            Tag::Leak => d.leaks.push(LeakRec {
                stack: r.u()?,
                count: r.u()?,
                bytes: r.u()?,
            }),
            Tag::Globals => {
                d.globals = Globals {
                    peak_requested: r.u()?,
                    peak_ticks: r.u()?,
                    alive_requested: r.u()?,
                    internal_memory: r.u()?,
                    max_threads: r.u()?,
                    truncated_stacks: r.u()?,
                    unrecorded_events: r.u()?,
                    unknown_frees: r.u()?,
                    dropped_histogram_entries: r.u()?,
                    internal_peak: r.u()?,
                }
            }
            Tag::Degraded => {
                d.degraded = Some(Degraded {
                    stacks_cause: r.u()?,
                    stacks_ticks: r.u()?,
                    stopped_cause: r.u()?,
                    stopped_ticks: r.u()?,
                    allocs_without_stack: r.u()?,
                    calls_not_recorded: r.u()?,
                    released_bytes: r.u()?,
                })
            }
            Tag::Unhooked => {
                d.unhooked = r
                    .bytes()?
                    .split(|&b| b == 0)
                    .filter(|s| !s.is_empty())
                    .map(|s| String::from_utf8_lossy(s).into_owned())
                    .collect();
                d.unhooked_by = r.string()?;
            }
            Tag::WaitKind => {
                if d.wait_kinds.len() >= 256 {
                    return Err(DecodeError::BadRecord {
                        tag: Tag::WaitKind as u8,
                        offset: r.at(),
                    });
                }
                d.wait_kinds.push((r.u()?, r.string()?));
            }
            Tag::Wait => {
                let mut w = Wait {
                    thread: r.u()?,
                    kind: r.u()?,
                    count: r.u()?,
                    total_ns: r.u()?,
                    max_ns: r.u()?,
                    ..Wait::default()
                };
                w.stack = r.frames(Tag::Wait)?;
                w.holder = r.frames(Tag::Wait)?;
                if d.waits.len() >= MAX_WAITS {
                    return Err(DecodeError::BadRecord {
                        tag: Tag::Wait as u8,
                        offset: r.at(),
                    });
                }
                d.waits.push(w);
            }
            Tag::Reset => {
                d.reset = Some(Reset {
                    count: r.u()?,
                    ticks: r.u()?,
                    older_alive: r.u()?,
                    older_alive_bytes: r.u()?,
                    older_freed: r.u()?,
                    older_freed_bytes: r.u()?,
                })
            }
            Tag::Forked => {
                d.forked = Some(Forked {
                    parent: r.u()? as u32,
                    inherited_alive: r.u()?,
                    inherited_alive_bytes: r.u()?,
                    inherited_freed: r.u()?,
                    inherited_freed_bytes: r.u()?,
                })
            }
            Tag::Exit => {
                let (kind, value) = (r.u()?, r.u()?);
                d.ending = Some(
                    Ending::from_pair(kind, value)
                        .ok_or(DecodeError::BadRecord { tag: t, offset: at })?,
                );
            }
            Tag::Allocator => d.allocator = r.string()?,
            Tag::Memory => {
                d.peak_rss = r.u()?;
                d.peak_virtual = r.u()?;
            }
            Tag::Timeline => {
                let step = r.u()?;
                let n = r.u()?;
                // Each bucket takes at least FIELDS bytes.
                if n > r.left() / TimelinePoint::FIELDS as u64 {
                    return Err(DecodeError::Truncated);
                }
                let mut points = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    let mut v = [0u64; TimelinePoint::FIELDS];
                    for x in v.iter_mut() {
                        *x = r.u()?;
                    }
                    points.push(TimelinePoint::from_values(&v));
                }
                d.timeline = Some((step.max(1), points));
            }
            Tag::ThreadStack => {
                for _ in 0..4 {
                    r.u()?;
                }
                d.thread_stacks.bytes.extend_from_slice(&r.record()[1..]);
                d.thread_stacks.len += 1;
            }
            Tag::ThreadStacksUnkept => d.thread_stacks_unkept = r.u()?,
            Tag::HandOvers => d.hand_overs = (r.u()?, r.u()?),
            Tag::Label => {
                let id = r.u()?;
                let text = r.string()?;
                if d.labels.len() >= MAX_LABELS {
                    return Err(DecodeError::BadRecord {
                        tag: Tag::Label as u8,
                        offset: r.at(),
                    });
                }
                d.labels.push((id, text));
            }
            Tag::StackUse => {
                let u = StackUse {
                    thread: r.u()?,
                    bytes: r.u()?,
                    stack: r.u()?,
                    frames: r.frames(Tag::StackUse)?,
                };
                if d.stack_use.len() >= MAX_WAITS {
                    return Err(DecodeError::BadRecord {
                        tag: Tag::StackUse as u8,
                        offset: r.at(),
                    });
                }
                d.stack_use.push(u);
            }
            Tag::LeakBlock => d.leak_blocks.push((r.u()?, r.u()?, r.u()?)),
            Tag::LeakBlocksOmitted => d.leak_blocks_omitted += r.u()?,
            Tag::Scatter => {
                let which = r.u()?;
                let n = r.u()?;
                if which > 1 {
                    return Err(DecodeError::BadRecord {
                        tag: Tag::Scatter as u8,
                        offset: r.at(),
                    });
                }
                if n > r.left() / 3 {
                    return Err(DecodeError::Truncated);
                }
                let cells = &mut d.scatter[which as usize];
                cells.reserve(n as usize);
                for _ in 0..n {
                    cells.push((r.u()?, r.u()?, r.u()?));
                }
            }
            Tag::Snapshot => d.snapshot = Some(r.string()?),
            Tag::Checkpoint => {
                d.checkpoint = Some(Checkpoint {
                    seq: r.u()?,
                    ticks: r.u()?,
                })
            }
            Tag::End => {
                if !seen_header {
                    return Err(DecodeError::NotADump);
                }
                drop(addr_ids);
                d.packed.shrink_to_fit();
                ids.shrink_to_fit();
                return Ok((d, StackFrames { ids, ends, addrs }));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_series_is_read_up_to_its_first_damaged_or_cut_record() {
        let mut file = Vec::new();
        for (seq, stacks) in [
            (1u64, vec![(3u64, [1u64, 16, 0, 0]), (9, [2, 64, 1, 32])]),
            (2, vec![(3, [5, 80, 4, 64])]),
        ] {
            let mut e = Encoder {
                sink: VecSink(Vec::new()),
            };
            e.u(seq);
            e.u(seq * 1000);
            let mut prev = 0i64;
            for (id, c) in &stacks {
                e.i(*id as i64 - prev);
                prev = *id as i64;
                for v in c {
                    e.u(*v);
                }
            }
            file.extend_from_slice(&SERIES_MAGIC);
            file.extend_from_slice(&(e.sink.0.len() as u32).to_le_bytes());
            file.extend_from_slice(&e.sink.0);
        }
        let whole = decode_series(&file);
        assert_eq!(whole.len(), 2);
        assert_eq!(
            whole[0].stacks,
            vec![(3, [1, 16, 0, 0]), (9, [2, 64, 1, 32])]
        );
        assert_eq!((whole[1].seq, whole[1].ticks), (2, 2000));
        // Cut anywhere in the second record: the first stands.
        for cut in 1..file.len() - whole_len(&file) {
            let part = decode_series(&file[..file.len() - cut]);
            assert_eq!(part.len(), 1, "cut {cut}");
        }
        assert!(decode_series(b"not a series").is_empty());
        // Read as a file: the same records, and the same where cut.
        let from_file = |b: &[u8]| {
            let mut v = Vec::new();
            each_series_record(b, |r| {
                v.push(SeriesRecord {
                    seq: r.seq,
                    ticks: r.ticks,
                    stacks: r.rows().collect(),
                });
                true
            });
            v
        };
        assert_eq!(from_file(&file), whole);
        for cut in 0..file.len() {
            assert_eq!(
                from_file(&file[..cut]),
                decode_series(&file[..cut]),
                "cut {cut}"
            );
        }
        let mut damaged = file.clone();
        damaged[whole_len(&file) + 9] = 0xff;
        damaged.push(0x80);
        assert_eq!(from_file(&damaged), decode_series(&damaged));
        // Stopped by its caller after one.
        let mut n = 0;
        each_series_record(&file[..], |_| {
            n += 1;
            false
        });
        assert_eq!(n, 1);
    }

    /// The first record's length, magic and length included.
    fn whole_len(file: &[u8]) -> usize {
        8 + u32::from_le_bytes(file[4..8].try_into().unwrap()) as usize
    }

    #[test]
    fn a_large_dump_may_hold_frames_in_proportion() {
        assert_eq!(max_frames(0), MAX_FRAMES);
        assert_eq!(max_frames(1 << 20), MAX_FRAMES);
        // Python compiling 11 700 files: 159 M frames in 165 MB.
        assert!(max_frames(164_868_408) > 159_307_963);
        assert_eq!(max_frames(usize::MAX), usize::MAX);
    }

    use super::*;

    struct VecSink(Vec<u8>);
    impl Sink for VecSink {
        fn put(&mut self, b: &[u8]) {
            self.0.extend_from_slice(b);
        }
    }

    /// An encoder with a header written (pid 42, dwarf stacks).
    fn with_header() -> Encoder<VecSink> {
        let mut e = Encoder::new(VecSink(Vec::new()));
        e.tag(Tag::Header);
        for v in [VERSION, 42, 1, 2, 128, 0, 64, 1000, 5, 9, 77] {
            e.u(v);
        }
        e.bytes(b"/bin/prog");
        e.bytes(b"prog\0-x\0");
        e
    }

    /// Gives at most `step` bytes a call.
    struct Trickle<'a> {
        b: &'a [u8],
        step: usize,
    }

    impl std::io::Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let n = out.len().min(self.step).min(self.b.len());
            out[..n].copy_from_slice(&self.b[..n]);
            self.b = &self.b[n..];
            Ok(n)
        }
    }

    /// A dump read a window at a time (`decode_read`) is the dump read
    /// whole: across windows dropped and refilled, a record longer than a
    /// window, reads of a few bytes; and cut short, it is truncated too.
    #[test]
    fn a_dump_read_a_window_at_a_time_is_the_dump_read_whole() {
        let mut e = with_header();
        e.tag(Tag::Maps);
        e.bytes(&vec![b'm'; 3 * WINDOW + 5]);
        let mut prev = vec![];
        for i in 0..60_000u64 {
            let frames = [0x40_0000 + i % 977, 0x40_1000 + i % 3, 0x40_2000];
            e.stack(i + 1, &frames, &prev);
            prev = frames.to_vec();
            e.tag(Tag::ThreadStack);
            for v in [2 + i % 2, i + 1, 1, 16 * i] {
                e.u(v);
            }
        }
        e.tag(Tag::End);
        let buf = e.sink.0;
        let whole = format!("{:?}", decode(&buf).unwrap());
        for step in [3, 4096, WINDOW + 1] {
            let d = decode_read(Trickle { b: &buf, step }, buf.len() as u64).unwrap();
            assert_eq!(format!("{d:?}"), whole, "{step} bytes a read");
        }
        for n in [0, 5, WINDOW, buf.len() / 2, buf.len() - 1] {
            let cut = &buf[..n];
            assert_eq!(
                decode_read(cut, n as u64).unwrap_err(),
                DecodeError::Truncated,
                "{n} bytes"
            );
        }
        assert_eq!(
            decode_read(&b"HLXXXXXXXXXX"[..], 12).unwrap_err(),
            DecodeError::NotADump
        );
    }

    fn sample() -> Vec<u8> {
        let mut e = with_header();
        e.stack(3, &[0x401000, u64::MAX], &[]);
        // Shares its two outer frames with the one before.
        e.stack(
            4,
            &[0x7f00_0000_1000, 0x400000, 0x401000, u64::MAX],
            &[0x401000, u64::MAX],
        );
        // Shares nothing.
        e.stack(5, &[1], &[0x7f00_0000_1000, 0x400000, 0x401000, u64::MAX]);
        // Shares all of the one before.
        e.stack(6, &[2, 1], &[1]);
        let mut c = StackCounters::default();
        c.totals.alloc.add(10);
        c.totals.realloc_delta = -5;
        c.alive = -7;
        e.stack_counters(3, &c);
        // Thread 7 (3 mem ops, one malloc of 40 bytes), then 1000 ended
        // threads merged (2000 mem ops, 1000 frees).
        for (tag, first, ops) in [(Tag::Thread, 7, 3), (Tag::EndedThreads, 1000, 2000)] {
            e.tag(tag);
            e.u(first);
            e.u(ops);
            for f in AllocFn::ALL {
                let s = match f {
                    AllocFn::Malloc if ops == 3 => (1, 40, 9),
                    AllocFn::Free if ops == 2000 => (1000, 0, 5),
                    _ => (0, 0, 0),
                };
                e.u(s.0);
                e.u(s.1);
                e.u(s.2);
            }
        }
        e.globals(&Globals {
            peak_requested: 10,
            ..Default::default()
        });
        e.tag(Tag::Unhooked);
        e.bytes(b"malloc\0free\0");
        e.bytes(b"");
        e.degraded(&Degraded {
            stacks_cause: 1,
            stacks_ticks: 100,
            stopped_cause: 2,
            stopped_ticks: 300,
            allocs_without_stack: 5,
            calls_not_recorded: 1 << 40,
            released_bytes: 4096,
        });
        e.forked(&Forked {
            parent: 41,
            inherited_alive: 3,
            inherited_alive_bytes: 300,
            inherited_freed: 2,
            inherited_freed_bytes: 200,
        });
        e.ending(Ending::Signal(15));
        e.tag(Tag::Allocator);
        e.bytes(b"/lib/libbump.so");
        e.tag(Tag::Memory);
        e.u(5 << 20);
        e.u(9 << 20);
        e.tag(Tag::End);
        e.sink.0
    }

    #[test]
    fn a_checkpoint_says_so_and_a_final_dump_does_not() {
        assert_eq!(decode(&sample()).unwrap().checkpoint, None);
        let mut e = with_header();
        e.checkpoint(&Checkpoint {
            seq: 3,
            ticks: 1 << 40,
        });
        e.tag(Tag::End);
        let d = decode(&e.sink.0).unwrap();
        assert_eq!(
            d.checkpoint,
            Some(Checkpoint {
                seq: 3,
                ticks: 1 << 40
            })
        );
        // Cut inside the record: truncated, not a checkpoint.
        let mut e = with_header();
        e.tag(Tag::Checkpoint);
        e.u(3);
        assert!(decode(&e.sink.0).is_err());
    }

    #[test]
    fn empty_arguments_are_kept() {
        let mut bytes = sample();
        let at = bytes.windows(8).position(|w| w == b"prog\0-x\0").unwrap();
        // The same eight bytes: "p", "", "-x", "" and "" (the last NUL ends it).
        bytes[at..at + 8].copy_from_slice(b"p\0\0-x\0\0\0");
        let d = decode(&bytes).unwrap();
        assert_eq!(d.cmdline, vec!["p", "", "-x", "", ""]);
    }

    #[test]
    fn round_trip() {
        let d = decode(&sample()).unwrap();
        assert_eq!(d.pid, 42);
        assert_eq!(d.stack_mode, Some(StackMode::Dwarf));
        assert_eq!(d.cmdline, vec!["prog", "-x"]);
        let frames = |i: usize| {
            let mut v = Vec::new();
            d.frames(i, &mut v);
            v
        };
        assert_eq!(frames(0), vec![0x401000, u64::MAX]);
        assert_eq!(
            frames(1),
            vec![0x7f00_0000_1000, 0x400000, 0x401000, u64::MAX]
        );
        assert_eq!(frames(2), vec![1]);
        assert_eq!((d.stacks[3].id, &frames(3)[..]), (6, &[2u64, 1][..]));
        // Stacks 0 and 1 share their outer two frames' nodes, and each
        // (parent, frame) is one node: 4 + 1 + 1 (stack 3's 2 under 1).
        assert_eq!(d.tree.len(), 1 + 4 + 1 + 1);
        assert_eq!(d.counters(0).totals.realloc_delta, -5);
        assert_eq!(d.counters(0).alive, -7);
        assert_eq!(d.counters(0).totals.alloc.sum, 10);
        let rows: Vec<_> = d
            .threads
            .iter()
            .map(|t| (t.number, t.merged, t.mem_ops))
            .collect();
        assert_eq!(rows, [(7, 0, 3), (u64::MAX, 1000, 2000)]);
        assert_eq!(d.threads[0].stats[AllocFn::Malloc as usize], (1, 40, 9));
        assert_eq!(d.threads[1].stats[AllocFn::Free as usize], (1000, 0, 5));
        assert_eq!(d.globals.peak_requested, 10);
        assert_eq!(d.unhooked, vec!["malloc", "free"]);
        assert_eq!(d.unhooked_by, "");
        assert_eq!((d.peak_rss, d.peak_virtual), (5 << 20, 9 << 20));
        let g = d.degraded.unwrap();
        assert_eq!(
            (
                g.stacks_cause,
                g.stacks_ticks,
                g.stopped_cause,
                g.stopped_ticks
            ),
            (1, 100, 2, 300)
        );
        assert_eq!(
            (
                g.allocs_without_stack,
                g.calls_not_recorded,
                g.released_bytes
            ),
            (5, 1 << 40, 4096)
        );
        assert_eq!(
            DegradeCause::from_u64(g.stopped_cause),
            Some(DegradeCause::ProgramMemory)
        );
        let f = d.forked.unwrap();
        assert_eq!(
            (f.parent, f.inherited_alive, f.inherited_freed_bytes),
            (41, 3, 200)
        );
        assert_eq!(d.ending, Some(Ending::Signal(15)));
        assert_eq!(d.allocator, "/lib/libbump.so");
    }

    #[test]
    fn endings_keep_their_status() {
        for e in [
            Ending::Exited(0),
            Ending::Exited(255),
            Ending::Exited(-1),
            Ending::Signal(9),
        ] {
            let (k, v) = e.to_pair();
            assert_eq!(Ending::from_pair(k, v), Some(e));
        }
        assert_eq!(Ending::from_pair(3, 0), None);
    }

    #[test]
    fn a_stack_sharing_more_than_its_predecessor_has_is_an_error() {
        let mut e = with_header();
        e.stack(1, &[5, 6], &[]);
        let good = e.sink.0;
        // (id, frames, shared): 3 shared of its own 2 frames; 3 shared of
        // the 2 frames the one before has.
        for record in [[2, 2, 3], [2, 4, 3]] {
            let mut e = Encoder {
                sink: VecSink(good.clone()),
            };
            e.tag(Tag::Stack);
            for v in record {
                e.u(v);
            }
            e.tag(Tag::End);
            assert!(
                matches!(
                    decode(&e.sink.0),
                    Err(DecodeError::BadRecord { tag: 4, .. })
                ),
                "{record:?}"
            );
        }
    }

    /// Frame ids start at 16 bits and widen past 65 536 distinct
    /// addresses: the stacks before and after read back whole.
    #[test]
    fn stacks_read_back_whole_past_sixteen_bit_frame_ids() {
        let mut e = with_header();
        // 9 000 stacks of 10 frames: a new leaf and 8 new frames each, and
        // one outer frame shared by all (the one before's, where it has it):
        // 81 001 distinct addresses.
        let stack = |i: u64| -> Vec<u64> {
            let mut f: Vec<u64> = (0..9).map(|k| 0x10_0000 + i * 16 + k).collect();
            f.push(0x7f00);
            f
        };
        let mut prev = Vec::new();
        for i in 0..9000u64 {
            let f = stack(i);
            e.stack(i + 1, &f, &prev);
            prev = f;
        }
        e.tag(Tag::End);
        let d = decode(&e.sink.0).unwrap();
        assert_eq!(d.stacks.len(), 9000);
        let mut out = Vec::new();
        for (i, s) in d.stacks.iter().enumerate() {
            d.frames(i, &mut out);
            assert_eq!(out, stack(s.id - 1), "stack {}", s.id);
        }
    }

    #[test]
    fn every_truncation_is_an_error() {
        let full = sample();
        for n in 0..full.len() {
            assert!(decode(&full[..n]).is_err(), "prefix of {n} bytes accepted");
        }
        assert_eq!(decode(b"{\"json\": 1}").unwrap_err(), DecodeError::NotADump);
    }
}
