//! The registry: its HTTP client and the server `gdn registry serve`
//! runs. Both speak the wire types of [`crate::metadata`].

pub mod client;
pub mod server;
