//! libFuzzer entry for `goondan_fuzz::ipc_line`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| goondan_fuzz::ipc_line(data));
