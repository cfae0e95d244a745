//! The Goondan execution core and orchestrator: pipeline, Turn/Step loop, tools, extensions, IPC, supervision.
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]
