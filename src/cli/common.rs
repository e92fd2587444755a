//! What every command-line surface shares: the error type, the options
//! of the host surfaces (`zot`, `zot rpc`, `zot mcp`) and their parsing,
//! the host's configuration from them, signals, and stdout for help text.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use zot_host::{HostHandle, Request};

/// The session's own commands: names, arguments, what they do. `/help`
/// lists them, and every `zot` surface reserves the names (docs/PROTOCOL.md#names-and-precedence):
/// an extension command of the same name is ignored.
pub const HOST_COMMANDS: [(&[&str], &str, &str); 12] = [
    (&["help"], "", "this list"),
    (&["commands"], "", "extension commands"),
    (&["tools"], "", "tools and their arguments"),
    (&["ext"], "", "extensions: scope, state, pid, error"),
    (
        &["call"],
        " TOOL [JSON]",
        "run a tool as the model would (event, guards, result)",
    ),
    (
        &["reload-ext"],
        "",
        "stop every extension, start them again",
    ),
    (
        &["key"],
        " [EXT PANEL] KEY [TEXT]",
        "send a key to the panel; esc (or close) closes it",
    ),
    (
        &["clear"],
        "",
        "clear the notes (and prepare the system prompt again)",
    ),
    (
        &["prompt"],
        "",
        "show the system prompt the agent command gets",
    ),
    (
        &["resume"],
        " [CALL]",
        "run a call a crash interrupted again, by its tool's replay policy (--journal); no CALL lists them",
    ),
    (
        &["abandon"],
        " CALL",
        "close a call a crash interrupted without running it (--journal)",
    ),
    (&["quit", "exit"], "", "leave (Ctrl-D too)"),
];

/// How a command failed.
#[derive(Debug)]
pub enum CliError {
    /// Bad arguments: exit 2 with the usage line.
    Usage(String),
    /// The command failed: exit 1.
    Failed(String),
}

impl From<lexopt::Error> for CliError {
    fn from(e: lexopt::Error) -> Self {
        CliError::Usage(e.to_string())
    }
}

/// Options shared by the session and `zot rpc`.
#[derive(Debug, Default, Clone)]
pub struct HostOpts {
    /// `-e/--ext` paths in order, made absolute.
    pub ext_paths: Vec<PathBuf>,
    /// `--no-ext`.
    pub no_ext: bool,
    /// `--trust-project`: the project's extensions start this run
    /// without recorded trust (docs/PROTOCOL.md#trust).
    pub trust_project: bool,
    /// `--cwd`, made absolute.
    pub cwd: Option<PathBuf>,
    /// `--agent-cmd` (session only).
    pub agent_cmd: Option<String>,
    /// `--system-prompt TEXT|@FILE` (session only): the base system prompt.
    pub system_prompt: Option<String>,
    /// `--tool-timeout SECS`: the library's `Timeouts::tool`.
    pub tool_timeout: Option<std::time::Duration>,
    /// `--command-timeout SECS`: the library's `Timeouts::command`.
    pub command_timeout: Option<std::time::Duration>,
    /// `--provider NAME`: sent to extensions in `hello_ack.provider`.
    pub provider: Option<String>,
    /// `--model NAME`: sent to extensions in `hello_ack.model`.
    pub model: Option<String>,
    /// `--session-id ID`: the `session_id` of every event (docs/PROTOCOL.md#events).
    pub session_id: Option<String>,
    /// `--startup-timeout SECS` (else `$ZOT_STARTUP_TIMEOUT`).
    pub startup_timeout: Option<std::time::Duration>,
    /// `--hello-timeout SECS` (else `$ZOT_HELLO_TIMEOUT`): the library's
    /// `Timeouts::hello`; a server started through `npx` or a big SDK
    /// may need more than 10 s on a busy machine.
    pub hello_timeout: Option<std::time::Duration>,
    /// `--confine` (else `$ZOT_CONFINE=1`): extensions run confined (docs/PROTOCOL.md#confinement).
    pub confine: bool,
    /// `--journal PATH`: the embedder's tool calls are journaled there.
    pub journal: Option<PathBuf>,
}

impl HostOpts {
    /// Reads the value of the shared option `which` (from [`shared_option`]).
    pub(crate) fn take(
        &mut self,
        which: char,
        parser: &mut lexopt::Parser,
    ) -> Result<(), CliError> {
        match which {
            'e' => self.ext_paths.push(absolute(parser.value()?.into())?),
            'c' => self.cwd = Some(absolute(parser.value()?.into())?),
            'a' => self.agent_cmd = Some(string(parser.value()?)?),
            'y' => self.system_prompt = Some(system_prompt(parser.value()?)?),
            't' => self.tool_timeout = Some(seconds("--tool-timeout", parser.value()?)?),
            'o' => self.command_timeout = Some(seconds("--command-timeout", parser.value()?)?),
            'p' => self.provider = Some(string(parser.value()?)?),
            'm' => self.model = Some(string(parser.value()?)?),
            'i' => self.session_id = Some(session_id(parser.value()?)?),
            's' => self.startup_timeout = Some(seconds("--startup-timeout", parser.value()?)?),
            'w' => self.hello_timeout = Some(seconds("--hello-timeout", parser.value()?)?),
            'f' => self.confine = true,
            'T' => self.trust_project = true,
            'J' => self.journal = Some(absolute(parser.value()?.into())?),
            _ => self.no_ext = true,
        }
        Ok(())
    }
}

/// Which shared option `arg` is, if any. Decided before reading the
/// value because `arg` borrows from the parser.
pub(crate) fn shared_option(arg: &lexopt::Arg) -> Option<char> {
    use lexopt::Arg::*;
    match arg {
        Short('e') | Long("ext") => Some('e'),
        Long("no-ext") => Some('n'),
        Long("trust-project") => Some('T'),
        Long("cwd") => Some('c'),
        Long("agent-cmd") => Some('a'),
        Long("system-prompt") => Some('y'),
        Long("tool-timeout") => Some('t'),
        Long("command-timeout") => Some('o'),
        Long("provider") => Some('p'),
        Long("model") => Some('m'),
        Long("session-id") => Some('i'),
        Long("startup-timeout") => Some('s'),
        Long("hello-timeout") => Some('w'),
        Long("confine") => Some('f'),
        Long("journal") => Some('J'),
        _ => None,
    }
}

/// `--system-prompt TEXT`, or `@FILE` for the text of FILE.
fn system_prompt(value: OsString) -> Result<String, CliError> {
    let text = string(value)?;
    let Some(file) = text.strip_prefix('@') else {
        return Ok(text);
    };
    std::fs::read_to_string(file)
        .map_err(|e| CliError::Failed(format!("--system-prompt @{file}: cannot read it: {e}")))
}

/// A `--session-id`: not empty, no control characters.
fn session_id(value: OsString) -> Result<String, CliError> {
    let id = string(value)?;
    if id.trim().is_empty() || id.chars().any(char::is_control) {
        return Err(CliError::Usage(format!(
            "--session-id {id:?}: expected a non-empty id without control characters"
        )));
    }
    Ok(id)
}

/// Calls `f` for every SIGINT (Ctrl-C), SIGTERM and SIGHUP from now on,
/// one at a time on `ctrlc`'s thread, which does not say which of the
/// three arrived: every surface treats them alike. Once per process.
pub fn on_signal(f: impl FnMut() + Send + 'static) -> Result<(), CliError> {
    ctrlc::set_handler(f)
        .map_err(|e| CliError::Failed(format!("cannot install the signal handler: {e}")))
}

/// Signals for `zot rpc` and `zot mcp` (docs/PROTOCOL.md#shutdown): the first hands
/// `graceful` a shutdown (requests already read are answered first), the
/// second asks `host` to stop now (they are not waited for), a third
/// exits at once, as only a stdout nobody reads can still hold us up.
/// Each step is said on stderr after `who`.
pub fn stop_on_signal(
    who: &'static str,
    graceful: impl Fn(Request) + Send + 'static,
    host: HostHandle,
) -> Result<(), CliError> {
    let mut seen = 0;
    on_signal(move || {
        seen += 1;
        let say = |what: &str| {
            let _ = writeln!(std::io::stderr(), "{who}: {what}");
        };
        match seen {
            1 => {
                say("signal received, shutting down (again to skip waiting for requests)");
                graceful(Request::Shutdown {
                    reply: Box::new(|_| {}),
                });
            }
            2 => {
                say("signal received again, stopping now");
                host.submit(Request::ShutdownNow {
                    reply: Box::new(|_| {}),
                });
            }
            _ => zot_host::internal::process::exit(1),
        }
    })
}

/// A positive number of seconds (fractions allowed), for `option`.
fn seconds(option: &str, value: OsString) -> Result<std::time::Duration, CliError> {
    let text = string(value)?;
    decimal_seconds(text.trim())
        .filter(|d| !d.is_zero())
        .ok_or_else(|| {
            CliError::Usage(format!(
                "{option} {text:?}: expected a positive number of seconds"
            ))
        })
}

/// `2`, `0.5` or `.5` seconds, to the nanosecond (later digits are
/// dropped). Decimal digits only, read as a JSON number: serde_json's
/// float parser is in the binary already, core's would add its own to
/// the static binary.
fn decimal_seconds(text: &str) -> Option<std::time::Duration> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || !digits(fraction) || whole.len() + fraction.len() == 0 {
        return None;
    }
    // JSON wants no leading zero and digits on both sides of the point.
    let whole = match whole.trim_start_matches('0') {
        "" => "0",
        w => w,
    };
    let secs: f64 = serde_json::from_str(&format!("{whole}.{fraction:0<1.9}")).ok()?;
    std::time::Duration::try_from_secs_f64(secs).ok()
}

/// A limit given as an option, else by environment variable `var`
/// (`--startup-timeout` / `$ZOT_STARTUP_TIMEOUT`, `--hello-timeout` /
/// `$ZOT_HELLO_TIMEOUT`).
fn option_or_env(
    option: Option<std::time::Duration>,
    var: &str,
) -> Result<Option<std::time::Duration>, CliError> {
    if option.is_some() {
        return Ok(option);
    }
    match std::env::var_os(var) {
        Some(v) if !v.is_empty() => seconds(var, v).map(Some),
        _ => Ok(None),
    }
}

/// A path made absolute against the current directory (not canonicalised).
pub fn absolute(path: PathBuf) -> Result<PathBuf, CliError> {
    std::path::absolute(&path)
        .map_err(|e| CliError::Failed(format!("cannot resolve {}: {e}", path.display())))
}

/// An argument that must be UTF-8.
pub fn string(value: OsString) -> Result<String, CliError> {
    value
        .into_string()
        .map_err(|v| CliError::Usage(format!("argument {v:?} is not valid UTF-8")))
}

/// `$ZOT_HOME` (or the platform's default), made absolute (extensions
/// run in their own directory), or an error saying how to set it.
pub fn zot_home() -> Result<PathBuf, CliError> {
    zot_host::internal::discovery::zot_home()
        .ok_or_else(|| CliError::Failed("cannot find the zot state directory: set ZOT_HOME".into()))
        .and_then(absolute)
}

/// The project directory: `--cwd`, else the current directory.
pub fn project_dir(cwd: Option<&std::path::Path>) -> Result<PathBuf, CliError> {
    match cwd {
        Some(dir) => Ok(dir.to_path_buf()),
        None => std::env::current_dir()
            .map_err(|e| CliError::Failed(format!("cannot read the current directory: {e}"))),
    }
}

/// A host config with the session's host commands reserved, so every
/// surface (and `ext check`) treats them the same.
pub fn host_config(zot_home: PathBuf, cwd: PathBuf) -> zot_host::HostConfig {
    let mut config = zot_host::HostConfig::new(zot_home, cwd);
    config.builtin_commands = HOST_COMMANDS
        .iter()
        .flat_map(|(names, ..)| names.iter().map(|n| n.to_string()))
        .collect();
    config
}

/// Sets the startup grace and the hello limit from the options given,
/// else from `$ZOT_STARTUP_TIMEOUT` / `$ZOT_HELLO_TIMEOUT`; and, from
/// `$ZOT_EXIT_GRACE`, every grace the host gives an exiting extension
/// (`Timeouts::eof_before_hello`, `eof_after_hello`, `exit_silence`,
/// `exit_drain`, `stdin_closed`), so that tests of exits through the
/// CLI need not wait them out; and, from `$ZOT_RESTART_BACKOFF`, the
/// first restart backoff (`Timeouts::restart_backoff`, 0.5 s), which
/// crash-loop tests would otherwise wait out; and, from `$ZOT_MCP_PROBE_TIMEOUT`, how
/// long an MCP server's `server/discover` probe may go unanswered
/// (`Timeouts::mcp_probe`, 3 s); and, from `$ZOT_INTERCEPT_TIMEOUT`,
/// how long guards get to answer an intercepted event
/// (`Timeouts::intercept`, 5 s), which
/// `zot ext check`'s silent-guard test would otherwise wait out; and,
/// from `$ZOT_SHUTDOWN_GRACE`, both graces of a stop: from `shutdown` to
/// SIGTERM (`Timeouts::shutdown_grace`, 2 s) and from SIGTERM to SIGKILL
/// (`Timeouts::term_grace`, 1 s), which tests that end with an
/// extension that ignores `shutdown` would otherwise wait out.
pub fn apply_limits(
    config: &mut zot_host::HostConfig,
    startup: Option<std::time::Duration>,
    hello: Option<std::time::Duration>,
) -> Result<(), CliError> {
    if let Some(grace) = option_or_env(startup, "ZOT_STARTUP_TIMEOUT")? {
        config.timeouts.startup = grace;
    }
    if let Some(limit) = option_or_env(hello, "ZOT_HELLO_TIMEOUT")? {
        config.timeouts.hello = limit;
    }
    if let Some(grace) = option_or_env(None, "ZOT_EXIT_GRACE")? {
        let t = &mut config.timeouts;
        for g in [
            &mut t.eof_before_hello,
            &mut t.eof_after_hello,
            &mut t.exit_silence,
            &mut t.exit_drain,
            &mut t.stdin_closed,
        ] {
            *g = grace;
        }
    }
    if let Some(backoff) = option_or_env(None, "ZOT_RESTART_BACKOFF")? {
        config.timeouts.restart_backoff = backoff;
    }
    if let Some(limit) = option_or_env(None, "ZOT_MCP_PROBE_TIMEOUT")? {
        config.timeouts.mcp_probe = limit;
    }
    if let Some(limit) = option_or_env(None, "ZOT_INTERCEPT_TIMEOUT")? {
        config.timeouts.intercept = limit;
    }
    if let Some(grace) = option_or_env(None, "ZOT_SHUTDOWN_GRACE")? {
        config.timeouts.shutdown_grace = grace;
        config.timeouts.term_grace = grace;
    }
    Ok(())
}

/// Whether extensions run confined: `--confine` given, or `$ZOT_CONFINE`
/// is `1`. On a system without Landlock, or in a build without the
/// `confine` feature, that is an error, not a silent unconfined run.
pub fn confine_wanted(flag: bool) -> Result<bool, CliError> {
    let wanted = flag || std::env::var_os("ZOT_CONFINE").is_some_and(|v| v == "1");
    #[cfg(not(feature = "confine"))]
    if wanted {
        let what = if flag { "--confine" } else { "ZOT_CONFINE=1" };
        return Err(not_built(what, "confine"));
    }
    if wanted && !cfg!(target_os = "linux") {
        return Err(CliError::Failed(
            "--confine needs Linux Landlock, which this system does not have".into(),
        ));
    }
    Ok(wanted)
}

/// Starts a host for a surface from the shared options. `surface`
/// adjusts the config to what that surface can do
/// (docs/PROTOCOL.md#interactive-tools, docs/PROTOCOL.md#calls-from-extensions:
/// panels, built-in tools). The calling (main) thread runs the loop
/// (`zot_host::internal::surface::poll_with`) while it waits on its own
/// channel, which the loop selects on with everything else; the stdin reader's
/// and the signal handler's calls only wait.
pub fn start_host(
    opts: &HostOpts,
    surface: impl FnOnce(&mut zot_host::HostConfig),
) -> Result<zot_host::Host, CliError> {
    let mut config = surface_config(opts)?;
    surface(&mut config);
    zot_host::internal::surface::start(config)
        .map_err(|e| CliError::Failed(format!("cannot start the host: {e}")))
}

/// Names the surface in the journal's `origin` of the calls it makes.
pub fn journal_origin(config: &mut zot_host::HostConfig, surface: &str) {
    #[cfg(feature = "journal")]
    {
        config.journal_origin = surface.into();
    }
    #[cfg(not(feature = "journal"))]
    let _ = (config, surface);
}

/// The host config every surface runs with, from the shared options.
pub fn surface_config(opts: &HostOpts) -> Result<zot_host::HostConfig, CliError> {
    let zot_home = zot_home()?;
    let cwd = project_dir(opts.cwd.as_deref())?;
    if !cwd.is_dir() {
        return Err(CliError::Failed(format!(
            "--cwd {}: not a directory",
            cwd.display()
        )));
    }
    let mut config = host_config(zot_home, cwd);
    config.ext_paths = opts.ext_paths.clone();
    config.discover = !opts.no_ext;
    config.trust_project = opts.trust_project;
    if let Some(t) = opts.tool_timeout {
        config.timeouts.tool = t;
    }
    if let Some(t) = opts.command_timeout {
        config.timeouts.command = t;
    }
    config.provider = opts.provider.clone().unwrap_or_default();
    config.model = opts.model.clone().unwrap_or_default();
    config.session_id = opts.session_id.clone().unwrap_or_default();
    config.confine = confine_wanted(opts.confine)?;
    apply_limits(&mut config, opts.startup_timeout, opts.hello_timeout)?;
    #[cfg(feature = "journal")]
    {
        config.journal = opts.journal.clone();
    }
    #[cfg(not(feature = "journal"))]
    if opts.journal.is_some() {
        return Err(not_built("--journal", "journal"));
    }
    Ok(config)
}

/// `value` as JSON text: the one serializer every rpc response and
/// event goes through (`rpc.rs`, `journal.rs`), so each type's
/// serialization is compiled once.
pub(crate) fn json(value: &impl serde::Serialize) -> Vec<u8> {
    // Cannot fail: every map key is a string.
    serde_json::to_vec(value).unwrap_or_default()
}

/// Writes `text` to stdout: exit 0, also when the reader has gone (a
/// closed pipe: `zot --help | head -1`); any other failure (a full
/// disk) is an error naming it, never a panic.
pub(crate) fn print_out(text: &str) -> Result<i32, CliError> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(CliError::Failed(format!("cannot write to stdout: {e}")))
        }
        _ => Ok(0),
    }
}

/// The error of a subcommand this build left out: which feature has it
/// and how to build with it (README: Install).
#[cfg(not(all(
    feature = "mcp",
    feature = "author",
    feature = "confine",
    feature = "journal"
)))]
pub(crate) fn not_built(what: &str, feature: &str) -> CliError {
    CliError::Failed(not_in_build(what, feature))
}

/// [`not_built`]'s words, for a request answered with an error.
#[cfg(not(all(
    feature = "mcp",
    feature = "author",
    feature = "confine",
    feature = "journal",
    feature = "panels",
    feature = "ext-calls"
)))]
pub(crate) fn not_in_build(what: &str, feature: &str) -> String {
    zot_host::internal::build::needs_feature(&format!("`{what}`"), feature)
}

#[cfg(test)]
mod tests {
    use super::decimal_seconds;
    use std::time::Duration;

    #[test]
    fn seconds_are_decimal_numbers() {
        let ms = |n| Some(Duration::from_millis(n));
        assert_eq!(decimal_seconds("2"), ms(2000));
        assert_eq!(decimal_seconds("0.25"), ms(250));
        assert_eq!(decimal_seconds(".5"), ms(500));
        assert_eq!(decimal_seconds("1."), ms(1000));
        assert_eq!(decimal_seconds("007.5"), ms(7500));
        assert_eq!(decimal_seconds("86400"), ms(86_400_000));
        assert_eq!(
            decimal_seconds("0.0000000019"),
            Some(Duration::from_nanos(1))
        );
        for bad in [
            "",
            ".",
            "-1",
            "+1",
            "1e3",
            "1.2.3",
            "abc",
            "99999999999999999999",
        ] {
            assert_eq!(decimal_seconds(bad), None, "{bad:?}");
        }
    }
}
