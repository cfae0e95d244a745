//! The one way `gdn` builds its async runtime: one thread, IO and timers
//! on. Every process `gdn` is (a command, an orchestrator, an agent, a
//! connector) runs its work on it; heavy work goes to blocking tasks.

use anyhow::Context;

/// A current-thread tokio runtime with IO and timers.
pub(crate) fn current_thread() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}
