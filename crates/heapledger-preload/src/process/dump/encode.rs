//! What the dump holds: the header, modules, maps, stacks and their
//! counters, threads, histograms, the live blocks, and the process's totals.

use super::file::FileSink;
use crate::base::clock::{self, now_ns};
use crate::base::{arena, config, degrade, phase};
use crate::data::counters;
use crate::data::counters::{Full, Histogram, SizeHistogram, StackMap, PEAK_TICKS, UNRECORDED};
use crate::data::stackmap::Packed;
use crate::data::{live, modules, stacks};
use crate::process::unhooked;
use crate::thread::state;
use alloc::vec;
use alloc::vec::Vec;
use core::sync::atomic::Ordering;
use heapledger_wire::{Checkpoint, Encoder, Globals, StackCounters, Tag, TimelinePoint, VERSION};

fn read_file(path: &core::ffi::CStr) -> Vec<u8> {
    let mut out = Vec::new();
    // SAFETY: a NUL-terminated path; the buffer is writable for its length.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return out;
        }
        let mut buf = [0u8; 8192];
        loop {
            let n = libc::read(fd, buf.as_mut_ptr() as *mut _, buf.len());
            if n <= 0 {
                break;
            }
            // Out of memory (see `base::degrade`): the file is cut there.
            if out.try_reserve(n as usize).is_err() {
                break;
            }
            out.extend_from_slice(&buf[..n as usize]);
        }
        libc::close(fd);
    }
    out
}

/// A file of this process in /proc, read through the calling thread's
/// directory first: where the main thread has ended (`pthread_exit` in
/// `main`, the process living on in other threads), `/proc/self/` shows an
/// empty command line, no executable and no mappings.
pub(super) fn read_proc(thread: &core::ffi::CStr, process: &core::ffi::CStr) -> Vec<u8> {
    let v = read_file(thread);
    if v.is_empty() {
        read_file(process)
    } else {
        v
    }
}

fn exe() -> Vec<u8> {
    let mut buf = vec![0u8; 4096];
    for path in [c"/proc/thread-self/exe", c"/proc/self/exe"] {
        // SAFETY: buf is writable for its length.
        let n = unsafe { libc::readlink(path.as_ptr(), buf.as_mut_ptr() as *mut _, buf.len()) };
        if n > 0 {
            buf.truncate(n as usize);
            return buf;
        }
    }
    Vec::new()
}

pub(super) fn encode(e: &mut Encoder<FileSink>) {
    let start_ticks = preamble(e, clock::ticks(), None);
    // Every thread's counters: the largest table is read in place, the
    // others merged beside it (a copy of them all would double the
    // recorder's memory for a program of many stacks).
    let epoch = counters::peak();
    let g = state::with_states(|states| {
        let base = (0..states.len()).max_by_key(|&i| states[i].stacks.len());
        let g = gather(states, epoch, base);
        write_stacks(e, &Sources::new(states, base, &g), epoch, &mut |_, _| {});
        super::per_thread::write(e, states);
        g
    });
    let (leaks, alive_total) = leaks();
    let max_threads = state::REGISTRY
        .try_lock_for(1000)
        .map_or(0, |r| r.max_alive);
    let totals = Totals {
        epoch,
        peak_ticks: PEAK_TICKS.load(Ordering::Relaxed),
        alive_total,
        max_threads,
        unrecorded: UNRECORDED.load(Ordering::Relaxed),
    };
    rest(e, g, &leaks, &totals, start_ticks, true);
}

/// The process's numbers beside the stacks' (see `Globals`).
pub(super) struct Totals {
    pub(super) epoch: u64,
    pub(super) peak_ticks: u64,
    pub(super) alive_total: u64,
    pub(super) max_threads: u64,
    pub(super) unrecorded: u64,
}

/// The header (with `ckpt` after it, for a checkpoint), the modules, the
/// maps and the allocator functions found elsewhere; the start ticks.
pub(super) fn preamble(e: &mut Encoder<FileSink>, end_ticks: u64, ckpt: Option<Checkpoint>) -> u64 {
    let cfg = config::get();
    let end_ns = now_ns();
    let start_ticks = phase::START_TICKS.load(Ordering::Relaxed);
    let start_ns = phase::START_NS.load(Ordering::Relaxed);
    let elapsed_ns = end_ns.saturating_sub(start_ns).max(1);
    let tps = ((end_ticks.saturating_sub(start_ticks)) as u128 * 1_000_000_000 / elapsed_ns as u128)
        as u64;
    let wall_start = clock::ns(libc::CLOCK_REALTIME).saturating_sub(elapsed_ns);

    e.tag(Tag::Header);
    let (pid, ppid) = (phase::pid(), phase::ppid());
    for v in [
        VERSION,
        pid as u64,
        ppid as u64,
        cfg.stack_mode as u64,
        cfg.max_depth as u64,
        cfg.sample_every,
        cfg.lifetime_head,
        tps,
        start_ticks,
        end_ticks,
        wall_start,
    ] {
        e.u(v);
    }
    e.bytes(&exe());
    e.bytes(&read_proc(
        c"/proc/thread-self/cmdline",
        c"/proc/self/cmdline",
    ));
    if let Some(c) = ckpt {
        e.checkpoint(&c);
    }

    if let Some(seen) = modules::SEEN.try_lock_for(1000) {
        for m in seen.iter() {
            e.tag(Tag::Module);
            e.u(m.start);
            e.u(m.end);
            e.u(m.file_offset);
            e.bytes(m.path.as_bytes());
            e.bytes(&m.build_id);
        }
    }
    e.tag(Tag::Maps);
    e.bytes(&read_proc(c"/proc/thread-self/maps", c"/proc/self/maps"));
    if let Some((names, by)) = unhooked::unhooked() {
        let mut list = Vec::new();
        for n in names {
            list.extend_from_slice(n);
            list.push(0);
        }
        e.tag(Tag::Unhooked);
        e.bytes(&list);
        e.bytes(by);
    }
    start_ticks
}

/// Blocks still alive, grouped by stack (count, bytes; empty without
/// memory for them), and their bytes in all.
pub(super) fn leaks() -> (Vec<(u64, u64)>, u64) {
    let n = stacks::count() as usize;
    let mut leaks: Vec<(u64, u64)> = Vec::new();
    if leaks.try_reserve_exact(n).is_ok() {
        leaks.resize(n, (0, 0));
    }
    let mut alive_total = 0u64;
    live::for_each_block(|b| {
        if let Some(l) = leaks.get_mut(b.stack as usize) {
            l.0 += 1;
            l.1 += b.size;
        }
        alive_total += b.size;
    });
    (leaks, alive_total)
}

/// Threads, histograms, leaks, what the dump says of the process, its
/// totals, and the end.
pub(super) fn rest(
    e: &mut Encoder<FileSink>,
    g: Gathered,
    leaks: &[(u64, u64)],
    t: &Totals,
    start_ticks: u64,
    blocks: bool,
) {
    let Gathered {
        mut threads,
        folded,
        sizes,
        jumps,
        size_time,
        life_size,
        stack_peaks,
        unknown_frees,
        truncated,
        waits: g_waits,
        ..
    } = g;
    threads.sort_by_key(|t| t.0);
    if let Some(kinds) = crate::data::timelog::USER_KINDS.try_lock_for(1000) {
        for (i, name) in kinds.iter().enumerate() {
            e.tag(Tag::WaitKind);
            e.u(crate::data::timelog::USER_KIND as u64 + i as u64);
            e.bytes(name.as_bytes());
        }
    }
    crate::data::traceback::each_label(|id, text| {
        e.tag(Tag::Label);
        e.u(id);
        e.bytes(text.as_bytes());
    });
    for (thread, w) in &g_waits {
        let frames = |id: u32| -> Vec<u64> {
            let mut v = Vec::new();
            if id != crate::data::timelog::NONE && id < stacks::count() {
                stacks::frames(stacks::entry(id)).copy_to(&mut v);
            }
            v
        };
        e.wait(
            [*thread, w.key.kind as u64, w.count, w.total_ns, w.max_ns],
            &frames(w.key.stack),
            &frames(w.key.other),
        );
    }
    let rows = threads.iter().map(|r| (Tag::Thread, r));
    for (tag, (first, ops, stats)) in rows.chain(folded.iter().map(|r| (Tag::EndedThreads, r))) {
        e.tag(tag);
        e.u(*first);
        e.u(*ops);
        for (c, s, t) in stats {
            e.u(*c);
            e.u(*s);
            e.u(*t);
        }
    }
    for (size, c) in sizes.iter() {
        e.tag(Tag::Size);
        e.u(size);
        e.u(c);
    }
    for &(number, bytes, id) in &stack_peaks {
        let mut frames = Vec::new();
        if id < stacks::count() as u64 {
            stacks::frames(stacks::entry(id as u32)).copy_to(&mut frames);
        }
        e.stack_use(number, bytes, id, &frames);
    }
    for (which, h) in [&size_time, &life_size].into_iter().enumerate() {
        e.scatter(which as u64, h.keys_held(), h.iter());
    }
    for ((old, new), c) in jumps.iter() {
        e.tag(Tag::ReallocJump);
        e.u(old);
        e.u(new);
        e.u(c);
    }
    for (id, &(c, b)) in leaks.iter().enumerate() {
        if c > 0 {
            e.tag(Tag::Leak);
            e.u(id as u64);
            e.u(c);
            e.u(b);
        }
    }
    if blocks {
        leak_blocks(e);
    }
    super::about::encode(e);
    timeline(e);
    e.globals(&Globals {
        peak_requested: t.epoch,
        peak_ticks: t.peak_ticks.saturating_sub(start_ticks),
        alive_requested: t.alive_total,
        internal_memory: arena::INTERNAL_BYTES.load(Ordering::Relaxed),
        internal_peak: arena::INTERNAL_PEAK.load(Ordering::Relaxed),
        max_threads: t.max_threads,
        truncated_stacks: truncated,
        unrecorded_events: t.unrecorded,
        unknown_frees,
        dropped_histogram_entries: sizes.large.dropped + jumps.dropped,
    });
    if let Some(d) = degrade::report(start_ticks) {
        e.degraded(&d);
    }
    e.tag(Tag::End);
}

/// Blocks alive at the end written one by one, for `heapledger leaks
/// --each` (their pointers): at most this many.
const LEAK_BLOCKS: u64 = 1 << 20;

/// Each block alive, as the live table holds it (stack, address, size),
/// written straight from the table (a final dump only: a checkpoint,
/// taken while the threads wait, writes the counts per stack alone).
fn leak_blocks(e: &mut Encoder<FileSink>) {
    let mut n = 0u64;
    live::for_each_block(|b| {
        if n < LEAK_BLOCKS {
            e.tag(Tag::LeakBlock);
            e.u(b.stack as u64);
            e.u(b.addr);
            e.u(b.size);
        }
        n += 1;
    });
    if n > LEAK_BLOCKS {
        e.tag(Tag::LeakBlocksOmitted);
        e.u(n - LEAK_BLOCKS);
    }
}

/// The timeline's buckets so far (`data::timeline`).
fn timeline(e: &mut Encoder<FileSink>) {
    let Some(s) = crate::data::timeline::SERIES.try_lock_for(1000) else {
        return;
    };
    let mut points: Vec<TimelinePoint> = Vec::new();
    let used = s.used();
    if points.try_reserve_exact(used.len()).is_err() {
        return;
    }
    points.extend_from_slice(used);
    let step = s.step_ns;
    drop(s);
    e.timeline(step, &points);
}

/// (thread number, memory operations, per-function (count, sum, ticks))
type ThreadRow = (u64, u64, [(u64, u64, u64); 9]);

/// What the dump takes from the thread states.
pub(super) struct Gathered {
    /// Counters of the stacks, merged from the states but the one left to
    /// be read in place.
    pub(super) merged: StackMap,
    pub(super) sizes: SizeHistogram,
    pub(super) jumps: Histogram,
    pub(super) size_time: Histogram,
    pub(super) life_size: Histogram,
    /// (thread number, u64::MAX for the ended threads' row; the most of
    /// its stack in use; the stack id of that allocation)
    pub(super) stack_peaks: Vec<(u64, u64, u64)>,
    pub(super) unknown_frees: u64,
    pub(super) truncated: u64,
    pub(super) threads: Vec<ThreadRow>,
    /// (threads merged, memory operations, per function) of state::FOLDED
    pub(super) folded: Option<ThreadRow>,
    /// Each thread's log of time lost waiting (thread number, u64::MAX for
    /// the ended threads' row; an entry).
    pub(super) waits: Vec<(u64, crate::data::timelog::Entry)>,
}

/// Merges the states' counters (those of `states[skip]`'s stacks left
/// out: the caller reads them in place).
pub(super) fn gather(states: &[&state::ThreadState], epoch: u64, skip: Option<usize>) -> Gathered {
    let mut g = Gathered {
        merged: StackMap::new(),
        sizes: SizeHistogram::new(),
        jumps: Histogram::new(),
        size_time: Histogram::new(),
        life_size: Histogram::new(),
        stack_peaks: Vec::new(),
        unknown_frees: 0,
        truncated: 0,
        threads: Vec::new(),
        folded: None,
        waits: Vec::new(),
    };
    for (i, s) in states.iter().enumerate() {
        if Some(i) != skip && !s.stacks.is_empty() {
            for (id, at) in s.stacks.iter() {
                // (Without memory, the rest is lost: recording stopped.)
                g.merged.absorb(id, &s.stacks.full(at), epoch);
            }
        }
        g.sizes.absorb(&s.sizes);
        g.jumps.absorb(&s.jumps);
        g.size_time.absorb(&s.size_time);
        g.life_size.absorb(&s.life_size);
        g.unknown_frees += s.unknown_frees;
        g.truncated += s.truncated;
        if s.number < state::SPARE || s.number == state::FOLDED {
            let number = if s.number == state::FOLDED {
                u64::MAX
            } else {
                s.number
            };
            if s.stack_peak > 0 && g.stack_peaks.try_reserve(1).is_ok() {
                g.stack_peaks
                    .push((number, s.stack_peak, s.stack_peak_id as u64));
            }
        }
        if let (Some(w), true) = (
            &s.waits,
            s.number < state::SPARE || s.number == state::FOLDED,
        ) {
            let number = if s.number == state::FOLDED {
                u64::MAX
            } else {
                s.number
            };
            for entry in w.all() {
                if g.waits.try_reserve(1).is_ok() {
                    g.waits.push((number, entry));
                }
            }
        }
        if s.number < state::SPARE {
            let (ops, stats) = s.totals();
            if g.threads.try_reserve(1).is_ok() {
                g.threads.push((s.number, ops, stats));
            }
        } else if s.number == state::FOLDED {
            g.folded = Some((s.merged, s.mem_ops, s.stats));
        }
    }
    g
}

/// Where the stacks' counters are: the largest thread's table, read in
/// place; the other threads' merged (`Gathered::merged`); and the retired
/// state's packed rows (the threads that ended and the tables handed over).
pub(super) struct Sources<'a> {
    maps: [Option<&'a StackMap>; 2],
    packed: Option<&'a Packed>,
}

impl<'a> Sources<'a> {
    /// The sources of `states`, `base` the one whose table `g` left out.
    pub(super) fn new(
        states: &[&'a state::ThreadState],
        base: Option<usize>,
        g: &'a Gathered,
    ) -> Self {
        Sources {
            maps: [base.map(|i| &states[i].stacks), Some(&g.merged)],
            packed: states
                .iter()
                .find(|s| s.number == state::RETIRED)
                .map(|s| &s.packed),
        }
    }
}

/// Writes every stack with counters (see [`each_stack`]), each against the
/// one before (they share outer frames). `see` is shown each stack's
/// counters as written.
pub(super) fn write_stacks(
    e: &mut Encoder<FileSink>,
    src: &Sources,
    epoch: u64,
    see: &mut dyn FnMut(u32, &StackCounters),
) {
    // This stack's frames and the one's before it, each as one slice.
    let (mut cur, mut prev): (Vec<u64>, Vec<u64>) = (Vec::new(), Vec::new());
    each_stack(src, epoch, &mut |id, c| {
        stacks::frames(stacks::entry(id)).copy_to(&mut cur);
        e.stack(id as u64, &cur, &prev);
        core::mem::swap(&mut cur, &mut prev);
        e.stack_counters(id as u64, c);
        see(id, c);
    });
}

/// Every stack with counters, its counters summed over `maps`, in order of
/// id but the empty stack's, which comes last: its share at the peak is
/// the peak less every other stack's (its blocks do not track it, see
/// `hooks::alloc::stackless`), and its highest bytes alive at least that
/// share and what it holds now (with `--stack none`, the peak).
pub(super) fn each_stack(src: &Sources, epoch: u64, f: &mut dyn FnMut(u32, &StackCounters)) {
    let mut others: i64 = 0;
    let mut empty: Option<Full> = None;
    let mut next = [0; 2];
    let mut packed = src.packed.map(|p| p.cursor());
    for id in 0..stacks::count() {
        let mut sum: Option<Full> = packed.as_mut().and_then(|c| c.take(id, epoch));
        for (m, next) in src.maps.iter().zip(next.iter_mut()) {
            let Some(m) = m else { continue };
            if let Some(at) = m.find_next(id, next) {
                let f = m.full(at);
                match sum.as_mut() {
                    None => sum = Some(f),
                    Some(s) => s.absorb(&f, epoch),
                }
            }
        }
        let Some(m) = sum else { continue };
        if m.t.is_empty() {
            continue;
        }
        if id == 0 {
            empty = Some(m);
            continue;
        }
        let c = m.wire_counters(id, epoch);
        others = others.saturating_add(c.at_peak);
        f(id, &c);
    }
    if let Some(m) = empty {
        let mut c = m.wire_counters(0, epoch);
        c.at_peak = (epoch as i64).saturating_sub(others).max(0);
        c.max_alive = c.max_alive.max(c.at_peak as u64).max(c.alive.max(0) as u64);
        f(0, &c);
    }
}
