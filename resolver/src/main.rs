//! `healthroute-resolver`: the DNS server, standalone mode, and the simulator.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use healthroute_resolver::simulate::{self, SimulateArgs};

#[derive(Parser)]
#[command(name = "healthroute-resolver", version, about = "Health-checked DNS routing: the resolver")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// What would DNS answer if...: compile a manifest directory and draw answers.
    Simulate(SimulateArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Simulate(args)) => match simulate::run(&args) {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        },
        None => {
            eprintln!("healthroute-resolver: serving is not built yet; try `simulate --help`");
            ExitCode::from(2)
        }
    }
}
