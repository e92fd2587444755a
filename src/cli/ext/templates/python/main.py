#!/usr/bin/env python3
"""{{name}}: a zot extension in Python (made with `zot ext new`).

zot starts this program and speaks JSON lines with it: one JSON object
per line, frames from zot on our stdin, our frames on stdout. stdout is
for frames only; everything else goes to stderr, which zot keeps in
$ZOT_HOME/logs/ext-{{name}}.log (`zot ext logs {{name}}`).

  /{{name}} [who]   a slash command: says hello
  {{tool}}          a tool the model can call: echoes `text`

Try it:   zot -e .   then   /{{name}} you   and   /call {{tool}} {"text": "hi"}
Check it: zot ext check . --call {{tool}} '{"text": "hi"}' --command {{name}} you
"""
import json
import sys

NAME = "{{name}}"
TOOL = "{{tool}}"

# The tool's arguments as a JSON Schema: the model reads it to know what to send.
SCHEMA = {
    "type": "object",
    "properties": {
        "text": {"type": "string", "description": "the text to echo"},
        "upper": {"type": "boolean", "description": "echo it in capitals (default false)"},
    },
    "required": ["text"],
    "additionalProperties": False,
}


def send(frame):
    """One frame: one JSON object on one line, flushed at once."""
    sys.stdout.write(json.dumps(frame) + "\n")
    sys.stdout.flush()


def log(message):
    """Logs go to stderr: a stray print on stdout would break the protocol."""
    print(f"[{NAME}] {message}", file=sys.stderr, flush=True)


def greet(args):
    """The command's answer: display a note (or "prompt", "insert", "noop")."""
    return {"action": "display", "display": f"hello, {args or 'world'}!"}


def echo(args):
    """(text, is_error). Check the arguments: the model can send anything."""
    if not isinstance(args, dict):
        return "the arguments must be an object", True
    unknown = sorted(set(args) - set(SCHEMA["properties"]))
    if unknown:
        return f"unknown argument(s): {', '.join(unknown)}", True
    text, upper = args.get("text"), args.get("upper", False)
    if not isinstance(text, str):
        return "`text` is required and must be a string", True
    if not isinstance(upper, bool):
        return "`upper` must be true or false", True
    return (text.upper() if upper else text), False


# 1. The first line we write is hello, with the manifest's name.
send({"type": "hello", "name": NAME, "version": "0.1.0", "capabilities": ["commands", "tools"]})

for line in sys.stdin:
    try:
        frame = json.loads(line)
    except ValueError:
        log(f"ignored a line that is not JSON: {line!r}")
        continue
    kind = frame.get("type")
    if kind == "hello_ack":
        # 2. Register after hello_ack, then say ready (zot stops waiting for us).
        #    frame["cwd"] is the user's project directory; ours is this directory.
        send({"type": "register_command", "name": NAME,
              "description": f"say hello (try /{NAME} you)"})
        send({"type": "register_tool", "name": TOOL, "schema": SCHEMA,
              "description": "Echo `text` back, in capitals when `upper` is true."})
        send({"type": "ready"})
        log("ready")
    elif kind == "command_invoked":
        # 3. Requests carry an id; the answer carries the same id.
        if frame.get("name") == NAME:
            reply = greet(frame.get("args", ""))
        else:
            reply = {"action": "noop", "error": f"unknown command {frame.get('name')}"}
        send({"type": "command_response", "id": frame.get("id"), **reply})
    elif kind == "tool_call":
        if frame.get("name") == TOOL:
            text, is_error = echo(frame.get("args"))
        else:
            text, is_error = f"unknown tool {frame.get('name')}", True
        send({"type": "tool_result", "id": frame.get("id"), "is_error": is_error,
              "content": [{"type": "text", "text": text}]})
    elif kind == "shutdown":
        # 4. Acknowledge and exit: zot stops whatever still runs after 2 s.
        send({"type": "shutdown_ack"})
        break
    # Other frames (event, event_intercept, ...) come only after a subscribe.
log("bye")
