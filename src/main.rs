//! `zot`: the command-line front end of zot-host.

mod cli;

use cli::CliError;

fn main() {
    let code = match cli::run(std::env::args_os().skip(1).collect()) {
        Ok(code) => code,
        Err(CliError::Usage(msg)) => {
            eprintln!("zot: {msg}");
            eprintln!("{}", cli::USAGE_LINE);
            2
        }
        Err(CliError::Failed(msg)) => {
            eprintln!("zot: {msg}");
            1
        }
    };
    std::process::exit(code);
}
