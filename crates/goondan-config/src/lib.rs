//! Loads a Goondan bundle from YAML, validates it and resolves its
//! references, or reports every problem at once.
//!
//! ```no_run
//! use goondan_config::{load_bundle, LoadOptions};
//! let outcome = load_bundle("examples/two-agents".as_ref(), &LoadOptions::default())?;
//! for diagnostic in &outcome.diagnostics {
//!     eprintln!("{diagnostic}");
//! }
//! if let Some(bundle) = outcome.bundle {
//!     let swarm = bundle.default_swarm().expect("one swarm");
//!     for agent in swarm.agents() {
//!         println!("{} uses {}", agent.name(), agent.model().spec.model);
//!     }
//! }
//! # Ok::<(), goondan_config::LoadError>(())
//! ```
//!
//! The crate owns the bundle format (`bundle.md`, `resources.md`): file
//! discovery, YAML safety limits, the eight kinds as strict typed specs,
//! reference resolution against the bundle and the embedded
//! `@goondan/base` package, and the environment (`.env` files) that
//! ValueSources resolve against. It does no runtime work: it never starts
//! a process, calls a model or writes state.
//!
//! Invariant: a [`Bundle`] exists only when no diagnostic is an error, so
//! every reference inside it resolves.
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod approvals;
mod base_package;
mod bundle;
mod codes;
mod discover;
mod env;
mod error;
pub mod fix;
mod loader;
pub mod lockfile;
mod paths;
mod resource;
pub mod spec;
mod suggest;
pub mod yaml;

pub use base_package::{builtin_names, BASE_PACKAGE, BUILTIN_PREFIX};
pub use bundle::{AgentView, Bundle, ConnectionView, SwarmView};
pub use codes::Code;
pub use env::EnvMap;
pub use error::{LoadError, ResolveError};
pub use loader::{load_bundle, LoadOptions, LoadOutcome};
pub use resource::{Kind, Metadata, Origin, Resource};
