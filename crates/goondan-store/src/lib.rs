//! Durable state of Goondan instances under the System Root: event-sourced message logs, metadata, extension state.
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]
