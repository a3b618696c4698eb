// The heapledger-api crate from a Rust program (tests/control.rs): built
// with rustc alone, the crate's source included as a module.
#[path = "../../../heapledger-api/src/lib.rs"]
#[allow(dead_code)]
mod heapledger_api;

#[inline(never)]
fn keep(n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|i| vec![i as u8; 300]) /* SITE:keep */ .collect()
}

fn main() {
    let running = heapledger_api::is_running();
    eprintln!("running {running}");
    eprintln!("switch {}", heapledger_api::set_backtrace_enabled(true));
    eprintln!("enabled {}", heapledger_api::is_backtrace_enabled());
    let before = heapledger_api::stats().unwrap_or_default();
    let kept = keep(7);
    let after = heapledger_api::stats().unwrap_or_default();
    eprintln!(
        "grew {} {}",
        after.blocks_alive - before.blocks_alive,
        after.bytes_alive - before.bytes_alive
    );
    let report = heapledger_api::leak_report();
    eprintln!("report {}", report.lines().next().unwrap_or(""));
    eprintln!("snapshot {:?}", heapledger_api::snapshot("kept"));
    eprintln!("reset {}", heapledger_api::reset_stats());
    // Frames of the program's own, a traceback and a time log.
    let base = heapledger_api::frames_alive();
    heapledger_api::push_label("steer.rs:1 in outer");
    let tb = heapledger_api::Traceback::snapshot();
    let log = heapledger_api::TimeLog::new(2);
    heapledger_api::time_lost_at("io", 3_000_000, None);
    heapledger_api::pop_frame();
    eprintln!("frames {:?}", tb.as_ref().map(|t| t.frames()));
    for e in log.as_ref().map(|l| l.entries()).unwrap_or_default() {
        let frames = e.traceback.as_ref().map(|t| t.frames());
        eprintln!("entry {} {} {} {:?}", e.kind, e.count, e.total_ns, frames);
    }
    drop((tb, log));
    eprintln!("alive {}", heapledger_api::frames_alive() - base);
    drop(kept);
    println!("done");
}
