//! libFuzzer entry for `goondan_fuzz::config_bundle`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| goondan_fuzz::config_bundle(data));
