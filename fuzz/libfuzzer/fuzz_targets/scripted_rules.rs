//! libFuzzer entry for `goondan_fuzz::scripted_rules`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| goondan_fuzz::scripted_rules(data));
