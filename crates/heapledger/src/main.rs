//! `heapledger`: parse the command line, run the command, report errors as one
//! line. All the work is in the library (`heapledger::cli`).

use std::process::ExitCode;

fn main() -> ExitCode {
    match heapledger::cli::main() {
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
            eprintln!("heapledger: {}", one_line(&e));
            ExitCode::from(2)
        }
    }
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
    line.replace('\n', " ")
}
