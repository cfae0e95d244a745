//! The MCP JSON-RPC decoder: a message body or line parsed as JSON and
//! classified by `goondan_mcp::jsonrpc::Incoming::classify`, as the MCP
//! server (stdio and HTTP) and client read what a peer sent.

use goondan_mcp::jsonrpc::Incoming;
use serde_json::Value;

/// Parses `data` as JSON and classifies it as a request, notification or
/// response.
pub fn mcp_jsonrpc(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let _ = Incoming::classify(value);
}
