//! Where state lives: the System Root, workspace ids, instance folders and
//! the orchestrator's `runtime/` files (`workspace.md` §3, §6, §7).
//!
//! This module computes paths; its only IO is [`StateRoot::initialize`],
//! [`StateRoot::list_workspaces`] and the one check of
//! [`StateRoot::workspace`] for a workspace the original wrote. These
//! rules shape it:
//!
//! - Every name derived from user input (instance keys, agent names,
//!   extension names) goes through [`encode_path_component`], a reversible
//!   escaping that keeps the original's folder names for ordinary keys
//!   (`coder:user:123`) and makes `../x`, `.`, `/`, unicode and 300-character
//!   keys land in one safe folder each.
//! - An instance folder is keyed by `agentName:instanceKey`, the routing
//!   key, as the original does: two agents serving the same instance key
//!   keep separate conversations.
//! - A swarm's runtime (its workspace, control socket, lock and active
//!   record) is keyed by the Swarm's instance key *and* its bundle's
//!   identity (the bundle scope, [`bundle_scope`]), so two projects whose
//!   swarms share an instance key never share an orchestrator or a
//!   conversation on one System Root.

use crate::StoreError;
use goondan_types::placement::fnv1a64;
use goondan_types::RoutingKey;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Longest encoded name kept verbatim; longer ones are cut and suffixed
/// with a hash. Well under the 255-byte limit of common filesystems, with
/// room for `.json`, `.tmp` and the lock-file suffixes.
const MAX_COMPONENT_BYTES: usize = 160;
/// Bytes of the encoded prefix kept in front of the hash of a cut name.
const CUT_PREFIX_BYTES: usize = 140;
/// Unix socket paths must fit `sun_path` (108 bytes on Linux, 104 on macOS,
/// both counting the terminating NUL); this bound leaves room for either.
pub const MAX_SOCKET_PATH_BYTES: usize = 100;
/// The environment variable through which an orchestrator hands its bundle
/// scope to the AgentProcesses it spawns, so they open the workspace it
/// chose without recomputing the bundle's identity.
pub const BUNDLE_SCOPE_ENV: &str = "GOONDAN_BUNDLE_SCOPE";

/// The inputs that decide the System Root, gathered by the caller so that
/// tests never touch the process environment.
#[derive(Debug, Clone, Default)]
pub struct StateRootSources {
    /// `--state-root` from the command line.
    pub cli_state_root: Option<PathBuf>,
    /// The value of `GOONDAN_STATE_ROOT`.
    pub env_state_root: Option<OsString>,
    /// The user's home folder.
    pub home_dir: Option<PathBuf>,
    /// The value of [`BUNDLE_SCOPE_ENV`], set by an orchestrator for the
    /// processes it spawns.
    pub env_bundle_scope: Option<OsString>,
}

impl StateRootSources {
    /// Reads `GOONDAN_STATE_ROOT` and `HOME` from the process environment.
    pub fn from_process_env(cli_state_root: Option<PathBuf>) -> Self {
        StateRootSources {
            cli_state_root,
            env_state_root: std::env::var_os("GOONDAN_STATE_ROOT"),
            home_dir: std::env::var_os("HOME").map(PathBuf::from),
            env_bundle_scope: std::env::var_os(BUNDLE_SCOPE_ENV),
        }
    }

    /// The System Root: the CLI option, then `GOONDAN_STATE_ROOT`, then
    /// `~/.goondan`. Relative paths are made absolute against the current
    /// folder, as the original's `path.resolve` does. A bundle scope from
    /// the environment is kept only when it looks like one (hex digits), so
    /// it can never name a folder outside `workspaces/`.
    pub fn resolve(&self) -> Result<StateRoot, StoreError> {
        let chosen = if let Some(cli) = self
            .cli_state_root
            .as_ref()
            .filter(|p| !p.as_os_str().is_empty())
        {
            cli.clone()
        } else if let Some(env) = self.env_state_root.as_ref().filter(|v| !v.is_empty()) {
            PathBuf::from(env)
        } else if let Some(home) = self.home_dir.as_ref().filter(|p| !p.as_os_str().is_empty()) {
            home.join(".goondan")
        } else {
            return Err(StoreError::NoStateRoot);
        };
        let absolute = std::path::absolute(&chosen)
            .map_err(|source| StoreError::io("resolving", &chosen, source))?;
        let bundle_scope = self
            .env_bundle_scope
            .as_ref()
            .and_then(|scope| scope.to_str())
            .filter(|scope| is_bundle_scope(scope))
            .map(str::to_string);
        Ok(StateRoot {
            root: absolute,
            bundle_scope,
        })
    }
}

/// The System Root (`goondanHome`) and the paths under it that are not
/// per workspace, optionally scoped to one bundle (see [`bundle_scope`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateRoot {
    root: PathBuf,
    bundle_scope: Option<String>,
}

impl StateRoot {
    /// A System Root at `root`, taken as given, scoped to no bundle.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        StateRoot {
            root: root.into(),
            bundle_scope: None,
        }
    }

    /// The same System Root, its workspaces keyed by `scope` (from
    /// [`bundle_scope`]) as well as by the Swarm's instance key.
    pub fn with_bundle_scope(mut self, scope: impl Into<String>) -> Self {
        self.bundle_scope = Some(scope.into());
        self
    }

    /// The bundle scope its workspaces are keyed by, if any.
    pub fn bundle_scope(&self) -> Option<&str> {
        self.bundle_scope.as_deref()
    }

    /// The folder itself.
    pub fn path(&self) -> &Path {
        &self.root
    }

    /// `config.json`.
    pub fn config_file(&self) -> PathBuf {
        self.root.join("config.json")
    }

    /// `packages/`.
    pub fn packages_dir(&self) -> PathBuf {
        self.root.join("packages")
    }

    /// `workspaces/`.
    pub fn workspaces_dir(&self) -> PathBuf {
        self.root.join("workspaces")
    }

    /// `runtime/`: orchestrator state and process logs.
    pub fn runtime_dir(&self) -> PathBuf {
        self.root.join("runtime")
    }

    /// `runtime/active/`: one record per running orchestrator
    /// (`<workspaceId>.json`, see [`WorkspacePaths::active_file`]).
    pub fn active_dir(&self) -> PathBuf {
        self.runtime_dir().join("active")
    }

    /// `runtime/sockets/`: the control sockets and their lock files. Kept
    /// owner-only (0700) by whoever creates it.
    pub fn sockets_dir(&self) -> PathBuf {
        self.runtime_dir().join("sockets")
    }

    /// The paths of one workspace, from the Swarm's instance key
    /// (`Swarm.spec.instanceKey ?? Swarm.metadata.name`) and this root's
    /// bundle scope.
    ///
    /// A System Root the original Goondan wrote has its workspaces under
    /// the unscoped id (it knows no bundle scope): when the scoped folder
    /// does not exist but an unscoped one holds instances, that one is
    /// used in place, so its conversations go on here (the one stat this
    /// costs is paid by a command's start, not per message).
    pub fn workspace(&self, swarm_instance_key: &str) -> WorkspacePaths {
        let scoped = self.workspace_by_id(&scoped_workspace_id(
            swarm_instance_key,
            self.bundle_scope.as_deref(),
        ));
        if self.bundle_scope.is_some() && !scoped.dir.exists() {
            let original = self.workspace_by_id(&workspace_id(swarm_instance_key));
            if original.instances_dir().is_dir() {
                return original;
            }
        }
        scoped
    }

    /// The paths of a workspace whose id is already known (for listing).
    pub fn workspace_by_id(&self, workspace_id: &str) -> WorkspacePaths {
        WorkspacePaths {
            state_root: self.clone(),
            workspace_id: workspace_id.to_string(),
            dir: self.workspaces_dir().join(workspace_id),
        }
    }

    /// Creates `packages/`, `workspaces/` and `runtime/`, and an empty
    /// `config.json` (`{}`) when there is none (`workspace.md` §10.1).
    /// Existing files are left alone.
    pub fn initialize(&self) -> Result<(), StoreError> {
        for dir in [
            self.packages_dir(),
            self.workspaces_dir(),
            self.runtime_dir(),
        ] {
            crate::durability::create_dir_all(&dir)?;
        }
        let config = self.config_file();
        match crate::owner_only::open_options()
            .write(true)
            .create_new(true)
            .open(&config)
        {
            Ok(mut file) => std::io::Write::write_all(&mut file, b"{}\n")
                .map_err(|source| StoreError::io("writing", &config, source)),
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(source) => Err(StoreError::io("creating", &config, source)),
        }
    }

    /// What a Turn's sandboxed children must not see (issue 47 #1): every
    /// entry of the System Root but `packages/`, whose script entries the
    /// plugin hosts run. Read now; an entry made later is not listed.
    pub fn hidden_from_turns(&self) -> Vec<PathBuf> {
        let packages = self.packages_dir();
        std::fs::read_dir(&self.root)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .map(|entry| entry.path())
                    .filter(|path| *path != packages)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every workspace that has a folder, sorted by id.
    pub fn list_workspaces(&self) -> Result<Vec<WorkspacePaths>, StoreError> {
        let dir = self.workspaces_dir();
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(StoreError::io("listing", dir, source)),
        };
        let mut ids = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| StoreError::io("listing", &dir, source))?;
            if entry.path().is_dir() {
                ids.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        ids.sort();
        Ok(ids.iter().map(|id| self.workspace_by_id(id)).collect())
    }

    /// Fails when the System Root lies inside `project_root`: the runtime
    /// must never create state under the project (`workspace.md` §2.1).
    /// Both paths are compared as the filesystem resolves them (`..`
    /// and symlinks, issue 47), so `--state-root ../state` beside the
    /// project is outside it and a symlink into the project is not.
    pub fn ensure_outside_project(&self, project_root: &Path) -> Result<(), StoreError> {
        let project = resolved(project_root)
            .map_err(|source| StoreError::io("resolving", project_root, source))?;
        let root = resolved(&self.root)
            .map_err(|source| StoreError::io("resolving", &self.root, source))?;
        if root.starts_with(&project) {
            return Err(StoreError::StateRootInProject {
                state_root: self.root.clone(),
                project_root: project,
            });
        }
        Ok(())
    }
}

/// `path` as the filesystem resolves it: its deepest existing ancestor
/// canonicalized (symlinks and `..` followed), the rest, which does not
/// exist yet, appended with its own `.` and `..` applied.
fn resolved(path: &Path) -> std::io::Result<PathBuf> {
    let absolute = std::path::absolute(path)?;
    let mut existing = absolute.as_path();
    let mut missing = Vec::new();
    let base = loop {
        match std::fs::canonicalize(existing) {
            Ok(base) => break base,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                let Some(parent) = existing.parent() else {
                    return Err(error);
                };
                if let Some(name) = existing.file_name() {
                    missing.push(name.to_os_string());
                } else if existing.ends_with("..") {
                    missing.push("..".into());
                }
                existing = parent;
            }
            Err(error) => return Err(error),
        }
    };
    let mut resolved = base;
    for part in missing.iter().rev() {
        if part == ".." {
            resolved.pop();
        } else if part != "." {
            resolved.push(part);
        }
    }
    Ok(resolved)
}

/// The workspace id of a Swarm instance key (`workspace.md` §3.2): trimmed,
/// lowercased, every character outside `[a-z0-9._-]` replaced by `-`, runs
/// of `-` collapsed, leading and trailing `-` removed, `default` when empty,
/// at most 128 characters.
pub fn workspace_id(swarm_instance_key: &str) -> String {
    let mut slug = String::with_capacity(swarm_instance_key.len());
    for character in swarm_instance_key.trim().to_lowercase().chars() {
        let kept = character.is_ascii_lowercase()
            || character.is_ascii_digit()
            || matches!(character, '.' | '_' | '-');
        let next = if kept { character } else { '-' };
        if next == '-' && slug.ends_with('-') {
            continue;
        }
        slug.push(next);
    }
    let trimmed = slug.trim_matches('-');
    if trimmed.is_empty() {
        return "default".to_string();
    }
    // The slug is ASCII, so cutting at 128 bytes cuts at 128 characters.
    trimmed[..trimmed.len().min(128)].to_string()
}

/// The identity of a bundle as a short hex string: a hash of its canonical
/// folder path and its Package name. The original hashes the absolute
/// bundle path (`workspace.md` §2.2); the Package name is added so a
/// renamed package under the same folder starts afresh. FNV-1a is enough:
/// the scope separates one user's projects, it is no security boundary
/// (the System Root is owner-only).
pub fn bundle_scope(bundle_root: &Path, package_name: Option<&str>) -> String {
    let canonical = std::fs::canonicalize(bundle_root)
        .or_else(|_| std::path::absolute(bundle_root))
        .unwrap_or_else(|_| bundle_root.to_path_buf());
    let mut identity = canonical.as_os_str().as_encoded_bytes().to_vec();
    // A NUL never occurs in a path, so path and name cannot run together.
    identity.push(0);
    identity.extend_from_slice(package_name.unwrap_or_default().as_bytes());
    format!("{:016x}", fnv1a64(&identity))
}

fn is_bundle_scope(scope: &str) -> bool {
    (1..=16).contains(&scope.len()) && scope.bytes().all(|byte| byte.is_ascii_hexdigit())
}

/// The workspace id of a Swarm instance key within a bundle scope:
/// [`workspace_id`], suffixed with `-<scope>` when there is one.
pub fn scoped_workspace_id(swarm_instance_key: &str, bundle_scope: Option<&str>) -> String {
    let id = workspace_id(swarm_instance_key);
    match bundle_scope {
        Some(scope) => format!("{id}-{scope}"),
        None => id,
    }
}

/// The paths of one workspace (`workspaces/<workspaceId>/`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspacePaths {
    state_root: StateRoot,
    workspace_id: String,
    dir: PathBuf,
}

impl WorkspacePaths {
    /// The System Root it belongs to.
    pub fn state_root(&self) -> &StateRoot {
        &self.state_root
    }

    /// The workspace id.
    pub fn workspace_id(&self) -> &str {
        &self.workspace_id
    }

    /// `workspaces/<workspaceId>/`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `workspaces/<workspaceId>/instances/`.
    pub fn instances_dir(&self) -> PathBuf {
        self.dir.join("instances")
    }

    /// `workspaces/<workspaceId>/audit.jsonl`: one line per instance
    /// lifecycle operation (delete, reset), kept when instances go.
    pub fn audit_log(&self) -> PathBuf {
        self.dir.join("audit.jsonl")
    }

    /// `workspaces/<workspaceId>/swarm.json`: what names this workspace
    /// for a person ([`crate::WorkspaceIdentity`]).
    pub fn identity_file(&self) -> PathBuf {
        self.dir.join("swarm.json")
    }

    /// `runtime/active/<workspaceId>.json`: the orchestrator serving this
    /// workspace.
    pub fn active_file(&self) -> PathBuf {
        self.state_root
            .active_dir()
            .join(format!("{}.json", self.workspace_id))
    }

    /// `runtime/logs/<workspaceId>/`: stdout and stderr logs of the
    /// processes of this workspace's orchestrator (`cli.md` §9.3).
    pub fn runtime_logs_dir(&self) -> PathBuf {
        self.state_root
            .runtime_dir()
            .join("logs")
            .join(&self.workspace_id)
    }

    /// `runtime/logs/<workspaceId>/<process>.<stream>.log`.
    pub fn runtime_log_file(&self, process: &str, stream: &str) -> PathBuf {
        self.runtime_logs_dir().join(format!(
            "{}.{}.log",
            encode_path_component(process),
            encode_path_component(stream)
        ))
    }

    /// The control socket of this workspace's orchestrator:
    /// `runtime/sockets/<workspaceId>.sock`, or a hashed short name when
    /// the readable one would not fit a Unix socket address. The caller
    /// checks the result against [`MAX_SOCKET_PATH_BYTES`]: under a deep
    /// System Root even the short name does not fit.
    pub fn control_socket(&self) -> PathBuf {
        let sockets = self.state_root.sockets_dir();
        let readable = sockets.join(format!("{}.sock", self.workspace_id));
        if readable.as_os_str().len() <= MAX_SOCKET_PATH_BYTES {
            readable
        } else {
            sockets.join(format!(
                "{:016x}.sock",
                fnv1a64(self.workspace_id.as_bytes())
            ))
        }
    }

    /// The lock file beside the control socket, held exclusively by the
    /// one orchestrator of this workspace for its whole life.
    pub fn control_lock(&self) -> PathBuf {
        self.control_socket().with_extension("lock")
    }

    /// The folder of the instances' durable inboxes (`inbox/`): what the
    /// orchestrator accepted for each and no committed Turn consumed yet.
    pub fn inbox_dir(&self) -> PathBuf {
        self.dir.join("inbox")
    }

    /// The durable inbox of the instance `agent_name` serves for
    /// `instance_key`: `inbox/<agentName:instanceKey encoded>.jsonl`.
    pub fn inbox_file(&self, agent_name: &str, instance_key: &str) -> PathBuf {
        self.inbox_dir().join(format!(
            "{}.jsonl",
            instance_folder_name(agent_name, instance_key)
        ))
    }

    /// What the ConnectorProcess of the Connection `connection` keeps
    /// between its runs: `connections/<connection encoded>/` (the chat
    /// messages it posted for approvals, [`crate::ApprovalMessages`]).
    pub fn connection_dir(&self, connection: &str) -> PathBuf {
        self.dir
            .join("connections")
            .join(encode_path_component(connection))
    }

    /// The paths of the instance `agent_name` serves for `instance_key`.
    pub fn instance(&self, agent_name: &str, instance_key: &str) -> InstancePaths {
        let folder = instance_folder_name(agent_name, instance_key);
        InstancePaths {
            dir: self.instances_dir().join(folder),
        }
    }
}

/// The folder name of an instance: the encoded routing key
/// `agentName:instanceKey`.
pub fn instance_folder_name(agent_name: &str, instance_key: &str) -> String {
    encode_path_component(&RoutingKey::new(agent_name, instance_key).to_string())
}

/// The files of one instance (`workspace.md` §7.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstancePaths {
    dir: PathBuf,
}

impl InstancePaths {
    /// Paths of the instance stored in `dir` (as found by a listing).
    pub fn from_dir(dir: impl Into<PathBuf>) -> Self {
        InstancePaths { dir: dir.into() }
    }

    /// The instance folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `metadata.json`.
    pub fn metadata_file(&self) -> PathBuf {
        self.dir.join("metadata.json")
    }

    /// The advisory lock file held by the instance's single writer.
    pub fn lock_file(&self) -> PathBuf {
        self.dir.join("instance.lock")
    }

    /// `approvals.jsonl`: the requests for a person's decision the
    /// instance holds (see `ApprovalStore`).
    pub fn approvals_file(&self) -> PathBuf {
        self.dir.join("approvals.jsonl")
    }

    /// `messages/`.
    pub fn messages_dir(&self) -> PathBuf {
        self.dir.join("messages")
    }

    /// `messages/base.jsonl`: the committed messages.
    pub fn base_log(&self) -> PathBuf {
        self.messages_dir().join("base.jsonl")
    }

    /// `messages/events.jsonl`: the running Turn's message events.
    pub fn events_log(&self) -> PathBuf {
        self.messages_dir().join("events.jsonl")
    }

    /// `messages/runtime-events.jsonl`: observability events.
    pub fn runtime_events_log(&self) -> PathBuf {
        self.messages_dir().join("runtime-events.jsonl")
    }

    /// `messages/orphaned-events.jsonl`: events of abandoned Turns, kept
    /// verbatim for inspection and never replayed.
    pub fn orphaned_events_log(&self) -> PathBuf {
        self.messages_dir().join("orphaned-events.jsonl")
    }

    /// `extensions/`.
    pub fn extensions_dir(&self) -> PathBuf {
        self.dir.join("extensions")
    }

    /// `extensions/snapshots.jsonl`: the extension state after each Turn
    /// that changed it (`crate::extension_snapshots`). No extension's file
    /// can have this name: theirs end in `.json`.
    pub fn extension_snapshots_log(&self) -> PathBuf {
        self.extensions_dir().join("snapshots.jsonl")
    }

    /// `messages/archive/`: what rewinds cut from the log, one folder per
    /// rewind (`crate::fork_rewind`), never deleted.
    pub fn archive_dir(&self) -> PathBuf {
        self.messages_dir().join("archive")
    }

    /// `edits/`: an operator's edits of the instance, one record each
    /// (`crate::edit`), never deleted.
    pub fn edits_dir(&self) -> PathBuf {
        self.dir.join("edits")
    }

    /// `extensions/<ext-name>.json`.
    pub fn extension_state_file(&self, extension_name: &str) -> PathBuf {
        self.extensions_dir()
            .join(format!("{}.json", encode_path_component(extension_name)))
    }
}

/// Encodes `name` as one safe folder or file name.
///
/// ASCII letters, digits, `_`, `-`, `:` and `.` are kept (so ordinary keys
/// keep the original's folder names); every other byte of the UTF-8 text,
/// `%` itself and a leading `.` become `%XX` with uppercase hex. The result
/// is never empty, `.`, `..`, hidden, or contains `/` (the empty input is a
/// lone `%`); distinct inputs give
/// distinct outputs, and [`decode_path_component`] reverses it.
///
/// A result longer than 160 bytes is cut to 140 bytes (never inside an
/// escape) and suffixed with `~` and 16 hex digits of a 64-bit FNV-1a hash
/// of the input. `~` is always escaped otherwise, so a cut name never equals
/// an uncut one; its input can no longer be decoded from the name, which is
/// why the instance's `metadata.json` keeps the original key.
pub fn encode_path_component(name: &str) -> String {
    if name.is_empty() {
        // A lone `%` is never produced otherwise: escapes carry two digits.
        return "%".to_string();
    }
    let mut encoded = String::with_capacity(name.len());
    for (index, byte) in name.bytes().enumerate() {
        let kept = byte.is_ascii_alphanumeric()
            || matches!(byte, b'_' | b'-' | b':')
            || (byte == b'.' && index != 0);
        if kept {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    if encoded.len() <= MAX_COMPONENT_BYTES {
        return encoded;
    }
    let mut cut = CUT_PREFIX_BYTES;
    // Step back over a partial `%XX` so the kept prefix stays decodable.
    for back in 1..=2 {
        if encoded.as_bytes()[cut - back] == b'%' {
            cut -= back;
            break;
        }
    }
    format!("{}~{:016x}", &encoded[..cut], fnv1a64(name.as_bytes()))
}

/// Reverses [`encode_path_component`]. `None` for cut names (their input is
/// only in metadata) and for names it never produces.
pub fn decode_path_component(encoded: &str) -> Option<String> {
    if encoded == "%" {
        return Some(String::new());
    }
    let bytes = encoded.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        match bytes[index] {
            b'%' => {
                let hex = encoded.get(index + 1..index + 3)?;
                if hex.bytes().any(|b| b.is_ascii_lowercase()) {
                    return None;
                }
                decoded.push(u8::from_str_radix(hex, 16).ok()?);
                index += 3;
            }
            byte if byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-' | b':') => {
                decoded.push(byte);
                index += 1;
            }
            b'.' if index != 0 => {
                decoded.push(b'.');
                index += 1;
            }
            _ => return None,
        }
    }
    String::from_utf8(decoded).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspace_id_follows_the_slug_rules() {
        let long = "a".repeat(200);
        let cases = [
            ("main:prod", "main-prod"),
            ("  Main Prod  ", "main-prod"),
            ("default", "default"),
            ("", "default"),
            ("   ", "default"),
            (":::", "default"),
            ("a::b//c", "a-b-c"),
            ("-lead-and-trail-", "lead-and-trail"),
            ("v1.2_beta", "v1.2_beta"),
            ("한글swarm", "swarm"),
            ("x한y", "x-y"),
            (long.as_str(), &long[..128]),
        ];
        for (input, expected) in cases {
            assert_eq!(workspace_id(input), expected, "input {input:?}");
        }
    }

    #[test]
    fn state_root_prefers_cli_then_env_then_home() {
        let sources = StateRootSources {
            cli_state_root: Some(PathBuf::from("/cli")),
            env_state_root: Some(OsString::from("/env")),
            home_dir: Some(PathBuf::from("/home/u")),
            env_bundle_scope: None,
        };
        assert_eq!(sources.resolve().unwrap().path(), Path::new("/cli"));
        let sources = StateRootSources {
            cli_state_root: None,
            ..sources
        };
        assert_eq!(sources.resolve().unwrap().path(), Path::new("/env"));
        let sources = StateRootSources {
            env_state_root: None,
            ..sources
        };
        assert_eq!(
            sources.resolve().unwrap().path(),
            Path::new("/home/u/.goondan")
        );
        let sources = StateRootSources::default();
        assert_eq!(
            sources.resolve().unwrap_err().code(),
            "E_STORE_NO_STATE_ROOT"
        );
    }

    #[test]
    fn relative_state_root_is_made_absolute() {
        let sources = StateRootSources {
            cli_state_root: Some(PathBuf::from("rel/state")),
            ..StateRootSources::default()
        };
        let root = sources.resolve().unwrap();
        assert!(root.path().is_absolute());
        assert!(root.path().ends_with("rel/state"));
    }

    #[test]
    fn ordinary_keys_keep_the_original_folder_names() {
        let root = StateRoot::new("/s");
        let workspace = root.workspace("main:prod");
        let instance = workspace.instance("coder", "user:123");
        assert_eq!(
            instance.base_log(),
            Path::new("/s/workspaces/main-prod/instances/coder:user:123/messages/base.jsonl")
        );
        assert_eq!(
            instance.extension_state_file("compaction"),
            Path::new(
                "/s/workspaces/main-prod/instances/coder:user:123/extensions/compaction.json"
            )
        );
        assert_eq!(
            instance.runtime_events_log(),
            Path::new(
                "/s/workspaces/main-prod/instances/coder:user:123/messages/runtime-events.jsonl"
            )
        );
        assert_eq!(
            workspace.active_file(),
            Path::new("/s/runtime/active/main-prod.json")
        );
        assert_eq!(
            root.workspace("default").runtime_logs_dir(),
            Path::new("/s/runtime/logs/default")
        );
        assert_eq!(
            root.workspace("default")
                .runtime_log_file("orchestrator", "stderr"),
            Path::new("/s/runtime/logs/default/orchestrator.stderr.log")
        );
        assert_eq!(
            workspace.control_socket(),
            Path::new("/s/runtime/sockets/main-prod.sock")
        );
        assert_eq!(
            workspace.control_lock(),
            Path::new("/s/runtime/sockets/main-prod.lock")
        );
        assert_eq!(root.config_file(), Path::new("/s/config.json"));
    }

    #[test]
    fn initialize_creates_the_layout_and_keeps_an_existing_config() {
        let dir = tempfile::tempdir().unwrap();
        let root = StateRoot::new(dir.path().join("home"));
        root.initialize().unwrap();
        assert_eq!(std::fs::read_to_string(root.config_file()).unwrap(), "{}\n");
        assert!(root.packages_dir().is_dir() && root.runtime_dir().is_dir());
        std::fs::write(root.config_file(), "{\"logLevel\":\"debug\"}").unwrap();
        root.initialize().unwrap();
        assert_eq!(
            std::fs::read_to_string(root.config_file()).unwrap(),
            "{\"logLevel\":\"debug\"}"
        );
        assert!(root.list_workspaces().unwrap().is_empty());
        std::fs::create_dir_all(root.workspace("b").instances_dir()).unwrap();
        std::fs::create_dir_all(root.workspace("a:x").instances_dir()).unwrap();
        let ids: Vec<String> = root
            .list_workspaces()
            .unwrap()
            .iter()
            .map(|w| w.workspace_id().to_string())
            .collect();
        assert_eq!(ids, ["a-x", "b"]);
    }

    #[test]
    fn long_socket_paths_fall_back_to_a_short_hashed_name() {
        let root = StateRoot::new(format!("/{}", "d".repeat(60)));
        let socket = root.workspace(&"w".repeat(100)).control_socket();
        assert!(socket.as_os_str().len() <= MAX_SOCKET_PATH_BYTES);
        assert_eq!(socket.extension().unwrap(), "sock");
    }

    #[test]
    fn two_bundles_with_one_instance_key_get_separate_workspaces() {
        let a = bundle_scope(Path::new("/projects/a"), Some("app"));
        let b = bundle_scope(Path::new("/projects/b"), Some("app"));
        let renamed = bundle_scope(Path::new("/projects/a"), Some("other"));
        assert_ne!(a, b);
        assert_ne!(a, renamed);
        assert_eq!(a, bundle_scope(Path::new("/projects/a"), Some("app")));
        let root = StateRoot::new("/s");
        let in_a = root.clone().with_bundle_scope(a.clone()).workspace("main");
        let in_b = root.clone().with_bundle_scope(b).workspace("main");
        assert_ne!(in_a.dir(), in_b.dir());
        assert_ne!(in_a.control_socket(), in_b.control_socket());
        assert_ne!(in_a.active_file(), in_b.active_file());
        assert_eq!(in_a.workspace_id(), format!("main-{a}"));
    }

    #[test]
    fn a_bundle_scope_from_the_environment_must_be_hex() {
        let scoped = |value: &str| {
            StateRootSources {
                cli_state_root: Some(PathBuf::from("/s")),
                env_bundle_scope: Some(OsString::from(value)),
                ..StateRootSources::default()
            }
            .resolve()
            .unwrap()
            .bundle_scope()
            .map(str::to_string)
        };
        assert_eq!(
            scoped("00ff12ab34cd56ef").as_deref(),
            Some("00ff12ab34cd56ef")
        );
        assert_eq!(scoped("../../etc"), None);
        assert_eq!(scoped(""), None);
    }

    #[test]
    fn tricky_keys_map_to_one_safe_component_each() {
        let long = "k".repeat(300);
        let long_unicode = "키".repeat(120);
        let cases = [
            "user:123",
            "../x",
            "..",
            ".",
            "",
            "a/b",
            "a\\b",
            "%2F",
            "/",
            "~",
            ".hidden",
            "x.y",
            "User:123",
            "user:123 ",
            "키-🙂",
            "a\0b",
            long.as_str(),
            long_unicode.as_str(),
        ];
        let mut seen = std::collections::HashSet::new();
        for key in cases {
            let encoded = encode_path_component(key);
            assert!(!encoded.is_empty(), "{key:?}");
            assert!(encoded != "." && encoded != "..", "{key:?} -> {encoded}");
            assert!(!encoded.starts_with('.'), "{key:?} -> {encoded}");
            assert!(!encoded.contains('/') && !encoded.contains('\\') && !encoded.contains('\0'));
            assert!(
                encoded.len() <= MAX_COMPONENT_BYTES + 17,
                "{key:?} -> {} bytes",
                encoded.len()
            );
            assert!(encoded.is_ascii());
            assert!(
                seen.insert(encoded.clone()),
                "{key:?} collides as {encoded}"
            );
            let path = Path::new("/base").join(&encoded);
            assert_eq!(
                path.parent(),
                Some(Path::new("/base")),
                "{key:?} escapes: {encoded}"
            );
            if encoded.contains('~') {
                assert_eq!(decode_path_component(&encoded), None);
            } else {
                assert_eq!(decode_path_component(&encoded).as_deref(), Some(key));
            }
        }
    }

    #[test]
    fn encoding_table() {
        let cases = [
            ("user:123", "user:123"),
            ("../x", "%2E.%2Fx"),
            (".", "%2E"),
            ("..", "%2E."),
            ("a%b", "a%25b"),
            ("a~b", "a%7Eb"),
            ("é", "%C3%A9"),
            ("", "%"),
            ("\0", "%00"),
        ];
        for (input, expected) in cases {
            assert_eq!(encode_path_component(input), expected, "{input:?}");
        }
    }

    #[test]
    fn cut_names_differ_when_only_the_tail_differs() {
        let first = format!("{}a", "k".repeat(299));
        let second = format!("{}b", "k".repeat(299));
        let a = encode_path_component(&first);
        let b = encode_path_component(&second);
        assert_ne!(a, b);
        assert!(a.starts_with(&"k".repeat(140)));
        // An escape straddling the cut point is dropped whole.
        let escaped = format!("{}{}", "k".repeat(139), "/".repeat(100));
        let cut = encode_path_component(&escaped);
        assert!(cut.starts_with(&format!("{}~", "k".repeat(139))), "{cut}");
    }

    #[test]
    fn decode_rejects_names_it_never_produces() {
        for name in [".x", "a/b", "%2f", "%G0", "%4", "a~b", "a b"] {
            assert_eq!(decode_path_component(name), None, "{name:?}");
        }
    }
}
