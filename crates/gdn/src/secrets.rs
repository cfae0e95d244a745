//! Marking the processes that hold secrets non-dumpable. Which secrets a
//! child receives is `goondan_host::secrets`; the handshake itself is
//! `goondan_ipc::handshake`; masking tool results is
//! `goondan_runtime::tool::mask_tool_result`.

/// Marks this process non-dumpable (Linux `PR_SET_DUMPABLE` 0): no core
/// dump, no `ptrace` by other processes of the same user, and its
/// `/proc/<pid>/environ` and `/proc/<pid>/mem` become unreadable to them,
/// so a tool the model runs cannot read the keys this process holds from
/// its parent's memory or environment. The flag is reset on `exec`, so
/// the children this process starts are not affected. Other platforms
/// have no such switch; there, secrets rely on the handshake and the
/// masking alone.
pub(crate) fn make_non_dumpable() {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if let Err(error) = nix::sys::prctl::set_dumpable(false) {
        eprintln!("warning: could not mark the process non-dumpable: {error}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn the_process_becomes_non_dumpable() {
        make_non_dumpable();
        assert!(!nix::sys::prctl::get_dumpable().unwrap());
    }
}
