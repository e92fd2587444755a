// {{name}}: a zot extension in Node.js (made with `zot ext new`).
//
// zot starts `node index.js` here and speaks JSON lines with it: one JSON
// object per line, frames from zot on our stdin, our frames on stdout.
// stdout is for frames only (no console.log!); everything else goes to
// stderr, which zot keeps in $ZOT_HOME/logs/ext-{{name}}.log
// (`zot ext logs {{name}}`).
//
//   /{{name}} [who]   a slash command: says hello
//   {{tool}}          a tool the model can call: echoes `text`
//
// Try it:   zot -e .   then   /{{name}} you   and   /call {{tool}} {"text": "hi"}
// Check it: zot ext check . --call {{tool}} '{"text": "hi"}' --command {{name}} you
"use strict";

const readline = require("node:readline");

const NAME = "{{name}}";
const TOOL = "{{tool}}";

// The tool's arguments as a JSON Schema: the model reads it to know what to send.
const SCHEMA = {
  type: "object",
  properties: {
    text: { type: "string", description: "the text to echo" },
    upper: { type: "boolean", description: "echo it in capitals (default false)" },
  },
  required: ["text"],
  additionalProperties: false,
};

// One frame: one JSON object on one line.
function send(frame) {
  process.stdout.write(JSON.stringify(frame) + "\n");
}

// Logs go to stderr: a stray console.log on stdout would break the protocol.
function log(message) {
  process.stderr.write(`[${NAME}] ${message}\n`);
}

// The command's answer: display a note (or "prompt", "insert", "noop").
function greet(args) {
  return { action: "display", display: `hello, ${args || "world"}!` };
}

// [text, isError]. Check the arguments: the model can send anything.
function echo(args) {
  if (typeof args !== "object" || args === null || Array.isArray(args)) {
    return ["the arguments must be an object", true];
  }
  const unknown = Object.keys(args).filter((k) => !(k in SCHEMA.properties)).sort();
  if (unknown.length > 0) {
    return [`unknown argument(s): ${unknown.join(", ")}`, true];
  }
  const { text, upper = false } = args;
  if (typeof text !== "string") {
    return ["`text` is required and must be a string", true];
  }
  if (typeof upper !== "boolean") {
    return ["`upper` must be true or false", true];
  }
  return [upper ? text.toUpperCase() : text, false];
}

// 1. The first line we write is hello, with the manifest's name.
send({ type: "hello", name: NAME, version: "0.1.0", capabilities: ["commands", "tools"] });

const input = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
input.on("line", (line) => {
  let frame;
  try {
    frame = JSON.parse(line);
  } catch {
    log(`ignored a line that is not JSON: ${line}`);
    return;
  }
  switch (frame.type) {
    case "hello_ack":
      // 2. Register after hello_ack, then say ready (zot stops waiting for us).
      //    frame.cwd is the user's project directory; ours is this directory.
      send({ type: "register_command", name: NAME, description: `say hello (try /${NAME} you)` });
      send({
        type: "register_tool",
        name: TOOL,
        description: "Echo `text` back, in capitals when `upper` is true.",
        schema: SCHEMA,
      });
      send({ type: "ready" });
      log("ready");
      break;
    case "command_invoked": {
      // 3. Requests carry an id; the answer carries the same id.
      const reply =
        frame.name === NAME
          ? greet(frame.args)
          : { action: "noop", error: `unknown command ${frame.name}` };
      send({ type: "command_response", id: frame.id, ...reply });
      break;
    }
    case "tool_call": {
      const [text, isError] =
        frame.name === TOOL ? echo(frame.args) : [`unknown tool ${frame.name}`, true];
      send({ type: "tool_result", id: frame.id, is_error: isError, content: [{ type: "text", text }] });
      break;
    }
    case "shutdown":
      // 4. Acknowledge and exit once the ack is written: zot stops
      //    whatever still runs after 2 s.
      log("bye");
      process.stdout.write(JSON.stringify({ type: "shutdown_ack" }) + "\n", () => process.exit(0));
      break;
    // Other frames (event, event_intercept, ...) come only after a subscribe.
  }
});
