//! libFuzzer entry for `goondan_fuzz::package_tarball`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| goondan_fuzz::package_tarball(data));
