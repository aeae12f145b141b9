//! `fabric`: the command-line tool of the fabric crates.
//!
//! Each subcommand lives in its own module, which provides a clap `Args`
//! type and a `run` function returning a [`Status`]; adding one is a new
//! module plus a variant of [`Command`].
//!
//! Logging goes to stderr through `tracing`, filtered by `RUST_LOG`
//! (default `warn`).

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;

mod bw;
mod hints_json;
mod info;
mod perf;
mod pingpong;
mod soak;

/// Command-line tools for the fabric interface (the libfabric / OFI model).
#[derive(Debug, Parser)]
#[command(
    name = "fabric",
    disable_version_flag = true,
    arg_required_else_help = true
)]
struct Cli {
    /// Print the version of this tool and of the fabric API, and exit.
    #[arg(long)]
    version: bool,

    /// What to do.
    #[command(subcommand)]
    command: Option<Command>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Show the fabric interfaces `getinfo` finds, like libfabric's fi_info.
    Info(info::InfoArgs),
    /// Measure round-trip latency between two endpoints, like fi_pingpong.
    Pingpong(pingpong::PingpongArgs),
    /// Measure one-way bandwidth with a window of operations in flight.
    Bw(bw::BwArgs),
    /// Send many messages of mixed sizes from several endpoints to one,
    /// checking that each arrives once with every byte right.
    Soak(soak::SoakArgs),
}

/// How a subcommand ended; the process exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    /// It did what was asked (exit 0).
    Success = 0,
    /// It ran and failed, for example nothing matched (exit 1).
    Failure = 1,
    /// The command line or an input file was unusable (exit 2, as clap's
    /// own usage errors).
    Usage = 2,
}

impl From<Status> for ExitCode {
    fn from(s: Status) -> Self {
        ExitCode::from(s as u8)
    }
}

/// The `--version` text: this tool's version and the API version it speaks.
pub(crate) fn version_text() -> String {
    format!(
        "fabric: {}\napi: {}\n",
        env!("CARGO_PKG_VERSION"),
        fabric::Version::CURRENT
    )
}

/// Logs to stderr, filtered by `RUST_LOG` (invalid directives are
/// ignored), `warn` when it is unset.
fn init_tracing() {
    let filter = EnvFilter::builder()
        .with_default_directive(LevelFilter::WARN.into())
        .from_env_lossy();
    // Fails only when a subscriber is already installed; keep that one.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing();
    if cli.version {
        return info::write_stdout(&version_text()).into();
    }
    match cli.command {
        Some(Command::Info(args)) => info::run(&args).into(),
        Some(Command::Pingpong(args)) => pingpong::run(&args).into(),
        Some(Command::Bw(args)) => bw::run(&args).into(),
        Some(Command::Soak(args)) => soak::run(&args).into(),
        None => {
            let _ = Cli::command().print_help();
            Status::Usage.into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn version_names_tool_and_api() {
        let v = version_text();
        assert!(v.starts_with(&format!("fabric: {}\n", env!("CARGO_PKG_VERSION"))));
        assert!(v.ends_with("api: 1.17\n"));
    }
}
