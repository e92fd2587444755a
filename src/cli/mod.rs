//! Command-line surfaces: the top level's help and dispatch to `zot ext`,
//! `zot rpc`, `zot mcp`, `zot journal` and the interactive session; what
//! they share is in `common.rs`.

mod bounds;
pub mod common;
pub mod ext;
#[cfg(feature = "journal")]
mod journal;
#[cfg(feature = "mcp")]
pub mod mcp;
pub mod rpc;
pub mod session;
mod stdout;

use common::{print_out, shared_option, CliError, HostOpts};
use std::ffi::OsString;

/// Printed after a usage error.
pub const USAGE_LINE: &str = "usage: zot [OPTIONS] [rpc | mcp | ext <command>] (try zot --help)";

const HELP: &str = "\
zot: host for zot extensions

usage:
  zot [OPTIONS]                 interactive session (reads lines; works with a pipe)
  zot rpc [OPTIONS]             JSON-lines control interface (zot rpc --help)
  zot mcp [OPTIONS]             MCP server on stdio for MCP clients (zot mcp --help)
  zot journal PATH              a journal's tool calls as an audit log (zot journal --help)
  zot ext <command> ...         manage, check and create extensions (zot ext --help)

options:
  -e, --ext PATH              load the extension at PATH first (repeatable)
      --no-ext                do not discover installed or project extensions
      --trust-project         start this project's .zot/extensions for this run
                              without recorded trust (records nothing)
      --cwd DIR               project directory (default: the current directory)
      --agent-cmd CMD         run prompts through `sh -c CMD` (session only)
      --system-prompt TEXT|@FILE  the system prompt: before_agent_start may
                              replace it; the agent command gets it in the
                              file $ZOT_SYSTEM_PROMPT_FILE, and under 128 KiB
                              in $ZOT_SYSTEM_PROMPT (session only)
      --tool-timeout SECS     how long a tool may run (default 60)
      --command-timeout SECS  how long a command may run (default 30)
      --startup-timeout SECS  how long startup waits for extensions to be ready
                              (default 3; also ZOT_STARTUP_TIMEOUT)
      --hello-timeout SECS    how long an extension may take to say hello
                              (default 10; also ZOT_HELLO_TIMEOUT)
      --provider NAME         provider name sent to extensions in hello_ack
      --model NAME            model name sent to extensions in hello_ack
      --session-id ID         session_id of every event (default: a new UUID)
      --confine               confine extensions with Landlock to what their
                              manifests' permissions allow (Linux; also ZOT_CONFINE=1)
      --journal PATH          journal every tool call there, durably; recover
                              calls a crash interrupted (see zot journal --help)
  -h, --help                  show this help
  -V, --version               show the version

session commands (type /help in the session):
  /help  /commands  /tools  /ext       what is loaded
  /call TOOL [JSON]                    run a tool as the model would (event, guards)
  /key [EXT PANEL] KEY [TEXT]          send a key to the open panel; /key esc closes it
  /reload-ext  /clear  /quit           restart extensions, clear notes, leave
  /prompt                              show the system prompt (after before_agent_start)
  /resume [CALL]  /abandon CALL        with --journal: a call a crash interrupted
  /NAME [ARGS]                         run an extension's command; plain text is a prompt

files:
  extensions are found in ./.zot/extensions/*/ and $ZOT_HOME/extensions/*/;
  the project's own start only once trusted (zot ext trust) or with --trust-project
  each extension's stderr and the host's lines about it: $ZOT_HOME/logs/ext-NAME.log
  (zot ext logs NAME); ZOT_HOME defaults to $XDG_STATE_HOME/zot when that is set
  (on every platform), else ~/.local/state/zot (~/Library/Application Support/zot on macOS)
";

/// Parses the top level and runs the chosen surface; returns the exit code.
pub fn run(args: Vec<OsString>) -> Result<i32, CliError> {
    use lexopt::prelude::*;
    let mut parser = lexopt::Parser::from_args(args);
    let mut opts = HostOpts::default();
    // The shared options may come before or after `rpc` / `mcp`.
    let mut rpc = false;
    // Set only in a build with `zot mcp`.
    #[cfg_attr(not(feature = "mcp"), allow(unused_mut))]
    let mut mcp = false;
    while let Some(arg) = parser.next()? {
        if let Some(which) = shared_option(&arg) {
            opts.take(which, &mut parser)?;
            continue;
        }
        match arg {
            Short('h') | Long("help") => {
                #[cfg(feature = "mcp")]
                if mcp {
                    return print_out(mcp::HELP);
                }
                return print_out(if rpc { rpc::HELP } else { HELP });
            }
            Short('V') | Long("version") if !rpc && !mcp => {
                return print_out(&format!("zot {}\n", env!("CARGO_PKG_VERSION")));
            }
            Value(sub) if sub == "ext" && !rpc && !mcp => {
                // `zot --cwd DIR ext ...` means the same as `zot ext --cwd DIR ...`.
                let mut rest: Vec<OsString> = Vec::new();
                if let Some(cwd) = opts.cwd {
                    rest.extend(["--cwd".into(), cwd.into_os_string()]);
                }
                rest.extend(parser.raw_args()?);
                return ext::run(rest);
            }
            Value(sub) if sub == "rpc" && !rpc && !mcp => rpc = true,
            #[cfg(feature = "journal")]
            Value(sub) if sub == "journal" && !rpc && !mcp => {
                return journal::run(parser.raw_args()?.collect());
            }
            #[cfg(not(feature = "journal"))]
            Value(sub) if sub == "journal" && !rpc && !mcp => {
                return Err(common::not_built("zot journal", "journal"))
            }
            #[cfg(not(feature = "mcp"))]
            Value(sub) if sub == "mcp" && !rpc => return Err(common::not_built("zot mcp", "mcp")),
            #[cfg(feature = "mcp")]
            Value(sub) if sub == "mcp" && !rpc && !mcp => mcp = true,
            _ => return Err(arg.unexpected().into()),
        }
    }
    if rpc {
        return rpc::run(opts);
    }
    #[cfg(feature = "mcp")]
    if mcp {
        return mcp::run(opts);
    }
    session::run(opts)
}
