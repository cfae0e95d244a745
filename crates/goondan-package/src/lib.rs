//! Goondan packages (`bundle_package.md`): resolving a bundle's
//! dependencies to exact versions, `goondan.lock.yaml`, tarballs with
//! `sha512-` integrity, installing under the System Root's `packages/`,
//! and both ends of the registry API (the client, and the server of
//! `gdn registry serve`).
//!
//! Loading installed packages is not here: the bundle loader
//! (`goondan-config`) reads the lockfile and the unpacked folders itself,
//! so an AgentProcess never links network or archive code paths it does
//! not run. This crate is used only by `gdn`'s package and registry
//! commands and by `gdn run` before it starts anything.
//!
//! Invariant: a tarball reaches the disk only through
//! [`tarball::unpack`], and an installed package only after its
//! integrity matched.
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

mod dependency_edit;
mod error;
mod fsutil;
pub mod install;
pub mod integrity;
pub mod manifest;
pub mod metadata;
pub mod name;
pub mod publish;
pub mod registry;
pub mod resolve;
pub mod settings;
pub mod tarball;

pub use error::PackageError;
