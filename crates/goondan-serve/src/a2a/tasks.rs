//! The Tasks the server remembers.

/// The Tasks, running and ended.
pub(crate) struct Tasks {
    limit: usize,
}

impl Tasks {
    pub(crate) fn new(limit: usize) -> Tasks {
        Tasks { limit }
    }
}
