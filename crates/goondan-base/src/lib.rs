//! The @goondan/base package: built-in tools and extensions compiled into the binary.
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]
