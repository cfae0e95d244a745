//! Failures of the agent's shared bash sandbox (`shared`) that are not
//! the operating system's own errors. They travel inside an
//! [`std::io::Error`] (the crate's spawn functions return `io::Result`,
//! like std's), from which a caller can take them back with
//! `get_ref()` and `downcast_ref`.

/// Why a command could not run in the agent's shared sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SharedError {
    /// The helper exited (it was killed, or the namespace could not
    /// fork) before it reported the command's start.
    #[error("the bash sandbox helper exited before the command started")]
    HelperExited,
    /// The thread that starts the helper and reads its replies ended
    /// before the helper was ready.
    #[error("the bash sandbox helper's thread ended before the helper was ready")]
    ThreadEnded,
}

impl SharedError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            SharedError::HelperExited => "E_SANDBOX_HELPER_EXITED",
            SharedError::ThreadEnded => "E_SANDBOX_HELPER_THREAD",
        }
    }

    /// What to do about it: the next command starts a new helper.
    pub fn suggestion(&self) -> &'static str {
        "Run the command again: the next one starts a new sandbox helper."
    }
}

impl From<SharedError> for std::io::Error {
    fn from(error: SharedError) -> std::io::Error {
        std::io::Error::other(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_survive_the_trip_through_io_error() {
        for error in [SharedError::HelperExited, SharedError::ThreadEnded] {
            let io_error = std::io::Error::from(error);
            let back = io_error
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<SharedError>())
                .unwrap();
            assert_eq!(back, &error);
            assert!(back.code().starts_with("E_SANDBOX_"));
        }
    }
}
