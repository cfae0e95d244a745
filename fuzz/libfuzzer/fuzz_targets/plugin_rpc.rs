//! libFuzzer entry for `goondan_fuzz::plugin_rpc`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| goondan_fuzz::plugin_rpc(data));
