//! Timing of the replay on 1 M samples 100 frames deep. Not a test of speed
//! (timings are printed, never asserted); run it in release mode:
//!
//! ```text
//! cargo test --release -p heapledger-analysis --test calltree_bench -- --ignored --nocapture
//! ```

use std::sync::Mutex;
use std::time::{Duration, Instant};

use heapledger_analysis::calltree::{
    write_json, write_text, CallTree, CallTreeBuilder, CollapseMode, Direction, FlatProfile,
    RenderOptions, RoutineId, RoutineTable, Samples,
};

/// Runs the benchmarks one at a time, so that they do not time each other.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const SAMPLES: usize = 1_000_000;
const DEPTH: usize = 100;
const ROUTINES: usize = 2_000;
const CALLEES: usize = 4;

/// SplitMix64: a fixed, dependency-free generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A program: each routine calls `CALLEES` others, itself with some chance
/// (direct recursion); calls between random routines make mutual recursion.
struct Program {
    routines: RoutineTable,
    ids: Vec<RoutineId>,
    callees: Vec<[usize; CALLEES]>,
}

impl Program {
    fn new(rng: &mut Rng) -> Program {
        let mut routines = RoutineTable::new();
        let ids = (0..ROUTINES)
            .map(|i| routines.intern(&format!("routine_{i}")))
            .collect();
        let callees = (0..ROUTINES)
            .map(|caller| {
                std::array::from_fn(|_| {
                    if rng.below(100) < 15 {
                        caller
                    } else {
                        rng.below(ROUTINES)
                    }
                })
            })
            .collect();
        Program {
            routines,
            ids,
            callees,
        }
    }

    /// A stack `DEPTH` deep: a random walk down the call graph from routine 0.
    fn stack(&self, rng: &mut Rng, out: &mut Vec<RoutineId>) {
        let mut at = 0;
        for _ in 0..DEPTH {
            out.push(self.ids[at]);
            at = self.callees[at][rng.below(CALLEES)];
        }
    }
}

/// Time this thread spent on a CPU, from `/proc/thread-self/schedstat` (Linux),
/// so that other processes on a shared machine do not count.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let nanos = stat.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(nanos))
}

fn time<T>(label: &str, work: impl FnOnce() -> T) -> T {
    let (start, start_cpu) = (Instant::now(), cpu_time());
    let result = work();
    let wall = start.elapsed().as_secs_f64();
    match (start_cpu, cpu_time()) {
        (Some(before), Some(after)) => println!(
            "{label:<48} {wall:>8.3} s wall {:>8.3} s cpu",
            (after - before).as_secs_f64()
        ),
        _ => println!("{label:<48} {wall:>8.3} s wall"),
    }
    result
}

fn replay(
    program: &Program,
    frames: &[RoutineId],
    weights: &[u64],
    mode: CollapseMode,
    direction: Direction,
) -> CallTree {
    let mut builder = CallTreeBuilder::new(mode, direction, &program.routines);
    for (stack, &weight) in frames.chunks_exact(DEPTH).zip(weights) {
        builder.push(stack, weight).unwrap();
    }
    builder.finish()
}

fn report(tree: CallTree) {
    println!("{:<48} {:>8} nodes", "", tree.node_count());
    time("    drop", || drop(tree));
}

#[test]
#[ignore = "a benchmark: run in release mode with --ignored --nocapture"]
fn replay_1m_samples_100_deep_from_20k_stacks() {
    let _alone = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut rng = Rng(0x5eed);
    let program = Program::new(&mut rng);
    let weights: Vec<u64> = (0..SAMPLES).map(|_| 1 + rng.below(4096) as u64).collect();

    // Realistic: 1 M samples drawn from 20 000 distinct stacks, in random order.
    const DISTINCT: usize = 20_000;
    let mut pool = Vec::with_capacity(DISTINCT * DEPTH);
    for _ in 0..DISTINCT {
        program.stack(&mut rng, &mut pool);
    }
    let mut frames = Vec::with_capacity(SAMPLES * DEPTH);
    for _ in 0..SAMPLES {
        let at = rng.below(DISTINCT) * DEPTH;
        frames.extend_from_slice(&pool[at..at + DEPTH]);
    }
    println!("{SAMPLES} samples x {DEPTH} frames from {DISTINCT} distinct stacks");
    let samples = time("  collect into Samples (merges identical stacks)", || {
        let mut samples = Samples::with_routines(program.routines.clone());
        for (stack, &weight) in frames.chunks_exact(DEPTH).zip(&weights) {
            samples.push(stack, weight).unwrap();
        }
        samples
    });
    for mode in CollapseMode::ALL {
        report(time(
            &format!("  CallTree::top_down, {mode} collapse"),
            || CallTree::top_down(&samples, mode),
        ));
    }
    report(time("  CallTree::bottom_up, full collapse", || {
        CallTree::bottom_up(&samples, CollapseMode::Full)
    }));
    let tree = CallTree::top_down(&samples, CollapseMode::Full);
    let mut out = Vec::new();
    time("  text, full collapse, default options", || {
        write_text(
            &mut out,
            &tree,
            samples.routines(),
            "bytes",
            &RenderOptions::default(),
        )
        .unwrap()
    });
    out.clear();
    time("  JSON, full collapse, every node", || {
        write_json(
            &mut out,
            &tree,
            samples.routines(),
            "bytes",
            &RenderOptions::all(),
        )
        .unwrap()
    });
    println!("{:<48} {:>8} bytes", "", out.len());
    time("  flat profile", || FlatProfile::from_samples(&samples));
    report(time(
        "  builder, 1 M pushes unmerged, full collapse",
        || {
            replay(
                &program,
                &frames,
                &weights,
                CollapseMode::Full,
                Direction::TopDown,
            )
        },
    ));
}

#[test]
#[ignore = "a benchmark: run in release mode with --ignored --nocapture"]
fn replay_250k_distinct_samples_100_deep() {
    let _alone = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    // Worst case: every sample a new random walk, so nearly every frame makes a
    // node (~18 M of them) and costs a cache miss. Kept to 250 000 samples to
    // stay within a few GiB; no collapse is left out (it makes one node per frame).
    const DISTINCT_SAMPLES: usize = SAMPLES / 4;
    let mut rng = Rng(0x5eed);
    let program = Program::new(&mut rng);
    let weights: Vec<u64> = (0..DISTINCT_SAMPLES)
        .map(|_| 1 + rng.below(4096) as u64)
        .collect();
    let mut frames = Vec::with_capacity(DISTINCT_SAMPLES * DEPTH);
    for _ in 0..DISTINCT_SAMPLES {
        program.stack(&mut rng, &mut frames);
    }
    println!("{DISTINCT_SAMPLES} samples x {DEPTH} frames, every stack distinct");
    report(time("  builder, full collapse", || {
        replay(
            &program,
            &frames,
            &weights,
            CollapseMode::Full,
            Direction::TopDown,
        )
    }));
}
