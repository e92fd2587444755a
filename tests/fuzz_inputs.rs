//! Seeded randomized input: random and mutated lines fed to
//! the frame reader (through a real extension process that replays
//! them) and to the rpc request parser (through the real `zot rpc`).
//! Whatever the lines hold, the stream goes on and the host answers.
//!
//! The seed is fixed; set `ZOT_FUZZ_SEED` to try another. A failure
//! prints the seed that reproduces it.

mod common;

use common::*;
use serde_json::json;
use std::path::Path;

/// Lines per run, and a bound on one line's size.
const LINES: usize = 300;
const MAX_DEPTH_TRIED: usize = 100_000;

fn seed() -> u64 {
    std::env::var("ZOT_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_2026_0009)
}

/// Prints the seed if the test fails while this is alive.
struct SeedReport(u64);

impl Drop for SeedReport {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("fuzz_inputs failed with ZOT_FUZZ_SEED={}", self.0);
        }
    }
}

/// xorshift64*: small, deterministic, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Awkward values to splice into otherwise valid lines.
const ODD_VALUES: &[&str] = &[
    "1e999999",
    "-1e-999999",
    "123456789012345678901234567890123456789012345678901234567890",
    "18446744073709551616",
    "-9223372036854775809",
    "0.000000000000000000000000000000000000000000000001",
    "\"\\ud800\"",
    "\"\\u0000\"",
    "\"\\uDFFF\\uD800\"",
    "null",
    "[]",
    "{}",
    "true",
    "\"\"",
];

/// One mutated line built from `templates`; never contains `\n`.
fn mutated_line(rng: &mut Rng, templates: &[String]) -> Vec<u8> {
    let mut line = rng.pick(templates).clone().into_bytes();
    for _ in 0..=rng.below(3) {
        match rng.below(11) {
            // Truncated anywhere, UTF-8 sequences included.
            0 => line.truncate(rng.below(line.len() + 1)),
            // Invalid UTF-8 and NULs.
            1 => {
                let at = rng.below(line.len() + 1);
                const JUNK: [&[u8]; 5] = [b"\xff\xfe", b"\0", b"\xc3", b"\xed\xa0\x80", b"\0\0\0"];
                let junk = *rng.pick(&JUNK);
                line.splice(at..at, junk.iter().copied());
            }
            // Deep nesting, from just past the limit to very deep.
            2 => {
                let depth = *rng.pick(&[65, 86, 128, 1000, MAX_DEPTH_TRIED]);
                let deep = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
                line =
                    format!("{{\"type\":\"notify\",\"message\":\"m\",\"x\":{deep}}}").into_bytes();
            }
            // An odd value in place of the first value after a colon.
            3 => {
                let text = String::from_utf8_lossy(&line).into_owned();
                if let Some(i) = text.find(':') {
                    let end = text[i + 1..]
                        .find([',', '}'])
                        .map_or(text.len(), |j| i + 1 + j);
                    line = format!("{}{}{}", &text[..=i], rng.pick(ODD_VALUES), &text[end..])
                        .into_bytes();
                }
            }
            // CRLF ending, BOM start.
            4 => line.push(b'\r'),
            5 => {
                line.splice(0..0, *b"\xEF\xBB\xBF");
            }
            // A byte flipped.
            6 if !line.is_empty() => {
                let at = rng.below(line.len());
                line[at] ^= 1 << rng.below(8);
            }
            // Random bytes.
            7 => line = (0..rng.below(200)).map(|_| rng.next() as u8).collect(),
            // Two lines glued, or a duplicate key.
            8 => line.extend_from_slice(rng.pick(templates).as_bytes()),
            9 if !line.is_empty() => {
                line.splice(1..1, *b"\"type\":7,");
            }
            // Unchanged.
            _ => {}
        }
    }
    for b in &mut line {
        if *b == b'\n' {
            *b = b' ';
        }
    }
    line
}

fn frame_templates() -> Vec<String> {
    [
        json!({"type": "notify", "level": "warn", "message": "fuzz"}),
        json!({"type": "register_command", "name": "fz", "description": "d"}),
        json!({"type": "register_tool", "name": "ft", "schema": {"type": "object", "properties": {"a": {"type": "string"}}}}),
        json!({"type": "subscribe", "events": ["turn_end"], "intercept": ["tool_call"]}),
        json!({"type": "tool_result", "id": "999", "content": [{"type": "text", "text": "t"}]}),
        json!({"type": "command_response", "id": "998", "action": "display", "display": "x"}),
        json!({"type": "event_intercept_response", "id": "997", "block": true}),
        json!({"type": "panel_render", "panel_id": "p", "lines": ["a", "b"]}),
        json!({"type": "panel_close", "panel_id": "p"}),
        json!({"type": "clear_notes"}),
        json!({"type": "hello", "name": "again"}),
    ]
    .iter()
    .map(|v| v.to_string())
    .collect()
}

fn request_templates() -> Vec<String> {
    [
        json!({"type": "ping", "id": "f"}),
        json!({"type": "list", "id": "f"}),
        json!({"type": "command", "id": "f", "name": "nope", "args": "a b"}),
        json!({"type": "tool_call", "id": "f", "name": "read", "args": {"path": "/x"}}),
        json!({"type": "tool_call", "id": "f", "name": "nope", "args": {"k": [1, 2, {"z": null}]}}),
        json!({"type": "intercept", "id": "f", "event": "tool_call", "tool_name": "bash", "tool_args": {}}),
        json!({"type": "event", "id": "f", "event": "turn_end", "stop": "done"}),
        json!({"type": "panel_key", "id": "f", "extension": "e", "panel_id": "p", "key": "up"}),
        json!({"type": "panel_close", "id": "f", "extension": "e", "panel_id": "p"}),
        json!({"type": "mystery", "id": "f"}),
    ]
    .iter()
    .map(|v| v.to_string())
    .collect()
}

/// Whether the host skips `line` without a response: blank once the
/// `\r` and a BOM are gone.
fn is_blank(line: &[u8]) -> bool {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    line.iter().all(u8::is_ascii_whitespace)
}

#[test]
fn random_frames_never_stop_the_reader() {
    let seed = seed();
    let _report = SeedReport(seed);
    let mut rng = Rng(seed);
    let templates = frame_templates();
    let mut garbage = Vec::new();
    for _ in 0..LINES {
        garbage.extend(mutated_line(&mut rng, &templates));
        garbage.push(b'\n');
    }
    let t = TempDir::new("fuzz-frames");
    let dir = t.join("replay");
    std::fs::create_dir_all(&dir).expect("create ext dir");
    std::fs::write(dir.join("garbage"), &garbage).expect("write garbage");
    let exe = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/hostile/replay.py");
    let manifest = json!({"name": "replay", "exec": exe, "args": [dir.join("garbage")]});
    std::fs::write(dir.join("extension.json"), manifest.to_string()).expect("write manifest");
    let mut rpc = Rpc::start(&t, &[dir]);
    rpc.until("the \"replay done\" note after the random frames", |v| {
        v["type"] == "notify" && v["message"] == "replay done"
    });
    let pong = rpc.call("after", json!({"type": "command", "name": "ping"}));
    assert_eq!(pong["data"]["display"], "pong", "{pong}");
    assert!(log_of(&t, "replay").contains("dropped frame"));
    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0), "zot rpc did not exit cleanly");
}

#[test]
fn random_requests_each_get_one_response() {
    let seed = seed();
    let _report = SeedReport(seed);
    let mut rng = Rng(seed ^ 0x00ff_00ff);
    let templates = request_templates();
    let t = TempDir::new("fuzz-rpc");
    let mut rpc = Rpc::start(&t, &[]);
    let mut expected = 0;
    let mut input = Vec::new();
    for _ in 0..LINES {
        let line = mutated_line(&mut rng, &templates);
        expected += usize::from(!is_blank(&line));
        input.extend(line);
        input.push(b'\n');
    }
    rpc.send_bytes(&input);
    rpc.send(json!({"type": "ping", "id": "last"}));
    let end = std::time::Instant::now() + DEADLINE;
    let responses = |rpc: &Rpc| rpc.seen.iter().filter(|v| v["type"] == "response").count();
    while responses(&rpc) < expected + 1 {
        assert!(
            std::time::Instant::now() < end && rpc.next().is_some(),
            "{} of {} lines answered",
            responses(&rpc),
            expected + 1
        );
    }
    assert_eq!(rpc.response("last")["data"]["pong"], true);
    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0), "zot rpc did not exit cleanly");
    assert_eq!(responses(&rpc), expected + 1, "one response per line");
}
