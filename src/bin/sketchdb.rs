//! The `sketchdb` command. The store, query language and REPL arrive in later milestones; for now
//! the binary reports its version and what the library offers, and refuses anything else clearly.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("--version" | "-V") => {
            println!("sketchdb {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        None | Some("--help" | "-h" | "help") => {
            println!(
                "sketchdb {}: probabilistic sketches over an event stream\n\n\
                 This build contains the sketch library (Bloom, HyperLogLog, Theta, Count-Min with\n\
                 Top-K, reservoir); the store, query language and REPL are not built yet.\n\n\
                 Usage: sketchdb --version | --help",
                env!("CARGO_PKG_VERSION")
            );
            ExitCode::SUCCESS
        }
        Some(other) => {
            eprintln!(
                "sketchdb: unknown command '{other}' (this build has only --version and --help)"
            );
            ExitCode::from(2)
        }
    }
}
