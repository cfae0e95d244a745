//! libFuzzer entry for `goondan_fuzz::connector_request`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| goondan_fuzz::connector_request(data));
