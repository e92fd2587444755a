#!/bin/sh
# {{name}}: a zot extension in POSIX sh with jq (made with `zot ext new`).
#
# zot starts this script and speaks JSON lines with it: one JSON object
# per line, frames from zot on our stdin, our frames on stdout. stdout is
# for frames only; everything else goes to stderr, which zot keeps in
# $ZOT_HOME/logs/ext-{{name}}.log (`zot ext logs {{name}}`).
#
#   /{{name}} [who]   a slash command: says hello
#   {{tool}}          a tool the model can call: echoes `text`
#
# Try it:   zot -e .   then   /{{name}} you   and   /call {{tool}} {"text": "hi"}
# Check it: zot ext check . --call {{tool}} '{"text": "hi"}' --command {{name}} you

NAME='{{name}}'
TOOL='{{tool}}'

log() { printf '[%s] %s\n' "$NAME" "$*" >&2; }

# One frame: one JSON object on one line. printf is not buffered.
send() { printf '%s\n' "$1"; }

command -v jq >/dev/null 2>&1 || {
	log "jq is required (apt install jq, brew install jq)"
	exit 1
}

# The tool's arguments as a JSON Schema: the model reads it to know what to send.
SCHEMA='{"type":"object","properties":{"text":{"type":"string","description":"the text to echo"},"upper":{"type":"boolean","description":"echo it in capitals (default false)"}},"required":["text"],"additionalProperties":false}'

# The tool, as a jq program over the tool_call frame. It checks the
# arguments first: the model can send anything.
ECHO='
def problem:
  if type != "object" then "the arguments must be an object"
  elif (keys - ["text", "upper"]) != [] then "unknown argument(s): " + ((keys - ["text", "upper"]) | join(", "))
  elif (.text | type) != "string" then "`text` is required and must be a string"
  elif has("upper") and (.upper | type) != "boolean" then "`upper` must be true or false"
  else null end;
(.args | problem) as $problem
| {type: "tool_result", id: .id,
   is_error: ($problem != null),
   content: [{type: "text",
              text: ($problem // (if .args.upper then .args.text | ascii_upcase else .args.text end))}]}'

# The tool's registration, made with jq before hello (see below why).
REGISTER_TOOL=$(jq -cn --arg name "$TOOL" --argjson schema "$SCHEMA" \
	'{type: "register_tool", name: $name, schema: $schema,
	  description: "Echo `text` back, in capitals when `upper` is true."}')

# 1. The first line we write is hello, with the manifest's name.
send '{"type":"hello","name":"'"$NAME"'","version":"0.1.0","capabilities":["commands","tools"]}'

# zot writes compact JSON with "type" first, so the start of a line says
# which frame it is, without starting jq: after hello, zot counts 250 ms
# of silence as "registered", and jq can take that long on a busy machine.
while IFS= read -r line; do
	case $line in
	'{"type":"hello_ack"'[,}]*)
		# 2. Register after hello_ack, then say ready (zot stops waiting for us).
		send '{"type":"register_command","name":"'"$NAME"'","description":"say hello (try /'"$NAME"' you)"}'
		send "$REGISTER_TOOL"
		send '{"type":"ready"}'
		log ready
		;;
	'{"type":"command_invoked"'[,}]*)
		# 3. Requests carry an id; the answer carries the same id.
		send "$(printf '%s' "$line" | jq -c --arg name "$NAME" '
			if .name == $name
			then {type: "command_response", id: .id, action: "display",
			      display: ("hello, " + (if (.args // "") == "" then "world" else .args end) + "!")}
			else {type: "command_response", id: .id, action: "noop", error: ("unknown command " + .name)}
			end')"
		;;
	'{"type":"tool_call"'[,}]*)
		send "$(printf '%s' "$line" | jq -c --arg name "$TOOL" "
			if .name == \$name then $ECHO
			else {type: \"tool_result\", id: .id, is_error: true,
			      content: [{type: \"text\", text: (\"unknown tool \" + .name)}]}
			end")"
		;;
	'{"type":"shutdown"'[,}]*)
		# 4. Acknowledge and exit: zot stops whatever still runs after 2 s.
		send '{"type":"shutdown_ack"}'
		log bye
		exit 0
		;;
	esac
	# Other frames (event, event_intercept, ...) come only after a subscribe.
done
