//! Storage errors, each with a stable code.

use std::path::PathBuf;
use thiserror::Error;

/// A failed storage operation.
#[derive(Debug, Error)]
pub enum StoreError {
    /// A filesystem operation failed.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What was being done, for example `appending to`.
        action: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

impl StoreError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            StoreError::Io { .. } => "E_STORE_IO",
        }
    }
}
