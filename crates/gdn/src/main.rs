//! The `gdn` binary: parses arguments, resolves configuration, calls the
//! libraries and renders their errors. It owns no domain logic.

fn main() {
    println!("gdn {}", env!("CARGO_PKG_VERSION"));
}
