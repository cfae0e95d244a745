"""A tiny MCP server over stdio: one tool, `define`, answering from a
glossary. Newline-delimited JSON-RPC 2.0 on stdin/stdout, as the MCP stdio
transport specifies; written by hand to show how little a server needs."""
import json
import sys

GLOSSARY = {
    "swarm": "A set of agents that answer together; one of them is the entry agent.",
    "turn": "One input handled by an agent: model calls and tool calls until it answers.",
    "connector": "A process that turns a platform's events (a webhook, a bot) into agent input.",
}

TOOLS = [
    {
        "name": "define",
        "description": "Look a term up in the glossary.",
        "inputSchema": {
            "type": "object",
            "properties": {"term": {"type": "string"}},
            "required": ["term"],
        },
    }
]


def answer(request):
    method = request.get("method")
    params = request.get("params") or {}
    if method == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "glossary", "version": "1.0.0"},
        }
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call" and params.get("name") == "define":
        term = str(params.get("arguments", {}).get("term", "")).strip().lower()
        text = GLOSSARY.get(term)
        if text is None:
            return {"content": [{"type": "text", "text": f"no entry for {term!r}"}], "isError": True}
        return {"content": [{"type": "text", "text": f"{term}: {text}"}]}
    raise LookupError(f"unknown method {method}")


for line in sys.stdin:
    request = json.loads(line)
    if "id" not in request:
        continue  # a notification (initialized, cancelled)
    try:
        reply = {"jsonrpc": "2.0", "id": request["id"], "result": answer(request)}
    except LookupError as error:
        reply = {"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32601, "message": str(error)}}
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()
