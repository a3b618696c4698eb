//! From a raw dump (addresses and counters) to a profile (MALT 1.6 JSON with
//! heapledger's key): symbolize, drop allocator-wrapper frames, fill MALT's
//! sections.

use heapledger_profile as mp;
use heapledger_profile::{Addr, InstrEntry, MapEntry, Profile, StackInfos, StringTable};
use heapledger_symbols::{MappedModule, Resolved};
use heapledger_wire::{AllocFn, Dump, Ending, StackCounters, ROOT};
use std::sync::{Arc, Mutex, OnceLock};
/// Maps keyed by addresses and stacks of addresses: no need for SipHash's
/// defence against chosen keys, and a Python start-up hashes 16 000 stacks
/// of 90 frames.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
type HashSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

/// What the CLI knows about the process that the dump does not.
#[derive(Clone, Debug, Default)]
pub struct ProcessEnd {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

/// Functions that only wrap the allocator: leading frames in them are not
/// part of the recorded call site (the call site is their caller).
fn is_wrapper(function: &str) -> bool {
    function.starts_with("operator new")
        || function.starts_with("operator delete")
        || function == "__libc_malloc"
        || function == "__libc_calloc"
}

fn mms(m: &heapledger_wire::MinMaxSum) -> mp::MinMaxSum {
    mp::MinMaxSum {
        count: m.count,
        min: m.min,
        max: m.max,
        sum: m.sum,
    }
}

fn merge_counters(a: &mut StackCounters, b: &StackCounters) {
    a.totals.merge(&b.totals);
    a.alive += b.alive;
    a.at_peak += b.at_peak;
    // Two stacks that became one: their maxima did not necessarily coincide.
    a.max_alive = a.max_alive.max(b.max_alive);
}

fn parse_maps(text: &str) -> Vec<MapEntry> {
    crate::maps::parse(text)
        .map(|m| MapEntry {
            lower: Addr::native(m.start),
            upper: Addr::native(m.end),
            offset: Addr::native(m.offset),
            aslr_offset: u64::MAX,
            file: m.path.to_owned(),
        })
        .collect()
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// MALT's variables of the object at `path`, made once per `heapledger`
/// process and shared by every profile that loads the object (a build's
/// compilers each load the same large libraries); a caller that asks for
/// an object another thread is reading (the symbolizing thread during the
/// run, or the conversion's helper thread, `Converter::convert`) waits for it.
pub fn globals_of(path: &str) -> Arc<Vec<mp::GlobalVariable>> {
    variables_of(path).list.clone()
}

/// An object's variables, and the store's row of them, made with them (on
/// the symbolizing thread while the program runs, where it can), so that
/// writing the store after the run only copies it.
pub struct Variables {
    pub list: Arc<Vec<mp::GlobalVariable>>,
    pub row: Option<Vec<u8>>,
}

type VariablesSlot = Arc<OnceLock<Arc<Variables>>>;

fn variables_slot(path: &str) -> VariablesSlot {
    static CACHE: OnceLock<Mutex<HashMap<String, VariablesSlot>>> = OnceLock::new();
    match CACHE.get_or_init(Default::default).lock() {
        Ok(mut c) => c.entry(path.to_owned()).or_default().clone(),
        Err(_) => VariablesSlot::default(),
    }
}

fn variables_of(path: &str) -> Arc<Variables> {
    variables_slot(path)
        .get_or_init(|| {
            let list = made_globals(path);
            let row = heapledger_store::encode_variables(path, &list).ok();
            Arc::new(Variables { list, row })
        })
        .clone()
}

/// The variables of `path` with their row, if they were made already.
pub fn variables_made(path: &str) -> Option<Arc<Variables>> {
    variables_slot(path).get().cloned()
}

/// The objects whose global and TLS variables a process's profile lists:
/// each it had loaded, but the recorder's own (as its frames are left out
/// of stacks), sorted.
pub fn global_paths(d: &Dump) -> Vec<&str> {
    let mut paths: Vec<&str> = d
        .modules
        .iter()
        .map(|m| m.path.as_str())
        .filter(|p| {
            !p.ends_with(crate::preload::PRELOAD_NAME) && !p.is_empty() && !p.starts_with('[')
        })
        .collect();
    paths.sort_unstable();
    paths.dedup();
    paths
}

fn made_globals(path: &str) -> Arc<Vec<mp::GlobalVariable>> {
    let vars = heapledger_symbols::globals::read_globals(std::path::Path::new(path));
    Arc::new(
        vars.into_iter()
            .map(|v| mp::GlobalVariable {
                symbol: v.symbol,
                name: v.name,
                size: v.size,
                offset: v.offset,
                sec_offset: v.section_offset,
                tls: v.tls,
                used_size: v.size,
                binary_file: path.to_owned(),
                source_file: v.file,
                line: v.line,
            })
            .collect(),
    )
}

fn meminfo(key: &str) -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// Builds the profile of one dumped process.
pub fn to_profile(
    d: &mut Dump,
    end: &ProcessEnd,
    symbols: &heapledger_symbols::Symbols,
) -> Profile {
    let mut p = to_compact_profile(d, end, symbols);
    p.expand_stacks();
    p
}

/// Stacks from which a process's conversion drops the parsed debug
/// information once its addresses are symbolized.
const FORGET_PARSED_STACKS: usize = 100_000;

/// [`to_profile`], its stacks left compact ([`Profile::compact`]): what
/// the profile store is written from.
pub fn to_compact_profile(
    d: &mut Dump,
    end: &ProcessEnd,
    symbols: &heapledger_symbols::Symbols,
) -> Profile {
    let modules: Vec<MappedModule> = d
        .modules
        .iter()
        .map(|m| MappedModule {
            path: m.path.clone().into(),
            start: m.start,
            end: m.end,
            file_offset: m.file_offset,
            build_id: (!m.build_id.is_empty()).then(|| m.build_id.clone()),
        })
        .collect();

    // Every distinct lookup address (return address minus one): the
    // dump's distinct frames (a Python start-up has 1.4 M frames but 3 000
    // distinct addresses), and those of the waits and the deepest stacks.
    let distinct: HashSet<u64> = d
        .tree
        .addrs
        .iter()
        .map(|f| f.wrapping_sub(1))
        .chain(
            d.waits
                .iter()
                .flat_map(|w| w.stack.iter().chain(&w.holder))
                .chain(d.stack_use.iter().flat_map(|u| &u.frames))
                .map(|f| f.wrapping_sub(1)),
        )
        .collect();
    let mut addrs: Vec<u64> = distinct.into_iter().collect();
    addrs.sort_unstable();
    let mut resolved: HashMap<u64, Resolved> = addrs
        .iter()
        .copied()
        .zip(symbols.symbolize(&modules, &addrs))
        .filter_map(|(a, r)| r.map(|r| (a, r)))
        .collect();
    // Code a JIT compiled lies in no binary: named from the perf map its
    // runtime wrote, where it wrote one (node --perf-basic-prof, python
    // -X perf, ...: `heapledger_symbols::perfmap`).
    let unresolved: Vec<u64> = addrs
        .iter()
        .copied()
        .filter(|a| !resolved.contains_key(a))
        .collect();
    resolved.extend(heapledger_symbols::perfmap::resolve(
        &heapledger_symbols::perfmap::path_of(d.pid),
        d.start_unix_ns,
        &unresolved,
    ));
    // Every address is symbolized: what was parsed for it goes before the
    // profile is built, where that is large (10 MB of libc's debug
    // information, at `run`'s peak on half a million stacks). A small
    // process keeps it for the next (`make` starting the same compiler a
    // hundred times).
    if d.stacks.len() >= FORGET_PARSED_STACKS {
        symbols.forget_parsed();
    }
    // Frames the program pushed with a label (`heapledger_push_label`).
    for (id, text) in &d.labels {
        resolved.insert(
            heapledger_wire::LABEL_FRAMES.wrapping_add(*id),
            label_frame(text),
        );
    }
    let outer_fn =
        |a: u64| -> Option<&str> { resolved.get(&a)?.frames.last()?.function.as_deref() };

    // Drop allocator-wrapper frames at the leaf, then merge stacks that
    // became equal. A stack is a node of the dump's tree of frames (return
    // addresses, 1 above the lookup addresses); dropping leaf frames moves
    // it up the tree. Nothing is copied.
    let tree = &d.tree;
    let frame_of = |n: u32| tree.frame(n);
    let parent_of = |n: u32| tree.parent[n as usize];
    // Addresses dropped as wrapper frames (a handful), which a kept frame
    // may repeat (the recorder's own are dropped everywhere).
    let mut dropped: HashSet<u64> = HashSet::default();
    let kept: Vec<u32> = d
        .stacks
        .iter()
        .map(|s| {
            let mut n = s.node;
            // Keep at least one frame when the whole stack is wrappers.
            while n != ROOT
                && parent_of(n) != ROOT
                && outer_fn(frame_of(n).wrapping_sub(1)).is_some_and(is_wrapper)
            {
                dropped.insert(frame_of(n).wrapping_sub(1));
                n = parent_of(n);
            }
            n
        })
        .collect();
    // The recorder's own frames inside a stack: a hook that calls into the
    // C library (`dlopen`, `dlclose`) sits between the program's call and
    // what the library allocates there. They are left out, as if the
    // program had called the library itself: the few stacks that hold one
    // get a node of their own (`added`, numbered after the dump's nodes),
    // the others stay where they are. The recorder's image is one span of
    // addresses (its segments are mapped together), and most programs
    // never have a frame in it, which the distinct addresses tell before
    // any stack is looked at.
    let own = d
        .modules
        .iter()
        .filter(|m| m.path.ends_with(crate::preload::PRELOAD_NAME))
        .map(|m| (m.start, m.end))
        .reduce(|(lo, hi), (s, e)| (lo.min(s), hi.max(e)))
        .filter(|&(lo, hi)| addrs.iter().any(|a| (lo..hi).contains(a)));
    let is_own = |f: u64| own.is_some_and(|(lo, hi)| f.wrapping_sub(1).wrapping_sub(lo) < hi - lo);
    let n_dump = tree.len() as u32;
    let mut added: Vec<(u32, u64)> = Vec::new();
    let mut rebuilt: HashMap<usize, u32> = HashMap::default();
    if own.is_some() {
        // Which nodes have an own frame on their path (a parent's number
        // is below its children's).
        let mut on_path = vec![false; tree.len()];
        for n in 1..tree.len() {
            on_path[n] = on_path[tree.parent[n] as usize] || is_own(frame_of(n as u32));
        }
        // A node's child by frame: the dump's nodes through lists of
        // siblings (8 bytes a node; a map of every node by parent and
        // frame took 100 MB for Python compiling its library, whose few
        // stacks through `dlopen` made it), the added ones through a map.
        let (mut first, mut next) = (vec![0u32; tree.len()], vec![0u32; tree.len()]);
        for n in (1..n_dump).rev() {
            next[n as usize] = first[parent_of(n) as usize];
            first[parent_of(n) as usize] = n;
        }
        let mut index: HashMap<(u32, u64), u32> = HashMap::default();
        let mut frames = Vec::new();
        for (i, &k) in kept.iter().enumerate() {
            if !on_path[k as usize] {
                continue;
            }
            tree.frames(k, &mut frames);
            let mut n = ROOT;
            for &f in frames.iter().rev().filter(|&&f| !is_own(f)) {
                let mut c = if n < n_dump { first[n as usize] } else { 0 };
                while c != 0 && frame_of(c) != f {
                    c = next[c as usize];
                }
                n = match c {
                    0 => *index.entry((n, f)).or_insert_with(|| {
                        added.push((n, f));
                        n_dump + added.len() as u32 - 1
                    }),
                    c => c,
                };
            }
            rebuilt.insert(i, n);
        }
    }
    let key_of = |i: usize| rebuilt.get(&i).copied().unwrap_or(kept[i]);
    let lost_frames = |i: usize| kept[i] != d.stacks[i].node || rebuilt.contains_key(&i);
    // Any node's parent and frame, the added ones' too.
    let node_parent = |n: u32| match n.checked_sub(n_dump) {
        Some(k) => added[k as usize].0,
        None => parent_of(n),
    };
    let node_frame = |n: u32| match n.checked_sub(n_dump) {
        Some(k) => added[k as usize].1,
        None => frame_of(n),
    };
    // The recorder stores each distinct stack once, so only a stack that
    // lost frames can become equal to another: only those, and the stacks
    // that end where one of them does, are looked up.
    let n = d.stacks.len();
    let lost_keys: HashSet<u32> = (0..n).filter(|&i| lost_frames(i)).map(key_of).collect();
    // Each stack of the profile: its node, the dump's stack whose counters
    // it has, and that stack's id. Stacks that became one sum their
    // counters in `sums` (rarely: only stacks that lost frames).
    // (16 bytes each: half a million stacks at `run`'s peak.)
    let mut merged: Vec<(u32, u32, u64)> = Vec::with_capacity(n);
    let mut sums: HashMap<usize, StackCounters> = HashMap::default();
    let mut index: HashMap<u32, usize> = HashMap::default();
    let max_id = d.stacks.iter().map(|s| s.id).max().unwrap_or(0);
    let mut id_map = crate::series::IdMap::new(max_id, n);
    for (i, s) in d.stacks.iter().enumerate() {
        let key = key_of(i);
        let mut add = || {
            merged.push((key, i as u32, s.id));
            merged.len() - 1
        };
        let at = if lost_keys.contains(&key) {
            *index.entry(key).or_insert_with(add)
        } else {
            add()
        };
        let first = merged[at].1 as usize;
        if first != i {
            let sum = sums.entry(at).or_insert_with(|| d.counters(first));
            merge_counters(sum, &d.counters(i));
        }
        id_map.insert(s.id, at);
    }
    drop(index);
    drop(kept);
    // What each thread allocated at each stack, by the threads' rows:
    // made before the stacks' counters are copied, so that the dump's rows
    // (14 MB for four threads over half a million stacks) go first.
    let thread_index: HashMap<u64, u32> = d
        .threads
        .iter()
        .enumerate()
        .filter(|(_, t)| t.merged == 0)
        .map(|(i, t)| (t.number, i as u32))
        .collect();
    // A thread's rows sorted, and a stack's added up (a thread that handed
    // its table over has several), one thread at a time as the dump gives
    // them: a map of every (thread, stack) took 80 MB and half a second
    // for four threads over half a million stacks, all the rows sorted at
    // once 48 MB.
    let mut thread_stacks = mp::ThreadStacks::default();
    thread_stacks.unkept = d.thread_stacks_unkept;
    let mut rows: Vec<(u32, u64, u64)> = Vec::new();
    let mut now: Option<u32> = None;
    let mut flush = |t: Option<u32>, rows: &mut Vec<(u32, u64, u64)>| {
        if let Some(t) = t {
            thread_stacks.push_thread_unsorted(t, rows);
        }
    };
    for (thread, id, count, bytes) in d.thread_stacks.iter() {
        let (Some(&t), Some(at)) = (thread_index.get(&thread), id_map.get(id)) else {
            continue;
        };
        if now != Some(t) {
            flush(now, &mut rows);
            now = Some(t);
        }
        rows.push((at as u32, count, bytes));
    }
    flush(now, &mut rows);
    drop(rows);
    d.thread_stacks.clear();
    let addr = |f: &u64| Addr::native(f.wrapping_sub(1));
    // The leaf of each stack that set a bucket's maximum in the timeline.
    let timeline_leaf: HashMap<u64, Addr> = d
        .timeline
        .iter()
        .flat_map(|(_, points)| points.iter().map(|p| p.high_stack))
        .filter_map(|id| {
            let node = merged[id_map.get(id)?].0;
            (node != ROOT).then(|| (id, addr(&node_frame(node))))
        })
        .collect();
    // The nodes the profile's stacks use, and their frames: each stack's
    // node, then, children before parents (a parent's number is below its
    // children's), the parents of those marked. (Walking each stack up
    // until a marked node missed the cache at every step; with this sweep
    // through the nodes in order and the fetches ahead below, converting
    // half a million stacks went from 0.28 s to 0.19.)
    let n_nodes = n_dump as usize + added.len();
    let mut used = vec![false; n_nodes];
    used[ROOT as usize] = true;
    for &(node, _, _) in &merged {
        used[node as usize] = true;
    }
    for m in (1..n_nodes as u32).rev() {
        if used[m as usize] {
            used[node_parent(m) as usize] = true;
        }
    }

    // Sites: interned strings, one instr entry per address still used: all
    // of them but the recorder's frames and the dropped wrapper frames that
    // no kept frame repeats. Those are looked for in every kept frame, most
    // of them outside the few addresses' span, which one comparison tells
    // (hashing each of Python's 1.3 M frames took 8 ms).
    if let (Some(&lo), Some(&hi)) = (dropped.iter().min(), dropped.iter().max()) {
        for m in (1..n_nodes as u32).filter(|&m| used[m as usize]) {
            let a = node_frame(m).wrapping_sub(1);
            if a.wrapping_sub(lo) <= hi - lo && dropped.remove(&a) && dropped.is_empty() {
                break;
            }
        }
    }
    let used_addrs: Vec<u64> = addrs
        .iter()
        .copied()
        .filter(|&a| !dropped.contains(&a) && !is_own(a.wrapping_add(1)))
        .collect();
    let mut strings = StringTable::new();
    let mut instr = indexmap::IndexMap::new();
    let mut inlined = indexmap::IndexMap::new();
    for a in &used_addrs {
        let Some(r) = resolved.get(a) else { continue };
        let binary_path = r.binary.to_string_lossy();
        let binary = strings.intern(&binary_path);
        let inner = &r.frames[0];
        // A frame without a function name is named by its address and
        // module, as every output names it (`Profile::frame_name`), so that
        // MALT's viewer too keeps unresolved frames apart, never `??`.
        let unnamed = || {
            let module = mp::basename(&binary_path);
            let module = if module.is_empty() { "??" } else { module };
            format!("{} ({module})", Addr::native(*a))
        };
        instr.insert(
            Addr::native(*a),
            InstrEntry {
                file: inner
                    .file
                    .as_deref()
                    .map_or(mp::StringId::UNKNOWN, |f| strings.intern(f)),
                function: match inner.function.as_deref() {
                    Some(f) => strings.intern(f),
                    None => strings.intern(&unnamed()),
                },
                line: inner.line,
                binary,
            },
        );
        if r.frames.len() > 1 {
            let outer: Vec<mp::InlineFrame> = r.frames[1..]
                .iter()
                .map(|f| mp::InlineFrame {
                    function: f
                        .function
                        .as_deref()
                        .map_or(mp::StringId::UNKNOWN, |s| strings.intern(s)),
                    file: f
                        .file
                        .as_deref()
                        .map_or(mp::StringId::UNKNOWN, |s| strings.intern(s)),
                    line: f.line,
                })
                .collect();
            inlined.insert(Addr::native(*a), outer);
        }
    }

    let exe_base = d.exe.rsplit('/').next().unwrap_or(&d.exe).to_owned();
    let mut run = mp::Run::new(
        format!("heapledger-{}", env!("CARGO_PKG_VERSION")),
        exe_base,
        shell_command(&d.cmdline),
    );
    run.date = crate::date::format_utc(d.start_unix_ns / 1_000_000_000);
    run.runtime = d.end_ticks.saturating_sub(d.start_ticks);
    // The object that defines the malloc the recorder forwarded to (a
    // preloaded jemalloc...); glibc's, for dumps that do not say.
    run.allocator = if d.allocator.is_empty() {
        d.modules
            .iter()
            .find(|m| m.path.contains("/libc.so"))
            .map(|m| m.path.clone())
            .unwrap_or_default()
    } else {
        d.allocator.clone()
    };
    run.hostname = hostname();
    let mut p = Profile::new(run);

    let mode = d.stack_mode.map_or("dwarf", |m| m.name());
    p.config.set("stack", "enabled", mode != "none");
    p.config.set("stack", "mode", mode);
    p.config.set("stack", "maxDepth", d.max_depth);
    p.config.set("output", "name", "heapledger");
    p.thread_stacks = thread_stacks;

    // The profile's tree: the nodes used, numbered in the same order (a
    // parent's number stays below its children's).
    let mut renumbered = vec![ROOT; n_nodes];
    let n_used = used.iter().filter(|&&u| u).count();
    let mut parent = Vec::with_capacity(n_used);
    let mut frame = Vec::with_capacity(n_used);
    parent.push(ROOT);
    frame.push(Addr::NULL);
    for m in 1..n_nodes as u32 {
        if used[m as usize] {
            renumbered[m as usize] = parent.len() as u32;
            parent.push(renumbered[node_parent(m) as usize]);
            frame.push(addr(&node_frame(m)));
        }
    }
    drop(used);
    // The dump's tree is the profile's now: it goes before the stacks'
    // counters are copied, at `run`'s peak (18 MB of half a million stacks).
    drop(std::mem::take(&mut d.tree));
    let mut compact = mp::CompactStacks::new(parent, frame);
    compact.reserve(merged.len(), d.counters_bytes());
    for (at, &(node, first, id)) in merged.iter().enumerate() {
        // The nodes' numbers lie in the tree's order, not the stacks':
        // fetched ahead.
        if let Some(&(ahead, _, _)) = merged.get(at + 8) {
            heapledger_profile::prefetch(renumbered.as_ptr().wrapping_add(ahead as usize));
        }
        let c = sums
            .get(&at)
            .copied()
            .unwrap_or_else(|| d.counters(first as usize));
        let infos = StackInfos {
            count_zeros: c.totals.zeros as i64,
            max_alive_req: c.max_alive as i64,
            alive_req: c.alive,
            alloc: mms(&c.totals.alloc),
            free: mms(&c.totals.free),
            mmap: mms(&c.totals.mmap),
            munmap: mms(&c.totals.munmap),
            lifetime: mms(&c.totals.lifetime),
            global_peak: c.at_peak,
            realloc_count: c.totals.realloc_count,
            realloc_sum_delta: c.totals.realloc_delta,
            temporary: c.totals.temporary,
        };
        compact.push(renumbered[node as usize], id, &infos);
    }
    // The dump's stacks are the profile's now: their memory goes before
    // the rest is built and the profile written, which reuse it.
    drop(renumbered);
    drop(merged);
    let mut merged_ats: Vec<usize> = sums.keys().copied().collect();
    merged_ats.sort_unstable();
    drop(sums);
    drop(added);
    drop(rebuilt);
    d.drop_stacks();
    p.series = crate::series::of(d, &id_map, &compact, &merged_ats);
    let frames_of = |at: usize| {
        let mut v = Vec::new();
        compact.stack(at, &mut v);
        v
    };

    // One leak entry per merged stack (recorded stacks that became one add up).
    let mut leak_of: HashMap<usize, usize> = HashMap::default();
    let mut leak_nodes: Vec<u32> = Vec::new();
    for l in &d.leaks {
        let Some(at) = id_map.get(l.stack) else {
            continue;
        };
        match leak_of.get(&at) {
            Some(&i) => {
                let x = &mut p.leaks[i];
                x.count += l.count;
                x.memory += l.bytes;
            }
            None => {
                leak_of.insert(at, p.leaks.len());
                leak_nodes.push(compact.node[at]);
                p.leaks.push(mp::Leak {
                    stack: frames_of(at),
                    count: l.count,
                    memory: l.bytes,
                });
            }
        }
    }
    // Largest first; then each block alive, in its leak's entry, by
    // address (the blocks of a merged stack in the entry of the merge).
    let mut order: Vec<usize> = (0..p.leaks.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(p.leaks[i].memory));
    let mut rank = vec![0u32; order.len()];
    for (to, &from) in order.iter().enumerate() {
        rank[from] = to as u32;
    }
    let mut leaks: Vec<Option<mp::Leak>> =
        std::mem::take(&mut p.leaks).into_iter().map(Some).collect();
    p.leaks = order
        .iter()
        .map(|&i| leaks[i].take().expect("each once"))
        .collect();
    let leak_nodes: Vec<u32> = order.iter().map(|&i| leak_nodes[i]).collect();
    let mut blocks: Vec<mp::LeakBlock> = d
        .leak_blocks
        .iter()
        .filter_map(|&(stack, ptr, size)| {
            let at = id_map.get(stack)?;
            let leak = rank[*leak_of.get(&at)?];
            Some(mp::LeakBlock { leak, ptr, size })
        })
        .collect();
    blocks.sort_unstable_by_key(|b| (b.leak, b.ptr));
    p.leak_blocks = mp::LeakBlocks {
        blocks,
        omitted: d.leak_blocks_omitted,
    };

    for t in &d.threads {
        let mut ts = mp::ThreadStats {
            cnt_mem_ops: t.mem_ops,
            merged_threads: t.merged,
            ..Default::default()
        };
        // Its deepest stack at an allocation: the bytes, and the frames of
        // that allocation. The frames' own sizes are not measured: MALT's
        // `mem` (the stack in use at each frame) holds the whole for each,
        // so that its per-function split reads 0 rather than a guess.
        let number = if t.merged > 0 { u64::MAX } else { t.number };
        if let Some(u) = d.stack_use.iter().find(|s| s.thread == number) {
            let bytes = u.bytes;
            // The stack with its wrapper frames dropped, as its counters';
            // one without counters (an enter/exit stack's deepest entry)
            // as written.
            let frames: Vec<Addr> = match id_map.get(u.stack) {
                Some(at) => frames_of(at),
                None => u.frames.iter().map(addr).collect(),
            };
            ts.stack_mem = mp::StackMem {
                size: bytes,
                mem: vec![bytes; frames.len().max(1)],
                stack: frames,
                total: bytes,
                timeprofiler: Default::default(),
            };
        }
        for f in AllocFn::ALL {
            let (count, sum, time) = t.stats[f as usize];
            if let Some(cs) = ts.stats.get_mut(f.name()) {
                cs.count = count;
                cs.sum = sum;
                cs.time = time;
            }
        }
        p.threads.push(ts);
    }

    for path in global_paths(d) {
        p.mem_stats
            .global_variables
            .insert(path.to_owned(), globals_of(path));
    }

    let mut sizes = d.sizes.clone();
    sizes.sort_unstable();
    p.mem_stats.size_map = sizes.into_iter().collect();
    let mut jumps = d.realloc_jumps.clone();
    jumps.sort_unstable();
    p.mem_stats.realloc_jump = jumps
        .into_iter()
        .map(|(o, n, c)| mp::ReallocJump {
            old_size: o,
            new_size: n,
            count: c,
        })
        .collect();

    p.globals = mp::Globals {
        ticks_per_second: d.ticks_per_second,
        total_memory: meminfo("MemTotal:"),
        free_memory_at_start: meminfo("MemFree:"),
        cached_memory_at_start: meminfo("Cached:"),
        max_thread_count: d.globals.max_threads,
    };

    p.sites.map = parse_maps(&d.maps);
    p.sites.strings = strings.into_strings();
    p.sites.instr = instr;
    p.stacks.count = compact.len() as u64;
    compact.leaks = leak_nodes;
    p.compact = Some(compact);

    let mut ext = mp::HeapledgerExt::new(mode, d.max_depth);
    ext.truncated_stacks = d.globals.truncated_stacks;
    ext.sample_every = (d.sample_every > 0).then_some(d.sample_every);
    // Sampled blocks (`--sample-every`), and `--stack none`'s, are timed
    // alike: all or none.
    ext.lifetimes_sampled_after = (d.lifetime_head != u64::MAX
        && d.sample_every == 0
        && d.stack_mode != Some(heapledger_wire::StackMode::None))
    .then_some(d.lifetime_head);
    ext.internal_memory = d.globals.internal_memory;
    ext.internal_memory_peak = d.globals.internal_peak;
    ext.peak_requested = d.globals.peak_requested;
    ext.peak_rss = d.peak_rss;
    ext.peak_virtual = d.peak_virtual;
    p.scatter = scatter_of(&d.scatter);
    if let Some((step_ns, points)) = &d.timeline {
        let (timeline, low) = timeline_of(d, *step_ns, points, &timeline_leaf);
        // The kernel's high-water marks, or the timeline's readings where
        // they are higher (VmHWM is updated lazily).
        ext.peak_rss = ext
            .peak_rss
            .max(timeline.memory_timeline.peak[mp::timeline::memory::PHYSICAL]);
        ext.peak_virtual = ext
            .peak_virtual
            .max(timeline.memory_timeline.peak[mp::timeline::memory::VIRTUAL]);
        p.timeline = timeline;
        ext.timeline_low_requested = low;
    }
    ext.peak_time = d.globals.peak_ticks;
    ext.pid = d.pid;
    ext.ppid = d.ppid;
    ext.exit = match (end.code, end.signal, d.ending) {
        // What `waitpid` said (the main process) stands; a child's is
        // what its recorder saw.
        (None, None, Some(Ending::Exited(code))) => mp::ExitInfo {
            code: Some(code),
            signal: None,
        },
        (None, None, Some(Ending::Signal(sig))) => mp::ExitInfo {
            code: None,
            signal: Some(sig),
        },
        _ => mp::ExitInfo {
            code: end.code,
            signal: end.signal,
        },
    };
    if let Some(f) = &d.forked {
        ext.forked_from = Some(f.parent);
        ext.inherited = Some(mp::Inherited {
            freed: f.inherited_freed,
            freed_bytes: f.inherited_freed_bytes,
            alive: f.inherited_alive,
            alive_bytes: f.inherited_alive_bytes,
        });
    }
    ext.modules = d
        .modules
        .iter()
        .map(|m| mp::ModuleInfo {
            path: m.path.clone(),
            build_id: (!m.build_id.is_empty())
                .then(|| m.build_id.iter().map(|b| format!("{b:02x}")).collect()),
            lower: Addr::native(m.start),
            upper: Addr::native(m.end),
            file_offset: Addr::native(m.file_offset),
        })
        .collect();
    ext.inlined = inlined;
    ext.unrecorded_events = d.globals.unrecorded_events;
    ext.unknown_frees = d.globals.unknown_frees;
    ext.unhooked = (!d.unhooked.is_empty()).then(|| mp::Unhooked {
        functions: d.unhooked.clone(),
        by: if d.unhooked_by.is_empty() {
            d.exe.clone()
        } else {
            d.unhooked_by.clone()
        },
    });
    ext.degraded = d.degraded.as_ref().map(degraded);
    ext.checkpoint = d.checkpoint.map(|c| mp::CheckpointInfo {
        seq: c.seq,
        time: c.ticks.saturating_sub(d.start_ticks),
    });
    ext.snapshot = d.snapshot.clone();
    ext.time_lost = time_lost(d, &|f: u64| is_own(f));
    ext.reset = d.reset.map(|r| mp::ResetInfo {
        count: r.count,
        time: r.ticks.saturating_sub(d.start_ticks),
        older_alive: r.older_alive,
        older_alive_bytes: r.older_alive_bytes,
        older_freed: r.older_freed,
        older_freed_bytes: r.older_freed_bytes,
    });
    p.heapledger = Some(ext);
    p.heapledger.as_mut().unwrap().runtime_leaks = mp::runtime::classify_leaks(&p);
    p.fill_malt_totals();
    p
}

/// The profile's account of how the recorder degraded (`Tag::Degraded`).
/// The threads' logs of time lost, longest first; frames of the recorder's
/// own (its wait hooks' trampolines) left out, as in every stack.
fn time_lost(d: &Dump, is_own: &dyn Fn(u64) -> bool) -> Vec<mp::TimeLost> {
    let frames = |v: &[u64]| -> Vec<Addr> {
        v.iter()
            .filter(|&&f| !is_own(f))
            .map(|f| Addr::native(f.wrapping_sub(1)))
            .collect()
    };
    let mut v: Vec<mp::TimeLost> = d
        .waits
        .iter()
        .map(|w| mp::TimeLost {
            thread: (w.thread != u64::MAX).then_some(w.thread),
            kind: mp::WaitKind::from_code(w.kind),
            label: d
                .wait_kinds
                .iter()
                .find(|(code, _)| *code == w.kind)
                .map(|(_, name)| name.clone()),
            count: w.count,
            total_ns: w.total_ns,
            max_ns: w.max_ns,
            stack: frames(&w.stack),
            holder: frames(&w.holder),
        })
        .collect();
    v.sort_by_key(|w| std::cmp::Reverse(w.total_ns));
    v
}

fn degraded(d: &heapledger_wire::Degraded) -> mp::Degraded {
    use heapledger_wire::DegradeCause;
    let step = |cause: u64, time: u64| {
        let cause = match DegradeCause::from_u64(cause)? {
            DegradeCause::RecorderMemory => mp::degrade_cause::RECORDER_MEMORY,
            DegradeCause::ProgramMemory => mp::degrade_cause::PROGRAM_MEMORY,
        };
        Some(mp::DegradeStep {
            time,
            cause: cause.to_owned(),
        })
    };
    mp::Degraded {
        stacks_stopped: step(d.stacks_cause, d.stacks_ticks),
        recording_stopped: step(d.stopped_cause, d.stopped_ticks),
        allocations_without_stack: d.allocs_without_stack,
        calls_not_recorded: d.calls_not_recorded,
        released_bytes: d.released_bytes,
    }
}

/// The command line as a shell would take it back: each argument as is
/// when it holds nothing a shell reads specially, else in single quotes
/// (an empty one too, which a plain join would lose).
fn shell_command(args: &[String]) -> String {
    let plain = |a: &str| {
        !a.is_empty()
            && a.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
    };
    args.iter()
        .map(|a| {
            if plain(a) {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// MALT's three series from the recorder's buckets (`Tag::Timeline`), and
/// the lowest requested bytes of each bucket. A bucket the recorder's
/// thread did not reach (a program that kept it from running) repeats the
/// readings before it, with no allocation or free in it.
fn timeline_of(
    d: &Dump,
    step_ns: u64,
    points: &[heapledger_wire::TimelinePoint],
    leaf: &HashMap<u64, Addr>,
) -> (mp::Timeline, Vec<u64>) {
    use mp::timeline::{bandwidth, memory, system};
    let mut t = mp::Timeline::empty();
    let per = ((step_ns as u128 * d.ticks_per_second.max(1) as u128) / 1_000_000_000).max(1) as u64;
    for s in [
        &mut t.memory_timeline,
        &mut t.system_timeline,
        &mut t.memory_bandwidth,
    ] {
        s.start = d.start_ticks;
        s.per_points = per;
    }
    let mut low = Vec::with_capacity(points.len());
    // Buckets before the first the recorder's thread reached (it starts
    // a moment after the program) read as that first one, at its lowest.
    let mut last = points
        .iter()
        .find(|p| p.touched)
        .map(|p| heapledger_wire::TimelinePoint { high: p.low, ..*p })
        .unwrap_or_default();
    for p in points {
        let (cur, moved) = if p.touched {
            last = *p;
            (*p, true)
        } else {
            (last, false)
        };
        let mut m = vec![0; memory::FIELDS.len()];
        m[memory::REQUESTED] = cur.high;
        m[memory::PHYSICAL] = cur.rss;
        m[memory::VIRTUAL] = cur.vsz;
        m[memory::INTERNAL] = cur.internal;
        m[memory::SEGMENTS] = cur.blocks;
        let site = if moved {
            leaf.get(&cur.high_stack).copied().unwrap_or(Addr::NULL)
        } else {
            Addr::NULL
        };
        t.memory_timeline.values.push(m);
        t.memory_timeline.callsite.push(site);
        low.push(if moved { cur.low } else { cur.high });
        let mut s = vec![0; system::FIELDS.len()];
        s[system::FREE] = cur.sys_free;
        s[system::SWAP] = cur.sys_swap;
        s[system::CACHED] = cur.sys_cached;
        t.system_timeline.values.push(s);
        t.system_timeline.callsite.push(Addr::NULL);
        let mut b = vec![0; bandwidth::FIELDS.len()];
        if moved {
            b[bandwidth::ALLOC_COUNT] = cur.allocs;
            b[bandwidth::ALLOC_MEM] = cur.alloc_bytes;
            b[bandwidth::FREE_COUNT] = cur.frees;
            b[bandwidth::FREE_MEM] = cur.free_bytes;
        }
        t.memory_bandwidth.values.push(b);
        t.memory_bandwidth.callsite.push(Addr::NULL);
    }
    for s in [
        &mut t.memory_timeline,
        &mut t.system_timeline,
        &mut t.memory_bandwidth,
    ] {
        let mut peak = vec![0u64; s.fields.len()];
        for v in &s.values {
            for (p, x) in peak.iter_mut().zip(v) {
                *p = (*p).max(*x);
            }
        }
        s.peak = peak;
    }
    (t, low)
}

/// MALT's scatter from the recorder's cells (`Tag::Scatter`; see the
/// preload's `thread/scatter.rs`): each point at the lower bound of its cell
/// (a power of two for sizes and lifetimes; for time, the cell's start in
/// ticks, after the cells of every fineness are merged into the coarsest
/// one the run needed, at most 64 across the run).
fn scatter_of(cells: &[Vec<(u64, u64, u64)>; 2]) -> mp::Scatter {
    let low = |cell: u64| {
        if cell == 0 {
            0
        } else {
            1u64 << (cell - 1).min(63)
        }
    };
    let top = |cell: u64| 1u64 << cell.min(63);
    let mut s = mp::Scatter::empty();
    // Allocations by time and size.
    let shift = cells[0].iter().map(|c| c.0 >> 8).max().unwrap_or(0);
    let mut by: std::collections::BTreeMap<(u64, u64), u64> = Default::default();
    for &(key, size, n) in &cells[0] {
        let (s_own, cell) = (key >> 8, key & 0xff);
        let t = (cell << s_own.min(63)) >> shift.min(63);
        *by.entry((t, size)).or_default() += n;
    }
    let chart = &mut s.size_over_time;
    chart.infos.x_axis.max = 64u64 << shift.min(57);
    chart.infos.y_axis.max = top(by.keys().map(|k| k.1).max().unwrap_or(0));
    chart.points = by
        .into_iter()
        .map(|((t, size), v)| mp::ScatterPoint {
            x: t << shift.min(63),
            y: low(size),
            v,
        })
        .collect();
    // Freed blocks by size and lifetime.
    let mut by: std::collections::BTreeMap<(u64, u64), u64> = Default::default();
    for &(size, life, n) in &cells[1] {
        *by.entry((size, life)).or_default() += n;
    }
    let chart = &mut s.lifetime_over_size;
    chart.infos.x_axis.max = top(by.keys().map(|k| k.0).max().unwrap_or(0));
    chart.infos.y_axis.max = top(by.keys().map(|k| k.1).max().unwrap_or(0));
    chart.points = by
        .into_iter()
        .map(|((size, life), v)| mp::ScatterPoint {
            x: low(size),
            y: low(life),
            v,
        })
        .collect();
    s
}

/// A frame the program labelled: `FILE:LINE in FUNCTION` read as such
/// (an interpreter's frames), any other label as a function's name; its
/// binary `[pushed]`.
fn label_frame(text: &str) -> Resolved {
    let parsed = text.split_once(" in ").and_then(|(at, function)| {
        let (file, line) = at.rsplit_once(':')?;
        let line: u32 = line.parse().ok()?;
        Some(heapledger_symbols::Frame {
            function: Some(function.to_owned()),
            file: Some(file.to_owned()),
            line: Some(line),
        })
    });
    Resolved {
        binary: std::path::PathBuf::from("[pushed]"),
        frames: vec![parsed.unwrap_or_else(|| heapledger_symbols::Frame {
            function: Some(text.to_owned()),
            file: None,
            line: None,
        })],
    }
}

#[cfg(test)]
mod tests {
    use super::shell_command;

    #[test]
    fn command_lines_are_quoted_as_a_shell_reads_them() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            shell_command(&args(&["./prog", "-x", "a=b"])),
            "./prog -x a=b"
        );
        assert_eq!(
            shell_command(&args(&["./prog", "", "a b", "it's", "$HOME"])),
            "./prog '' 'a b' 'it'\\''s' '$HOME'"
        );
    }

    #[test]
    fn labels_read_as_file_line_and_function() {
        let f = &super::label_frame("lib/app.py:12 in build").frames[0];
        assert_eq!(
            (f.function.as_deref(), f.file.as_deref(), f.line),
            (Some("build"), Some("lib/app.py"), Some(12))
        );
        let f = &super::label_frame("parse header").frames[0];
        assert_eq!(
            (f.function.as_deref(), f.file.as_deref(), f.line),
            (Some("parse header"), None, None)
        );
        let f = &super::label_frame("x:y in z").frames[0];
        assert_eq!(f.function.as_deref(), Some("x:y in z"));
    }
}
