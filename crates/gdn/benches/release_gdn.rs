//! Shared by the benches that time the release `gdn` from outside: where
//! it is.

use std::path::{Path, PathBuf};

/// The release binary: `GDN`, else the workspace's `target/release/gdn`.
pub fn gdn_binary() -> PathBuf {
    let path = std::env::var_os("GDN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
            target.join("release/gdn")
        });
    assert!(
        path.is_file(),
        "{} is missing: build it with `cargo build --release -p gdn`, or set GDN",
        path.display()
    );
    path
}
