//! The built-in tools of `@goondan/base`, one module per Tool resource.

pub mod bash;
pub mod file_system;
pub mod http_fetch;
pub mod json_query;
pub mod text_transform;
pub mod wait;
mod workdir;
