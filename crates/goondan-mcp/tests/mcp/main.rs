//! goondan-mcp against real MCP server processes: the fixture server
//! (`tests/fixtures/mcp_server.py`, JSON-RPC by hand) over stdio and over
//! streamable HTTP on 127.0.0.1, the `mcp` extension inside a real Agent
//! with a scripted model, and the server core of `gdn mcp serve`.

mod client;
mod harness;
mod server;
