//! `memtrail`: parse the command line, run the command, report errors as one
//! line. All the work is in the library (`memtrail::cli`).

use std::process::ExitCode;

fn main() -> ExitCode {
    match memtrail::cli::main() {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("memtrail: {e:#}");
            ExitCode::from(2)
        }
    }
}
