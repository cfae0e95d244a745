//! Links `gdn` as a position-dependent executable on Linux (issue 37).
//!
//! Every agent and connector process is this binary. As a PIE it starts by
//! applying a relocation to every pointer in its read-only data (vtables,
//! string tables: about 1.5 MB of `.data.rel.ro`), which costs each
//! process start milliseconds and turns those pages into private dirty
//! memory in every process. Linked at a fixed address, the pointers are
//! final in the file: nothing to relocate, and the pages stay clean and
//! shared by every agent. What is given up is the randomized address of
//! this one executable's code and data; the heap, the stacks, libc and the
//! loader stay randomized (SECURITY.md). `GOONDAN_PIE=1` at build time
//! keeps the PIE.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=GOONDAN_PIE");
    let pie = std::env::var("GOONDAN_PIE").is_ok_and(|value| value == "1");
    if !pie && std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
}
