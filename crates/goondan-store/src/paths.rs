//! Where state lives: the System Root, workspace ids, instance folders and
//! the orchestrator's `runtime/` files (`workspace.md` §3, §6, §7).
//!
//! This module computes paths; its only IO is [`StateRoot::initialize`] and
//! [`StateRoot::list_workspaces`]. Two rules shape it:
//!
//! - Every name derived from user input (instance keys, agent names,
//!   extension names) goes through [`encode_path_component`], a reversible
//!   escaping that keeps the original's folder names for ordinary keys
//!   (`coder:user:123`) and makes `../x`, `.`, `/`, unicode and 300-character
//!   keys land in one safe folder each.
//! - An instance folder is keyed by `agentName:instanceKey`, the routing
//!   key, as the original does: two agents serving the same instance key
//!   keep separate conversations.

use crate::StoreError;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Longest encoded name kept verbatim; longer ones are cut and suffixed
/// with a hash. Well under the 255-byte limit of common filesystems, with
/// room for `.json`, `.tmp` and the lock-file suffixes.
const MAX_COMPONENT_BYTES: usize = 160;
/// Bytes of the encoded prefix kept in front of the hash of a cut name.
const CUT_PREFIX_BYTES: usize = 140;
/// Unix socket paths must fit `sun_path` (108 bytes on Linux, 104 on macOS).
const MAX_SOCKET_PATH_BYTES: usize = 100;

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
}

impl StateRootSources {
    /// Reads `GOONDAN_STATE_ROOT` and `HOME` from the process environment.
    pub fn from_process_env(cli_state_root: Option<PathBuf>) -> Self {
        StateRootSources {
            cli_state_root,
            env_state_root: std::env::var_os("GOONDAN_STATE_ROOT"),
            home_dir: std::env::var_os("HOME").map(PathBuf::from),
        }
    }

    /// The System Root: the CLI option, then `GOONDAN_STATE_ROOT`, then
    /// `~/.goondan`. Relative paths are made absolute against the current
    /// folder, as the original's `path.resolve` does.
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
        Ok(StateRoot { root: absolute })
    }
}

/// The System Root (`goondanHome`) and the paths under it that are not
/// per workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateRoot {
    root: PathBuf,
}

impl StateRoot {
    /// A System Root at `root`, taken as given.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        StateRoot { root: root.into() }
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

    /// `packages/<name>@<version>/`.
    pub fn package_dir(&self, name: &str, version: &str) -> PathBuf {
        self.packages_dir().join(format!("{name}@{version}"))
    }

    /// `workspaces/`.
    pub fn workspaces_dir(&self) -> PathBuf {
        self.root.join("workspaces")
    }

    /// `runtime/`: orchestrator state and process logs.
    pub fn runtime_dir(&self) -> PathBuf {
        self.root.join("runtime")
    }

    /// `runtime/active.json`: the active orchestrator.
    pub fn active_file(&self) -> PathBuf {
        self.runtime_dir().join("active.json")
    }

    /// `runtime/logs/<instanceKey>/`: stdout and stderr logs of the
    /// processes of one orchestrator instance (`cli.md` §9.3).
    pub fn runtime_logs_dir(&self, swarm_instance_key: &str) -> PathBuf {
        self.runtime_dir()
            .join("logs")
            .join(encode_path_component(swarm_instance_key))
    }

    /// `runtime/logs/<instanceKey>/<process>.<stream>.log`.
    pub fn runtime_log_file(
        &self,
        swarm_instance_key: &str,
        process: &str,
        stream: &str,
    ) -> PathBuf {
        self.runtime_logs_dir(swarm_instance_key).join(format!(
            "{}.{}.log",
            encode_path_component(process),
            encode_path_component(stream)
        ))
    }

    /// The orchestrator's control socket for one workspace:
    /// `runtime/sockets/<workspaceId>.sock`, or a hashed short name when the
    /// readable one would not fit a Unix socket address.
    pub fn control_socket(&self, workspace_id: &str) -> PathBuf {
        let sockets = self.runtime_dir().join("sockets");
        let readable = sockets.join(format!("{workspace_id}.sock"));
        if readable.as_os_str().len() <= MAX_SOCKET_PATH_BYTES {
            readable
        } else {
            sockets.join(format!("{:016x}.sock", fnv1a64(workspace_id.as_bytes())))
        }
    }

    /// The paths of one workspace, from the Swarm's instance key
    /// (`Swarm.spec.instanceKey ?? Swarm.metadata.name`).
    pub fn workspace(&self, swarm_instance_key: &str) -> WorkspacePaths {
        self.workspace_by_id(&workspace_id(swarm_instance_key))
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
        match std::fs::OpenOptions::new()
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
    pub fn ensure_outside_project(&self, project_root: &Path) -> Result<(), StoreError> {
        let project = std::path::absolute(project_root)
            .map_err(|source| StoreError::io("resolving", project_root, source))?;
        if self.root.starts_with(&project) {
            return Err(StoreError::StateRootInProject {
                state_root: self.root.clone(),
                project_root: project,
            });
        }
        Ok(())
    }
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
    encode_path_component(&format!("{agent_name}:{instance_key}"))
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

/// 64-bit FNV-1a. Hand-written because the names it builds must stay the
/// same across Rust releases, which `std`'s hasher does not promise, and
/// collisions are caught by the key kept in `metadata.json`.
fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
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
        assert_eq!(root.active_file(), Path::new("/s/runtime/active.json"));
        assert_eq!(
            root.runtime_logs_dir("default"),
            Path::new("/s/runtime/logs/default")
        );
        assert_eq!(
            root.runtime_log_file("default", "orchestrator", "stderr"),
            Path::new("/s/runtime/logs/default/orchestrator.stderr.log")
        );
        assert_eq!(
            root.control_socket("main-prod"),
            Path::new("/s/runtime/sockets/main-prod.sock")
        );
        assert_eq!(root.config_file(), Path::new("/s/config.json"));
        assert_eq!(
            root.package_dir("@goondan/base", "1.0.0"),
            Path::new("/s/packages/@goondan/base@1.0.0")
        );
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
        let socket = root.control_socket(&"w".repeat(100));
        assert!(socket.as_os_str().len() <= MAX_SOCKET_PATH_BYTES + 20);
        assert_eq!(socket.extension().unwrap(), "sock");
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
