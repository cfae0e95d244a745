//! Following logs as they grow: one file ([`FollowedLog`]), and every
//! runtime-event log of a workspace ([`WorkspaceFollower`]), the one
//! follower behind the Studio's live stream, `gdn logs -f` and the
//! activity lines of `gdn run` on a terminal.
//!
//! # Why polling
//!
//! Each look stats the files and reads what they gained; the callers look
//! every 50 to 200 ms. File events (`notify`, which `gdn run --watch`
//! uses for the bundle) were weighed and not taken: the logs sit under
//! the System Root, which may be on a file system without inotify (a
//! network mount in a container), a watch per instance folder is one more
//! kernel object per instance in the process of `gdn run` that also holds
//! the orchestrator's children, and a watch missed or overflowed would
//! need this very rescan to recover. A stat per log per look is cheap,
//! and a look that finds nothing reads nothing.
//!
//! What neither does: read what was there before they began (that is
//! [`crate::tail`]'s and [`crate::read_runtime_events`]'s job, whose
//! report says where following goes on).

mod log;
mod workspace;

pub use log::{FollowedLog, ANCHOR_BYTES, MAX_READ_PER_LOOK};
pub use workspace::{
    FollowFrom, FollowOptions, FollowStats, FollowedEvent, LoggedEvent, WorkspaceFollower,
};
