//! Reading a store: its processes, and one process's profile.

use crate::codec::{decode_columns, unzigzag, BLOCK_ROWS};
use crate::schema::{
    FORMAT, LEAK_BLOCK_COLUMNS, LEAK_COLUMNS, NODE_COLUMNS, SERIES_COLUMNS, STACK_COLUMNS,
    THREAD_STACK_COLUMNS, VERSION,
};
use crate::tree::Nodes;
use crate::StoreError;
use heapledger_profile::{
    Addr, AddrSpace, GlobalVariables, InstrEntry, Leak, LeakBlock, LeakBlocks, MinMaxSum, Profile,
    SeriesCounts, StackInfos, StackStat, StringId,
};
use rusqlite::{params, Connection, OpenFlags, OptionalExtension};
use std::path::Path;
use std::sync::Arc;

/// A store open for reading.
pub struct Store {
    conn: Connection,
    /// Columns of its `stack` blocks: `STACK_COLUMNS`, or one fewer in
    /// version 1 (no temporary blocks).
    stack_columns: usize,
    /// Its variables in a table of their own (version 3), not in each
    /// process's `memStats` section.
    globals_table: bool,
    /// The variables read so far, by row: processes that load the same
    /// binary share its list (`--all`).
    globals_read: std::cell::RefCell<crate::globals::Read>,
}

/// A process of the run, as the `process` table lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct ProcessInfo {
    pub pid: u32,
    pub ppid: u32,
    pub is_main: bool,
    pub forked_from: Option<u32>,
    pub exe: String,
    pub command: String,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    /// `None` for a process that ended normally; else the checkpoint its
    /// profile stops at (sequence number, seconds after its start).
    pub checkpoint: Option<(u64, f64)>,
    pub allocations: u64,
    pub allocated_bytes: u64,
    pub peak_bytes: u64,
    pub leaked_bytes: u64,
    pub stacks: u64,
}

/// A snapshot taken while a process ran, as the `snapshot` table lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct SnapshotInfo {
    /// What `head` and `profile` read it by.
    pub key: u32,
    pub pid: u32,
    pub seq: u64,
    pub label: String,
    pub seconds: f64,
    pub allocations: u64,
    pub allocated_bytes: u64,
    pub peak_bytes: u64,
    pub alive_bytes: u64,
}

/// The largest section a reader decompresses (a profile's run, threads,
/// timeline... are far smaller).
const SECTION_MAX: usize = 256 << 20;

/// A section's bytes, in a buffer of their own size: the size its zstd
/// frame states (the writer's always does), at most [`SECTION_MAX`]; a
/// frame that states none is read as a stream, to the same limit. (A
/// buffer of the limit itself, 256 MiB, was the largest allocation of
/// `tree` on a large profile, though mostly never touched.)
fn decompress_section(blob: &[u8]) -> Option<Vec<u8>> {
    use std::io::Read;
    match zstd::zstd_safe::get_frame_content_size(blob) {
        Ok(Some(n)) => {
            let n = usize::try_from(n).ok().filter(|&n| n <= SECTION_MAX)?;
            zstd::bulk::decompress(blob, n).ok()
        }
        Ok(None) => {
            let mut out = Vec::new();
            zstd::stream::read::Decoder::new(blob)
                .ok()?
                .take(SECTION_MAX as u64 + 1)
                .read_to_end(&mut out)
                .ok()?;
            (out.len() <= SECTION_MAX).then_some(out)
        }
        Err(_) => None,
    }
}

pub(crate) fn corrupt(what: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(what.to_string())
}

impl Store {
    /// Opens a store read-only; a file that is not one is named as such.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let meta = std::fs::metadata(path).map_err(|e| StoreError::Io(e.to_string()))?;
        if !meta.is_file() {
            return Err(StoreError::Foreign("not a regular file".into()));
        }
        let mut head = [0u8; 16];
        let n = {
            use std::io::Read;
            let mut f = std::fs::File::open(path).map_err(|e| StoreError::Io(e.to_string()))?;
            let mut n = 0;
            while n < head.len() {
                match f.read(&mut head[n..]) {
                    Ok(0) => break,
                    Ok(k) => n += k,
                    Err(e) => return Err(StoreError::Io(e.to_string())),
                }
            }
            n
        };
        if !crate::is_sqlite(&head[..n]) {
            return Err(StoreError::Foreign("not an SQLite database".into()));
        }
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        let get = |key: &str| -> Result<Option<String>, StoreError> {
            match conn
                .query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
                .optional()
            {
                Ok(v) => Ok(v),
                Err(rusqlite::Error::SqliteFailure(f, Some(m)))
                    if f.code == rusqlite::ErrorCode::Unknown && m.contains("no such table") =>
                {
                    Err(StoreError::Foreign(
                        "an SQLite database of something else".into(),
                    ))
                }
                Err(e) => Err(e.into()),
            }
        };
        if get("format")?.as_deref() != Some(FORMAT) {
            return Err(StoreError::Foreign(
                "an SQLite database of something else".into(),
            ));
        }
        let version = get("version")?.unwrap_or_default();
        let (stack_columns, globals_table) = match version.as_str() {
            "1" => (STACK_COLUMNS - 1, false),
            "2" => (STACK_COLUMNS, false),
            v if v == VERSION.to_string() => (STACK_COLUMNS, true),
            _ => return Err(StoreError::Version { found: version }),
        };
        Ok(Store {
            conn,
            stack_columns,
            globals_table,
            globals_read: Default::default(),
        })
    }

    /// Every process, the main one first, then by pid.
    pub fn processes(&self) -> Result<Vec<ProcessInfo>, StoreError> {
        let mut st = self.conn.prepare(
            "SELECT pid, ppid, is_main, forked_from, exe, command, exit_code, exit_signal,
                    complete, checkpoint_seq, checkpoint_seconds, allocations, allocated_bytes,
                    peak_bytes, leaked_bytes, stacks
             FROM process ORDER BY is_main DESC, pid",
        )?;
        let rows = st.query_map([], |r| {
            let complete: bool = r.get(8)?;
            let seq: Option<i64> = r.get(9)?;
            let secs: Option<f64> = r.get(10)?;
            Ok(ProcessInfo {
                pid: r.get(0)?,
                ppid: r.get(1)?,
                is_main: r.get(2)?,
                forked_from: r.get(3)?,
                exe: r.get(4)?,
                command: r.get(5)?,
                exit_code: r.get(6)?,
                exit_signal: r.get(7)?,
                checkpoint: (!complete).then(|| (seq.unwrap_or(0) as u64, secs.unwrap_or(0.0))),
                allocations: r.get::<_, i64>(11)? as u64,
                allocated_bytes: r.get::<_, i64>(12)? as u64,
                peak_bytes: r.get::<_, i64>(13)? as u64,
                leaked_bytes: r.get::<_, i64>(14)? as u64,
                stacks: r.get::<_, i64>(15)? as u64,
            })
        })?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    /// Every snapshot, by process and number (none in a store written
    /// before they were kept).
    pub fn snapshots(&self) -> Result<Vec<SnapshotInfo>, StoreError> {
        let has: i64 = self.conn.query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'snapshot'",
            [],
            |r| r.get(0),
        )?;
        if has == 0 {
            return Ok(Vec::new());
        }
        let mut st = self.conn.prepare(
            "SELECT key, pid, seq, label, seconds, allocations, allocated_bytes, peak_bytes,
                    alive_bytes
             FROM snapshot ORDER BY pid, seq",
        )?;
        let rows = st.query_map([], |r| {
            Ok(SnapshotInfo {
                key: r.get(0)?,
                pid: r.get(1)?,
                seq: r.get::<_, i64>(2)? as u64,
                label: r.get(3)?,
                seconds: r.get(4)?,
                allocations: r.get::<_, i64>(5)? as u64,
                allocated_bytes: r.get::<_, i64>(6)? as u64,
                peak_bytes: r.get::<_, i64>(7)? as u64,
                alive_bytes: r.get::<_, i64>(8)? as u64,
            })
        })?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    fn section<T: serde::de::DeserializeOwned>(
        &self,
        pid: u32,
        name: &str,
    ) -> Result<Option<T>, StoreError> {
        let blob: Option<Vec<u8>> = self
            .conn
            .query_row(
                "SELECT data FROM section WHERE pid = ?1 AND name = ?2",
                params![pid, name],
                |r| r.get(0),
            )
            .optional()?;
        let Some(blob) = blob else { return Ok(None) };
        let json = decompress_section(&blob)
            .ok_or_else(|| corrupt(format!("its section {name} does not decompress")))?;
        serde_json::from_slice(&json)
            .map(Some)
            .map_err(|e| corrupt(format!("its section {name}: {e}")))
    }

    fn need<T: serde::de::DeserializeOwned>(&self, pid: u32, name: &str) -> Result<T, StoreError> {
        self.section(pid, name)?
            .ok_or_else(|| corrupt(format!("process {pid} has no section {name}")))
    }

    /// Calls `f` on every block of one kind, in order, with its values
    /// (column by column) and its number of rows.
    fn blocks(
        &self,
        pid: u32,
        kind: &str,
        columns: usize,
        mut f: impl FnMut(&[u64], usize) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let mut st = self.conn.prepare(
            "SELECT first, rows, data FROM block WHERE pid = ?1 AND kind = ?2 ORDER BY first",
        )?;
        let mut rows = st.query(params![pid, kind])?;
        let mut next = 0i64;
        while let Some(r) = rows.next()? {
            let first: i64 = r.get(0)?;
            let n: i64 = r.get(1)?;
            if first != next || n <= 0 || n as usize > BLOCK_ROWS {
                return Err(corrupt(format!(
                    "its {kind} blocks do not follow each other"
                )));
            }
            let data = r.get_ref(2)?.as_blob().map_err(corrupt)?;
            let values = decode_columns(data, columns, n as usize)?;
            f(&values, n as usize)?;
            next = first + n;
        }
        Ok(())
    }

    /// The whole profile of one process, in MALT's layout.
    pub fn profile(&self, pid: u32) -> Result<Profile, StoreError> {
        let (mut profile, stacks) = self.head(pid)?;
        let mut text = [0u8; 24];
        let mut stats = Vec::new();
        stacks.each_stack(self, |stack, infos| {
            let id = stats.len() as u64 + 1;
            stats.push(StackStat {
                stack: stack.to_vec(),
                stack_id: Addr::native(id).format_into(&mut text).to_owned(),
                infos,
            });
        })?;
        profile.stacks.stats = stats;
        profile.mem_stats.global_variables = self.globals(pid)?;
        Ok(profile)
    }

    /// The global and thread-local variables of every binary process (or
    /// snapshot key) `pid` loaded, which [`Store::head`] leaves out (a
    /// build's compiler lists 127 000 of them).
    pub fn globals(&self, pid: u32) -> Result<GlobalVariables, StoreError> {
        if !self.globals_table {
            // Versions 1 and 2: in the process's `memStats` section.
            let m: crate::globals::MemStatsGlobals = self.need(pid, "memStats")?;
            return Ok(m
                .global_variables
                .into_iter()
                .map(|(binary, vars)| (binary, Arc::new(vars)))
                .collect());
        }
        let ids: Vec<i64> = self.section(pid, "variablesOf")?.unwrap_or_default();
        let mut out = GlobalVariables::default();
        for id in ids {
            if let Some((binary, vars)) = self.globals_read.borrow().get(&id) {
                out.insert(binary.clone(), vars.clone());
                continue;
            }
            let (binary, blob): (String, Vec<u8>) = self
                .conn
                .query_row(
                    "SELECT binary, data FROM variables WHERE id = ?1",
                    [id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?
                .ok_or_else(|| {
                    corrupt(format!("process {pid} names variables it does not hold"))
                })?;
            let json = decompress_section(&blob)
                .ok_or_else(|| corrupt(format!("the variables of {binary} do not decompress")))?;
            let vars = Arc::new(crate::globals::decode(&binary, &json)?);
            self.globals_read
                .borrow_mut()
                .insert(id, (binary.clone(), vars.clone()));
            out.insert(binary, vars);
        }
        Ok(out)
    }

    /// One process's profile without its stacks (`stacks.stats` empty;
    /// `each_stack` gives them one by one): what a reader that sums the
    /// stacks as they come needs, in memory that does not grow with them
    /// but for the prefix tree (8 bytes a node).
    pub fn head(&self, pid: u32) -> Result<(Profile, StackStream), StoreError> {
        let known: Option<i64> = if pid >= crate::SNAPSHOT_KEYS {
            self.conn
                .query_row("SELECT key FROM snapshot WHERE key = ?1", [pid], |r| {
                    r.get(0)
                })
                .optional()?
        } else {
            self.conn
                .query_row("SELECT pid FROM process WHERE pid = ?1", [pid], |r| {
                    r.get(0)
                })
                .optional()?
        };
        if known.is_none() {
            return Err(StoreError::NoProcess(pid));
        }
        let mut p = Profile::new(self.need(pid, "run")?);
        p.config = self.need(pid, "config")?;
        p.sites.map = self.need(pid, "maps")?;
        p.timeline = self.need(pid, "timeline")?;
        p.scatter = self.need(pid, "scatter")?;
        p.threads = self.need(pid, "threads")?;
        p.mem_stats = self
            .need::<crate::globals::MemStatsHead>(pid, "memStats")?
            .into();
        p.globals = self.need(pid, "globals")?;
        p.domains = self.need(pid, "domains")?;
        p.heapledger = self.section(pid, "heapledger")?;
        p.stacks.count = self.need(pid, "stacksCount")?;
        let mut st = self
            .conn
            .prepare("SELECT id, text FROM string WHERE pid = ?1 ORDER BY id")?;
        let mut strings = Vec::new();
        for r in st.query_map([pid], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))? {
            let (id, text) = r?;
            if id != strings.len() as i64 {
                return Err(corrupt("its strings are not numbered in order"));
            }
            strings.push(text);
        }
        p.sites.strings = strings;
        let n_strings = p.sites.strings.len() as i64;
        let string = |v: Option<i64>| -> Result<StringId, StoreError> {
            match v {
                Some(i) if (0..n_strings).contains(&i) => Ok(StringId(i as u32)),
                _ => Err(corrupt("a frame names a string it does not hold")),
            }
        };
        let mut st = self.conn.prepare(
            "SELECT id, address, space, function, file, line, binary FROM frame
             WHERE pid = ?1 ORDER BY id",
        )?;
        let mut addrs: Vec<Addr> = Vec::new();
        let mut rows = st.query([pid])?;
        while let Some(r) = rows.next()? {
            let id: i64 = r.get(0)?;
            if id != addrs.len() as i64 {
                return Err(corrupt("its frames are not numbered in order"));
            }
            let value = r.get::<_, i64>(1)? as u64;
            let a = match r.get::<_, i64>(2)? {
                0 => Addr::native(value),
                1 => Addr::python(value),
                2 => addr_in(AddrSpace::PythonPtr, value),
                _ => return Err(corrupt("a frame has an unknown address space")),
            };
            addrs.push(a);
            let function: Option<i64> = r.get(3)?;
            if function.is_some() {
                let line: Option<i64> = r.get(5)?;
                p.sites.instr.insert(
                    a,
                    InstrEntry {
                        function: string(function)?,
                        file: string(r.get(4)?)?,
                        line: line.and_then(|l| u32::try_from(l).ok()),
                        binary: string(r.get(6)?)?,
                    },
                );
            }
        }
        drop(rows);

        let mut nodes = Nodes::new();
        let mut path = Vec::new();
        let n_frames = addrs.len() as u64;
        self.blocks(pid, "node", NODE_COLUMNS, |v, n| {
            for i in 0..n {
                let frame = v[n + i];
                if frame >= n_frames {
                    return Err(corrupt("a node names a frame it does not hold"));
                }
                nodes.push(v[i], frame as u32, &mut path).map_err(corrupt)?;
            }
            Ok(())
        })?;
        let mut frames = NodeFrames::default();
        let mut node = 0i64;
        let mut leaks = Vec::new();
        self.blocks(pid, "leak", LEAK_COLUMNS, |v, n| {
            for i in 0..n {
                node = node.wrapping_add(unzigzag(v[i]));
                leaks.push(Leak {
                    stack: frames.of(&nodes, &addrs, node)?.to_vec(),
                    count: v[n + i],
                    memory: v[2 * n + i],
                });
            }
            Ok(())
        })?;
        p.leaks = leaks;
        Ok((p, StackStream { pid, nodes, addrs }))
    }
}

impl Store {
    /// The times of process `pid`'s checkpoints (seconds after it started;
    /// the last is the profile's end), in order: its series' points. Empty
    /// where it has none (no checkpoint written, or a store from before).
    pub fn series_times(&self, pid: u32) -> Result<Vec<f64>, StoreError> {
        Ok(self.section(pid, "series")?.unwrap_or_default())
    }

    /// Each stack's counters (allocations, bytes allocated, frees, bytes
    /// freed) at point `from` of the series (None: the process's start,
    /// all zeros) and at point `to`, for the stacks whose counters differ:
    /// (stack row in `each_stack`'s order, at `from`, at `to`), by row.
    /// Holds the stacks that changed up to `to` (one row each), not the
    /// series.
    pub fn series_between(
        &self,
        pid: u32,
        from: Option<usize>,
        to: usize,
    ) -> Result<Vec<(u32, SeriesCounts, SeriesCounts)>, StoreError> {
        let mut at: std::collections::HashMap<u32, (SeriesCounts, SeriesCounts)> =
            Default::default();
        let (mut point, mut row) = (0u64, 0i64);
        self.blocks(pid, "series", SERIES_COLUMNS, |v, n| {
            let col = |c: usize, i: usize| v[c * n + i];
            for i in 0..n {
                point = point.saturating_add(col(0, i));
                row = row.wrapping_add(unzigzag(col(1, i)));
                if point > to as u64 {
                    break;
                }
                let (count, bytes) = (col(2, i), col(3, i));
                let c = [
                    count,
                    bytes,
                    count.wrapping_sub(unzigzag(col(4, i)) as u64),
                    bytes.wrapping_sub(unzigzag(col(5, i)) as u64),
                ];
                let Ok(r) = u32::try_from(row) else {
                    return Err(corrupt("its series names a stack out of range"));
                };
                let e = at.entry(r).or_default();
                if from.is_some_and(|f| point <= f as u64) {
                    e.0 = c;
                }
                e.1 = c;
            }
            Ok(())
        })?;
        let mut out: Vec<(u32, SeriesCounts, SeriesCounts)> = at
            .into_iter()
            .filter(|(_, (a, b))| a != b)
            .map(|(r, (a, b))| (r, a, b))
            .collect();
        out.sort_unstable_by_key(|r| r.0);
        Ok(out)
    }

    /// The threads of process `pid` whose allocations per stack the store
    /// holds (indexes into its threads), and how many ended threads have
    /// none kept; empty where one thread allocated.
    pub fn thread_stack_threads(&self, pid: u32) -> Result<(Vec<u32>, u64), StoreError> {
        #[derive(serde::Deserialize, Default)]
        struct Section {
            threads: Vec<u32>,
            unkept: u64,
        }
        let s: Section = self.section(pid, "threadStacks")?.unwrap_or_default();
        Ok((s.threads, s.unkept))
    }

    /// What thread `thread` (an index into the process's threads)
    /// allocated at each stack: (stack row in `each_stack`'s order,
    /// allocations, bytes), by row.
    pub fn thread_stacks(&self, pid: u32, thread: u32) -> Result<Vec<(u32, u64, u64)>, StoreError> {
        let mut out = Vec::new();
        let (mut t, mut row) = (0u64, 0i64);
        self.blocks(pid, "thread_stack", THREAD_STACK_COLUMNS, |v, n| {
            let col = |c: usize, i: usize| v[c * n + i];
            for i in 0..n {
                if col(0, i) != 0 {
                    row = 0;
                }
                t = t.saturating_add(col(0, i));
                row = row.wrapping_add(unzigzag(col(1, i)));
                if t == u64::from(thread) {
                    let r = u32::try_from(row)
                        .map_err(|_| corrupt("its thread rows name a stack out of range"))?;
                    out.push((r, col(2, i), col(3, i)));
                }
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// The blocks alive at the end of process `pid` one by one, with their
    /// pointers (none in a store from before they were kept, nor for a
    /// process killed before its end).
    pub fn leak_blocks(&self, pid: u32) -> Result<LeakBlocks, StoreError> {
        let leaks: i64 = self.conn.query_row(
            "SELECT coalesce(sum(rows), 0) FROM block WHERE pid = ?1 AND kind = 'leak'",
            params![pid],
            |r| r.get(0),
        )?;
        let mut out = LeakBlocks::default();
        let (mut leak, mut ptr) = (0i64, 0i64);
        self.blocks(pid, "leak_block", LEAK_BLOCK_COLUMNS, |v, n| {
            for i in 0..n {
                leak = leak.wrapping_add(unzigzag(v[i]));
                ptr = ptr.wrapping_add(unzigzag(v[n + i]));
                if !(0..leaks).contains(&leak) {
                    return Err(corrupt("a block alive names a leak it does not hold"));
                }
                // (The recorder writes at most 2^20.)
                if out.blocks.len() >= 1 << 20 {
                    return Err(corrupt("it lists more blocks alive than a recorder writes"));
                }
                out.blocks.push(LeakBlock {
                    leak: leak as u32,
                    ptr: ptr as u64,
                    size: v[2 * n + i],
                });
            }
            Ok(())
        })?;
        if let Some(omitted) = self.section::<u64>(pid, "leakBlocksOmitted")? {
            out.omitted = omitted;
        }
        Ok(out)
    }
}

/// What gives a process's stacks one by one (see [`Store::head`]).
pub struct StackStream {
    pub pid: u32,
    nodes: Nodes,
    addrs: Vec<Addr>,
}

impl StackStream {
    /// Calls `f` on each stack (frames innermost first) with its counters.
    pub fn each_stack(
        &self,
        store: &Store,
        mut f: impl FnMut(&[Addr], StackInfos),
    ) -> Result<(), StoreError> {
        let mut frames = NodeFrames::default();
        let mut node = 0i64;
        let (nodes, addrs) = (&self.nodes, &self.addrs);
        let columns = store.stack_columns;
        store.blocks(self.pid, "stack", columns, |v, n| {
            let col = |c: usize, i: usize| v[c * n + i];
            // (A column missing in version 1 reads 0.)
            let mut row = [0u64; STACK_COLUMNS - 1];
            for i in 0..n {
                node = node.wrapping_add(unzigzag(col(0, i)));
                for (k, cell) in row[..columns - 1].iter_mut().enumerate() {
                    *cell = col(k + 1, i);
                }
                f(frames.of(nodes, addrs, node)?, infos(&row));
            }
            Ok(())
        })
    }
}

/// Nodes' frames, each node's made from the last one's: the stacks come in
/// the order of the tree's nodes, so that each shares most of its frames
/// with the one before (compileall's: 46 a stack, each a parent, a frame
/// and an address read at random).
#[derive(Default)]
struct NodeFrames {
    /// The last node's path, root first: a node is numbered after its
    /// parent (`Nodes::push`), so the numbers increase.
    path: Vec<u32>,
    /// Its frames, root first ...
    rooted: Vec<Addr>,
    /// ... and innermost first, as given.
    out: Vec<Addr>,
    below: Vec<u32>,
}

impl NodeFrames {
    /// `node`'s frames as addresses, innermost first.
    fn of(&mut self, nodes: &Nodes, addrs: &[Addr], node: i64) -> Result<&[Addr], StoreError> {
        if node < 0 || node as usize >= nodes.len() {
            return Err(corrupt("a stack names a node it does not hold"));
        }
        self.below.clear();
        let mut at = node as u32;
        let keep = loop {
            if at == crate::tree::ROOT {
                break 0;
            }
            match self.path.binary_search(&at) {
                Ok(position) => break position + 1,
                Err(_) => {
                    self.below.push(at);
                    at = nodes.parent[at as usize];
                }
            }
        };
        self.path.truncate(keep);
        self.rooted.truncate(keep);
        for &n in self.below.iter().rev() {
            self.path.push(n);
            self.rooted.push(addrs[nodes.frame[n as usize] as usize]);
        }
        self.out.clear();
        self.out.extend(self.rooted.iter().rev());
        Ok(&self.out)
    }
}

fn addr_in(space: AddrSpace, value: u64) -> Addr {
    // Addr has no public constructor by space for this one: its text form.
    format!("{}0x{value:x}", space.prefix())
        .parse()
        .unwrap_or(Addr::native(value))
}

fn mms(v: &[u64]) -> MinMaxSum {
    MinMaxSum {
        count: v[0],
        min: v[1],
        max: v[2],
        sum: v[3],
    }
}

fn undiff(d: u64, base: u64) -> u64 {
    base.wrapping_add(unzigzag(d) as u64)
}

/// The inverse of `write::stack_row`.
fn infos(v: &[u64]) -> StackInfos {
    let alloc = mms(&v[3..7]);
    let free = MinMaxSum {
        count: undiff(v[7], alloc.count),
        min: undiff(v[8], alloc.min),
        max: undiff(v[9], alloc.max),
        sum: undiff(v[10], alloc.sum),
    };
    let lifetime = MinMaxSum {
        count: undiff(v[19], free.count),
        min: v[20],
        max: undiff(v[21], v[20]),
        sum: v[22],
    };
    StackInfos {
        count_zeros: unzigzag(v[0]),
        max_alive_req: unzigzag(v[1]),
        alive_req: unzigzag(v[2]),
        alloc,
        free,
        mmap: mms(&v[11..15]),
        munmap: mms(&v[15..19]),
        lifetime,
        global_peak: unzigzag(v[23]),
        realloc_count: v[24],
        realloc_sum_delta: unzigzag(v[25]),
        temporary: v[26],
    }
}

#[cfg(test)]
mod tests {
    use super::{decompress_section, NodeFrames};
    use crate::tree::{Nodes, ROOT};
    use heapledger_profile::Addr;

    /// Each node's frames made from the last node's are its own, whatever
    /// order the nodes come in (pseudo-random trees, in the tree's order,
    /// in reverse and shuffled), and a node past the tree is refused.
    #[test]
    fn node_frames_from_the_last_nodes_are_each_nodes_own() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        for _ in 0..50 {
            let addrs: Vec<Addr> = (0..7).map(|a| Addr::native(0x1000 + a)).collect();
            let mut nodes = Nodes::new();
            let mut path = Vec::new();
            for _ in 0..1 + next(300) {
                let up = next(path.len() as u64 + 1);
                nodes.push(up, next(7) as u32, &mut path).unwrap();
            }
            let naive = |node: u32| {
                let mut out = Vec::new();
                let mut at = node;
                while at != ROOT {
                    out.push(addrs[nodes.frame[at as usize] as usize]);
                    at = nodes.parent[at as usize];
                }
                out
            };
            let n = nodes.len() as u32;
            let mut orders: Vec<Vec<u32>> = vec![(0..n).collect(), (0..n).rev().collect()];
            let mut shuffled: Vec<u32> = (0..n).collect();
            for i in (1..shuffled.len()).rev() {
                shuffled.swap(i, next(i as u64 + 1) as usize);
            }
            orders.push(shuffled);
            for order in orders {
                let mut frames = NodeFrames::default();
                for node in order {
                    assert_eq!(
                        frames.of(&nodes, &addrs, i64::from(node)).unwrap(),
                        naive(node).as_slice()
                    );
                }
                assert!(frames.of(&nodes, &addrs, i64::from(n)).is_err());
                assert!(frames.of(&nodes, &addrs, -1).is_err());
            }
        }
    }

    #[test]
    fn sections_decompress_with_or_without_a_stated_size() {
        let text = b"{\"a\": 1}".repeat(1000);
        let stated = zstd::bulk::compress(&text, 3).unwrap();
        assert_eq!(
            zstd::zstd_safe::get_frame_content_size(&stated).unwrap(),
            Some(text.len() as u64)
        );
        assert_eq!(decompress_section(&stated).unwrap(), text);
        // A stream states no size: read to the limit.
        let mut streamed = Vec::new();
        let mut e = zstd::stream::write::Encoder::new(&mut streamed, 3).unwrap();
        std::io::Write::write_all(&mut e, &text).unwrap();
        e.finish().unwrap();
        assert_eq!(
            zstd::zstd_safe::get_frame_content_size(&streamed).unwrap(),
            None
        );
        assert_eq!(decompress_section(&streamed).unwrap(), text);
        // Not zstd, or cut short.
        assert!(decompress_section(b"not a frame").is_none());
        assert!(decompress_section(&stated[..stated.len() / 2]).is_none());
    }
}
