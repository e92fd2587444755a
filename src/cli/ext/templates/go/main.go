// {{name}}: a zot extension in Go, standard library only (made with `zot ext new`).
//
// Build it first (Go 1.19 or newer): go build -o {{name}} .
//
// zot starts ./{{name}} and speaks JSON lines with it: one JSON object per
// line, frames from zot on our stdin, our frames on stdout. stdout is for
// frames only (no fmt.Println!); everything else goes to stderr, which zot
// keeps in $ZOT_HOME/logs/ext-{{name}}.log (`zot ext logs {{name}}`).
//
//	/{{name}} [who]   a slash command: says hello
//	{{tool}}          a tool the model can call: echoes `text`
//
// Try it:   zot -e .   then   /{{name}} you   and   /call {{tool}} {"text": "hi"}
// Check it: zot ext check . --call {{tool}} '{"text": "hi"}' --command {{name}} you
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
)

const (
	name = "{{name}}"
	tool = "{{tool}}"
)

// The tool's arguments as a JSON Schema: the model reads it to know what to send.
var schema = json.RawMessage(`{"type":"object",
	"properties":{"text":{"type":"string","description":"the text to echo"},
	              "upper":{"type":"boolean","description":"echo it in capitals (default false)"}},
	"required":["text"],"additionalProperties":false}`)

// frame holds the fields of every frame zot sends that we use; the
// others are ignored. Args is a string for commands, an object for tools.
type frame struct {
	Type string          `json:"type"`
	ID   string          `json:"id"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
	CWD  string          `json:"cwd"`
}

var out = bufio.NewWriter(os.Stdout)

// send writes one frame: one JSON object on one line, flushed at once.
func send(v map[string]any) {
	line, err := json.Marshal(v)
	if err != nil {
		logf("cannot encode a frame: %v", err)
		return
	}
	out.Write(append(line, '\n'))
	out.Flush()
}

// logf writes to stderr: a stray print on stdout would break the protocol.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "["+name+"] "+format+"\n", args...)
}

// greet is the command's answer: display a note (or "prompt", "insert", "noop").
func greet(args string) map[string]any {
	if args == "" {
		args = "world"
	}
	return map[string]any{"action": "display", "display": "hello, " + args + "!"}
}

// echo runs the tool. It checks the arguments: the model can send anything.
func echo(raw json.RawMessage) (text string, isError bool) {
	var args map[string]json.RawMessage
	if err := json.Unmarshal(raw, &args); err != nil || args == nil {
		return "the arguments must be an object", true
	}
	var unknown []string
	for key := range args {
		if key != "text" && key != "upper" {
			unknown = append(unknown, key)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return "unknown argument(s): " + strings.Join(unknown, ", "), true
	}
	var upper bool
	if given, ok := args["upper"]; ok && json.Unmarshal(given, &upper) != nil {
		return "`upper` must be true or false", true
	}
	// A JSON null would decode into an empty string without an error.
	given, ok := args["text"]
	if !ok || string(given) == "null" || json.Unmarshal(given, &text) != nil {
		return "`text` is required and must be a string", true
	}
	if upper {
		text = strings.ToUpper(text)
	}
	return text, false
}

func main() {
	// 1. The first line we write is hello, with the manifest's name.
	send(map[string]any{"type": "hello", "name": name, "version": "0.1.0",
		"capabilities": []string{"commands", "tools"}})

	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for in.Scan() {
		var f frame
		if err := json.Unmarshal(in.Bytes(), &f); err != nil {
			logf("ignored a line that is not a frame: %v", err)
			continue
		}
		switch f.Type {
		case "hello_ack":
			// 2. Register after hello_ack, then say ready (zot stops waiting for us).
			//    f.CWD is the user's project directory; ours is this directory.
			send(map[string]any{"type": "register_command", "name": name,
				"description": "say hello (try /" + name + " you)"})
			send(map[string]any{"type": "register_tool", "name": tool, "schema": schema,
				"description": "Echo `text` back, in capitals when `upper` is true."})
			send(map[string]any{"type": "ready"})
			logf("ready")
		case "command_invoked":
			// 3. Requests carry an id; the answer carries the same id.
			reply := map[string]any{"action": "noop", "error": "unknown command " + f.Name}
			var args string
			if f.Name == name && json.Unmarshal(f.Args, &args) == nil {
				reply = greet(args)
			}
			reply["type"], reply["id"] = "command_response", f.ID
			send(reply)
		case "tool_call":
			text, isError := "unknown tool "+f.Name, true
			if f.Name == tool {
				text, isError = echo(f.Args)
			}
			send(map[string]any{"type": "tool_result", "id": f.ID, "is_error": isError,
				"content": []map[string]any{{"type": "text", "text": text}}})
		case "shutdown":
			// 4. Acknowledge and exit: zot stops whatever still runs after 2 s.
			send(map[string]any{"type": "shutdown_ack"})
			logf("bye")
			return
		}
		// Other frames (event, event_intercept, ...) come only after a subscribe.
	}
}
