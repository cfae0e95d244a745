//! What keeps secrets (API keys, every variable a bundle reads through
//! `valueFrom.env`) away from the model and the tools it runs, on the
//! binary's side: which variables the orchestrator withholds from its
//! children and hands over in the spawn handshake instead, and marking the
//! processes that hold them non-dumpable. The handshake itself is
//! `goondan_ipc::handshake`; masking tool results is
//! `goondan_runtime::tool::mask_tool_result`.

use goondan_config::Bundle;
use goondan_types::Secrets;

/// The secrets a spawned child receives in its handshake, and every
/// secret variable name (set or not) removed from its exec environment.
pub(crate) fn for_children(bundle: &Bundle) -> (Secrets, Vec<String>) {
    let defaults = goondan_model::DEFAULT_KEY_VARIABLES;
    let secrets = bundle.secrets(defaults);
    let withheld = bundle
        .env_references()
        .into_iter()
        .chain(defaults.iter().copied())
        .map(str::to_string)
        .collect();
    (secrets, withheld)
}

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
