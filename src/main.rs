//! `zot`: the command-line front end of zot-host.

mod cli;

use cli::common::CliError;
use zot_host::internal::log::inert;

fn main() {
    let code = match cli::run(std::env::args_os().skip(1).collect()) {
        Ok(code) => code,
        // Messages may quote an extension's files (paths, manifest fields).
        Err(CliError::Usage(msg)) => {
            eprintln!("zot: {}", inert(&msg));
            eprintln!("{}", cli::USAGE_LINE);
            2
        }
        Err(CliError::Failed(msg)) => {
            eprintln!("zot: {}", inert(&msg));
            1
        }
    };
    std::process::exit(code);
}
