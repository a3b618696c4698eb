//! Opening a profile for a reader: a profile store (what `run` writes), of
//! which one process or all of them merged, or a JSON profile in MALT's
//! layout (written by `export --format malt`, by heapledger before the
//! store, or by MALT itself), read as it is.

use anyhow::{anyhow, bail, Result};
use heapledger_profile::{Addr, InstrEntry, Profile, StackInfos, StringTable};
use heapledger_store::{ProcessInfo, StackStream, Store};
use std::collections::HashMap;
use std::path::Path;

/// Which process of a store a reader shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pick {
    /// The process `run` started.
    #[default]
    Main,
    Pid(u32),
    /// Every process, merged into one profile.
    All,
}

/// The stacks of a profile opened from a store, read as they are needed:
/// one process's, or those of every process merged (`--all`), each with
/// the new addresses of its frames that mean something else in the first
/// process (`merge`).
struct Streams {
    store: Store,
    parts: Vec<(StackStream, Remap)>,
    path: std::path::PathBuf,
}

/// Frames of a merged process moved to addresses of their own.
type Remap = HashMap<Addr, Addr>;

impl Streams {
    fn one(store: Store, stream: StackStream, path: &Path) -> Streams {
        Streams {
            store,
            parts: vec![(stream, Remap::new())],
            path: path.to_owned(),
        }
    }

    /// The store and the stream of a profile of one process.
    fn single(&self) -> Option<(&Store, &StackStream, &Path)> {
        match self.parts.as_slice() {
            [(stream, _)] => Some((&self.store, stream, &self.path)),
            _ => None,
        }
    }
}

/// A profile to show, and the store's other processes.
pub struct Opened {
    /// The profile; without its stacks where they are given one by one
    /// from the store (`each_stack`).
    pub profile: Profile,
    stream: Option<Streams>,
    /// The store's processes not shown (empty for a JSON profile, and with
    /// `--all`).
    pub others: Vec<ProcessInfo>,
    /// Processes merged (`--all`), 1 otherwise.
    pub merged: usize,
    /// The checkpoint the shown profile stops at (sequence, seconds), where
    /// the process was killed.
    pub checkpoint: Option<(u64, f64)>,
    /// The shown process's snapshots, where the end of it is shown.
    pub snapshots: Vec<heapledger_store::SnapshotInfo>,
}

impl Opened {
    /// The blocks alive at exit one by one, with their pointers, where the
    /// store holds them (not for a JSON profile, nor a merge of processes).
    pub fn leak_blocks(&self) -> Result<Option<heapledger_profile::LeakBlocks>> {
        match self.stream.as_ref().and_then(Streams::single) {
            Some((store, stream, path)) => store
                .leak_blocks(stream.pid)
                .map(Some)
                .map_err(|e| anyhow!("`{}` {e}", path.display())),
            None => Ok(None),
        }
    }

    /// Calls `f` on every stack of the profile (frames innermost first):
    /// from the store as they are read, where the profile was opened
    /// without them, without holding them all.
    /// The times of the shown process's checkpoint series (seconds after
    /// it started; the last its end); empty where there is none (a JSON
    /// profile, a merge of processes, a run without checkpoints).
    pub fn series_times(&self) -> Result<Vec<f64>> {
        match self.stream.as_ref().and_then(Streams::single) {
            Some((store, stream, path)) => store
                .series_times(stream.pid)
                .map_err(|e| anyhow!("`{}` {e}", path.display())),
            _ => Ok(Vec::new()),
        }
    }

    /// What each stack did between two points of the series (indexes into
    /// [`Opened::series_times`]; `from` None: the start), for
    /// `tree::samples_in`: (stack row in `each_stack`'s order, counters at
    /// `from`, at `to`).
    pub fn series_between(
        &self,
        from: Option<usize>,
        to: usize,
    ) -> Result<
        Vec<(
            u32,
            heapledger_profile::SeriesCounts,
            heapledger_profile::SeriesCounts,
        )>,
    > {
        match self.stream.as_ref().and_then(Streams::single) {
            Some((store, stream, path)) => store
                .series_between(stream.pid, from, to)
                .map_err(|e| anyhow!("`{}` {e}", path.display())),
            _ => Ok(Vec::new()),
        }
    }

    /// The threads whose allocations per stack the profile holds (their
    /// indexes in `profile.threads`), and how many ended threads have none
    /// kept; empty where one thread allocated, or for a JSON profile or a
    /// merge of processes.
    pub fn thread_stack_threads(&self) -> Result<(Vec<u32>, u64)> {
        match self.stream.as_ref().and_then(Streams::single) {
            Some((store, stream, path)) => store
                .thread_stack_threads(stream.pid)
                .map_err(|e| anyhow!("`{}` {e}", path.display())),
            _ => Ok((Vec::new(), 0)),
        }
    }

    /// What thread `thread` (an index in `profile.threads`) allocated at
    /// each stack: (stack row in `each_stack`'s order, allocations, bytes).
    pub fn thread_stacks(&self, thread: u32) -> Result<Vec<(u32, u64, u64)>> {
        match self.stream.as_ref().and_then(Streams::single) {
            Some((store, stream, path)) => store
                .thread_stacks(stream.pid, thread)
                .map_err(|e| anyhow!("`{}` {e}", path.display())),
            _ => Ok(Vec::new()),
        }
    }

    /// The global and thread-local variables of every binary the shown
    /// process loaded: read from the store on demand (the profile opened
    /// from one leaves them out, as most readers do not show them).
    pub fn globals(&self) -> Result<heapledger_profile::GlobalVariables> {
        let Some(s) = &self.stream else {
            return Ok(self.profile.mem_stats.global_variables.clone());
        };
        // Merged processes: every binary's once.
        let mut all = heapledger_profile::GlobalVariables::default();
        for (stream, _) in &s.parts {
            let vars = s
                .store
                .globals(stream.pid)
                .map_err(|e| anyhow!("`{}` {e}", s.path.display()))?;
            for (binary, v) in vars {
                all.entry(binary).or_insert(v);
            }
        }
        Ok(all)
    }

    /// Whether the stacks come from a store as they are read
    /// ([`Opened::each_stack`]), not from `profile.stacks`.
    pub fn streams_stacks(&self) -> bool {
        self.stream.is_some()
    }

    pub fn each_stack(&self, mut f: impl FnMut(&[Addr], &StackInfos)) -> Result<()> {
        match &self.stream {
            Some(s) => {
                let mut moved = Vec::new();
                for (stream, remap) in &s.parts {
                    stream
                        .each_stack(&s.store, |stack, infos| {
                            if remap.is_empty() {
                                return f(stack, &infos);
                            }
                            moved.clear();
                            moved.extend(stack.iter().map(|a| remap.get(a).copied().unwrap_or(*a)));
                            f(&moved, &infos)
                        })
                        .map_err(|e| anyhow!("`{}` {e}", s.path.display()))?;
                }
                Ok(())
            }
            None => {
                for s in self.profile.stacks.iter() {
                    f(&s.stack, &s.infos);
                }
                Ok(())
            }
        }
    }
}

/// How much of a store's process to load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Load {
    /// The whole profile, stacks included (exports).
    Whole,
    /// Everything but the stacks, which `Opened::each_stack` gives one by
    /// one (readers that sum them: report, tree).
    Streamed,
}

/// Opens `path` and picks what to show. `FILE:LABEL`, where no file has
/// that whole name, is the snapshot LABEL of FILE (as `--snapshot`).
pub fn open(path: &Path, pick: Pick, load: Load) -> Result<Opened> {
    if !path.exists() {
        let text = path.to_string_lossy();
        if let Some((file, label)) = text.rsplit_once(':') {
            if !label.is_empty() && Path::new(file).is_file() {
                return open_snapshot(Path::new(file), pick, Some(label), load);
            }
        }
    }
    open_snapshot(path, pick, None, load)
}

/// Opens `path` and picks what to show: with `snapshot`, the picked
/// process's snapshot of that label (its last one of that label) or number.
pub fn open_snapshot(
    path: &Path,
    pick: Pick,
    snapshot: Option<&str>,
    load: Load,
) -> Result<Opened> {
    let head = first_bytes(path);
    if snapshot.is_some() && !heapledger_store::is_sqlite(&head) {
        bail!(
            "`{}` holds no snapshots (only a profile store does)",
            path.display()
        );
    }
    if !heapledger_store::is_sqlite(&head) {
        if pick != Pick::Main {
            // A JSON profile holds one process.
            let p = Profile::from_path(path)?;
            let pid = p.heapledger.as_ref().map(|e| e.pid);
            if let Pick::Pid(want) = pick {
                if pid != Some(want) {
                    bail!("`{}` holds no process {want}", path.display());
                }
            }
            return Ok(one(p));
        }
        return Ok(one(Profile::from_path(path)?));
    }
    let named = |e: heapledger_store::StoreError| anyhow!("`{}` {e}", path.display());
    let store = Store::open(path).map_err(named)?;
    let procs = store.processes().map_err(named)?;
    let check = |p: Profile| -> Result<Profile> {
        heapledger_profile::check_values(&p)
            .map_err(|d| anyhow!("profile `{}` is damaged: {d}", path.display()))?;
        Ok(p)
    };
    let main = procs.iter().find(|p| p.is_main).or(procs.first()).cloned();
    let Some(main) = main else {
        bail!("`{}` holds no process", path.display());
    };
    if let Some(label) = snapshot {
        let of = match pick {
            Pick::Pid(p) => p,
            Pick::Main => main.pid,
            Pick::All => bail!("a snapshot is of one process: --snapshot goes without --all"),
        };
        let snaps = store.snapshots().map_err(named)?;
        let mine: Vec<_> = snaps.iter().filter(|s| s.pid == of).collect();
        let found = mine
            .iter()
            .rev()
            .find(|s| s.label == label)
            .or_else(|| mine.iter().find(|s| label.parse() == Ok(s.seq)));
        let Some(found) = found else {
            let names: Vec<String> = mine
                .iter()
                .map(|s| format!("{} ({})", s.label, s.seq))
                .collect();
            bail!(
                "`{}` holds no snapshot {label} of process {of} ({})",
                path.display(),
                if names.is_empty() {
                    "it has none".to_owned()
                } else {
                    format!("its snapshots: {}", names.join(", "))
                }
            );
        };
        let (profile, stream) = match load {
            Load::Whole => (check(store.profile(found.key).map_err(named)?)?, None),
            Load::Streamed => {
                let (profile, stream) = store.head(found.key).map_err(named)?;
                (check(profile)?, Some(Streams::one(store, stream, path)))
            }
        };
        return Ok(Opened {
            profile,
            stream,
            others: Vec::new(),
            merged: 1,
            checkpoint: None,
            snapshots: Vec::new(),
        });
    }
    match pick {
        Pick::All => {
            let merged = procs.len();
            let (profile, stream) = match load {
                Load::Whole => {
                    let mut profiles = Vec::with_capacity(procs.len());
                    for p in &procs {
                        profiles.push(check(store.profile(p.pid).map_err(named)?)?);
                    }
                    (merge(profiles).0, None)
                }
                // Each process's stacks read in turn as the reader sums
                // them: memory for the merged heads and each process's
                // prefix tree, not for every stack's frames.
                Load::Streamed => {
                    let mut heads = Vec::with_capacity(procs.len());
                    let mut streams = Vec::with_capacity(procs.len());
                    for p in &procs {
                        let (head, stream) = store.head(p.pid).map_err(named)?;
                        heads.push(check(head)?);
                        streams.push(stream);
                    }
                    let (profile, remaps) = merge(heads);
                    let parts = streams.into_iter().zip(remaps).collect();
                    (
                        profile,
                        Some(Streams {
                            store,
                            parts,
                            path: path.to_owned(),
                        }),
                    )
                }
            };
            Ok(Opened {
                profile,
                stream,
                others: Vec::new(),
                merged,
                checkpoint: None,
                snapshots: Vec::new(),
            })
        }
        Pick::Main | Pick::Pid(_) => {
            let want = match pick {
                Pick::Pid(p) => procs.iter().find(|i| i.pid == p).cloned().ok_or_else(|| {
                    let pids: Vec<String> = procs.iter().map(|p| p.pid.to_string()).collect();
                    anyhow!(
                        "`{}` holds no process {p} (its processes: {})",
                        path.display(),
                        pids.join(", ")
                    )
                })?,
                _ => main,
            };
            let (profile, stream) = match load {
                Load::Whole => (check(store.profile(want.pid).map_err(named)?)?, None),
                Load::Streamed => {
                    let (profile, stream) = store.head(want.pid).map_err(named)?;
                    (check(profile)?, Some(Streams::one(store, stream, path)))
                }
            };
            let snapshots = store_snapshots(&stream, path, want.pid)?;
            Ok(Opened {
                profile,
                stream,
                others: procs.into_iter().filter(|p| p.pid != want.pid).collect(),
                merged: 1,
                checkpoint: want.checkpoint,
                snapshots,
            })
        }
    }
}

fn one(profile: Profile) -> Opened {
    Opened {
        profile,
        stream: None,
        others: Vec::new(),
        merged: 1,
        checkpoint: None,
        snapshots: Vec::new(),
    }
}

/// The snapshots of process `pid` in the store at `path`.
fn store_snapshots(
    stream: &Option<Streams>,
    path: &Path,
    pid: u32,
) -> Result<Vec<heapledger_store::SnapshotInfo>> {
    let named = |e: heapledger_store::StoreError| anyhow!("`{}` {e}", path.display());
    let all = match stream {
        Some(s) => s.store.snapshots().map_err(named)?,
        None => Store::open(path)
            .and_then(|s| s.snapshots())
            .map_err(named)?,
    };
    Ok(all.into_iter().filter(|s| s.pid == pid).collect())
}

/// The line that lists the shown process's snapshots, under a reader's
/// output.
pub fn snapshots_line(path: &Path, snapshots: &[heapledger_store::SnapshotInfo]) -> Option<String> {
    if snapshots.is_empty() {
        return None;
    }
    const SHOWN: usize = 8;
    let mut names: Vec<String> = snapshots
        .iter()
        .take(SHOWN)
        .map(|s| format!("{} ({:.1} s)", s.label, s.seconds))
        .collect();
    if snapshots.len() > SHOWN {
        names.push(format!("{} more", snapshots.len() - SHOWN));
    }
    Some(format!(
        "{} snapshot{} of this process in {}: {} (--snapshot LABEL shows one)",
        snapshots.len(),
        if snapshots.len() == 1 { "" } else { "s" },
        path.display(),
        names.join(", ")
    ))
}

fn first_bytes(path: &Path) -> Vec<u8> {
    use std::io::Read;
    // Only a regular file is opened (a FIFO would block); the JSON reader
    // says what else it is.
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return Vec::new();
    }
    let mut head = vec![0u8; 16];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .unwrap_or(0);
    head.truncate(n);
    head
}

/// The line that lists a store's other processes, under a reader's output.
pub fn others_line(path: &Path, others: &[ProcessInfo]) -> Option<String> {
    if others.is_empty() {
        return None;
    }
    const SHOWN: usize = 8;
    let mut names: Vec<String> = others
        .iter()
        .take(SHOWN)
        .map(|p| format!("{} ({})", p.exe, p.pid))
        .collect();
    if others.len() > SHOWN {
        names.push(format!("{} more", others.len() - SHOWN));
    }
    Some(format!(
        "{} other process{} in {}: {} (--pid PID shows one, --all all of them merged)",
        others.len(),
        if others.len() == 1 { "" } else { "es" },
        path.display(),
        names.join(", ")
    ))
}

/// Several processes' profiles as one: their stacks, leaks and threads
/// side by side (a frame that means something else in another process
/// gets an address of its own), their totals and peaks added up (the
/// processes' peaks need not have come at the same moment: their sum is
/// what they could have held at once).
///
/// The profiles may be whole, or heads without their stacks
/// (`Store::head`), which the reader then reads from the store: the answer
/// has, per profile, the addresses of its frames moved elsewhere (empty for
/// the first), for its stacks read afterwards.
pub fn merge(mut profiles: Vec<Profile>) -> (Profile, Vec<Remap>) {
    if profiles.len() <= 1 {
        let p = profiles
            .pop()
            .unwrap_or_else(|| Profile::new(heapledger_profile::Run::new("heapledger", "", "")));
        return (p, vec![Remap::new()]);
    }
    let mut rest = profiles.split_off(1);
    let mut base = profiles.pop().expect("one profile");
    let mut remaps = vec![Remap::new()];
    let mut stacks_count = base.stacks.count;
    let mut domains = base.domains;
    let mut strings = StringTable::from_strings(std::mem::take(&mut base.sites.strings));
    // Synthetic addresses for frames that clash, above any user address.
    let mut next_synthetic: u64 = 0xffff_8000_0000_0000;
    let count = rest.len() + 1;
    for p in rest.drain(..) {
        let s = |id: heapledger_profile::StringId| {
            p.sites
                .strings
                .get(id.index())
                .map_or(heapledger_profile::UNKNOWN, String::as_str)
        };
        let mut remap = Remap::new();
        for (a, e) in &p.sites.instr {
            let entry = InstrEntry {
                file: strings.intern(s(e.file)),
                function: strings.intern(s(e.function)),
                line: e.line,
                binary: strings.intern(s(e.binary)),
            };
            match base.sites.instr.get(a) {
                Some(have) if *have == entry => {}
                Some(_) => {
                    let new = Addr::native(next_synthetic);
                    next_synthetic += 1;
                    base.sites.instr.insert(new, entry);
                    remap.insert(*a, new);
                }
                None => {
                    base.sites.instr.insert(*a, entry);
                }
            }
        }
        let map = |a: &Addr| remap.get(a).copied().unwrap_or(*a);
        for mut st in p.stacks.stats {
            st.stack.iter_mut().for_each(|a| *a = map(a));
            base.stacks.stats.push(st);
        }
        for mut l in p.leaks {
            l.stack.iter_mut().for_each(|a| *a = map(a));
            base.leaks.push(l);
        }
        base.threads.extend(p.threads);
        stacks_count += p.stacks.count;
        add_domains(&mut domains, &p.domains);
        for (size, n) in p.mem_stats.size_map {
            *base.mem_stats.size_map.entry(size).or_default() += n;
        }
        base.mem_stats.realloc_jump.extend(p.mem_stats.realloc_jump);
        // Every binary's variables once (the processes share their lists).
        for (binary, vars) in p.mem_stats.global_variables {
            base.mem_stats
                .global_variables
                .entry(binary)
                .or_insert(vars);
        }
        base.run.runtime = base.run.runtime.max(p.run.runtime);
        if let (Some(b), Some(e)) = (base.heapledger.as_mut(), p.heapledger.as_ref()) {
            b.peak_requested += e.peak_requested;
            b.peak_rss += e.peak_rss;
            b.peak_virtual += e.peak_virtual;
            b.internal_memory += e.internal_memory;
            b.internal_memory_peak += e.internal_memory_peak;
            b.truncated_stacks += e.truncated_stacks;
            b.unrecorded_events += e.unrecorded_events;
            b.unknown_frees += e.unknown_frees;
            for (a, frames) in &e.inlined {
                let frames = frames
                    .iter()
                    .map(|f| heapledger_profile::InlineFrame {
                        function: strings.intern(s(f.function)),
                        file: strings.intern(s(f.file)),
                        line: f.line,
                    })
                    .collect();
                b.inlined.insert(map(a), frames);
            }
        }
        remaps.push(remap);
    }
    base.sites.strings = strings.into_strings();
    base.stacks.count = stacks_count;
    // Each process numbered its stacks from 1: numbered again, in the
    // order they are given (as a merge read from the store numbers them).
    let mut text = [0u8; 24];
    for (i, st) in base.stacks.stats.iter_mut().enumerate() {
        st.stack_id = Addr::native(i as u64 + 1).format_into(&mut text).to_owned();
    }
    base.leaks.sort_by_key(|l| std::cmp::Reverse(l.memory));
    base.run.command = format!(
        "{} processes merged, the first: {}",
        count, base.run.command
    );
    if let Some(e) = base.heapledger.as_mut() {
        e.runtime_leaks = Vec::new();
    }
    let runtime = heapledger_profile::runtime::classify_leaks(&base);
    if let Some(e) = base.heapledger.as_mut() {
        e.runtime_leaks = runtime;
    }
    let streamed = base.stacks.stats.is_empty() && base.compact.is_none();
    base.fill_malt_totals();
    if streamed {
        // The totals are the processes' own, added up (what filling them
        // from every stack gives).
        base.domains = domains;
    }
    (base, remaps)
}

/// Adds `b` to `a`, domain by domain.
fn add_domains(a: &mut heapledger_profile::Domains, b: &heapledger_profile::Domains) {
    for (x, y) in [
        (&mut a.counters, &b.counters),
        (&mut a.mem, &b.mem),
        (&mut a.local_peak, &b.local_peak),
        (&mut a.at_global_peak, &b.at_global_peak),
    ] {
        x.c += y.c;
        x.py_obj += y.py_obj;
        x.py_mem += y.py_mem;
        x.py_raw += y.py_raw;
        x.mmap += y.mmap;
    }
}

/// A small text file read whole (suppressions): only a regular file, of
/// at most `limit` bytes, in UTF-8; anything else is an error naming what
/// it is.
pub fn read_small_text(path: &Path, limit: u64) -> Result<String> {
    use std::io::Read;
    let m = std::fs::metadata(path).map_err(|e| anyhow!("cannot be read: {e}"))?;
    if !m.is_file() {
        bail!("is not a regular file");
    }
    if m.len() > limit {
        bail!("is larger than {limit} bytes");
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(limit + 1).read_to_end(&mut bytes))
        .map_err(|e| anyhow!("cannot be read: {e}"))?;
    if bytes.len() as u64 > limit {
        bail!("is larger than {limit} bytes");
    }
    String::from_utf8(bytes).map_err(|_| anyhow!("is not text (UTF-8)"))
}
