//! `heapledger waits PROFILE`: every entry of the threads' logs of time
//! lost, longest first, with the waiter's stack and the holder's.

use heapledger_analysis::summary::site_of;
use heapledger_analysis::waits::{seconds, Waits};
use heapledger_profile::{Addr, Profile};
use std::fmt::Write;

fn stack_lines(out: &mut String, p: &Profile, stack: &[Addr], frames: usize) {
    let shown = if frames == 0 {
        stack.len()
    } else {
        frames.min(stack.len())
    };
    for &a in &stack[..shown] {
        let _ = writeln!(out, "      {}", site_of(p, a));
    }
    if shown < stack.len() {
        let _ = writeln!(out, "      ... {} more frames", stack.len() - shown);
    }
}

/// The report as text (or JSON), `frames` frames a stack (0: all).
pub fn report(p: &Profile, frames: usize, json: bool) -> String {
    let list = p.heapledger.as_ref().map_or(&[][..], |e| &e.time_lost[..]);
    if json {
        let w = Waits::of(p);
        let mut v = w.to_json(usize::MAX);
        for (e, t) in v["entries"].as_array_mut().into_iter().flatten().zip(list) {
            let names = |s: &[Addr]| -> Vec<String> {
                s.iter().map(|&a| site_of(p, a).to_string()).collect()
            };
            e["stack"] = serde_json::json!(names(&t.stack));
            e["holder_stack"] = serde_json::json!(names(&t.holder));
        }
        return format!("{}\n", serde_json::to_string_pretty(&v).unwrap_or_default());
    }
    let mut out = String::new();
    if list.is_empty() {
        out.push_str("No time lost waiting was recorded (no lock wait, condition, join or semaphore that blocked; or `run --no-waits`).\n");
        return out;
    }
    let total: u64 = list.iter().map(|t| t.total_ns).sum();
    let _ = writeln!(
        out,
        "Time lost waiting: {} in {} entries (each thread keeps its longest: `run --waits-top N`)",
        seconds(total as f64 / 1e9),
        list.len()
    );
    for (i, t) in list.iter().enumerate() {
        let thread = t.thread.map_or("threads that ended first".to_owned(), |n| {
            format!("thread {}", n + 1)
        });
        let _ = writeln!(
            out,
            "\n#{}: {} lost in {} {} wait{} (longest {}), {thread}",
            i + 1,
            seconds(t.total_ns as f64 / 1e9),
            t.count,
            t.kind_name(),
            if t.count == 1 { "" } else { "s" },
            seconds(t.max_ns as f64 / 1e9),
        );
        let _ = writeln!(out, "    waiting at:");
        stack_lines(&mut out, p, &t.stack, frames);
        if !t.holder.is_empty() {
            let _ = writeln!(
                out,
                "    held by (where the lock was last taken after a wait):"
            );
            stack_lines(&mut out, p, &t.holder, frames);
        }
    }
    out
}
