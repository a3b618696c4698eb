//! `heapledger`: parse the command line, run the command, report errors as one
//! line. All the work is in the library (`heapledger::cli`).

use std::process::ExitCode;

/// A failed allocation ends heapledger with one line, keeping a run's raw
/// data and the program's exit code (`heapledger::fatal`).
#[global_allocator]
static ALLOC: heapledger::fatal::Guarded = heapledger::fatal::Guarded;

/// heapledger's own stack: the command runs on a thread with this much,
/// whatever `ulimit -s` gives the main thread (the limit the program
/// inherits, unchanged). Under 64 KiB, the main thread's stack overflowed
/// before the program ran.
const STACK: usize = 8 << 20;

fn main() -> ExitCode {
    heapledger::fatal::install_panic_hook();
    heapledger::fatal::file_size_limit_fails_writes();
    let result = match std::thread::Builder::new()
        .name("heapledger".into())
        .stack_size(STACK)
        .spawn(heapledger::cli::main)
    {
        // (A panic ends the process in the hook: join has no panic to see.)
        Ok(command) => command
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("internal error"))),
        // No memory for a thread: on this one.
        Err(_) => in_place(),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            // Output cut short by a closed pipe (`heapledger tree ... | head`)
            // is not an error to report.
            let broken_pipe = e
                .downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe);
            if broken_pipe {
                return ExitCode::SUCCESS;
            }
            heapledger::say!("heapledger: {}", one_line(&e));
            ExitCode::from(2)
        }
    }
}

/// The command on the main thread. Not inlined: inlined, every command's
/// frame became `main`'s, which then overflowed a 32 KiB stack on entry.
#[inline(never)]
fn in_place() -> anyhow::Result<u8> {
    heapledger::cli::main()
}

/// The error and its causes on one line, leaving out a cause whose text the
/// message already holds (library errors often quote their source).
fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    short(&line)
}

/// The longest line an error prints; library errors keep well under it
/// (they cut what they quote), this is the last guard.
const MAX_LINE: usize = 400;

/// `line` on one line (line breaks as spaces, other control characters
/// escaped, so that none reaches the terminal), cut in the middle when
/// longer than [`MAX_LINE`] characters.
fn short(line: &str) -> String {
    let mut out = String::with_capacity(line.len().min(4 * MAX_LINE));
    for c in line.chars() {
        match c {
            '\n' | '\r' => out.push(' '),
            c if c.is_control() => out.extend(c.escape_default()),
            c => out.push(c),
        }
    }
    let count = out.chars().count();
    if count <= MAX_LINE {
        return out;
    }
    let head: String = out.chars().take(MAX_LINE / 2).collect();
    let tail: String = out.chars().skip(count - MAX_LINE / 2 + 1).collect();
    format!("{head}…{tail}")
}
