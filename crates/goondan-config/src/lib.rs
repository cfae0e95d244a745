//! Loads a Goondan bundle from YAML, validates it and resolves references, or reports every problem at once.
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]
