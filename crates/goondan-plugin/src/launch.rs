//! Which program runs an entry file, with which arguments and which
//! environment, and how the process is tied to its agent.
//!
//! * `.js`, `.mjs`, `.cjs`: `node` running the embedded Node shim, which
//!   imports the module.
//! * `.ts`, `.mts`, `.cts`: `bun` when it is on PATH (it runs TypeScript
//!   itself); else `node` ≥ 22.6 with `--experimental-strip-types`; else
//!   `node` ≥ 20.6 with the shim's loader hooks, which strip types by
//!   running [`LaunchOptions::strip_types_command`]. With none of these,
//!   [`PluginError::RuntimeMissing`] says what was looked for.
//! * `.py`: `python3` running the embedded Python shim.
//! * anything else with an executable bit: the file itself, which speaks
//!   the protocol.
//!
//! The shims are files of this crate, embedded with `include_str!` and
//! written once per content hash to a per-user cache folder: a file starts
//! faster than `-e` source (node caches compiled files, and the loader
//! hooks must be a file anyway) and needs no install step.
//!
//! This module does not speak the protocol; [`crate::host`] does.

use crate::error::PluginError;
use goondan_runtime::tool::environment::allow_listed_environment;
use goondan_sandbox::{Contained, Containment};
use goondan_types::atomic_file::{write_atomically, FileAccess, WriteOptions};
use goondan_types::placement::fnv1a64;
use goondan_types::ScriptRuntime;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;

/// The Node shim: imports the user's module and adapts its shapes.
const NODE_SHIM: &str = include_str!("shim/node.mjs");
/// The Node loader hooks (resolve `./x.js` to `./x.ts`, strip types).
const NODE_HOOKS: &str = include_str!("shim/node-hooks.mjs");
/// The Python shim.
const PYTHON_SHIM: &str = include_str!("shim/python.py");

/// The variables a plugin inherits from the agent, besides `PATH`, `HOME`
/// and `LANG`. Node and Python need nothing else to find their modules.
pub const INHERITED_VARIABLES: &[&str] = &["LC_ALL", "TMPDIR", "NODE_PATH"];

/// The variable carrying the strip-types command (a JSON array of argv)
/// to the Node loader hooks.
pub const STRIP_TYPES_VARIABLE: &str = "GOONDAN_STRIP_TYPES_COMMAND";

/// The variable carrying the loader hooks' path to the Node shim.
const HOOKS_VARIABLE: &str = "GOONDAN_PLUGIN_HOOKS";

/// How plugin processes are started; the same for every entry of an
/// agent.
#[derive(Debug, Clone, Default)]
pub struct LaunchOptions {
    /// The command that prints a TypeScript file as JavaScript (the file
    /// path is appended), for Node versions that cannot strip types.
    /// `gdn` fills it with its own `strip-types` subcommand once that
    /// exists.
    pub strip_types_command: Option<Vec<String>>,
    /// Variables granted to every plugin on top of the allow-list.
    pub env: Vec<(String, String)>,
    /// Where the shims are written; the per-user cache folder when
    /// `None`.
    pub cache_dir: Option<PathBuf>,
}

/// A planned start: program, arguments, environment, folder.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The program.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Its whole environment.
    pub env: Vec<(OsString, OsString)>,
    /// Its working folder: the entry's folder.
    pub cwd: PathBuf,
}

/// Plans how to run `entry` (an absolute path) with `runtime`; `label` is
/// the entry as written, for errors.
pub fn plan(
    entry: &Path,
    runtime: ScriptRuntime,
    label: &str,
    options: &LaunchOptions,
) -> Result<Launch, PluginError> {
    let metadata = std::fs::metadata(entry).map_err(|error| PluginError::Entry {
        entry: label.to_string(),
        detail: format!("{} cannot be read: {error}", entry.display()),
        fix: "create the file or fix the path; paths are relative to the bundle root".into(),
    })?;
    if !metadata.is_file() {
        return Err(PluginError::Entry {
            entry: label.to_string(),
            detail: format!("{} is not a file", entry.display()),
            fix: "point spec.entry at a module file".into(),
        });
    }
    let mut env = allow_listed_environment(INHERITED_VARIABLES, &options.env);
    let cwd = entry
        .parent()
        .map_or_else(|| PathBuf::from("/"), Path::to_path_buf);
    let entry_arg = OsString::from(entry);
    let (program, args) = match runtime {
        ScriptRuntime::JavaScript => {
            let node = find_program("node").ok_or_else(|| missing_node(label))?;
            (
                node,
                vec![
                    shim_path(options, "node", NODE_SHIM, "mjs", label)?.into(),
                    entry_arg,
                ],
            )
        }
        ScriptRuntime::TypeScript => {
            let shim = shim_path(options, "node", NODE_SHIM, "mjs", label)?;
            if let Some(bun) = find_program("bun") {
                (bun, vec![shim.into(), entry_arg])
            } else {
                let node = find_program("node").ok_or_else(|| missing_typescript(label))?;
                match node_version(&node) {
                    Some(version) if version >= (22, 6) => {
                        // Node strips the types; the hooks still map
                        // `./x.js` imports to `./x.ts`, which it does not.
                        let hooks = shim_path(options, "node-hooks", NODE_HOOKS, "mjs", label)?;
                        env.push((HOOKS_VARIABLE.into(), hooks.into()));
                        (
                            node,
                            vec![
                                "--experimental-strip-types".into(),
                                "--no-warnings".into(),
                                shim.into(),
                                entry_arg,
                            ],
                        )
                    }
                    Some(version) if version >= (20, 6) => {
                        let Some(command) = &options.strip_types_command else {
                            return Err(missing_typescript(label));
                        };
                        let hooks = shim_path(options, "node-hooks", NODE_HOOKS, "mjs", label)?;
                        let command = serde_json::to_string(command).unwrap_or_default();
                        env.push((STRIP_TYPES_VARIABLE.into(), command.into()));
                        env.push((HOOKS_VARIABLE.into(), hooks.into()));
                        (node, vec![shim.into(), entry_arg])
                    }
                    _ => return Err(missing_typescript(label)),
                }
            }
        }
        ScriptRuntime::Python => {
            let python = find_program("python3").ok_or_else(|| PluginError::RuntimeMissing {
                entry: label.to_string(),
                looked_for: "`python3` on PATH".into(),
                install: "install Python 3 (https://www.python.org/downloads/)".into(),
            })?;
            let shim = shim_path(options, "python", PYTHON_SHIM, "py", label)?;
            // `-u`: unbuffered stdout, so every answer leaves at once.
            (python, vec!["-u".into(), shim.into(), entry_arg])
        }
        ScriptRuntime::Executable => {
            if !is_executable(&metadata) {
                return Err(PluginError::Entry {
                    entry: label.to_string(),
                    detail: "it has no known extension (.ts, .mts, .cts, .js, .mjs, .cjs, .py) \
                             and is not executable"
                        .into(),
                    fix: format!(
                        "rename it to a known extension, or `chmod +x {label}` if it speaks \
                         the plugin protocol itself"
                    ),
                });
            }
            (entry.to_path_buf(), Vec::new())
        }
    };
    Ok(Launch {
        program,
        args,
        env,
        cwd,
    })
}

fn missing_node(label: &str) -> PluginError {
    PluginError::RuntimeMissing {
        entry: label.to_string(),
        looked_for: "`node` on PATH".into(),
        install: "install Node.js 20 or newer (https://nodejs.org)".into(),
    }
}

fn missing_typescript(label: &str) -> PluginError {
    PluginError::RuntimeMissing {
        entry: label.to_string(),
        looked_for: "`bun` on PATH, `node` 22.6 or newer (strips types itself), or `node` 20.6 \
                     or newer with a strip-types command configured"
            .into(),
        install: "install Bun (https://bun.sh) or Node.js 22.6+ (https://nodejs.org), \
                  or compile the file to JavaScript and point spec.entry at the .js file"
            .into(),
    }
}

#[cfg(unix)]
fn is_executable(metadata: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt;
    metadata.permissions().mode() & 0o111 != 0
}

#[cfg(not(unix))]
fn is_executable(_metadata: &std::fs::Metadata) -> bool {
    false
}

/// The first `name` on the agent's PATH that is an executable file.
pub fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|folder| folder.join(name))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|metadata| metadata.is_file() && is_executable(&metadata))
        })
}

/// `(major, minor)` of the node at `program`, asked once per process:
/// it costs a node start.
fn node_version(program: &Path) -> Option<(u32, u32)> {
    static VERSION: OnceLock<Option<(u32, u32)>> = OnceLock::new();
    *VERSION.get_or_init(|| {
        let output = std::process::Command::new(program)
            .arg("--version")
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .ok()?;
        parse_node_version(&String::from_utf8_lossy(&output.stdout))
    })
}

/// `v20.20.2` → `(20, 20)`.
fn parse_node_version(text: &str) -> Option<(u32, u32)> {
    let mut parts = text.trim().trim_start_matches('v').split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// The per-user folder the shims are written to:
/// `$XDG_CACHE_HOME/goondan/plugin-shims`, `~/.cache/goondan/plugin-shims`,
/// or a folder named after the user in the temp folder.
fn cache_folder(options: &LaunchOptions) -> PathBuf {
    if let Some(folder) = &options.cache_dir {
        return folder.clone();
    }
    let non_empty = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
    if let Some(cache) = non_empty("XDG_CACHE_HOME") {
        return PathBuf::from(cache).join("goondan/plugin-shims");
    }
    if let Some(home) = non_empty("HOME") {
        return PathBuf::from(home).join(".cache/goondan/plugin-shims");
    }
    let user = nix::unistd::getuid();
    std::env::temp_dir().join(format!("goondan-{user}-plugin-shims"))
}

/// The path of shim `name` with `content`, written if it is not there
/// yet. The name carries the content's hash, so a new build never runs an
/// old shim and two agents writing at once write the same bytes (through
/// a rename, so no one reads half a file).
fn shim_path(
    options: &LaunchOptions,
    name: &str,
    content: &str,
    extension: &str,
    label: &str,
) -> Result<PathBuf, PluginError> {
    let folder = cache_folder(options);
    let path = folder.join(format!(
        "{name}-{:016x}.{extension}",
        fnv1a64(content.as_bytes())
    ));
    if path.exists() {
        return Ok(path);
    }
    // Durable: a shim is written once per build, and one a power loss
    // left empty would be taken as written, since its name exists.
    let write_options = WriteOptions {
        access: FileAccess::Default,
        durable: true,
    };
    let write = || -> std::io::Result<()> {
        std::fs::create_dir_all(&folder)?;
        write_atomically(&path, content.as_bytes(), write_options)
    };
    write().map_err(|error| PluginError::Entry {
        entry: label.to_string(),
        detail: format!(
            "the {name} shim could not be written to {}: {error}",
            folder.display()
        ),
        fix: "make the cache folder writable, or set XDG_CACHE_HOME to a writable folder".into(),
    })?;
    Ok(path)
}

/// The variable that keeps plugin hosts out of the namespaces (`off`):
/// for a plugin that must see the host's processes. Each still leads a
/// process group of its own.
pub const PLUGIN_SANDBOX_VARIABLE: &str = "GOONDAN_PLUGIN_SANDBOX";

/// Starts `launch` with piped stdio and an environment of exactly
/// `launch.env`, contained (see `goondan_sandbox`): in its own process
/// group and, where the platform allows, its own namespaces, so nothing
/// it starts outlives it or the agent. Killed, group and all, when the
/// returned handle is dropped.
pub fn spawn(launch: &Launch) -> std::io::Result<Contained> {
    let containment = match std::env::var_os(PLUGIN_SANDBOX_VARIABLE) {
        Some(value) if value.eq_ignore_ascii_case("off") => Containment::ProcessGroup,
        _ => Containment::Namespaces,
    };
    let build = || {
        let mut command = tokio::process::Command::new(&launch.program);
        command
            .args(&launch.args)
            .env_clear()
            .envs(launch.env.iter().map(|(name, value)| (name, value)))
            .current_dir(&launch.cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    };
    let mut contained = Contained::spawn(build, containment)?;
    contained.kill_on_drop(true);
    Ok(contained)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_versions_parse() {
        assert_eq!(parse_node_version("v20.20.2\n"), Some((20, 20)));
        assert_eq!(parse_node_version("v22.6.0"), Some((22, 6)));
        assert_eq!(parse_node_version("garbage"), None);
    }

    #[test]
    fn a_file_without_a_runtime_or_exec_bit_is_refused_with_a_fix() {
        let folder = tempfile::tempdir().unwrap();
        let file = folder.path().join("tool.rb");
        std::fs::write(&file, "puts 1").unwrap();
        let error = plan(
            &file,
            ScriptRuntime::Executable,
            "tool.rb",
            &LaunchOptions::default(),
        )
        .unwrap_err();
        assert_eq!(error.code(), "E_PLUGIN_ENTRY");
        assert!(error.to_string().contains("not executable"), "{error}");
        assert!(error.suggestion().unwrap().contains("chmod +x tool.rb"));
    }

    #[test]
    fn shims_are_written_once_per_content() {
        let folder = tempfile::tempdir().unwrap();
        let options = LaunchOptions {
            cache_dir: Some(folder.path().to_path_buf()),
            ..LaunchOptions::default()
        };
        let first = shim_path(&options, "node", NODE_SHIM, "mjs", "x").unwrap();
        let second = shim_path(&options, "node", NODE_SHIM, "mjs", "x").unwrap();
        assert_eq!(first, second);
        assert_eq!(std::fs::read_to_string(first).unwrap(), NODE_SHIM);
    }
}
