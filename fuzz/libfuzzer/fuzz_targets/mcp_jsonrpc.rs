//! libFuzzer entry for `goondan_fuzz::mcp_jsonrpc`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| goondan_fuzz::mcp_jsonrpc(data));
