//! Writing a store: processes added one by one, in one transaction.

use crate::codec::{encode_columns, zigzag, BLOCK_ROWS};
use crate::globals::MemStatsOwn;
use crate::schema::{
    FORMAT, LEAK_BLOCK_COLUMNS, LEAK_COLUMNS, NODE_COLUMNS, SCHEMA, SERIES_COLUMNS, STACK_COLUMNS,
    THREAD_STACK_COLUMNS, VERSION,
};
use crate::tree;
use crate::StoreError;
use heapledger_profile::prefetch;
use heapledger_profile::{
    Addr, AddrSpace, GlobalVariable, MinMaxSum, Profile, StackInfos, ThreadStacks,
};
use rusqlite::{params, Connection};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// A store being written. Nothing is visible until [`Writer::finish`].
pub struct Writer {
    conn: Connection,
    /// The variables already written, by binary: their lists and rows.
    globals: crate::globals::Written,
}

/// What the store says of a process beside its profile.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcessMeta {
    /// The process `heapledger run` started (readers show it by default).
    pub is_main: bool,
    /// The profile stops at this checkpoint (sequence number, seconds
    /// since the process started): the process was killed before its end.
    pub checkpoint: Option<(u64, f64)>,
}

/// A snapshot's row (`snapshot` table).
#[derive(Clone, Debug)]
pub struct SnapshotMeta {
    /// Its number among the process's checkpoints and snapshots.
    pub seq: u64,
    pub label: String,
    /// When it was taken, seconds after the process started.
    pub seconds: f64,
}

/// Keys of snapshots' rows in the tables keyed by pid: from here up (a
/// Linux pid is below 2^22).
pub const SNAPSHOT_KEYS: u32 = 0x8000_0000;

enum Entry {
    Process(ProcessMeta),
    Snapshot(SnapshotMeta),
}

pub(crate) fn space_code(s: AddrSpace) -> i64 {
    match s {
        AddrSpace::Native => 0,
        AddrSpace::Python => 1,
        AddrSpace::PythonPtr => 2,
    }
}

fn io(what: &str) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
    move |e| StoreError::Io(format!("{what}: {e}"))
}

impl Writer {
    /// Creates the store at `path`, which must not exist yet (the caller's
    /// temporary file, renamed once finished).
    pub fn create(path: &Path) -> Result<Writer, StoreError> {
        let conn = Connection::open(path).map_err(io("cannot create the database"))?;
        // One transaction into a file nobody sees before it is renamed:
        // no journal, no sync until the end.
        conn.execute_batch(
            "PRAGMA page_size = 16384; PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;",
        )
        .map_err(io("cannot set up the database"))?;
        conn.execute_batch("BEGIN")?;
        conn.execute_batch(SCHEMA)?;
        conn.execute(
            "INSERT INTO meta(key, value) VALUES ('format', ?1), ('version', ?2), ('tool', ?3)",
            params![
                FORMAT,
                VERSION.to_string(),
                concat!("heapledger ", env!("CARGO_PKG_VERSION"))
            ],
        )?;
        Ok(Writer {
            conn,
            globals: HashMap::new(),
        })
    }

    /// Writes `binary`'s variables `vars` from `data`, what
    /// [`crate::encode_variables`] made of them (ahead of time, by a caller
    /// that had the time), unless they are written already: a process
    /// added afterwards that holds this very list takes this row.
    pub fn add_variables(
        &mut self,
        binary: &str,
        vars: &Arc<Vec<GlobalVariable>>,
        data: &[u8],
    ) -> Result<(), StoreError> {
        put_globals(&self.conn, &mut self.globals, binary, vars, Some(data)).map(|_| ())
    }

    /// Adds one process's profile.
    pub fn add_process(&mut self, p: &Profile, meta: ProcessMeta) -> Result<(), StoreError> {
        let pid = p.heapledger.as_ref().map_or(0, |e| e.pid);
        self.add(p, pid, Entry::Process(meta))
    }

    /// Adds a snapshot of a process (`heapledger_snapshot`, `heapledger
    /// ctl PID snapshot`): its profile at that moment, kept under a key of
    /// its own (from `SNAPSHOT_KEYS`; pids stay below it), listed in the
    /// `snapshot` table.
    pub fn add_snapshot(&mut self, p: &Profile, meta: SnapshotMeta) -> Result<(), StoreError> {
        let n: i64 = self
            .conn
            .query_row("SELECT count(*) FROM snapshot", [], |r| r.get(0))?;
        let key = SNAPSHOT_KEYS + n as u32;
        self.add(p, key, Entry::Snapshot(meta))
    }

    fn add(&mut self, p: &Profile, pid: u32, entry: Entry) -> Result<(), StoreError> {
        let ext = p.heapledger.as_ref();
        let c = &self.conn;

        // Frames: the resolved addresses in `sites.instr`'s order, then
        // any other address a stack holds.
        let mut ids: HashMap<Addr, u32, foldhash::fast::RandomState> =
            HashMap::with_capacity_and_hasher(p.sites.instr.len(), Default::default());
        let mut unresolved: Vec<Addr> = Vec::new();
        for a in p.sites.instr.keys() {
            let n = ids.len() as u32;
            ids.entry(*a).or_insert(n);
        }
        let mut id_of = |a: &Addr| {
            let n = ids.len() as u32;
            *ids.entry(*a).or_insert_with(|| {
                unresolved.push(*a);
                n
            })
        };
        // The tree's rows, made as they are written where the tree is built.
        // (Options, so that they go once the tree's rows are written: 18
        // MB of half a million stacks' nodes, beside what comes after.)
        let mut frames: Option<Vec<u32>> = None;
        let mut dfs: Option<tree::Dfs> = None;
        let (mut rows, n_rows, stack_nodes, leak_nodes): (
            Box<dyn Iterator<Item = (u32, u32)>>,
            usize,
            _,
            _,
        ) = match &p.compact {
            Some(cs) => {
                // The tree is built: each node's frame looked up once.
                let frames = frames.insert(
                    std::iter::once(u32::MAX)
                        .chain(cs.frame[1..].iter().map(&mut id_of))
                        .collect(),
                );
                let dfs = dfs.insert(tree::from_tree(&cs.parent, frames));
                let number = dfs.number();
                let of = |nodes: &[u32]| -> Result<Vec<u32>, StoreError> {
                    nodes
                        .iter()
                        .map(|&n| number.get(n as usize).copied())
                        .collect::<Option<_>>()
                        .ok_or_else(|| StoreError::Io("a stack stands on no node".into()))
                };
                if cs.leaks.len() != p.leaks.len() {
                    return Err(StoreError::Io("the leaks have no nodes".into()));
                }
                let (nodes, leaks) = (of(&cs.node)?, of(&cs.leaks)?);
                drop(number);
                (
                    Box::new(dfs.walk().map(|(_, r)| r)),
                    dfs.rows(),
                    nodes,
                    leaks,
                )
            }
            None => {
                // Every stack's frames, outermost first, the leaks' after
                // the stacks'.
                let total: usize = p.stacks.iter().map(|s| s.stack.len()).sum::<usize>()
                    + p.leaks.iter().map(|l| l.stack.len()).sum::<usize>();
                let mut frames: Vec<u32> = Vec::with_capacity(total);
                let mut ends: Vec<usize> = Vec::with_capacity(p.stacks.len() + p.leaks.len());
                let all = p
                    .stacks
                    .iter()
                    .map(|s| &s.stack)
                    .chain(p.leaks.iter().map(|l| &l.stack));
                for stack in all {
                    frames.extend(stack.iter().rev().map(&mut id_of));
                    ends.push(frames.len());
                }
                let built = tree::build(&frames, &ends);
                drop(frames);
                let mut nodes = built.nodes;
                let leak_nodes = nodes.split_off(p.stacks.len());
                let n = built.rows.len();
                (Box::new(built.rows.into_iter()), n, nodes, leak_nodes)
            }
        };
        drop(ids);
        let n_stacks = stack_nodes.len();
        let infos_of = |i: usize| -> StackInfos {
            match &p.compact {
                Some(cs) => cs.infos(i),
                None => p.stacks.stats[i].infos.clone(),
            }
        };

        {
            let mut st = c.prepare("INSERT INTO string(pid, id, text) VALUES (?1, ?2, ?3)")?;
            for (i, s) in p.sites.strings.iter().enumerate() {
                st.execute(params![pid, i as i64, s])?;
            }
            let mut fr = c.prepare(
                "INSERT INTO frame(pid, id, address, space, function, file, line, binary)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?;
            let mut n = 0i64;
            for (a, e) in &p.sites.instr {
                fr.execute(params![
                    pid,
                    n,
                    a.value() as i64,
                    space_code(a.space()),
                    e.function.0,
                    e.file.0,
                    e.line,
                    e.binary.0
                ])?;
                n += 1;
            }
            for a in &unresolved {
                fr.execute(params![
                    pid,
                    n,
                    a.value() as i64,
                    space_code(a.space()),
                    None::<i64>,
                    None::<i64>,
                    None::<i64>,
                    None::<i64>
                ])?;
                n += 1;
            }
        }

        let mut blocks = c.prepare(
            "INSERT INTO block(pid, kind, first, rows, data) VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        let mut put_blocks = |kind: &str,
                              columns: usize,
                              n: usize,
                              row: &mut dyn FnMut(usize, &mut [u64])|
         -> Result<(), StoreError> {
            // Rows are made a few at a time, then moved into their columns
            // a cache line per column at once: one row at a time wrote each
            // column a value apart by a power of two (a block's rows), so
            // that every column's line fell in one set of the cache and
            // each write missed. (With the fetches ahead below, writing the
            // store of half a million stacks went from 0.37 s to 0.28.)
            const TILE: usize = 8;
            let mut tile = vec![0u64; TILE * columns];
            // One block's values, every one written for each block: made
            // (and zeroed) once, not once a block (150 MB zeroed for half a
            // million stacks).
            let mut data = Vec::new();
            let mut first = 0;
            while first < n {
                let len = (n - first).min(BLOCK_ROWS);
                data.resize(len * columns, 0u64);
                for r0 in (0..len).step_by(TILE) {
                    let rows = (len - r0).min(TILE);
                    for (dr, cells) in tile.chunks_exact_mut(columns).take(rows).enumerate() {
                        row(first + r0 + dr, cells);
                    }
                    for k in 0..columns {
                        for dr in 0..rows {
                            data[k * len + r0 + dr] = tile[dr * columns + k];
                        }
                    }
                }
                let blob = encode_columns(&data, columns)?;
                blocks.execute(params![pid, kind, first as i64, len as i64, blob])?;
                first += len;
            }
            Ok(())
        };
        put_blocks("node", NODE_COLUMNS, n_rows, &mut |_, out| {
            // Asked for in order.
            let (up, frame) = rows.next().unwrap_or_default();
            out[0] = u64::from(up);
            out[1] = u64::from(frame);
        })?;
        drop(rows);
        drop(dfs);
        drop(frames);
        // Stacks in the order of their nodes (depth first): the node column
        // then grows by small steps, and the counters of neighbouring
        // stacks look alike. The profile's order and its stack ids (labels
        // only) are not kept: ids are numbered in this order.
        let mut order: Vec<u32> = (0..n_stacks as u32).collect();
        order.sort_by_key(|&i| stack_nodes[i as usize]);
        let mut prev_node = 0i64;
        let (mut allocs, mut bytes) = (0u64, 0u64);
        put_blocks("stack", STACK_COLUMNS, n_stacks, &mut |i, out| {
            // The stacks are read in the order of their nodes, at random
            // in the packed counters and in their index: cache misses,
            // fetched ahead, the index first (fetching the counters alone
            // waited for the index's miss).
            if let Some(&far) = order.get(i + 16) {
                prefetch(stack_nodes.as_ptr().wrapping_add(far as usize));
                if let Some(cs) = &p.compact {
                    cs.fetch_counters_index(far as usize);
                }
            }
            if let Some(at) = p.compact.as_ref().and_then(|cs| {
                let ahead = *order.get(i + 8)?;
                cs.counters_addr(ahead as usize)
            }) {
                prefetch(at);
            }
            let i = order[i] as usize;
            let node = i64::from(stack_nodes[i]);
            out[0] = zigzag(node - prev_node);
            prev_node = node;
            let infos = infos_of(i);
            allocs = allocs.saturating_add(infos.alloc.count);
            bytes = bytes.saturating_add(infos.alloc.sum);
            stack_row(&infos, &mut out[1..]);
        })?;
        // The series, each stack by its row above.
        let mut row_of = vec![0u32; order.len()];
        for (row, &i) in order.iter().enumerate() {
            row_of[i as usize] = row as u32;
        }
        drop(order);
        // Each point's rows by stack row, one point at a time (the rows
        // are asked for in order).
        let known = |i: u32| (i as usize) < row_of.len();
        let n_series: usize = p
            .series
            .points
            .iter()
            .map(|pt| pt.changed.iter().filter(|(_, (i, _))| known(*i)).count())
            .sum();
        // (stack row, where the point holds it): 8 bytes a row.
        let mut point_rows: Vec<(u32, u32)> = Vec::new();
        let (mut next_point, mut point, mut at) = (0usize, 0u64, 0usize);
        let (mut prev_point, mut prev_row) = (0u64, 0i64);
        put_blocks("series", SERIES_COLUMNS, n_series, &mut |_, out| {
            while at == point_rows.len() {
                point_rows.clear();
                point_rows.extend(
                    p.series.points[next_point]
                        .changed
                        .iter()
                        .filter(|(_, (i, _))| known(*i))
                        .map(|(pos, (i, _))| (row_of[i as usize], pos as u32)),
                );
                point_rows.sort_unstable_by_key(|r| r.0);
                (point, at) = (next_point as u64, 0);
                next_point += 1;
            }
            let (row, k) = point_rows[at];
            let c = p.series.points[point as usize].changed.at(k as usize).1;
            at += 1;
            out[0] = point - prev_point;
            out[1] = zigzag(i64::from(row) - prev_row);
            (prev_point, prev_row) = (point, i64::from(row));
            out[2] = c[0];
            out[3] = c[1];
            out[4] = zigzag(c[0].wrapping_sub(c[2]) as i64);
            out[5] = zigzag(c[1].wrapping_sub(c[3]) as i64);
        })?;
        drop(point_rows);
        // Each thread's rows by their rows in the store, a thread at a time
        // (all of them sorted at once took 48 MB beside the profile's for
        // four threads over half a million stacks), packed again.
        let mut by_row = ThreadStacks::default();
        let mut pushes: Vec<_> = p.thread_stacks.threads().collect();
        pushes.sort_by_key(|x| x.0);
        let mut one: Vec<(u32, u64, u64)> = Vec::new();
        for same in pushes.chunk_by_mut(|a, b| a.0 == b.0) {
            one.clear();
            for (_, rows) in same.iter_mut() {
                one.extend(rows.filter_map(|(i, c, b)| Some((*row_of.get(i as usize)?, c, b))));
            }
            by_row.push_thread_unsorted(same[0].0, &mut one);
        }
        drop((pushes, one));
        let mut per_thread = by_row.iter();
        let (mut prev_thread, mut prev_row) = (0u64, 0i64);
        put_blocks(
            "thread_stack",
            THREAD_STACK_COLUMNS,
            by_row.len(),
            &mut |_, out| {
                // Asked for in order.
                let (t, row, c, b) = per_thread.next().unwrap_or_default();
                if u64::from(t) != prev_thread {
                    prev_row = 0;
                }
                out[0] = u64::from(t) - prev_thread;
                out[1] = zigzag(i64::from(row) - prev_row);
                (prev_thread, prev_row) = (u64::from(t), i64::from(row));
                out[2] = c;
                out[3] = b;
            },
        )?;
        drop(per_thread);
        let threads: Vec<u32> = by_row.threads().map(|(t, _)| t).collect();
        drop(by_row);
        let mut prev_leak = 0i64;
        put_blocks("leak", LEAK_COLUMNS, p.leaks.len(), &mut |i, out| {
            let node = i64::from(leak_nodes[i]);
            out[0] = zigzag(node - prev_leak);
            prev_leak = node;
            out[1] = p.leaks[i].count;
            out[2] = p.leaks[i].memory;
        })?;
        let lb = &p.leak_blocks.blocks;
        let (mut prev_leak, mut prev_ptr) = (0i64, 0i64);
        put_blocks("leak_block", LEAK_BLOCK_COLUMNS, lb.len(), &mut |i, out| {
            let b = lb[i];
            out[0] = zigzag(i64::from(b.leak) - prev_leak);
            out[1] = zigzag((b.ptr as i64).wrapping_sub(prev_ptr));
            out[2] = b.size;
            (prev_leak, prev_ptr) = (i64::from(b.leak), b.ptr as i64);
        })?;
        drop(blocks);
        if p.leak_blocks.omitted > 0 {
            put_section(c, pid, "leakBlocksOmitted", &p.leak_blocks.omitted)?;
        }

        put_section(c, pid, "run", &p.run)?;
        put_section(c, pid, "config", &p.config)?;
        put_section(c, pid, "maps", &p.sites.map)?;
        put_section(c, pid, "timeline", &p.timeline)?;
        put_section(c, pid, "scatter", &p.scatter)?;
        put_section(c, pid, "threads", &p.threads)?;
        put_section(c, pid, "memStats", &MemStatsOwn::of(&p.mem_stats))?;
        let mut rows = Vec::with_capacity(p.mem_stats.global_variables.len());
        for (binary, vars) in &p.mem_stats.global_variables {
            rows.push(put_globals(c, &mut self.globals, binary, vars, None)?);
        }
        if !rows.is_empty() {
            put_section(c, pid, "variablesOf", &rows)?;
        }
        put_section(c, pid, "globals", &p.globals)?;
        put_section(c, pid, "domains", &p.domains)?;
        put_section(c, pid, "stacksCount", &p.stacks.count)?;
        if !threads.is_empty() || p.thread_stacks.unkept > 0 {
            put_section(
                c,
                pid,
                "threadStacks",
                &serde_json::json!({ "threads": threads, "unkept": p.thread_stacks.unkept }),
            )?;
        }
        if !p.series.points.is_empty() {
            let times: Vec<f64> = p.series.points.iter().map(|pt| pt.seconds).collect();
            put_section(c, pid, "series", &times)?;
        }
        if let Some(e) = ext {
            put_section(c, pid, "heapledger", e)?;
        }

        let leaked: u64 = p.leaks.iter().map(|l| l.memory).sum();
        let meta = match entry {
            Entry::Process(meta) => meta,
            Entry::Snapshot(s) => {
                c.execute(
                    "INSERT INTO snapshot(key, pid, seq, label, seconds, allocations,
                        allocated_bytes, peak_bytes, alive_bytes, stacks)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                    params![
                        pid,
                        ext.map_or(0, |e| e.pid),
                        s.seq as i64,
                        s.label,
                        s.seconds,
                        allocs as i64,
                        bytes as i64,
                        ext.map_or(0, |e| e.peak_requested) as i64,
                        leaked as i64,
                        n_stacks as i64,
                    ],
                )?;
                return Ok(());
            }
        };
        c.execute(
            "INSERT INTO process(pid, ppid, is_main, forked_from, exe, command, exit_code,
                exit_signal, complete, checkpoint_seq, checkpoint_seconds, allocations,
                allocated_bytes, peak_bytes, leaked_bytes, stacks, nodes)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
            params![
                pid,
                ext.map_or(0, |e| e.ppid),
                meta.is_main,
                ext.and_then(|e| e.forked_from),
                p.run.exe,
                p.run.command,
                ext.and_then(|e| e.exit.code),
                ext.and_then(|e| e.exit.signal),
                meta.checkpoint.is_none(),
                meta.checkpoint.map(|c| c.0 as i64),
                meta.checkpoint.map(|c| c.1),
                allocs as i64,
                bytes as i64,
                ext.map_or(0, |e| e.peak_requested) as i64,
                leaked as i64,
                n_stacks as i64,
                n_rows as i64
            ],
        )
        .map_err(|e| match e {
            rusqlite::Error::SqliteFailure(f, _)
                if f.code == rusqlite::ErrorCode::ConstraintViolation =>
            {
                StoreError::Io(format!("two processes with pid {pid}"))
            }
            e => e.into(),
        })?;
        Ok(())
    }

    /// Commits everything written.
    pub fn finish(self) -> Result<(), StoreError> {
        self.conn.execute_batch("COMMIT")?;
        self.conn
            .close()
            .map_err(|(_, e)| StoreError::Io(e.to_string()))
    }
}

fn mms(m: &MinMaxSum, out: &mut [u64]) {
    out[0] = m.count;
    out[1] = m.min;
    out[2] = m.max;
    out[3] = m.sum;
}

fn diff(a: u64, b: u64) -> u64 {
    zigzag(a.wrapping_sub(b) as i64)
}

/// A stack's counters as 27 columns (after its node and id): the frees,
/// and the lifetimes' count, as differences from what they mostly equal.
fn stack_row(i: &StackInfos, out: &mut [u64]) {
    out[0] = zigzag(i.count_zeros);
    out[1] = zigzag(i.max_alive_req);
    out[2] = zigzag(i.alive_req);
    mms(&i.alloc, &mut out[3..7]);
    out[7] = diff(i.free.count, i.alloc.count);
    out[8] = diff(i.free.min, i.alloc.min);
    out[9] = diff(i.free.max, i.alloc.max);
    out[10] = diff(i.free.sum, i.alloc.sum);
    mms(&i.mmap, &mut out[11..15]);
    mms(&i.munmap, &mut out[15..19]);
    out[19] = diff(i.lifetime.count, i.free.count);
    out[20] = i.lifetime.min;
    out[21] = diff(i.lifetime.max, i.lifetime.min);
    out[22] = i.lifetime.sum;
    out[23] = zigzag(i.global_peak);
    out[24] = i.realloc_count;
    out[25] = zigzag(i.realloc_sum_delta);
    out[26] = i.temporary;
}

/// The row of `binary`'s variables `vars`, written unless an earlier
/// process's were the same list (the same shared list, as a run's
/// processes have, or an equal one).
fn put_globals(
    c: &Connection,
    written: &mut crate::globals::Written,
    binary: &str,
    vars: &Arc<Vec<GlobalVariable>>,
    data: Option<&[u8]>,
) -> Result<i64, StoreError> {
    let known = written.entry(binary.to_owned()).or_default();
    if let Some((_, id)) = known
        .iter()
        .find(|(v, _)| Arc::ptr_eq(v, vars) || **v == **vars)
    {
        return Ok(*id);
    }
    let made;
    let data = match data {
        Some(d) => d,
        None => {
            made = crate::globals::encode(binary, vars)?;
            &made
        }
    };
    c.execute(
        "INSERT INTO variables(binary, data) VALUES (?1, ?2)",
        params![binary, data],
    )?;
    let id = c.last_insert_rowid();
    known.push((vars.clone(), id));
    Ok(id)
}

pub(crate) fn put_section<T: serde::Serialize + ?Sized>(
    c: &Connection,
    pid: u32,
    name: &str,
    value: &T,
) -> Result<(), StoreError> {
    let json = serde_json::to_vec(value).map_err(|e| StoreError::Io(e.to_string()))?;
    let blob = zstd::bulk::compress(&json, 3).map_err(|e| StoreError::Io(e.to_string()))?;
    c.execute(
        "INSERT INTO section(pid, name, data) VALUES (?1, ?2, ?3)",
        params![pid, name, blob],
    )?;
    Ok(())
}
