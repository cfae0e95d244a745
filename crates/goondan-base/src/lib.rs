//! The `@goondan/base` package: the built-in tools and extensions compiled
//! into the binary, reached through `builtin:<name>` entries.
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

mod args;
pub mod error;
pub mod tools;

pub use error::BuiltinToolError;
