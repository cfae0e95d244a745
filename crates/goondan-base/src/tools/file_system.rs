//! The `file-system` tool: `read`, `write`, `list` and `mkdir`, each on a
//! path confined to the instance workdir (see the `workdir` module).
//!
//! Each call runs its blocking file-system work on tokio's blocking pool.
//! `list` never follows symlinked directories, so it can neither leave the
//! workdir nor loop.

use crate::args::{self, parse, require_non_empty, whole_number};
use crate::error::BuiltinToolError;
use crate::tools::capped_text::decode_prefix;
use crate::tools::workdir::Workdir;
use goondan_types::{JsonObject, JsonValue};
use serde::Deserialize;
use serde_json::json;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

const READ: &str = "file-system__read";
const WRITE: &str = "file-system__write";
const LIST: &str = "file-system__list";
const MKDIR: &str = "file-system__mkdir";

/// Options of the `file-system` tool, from the Tool's config.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct FileSystemConfig {
    /// Lets paths leave the workdir (absolute paths, `..`, symlinks out).
    pub allow_outside_workdir: bool,
    /// `read`'s `maxBytes` when a call gives none.
    pub default_max_bytes: u64,
    /// The most entries one `list` returns.
    pub max_list_entries: usize,
}

impl Default for FileSystemConfig {
    fn default() -> Self {
        FileSystemConfig {
            allow_outside_workdir: false,
            default_max_bytes: 100_000,
            max_list_entries: 10_000,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ReadArgs {
    path: String,
    #[serde(default, deserialize_with = "whole_number")]
    max_bytes: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct WriteArgs {
    path: String,
    content: String,
    #[serde(default)]
    append: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ListArgs {
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    recursive: bool,
    #[serde(default = "yes")]
    include_dirs: bool,
    #[serde(default = "yes")]
    include_files: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct MkdirArgs {
    path: String,
    #[serde(default = "yes")]
    recursive: bool,
}

fn yes() -> bool {
    true
}

/// The `file-system` tool.
#[derive(Debug, Clone, Default)]
pub struct FileSystemTool {
    config: FileSystemConfig,
}

impl FileSystemTool {
    /// The tool with `config`.
    pub fn new(config: FileSystemConfig) -> Self {
        FileSystemTool { config }
    }

    /// `read`: up to `maxBytes` of a file as UTF-8 text.
    pub async fn read(
        &self,
        workdir: &Path,
        raw: &JsonObject,
    ) -> Result<JsonValue, BuiltinToolError> {
        let parsed: ReadArgs = parse(READ, raw)?;
        require_non_empty(READ, "path", &parsed.path)?;
        let max_bytes = parsed.max_bytes.unwrap_or(self.config.default_max_bytes);
        if max_bytes == 0 {
            return Err(args::invalid(READ, "`maxBytes` must be at least 1"));
        }
        let workdir = self.open(workdir);
        blocking(move || {
            let path = workdir?.resolve(&parsed.path)?;
            let file = std::fs::File::open(&path)
                .map_err(|error| BuiltinToolError::io("read", path.clone(), error))?;
            let size = file
                .metadata()
                .map_err(|error| BuiltinToolError::io("read", path.clone(), error))?
                .len();
            let mut bytes = Vec::new();
            file.take(max_bytes)
                .read_to_end(&mut bytes)
                .map_err(|error| BuiltinToolError::io("read", path.clone(), error))?;
            Ok(json!({
                "path": path,
                "size": size,
                "truncated": size > max_bytes,
                "content": decode_prefix(&bytes),
            }))
        })
        .await
    }

    /// `write`: creates parent directories, then writes or appends.
    pub async fn write(
        &self,
        workdir: &Path,
        raw: &JsonObject,
    ) -> Result<JsonValue, BuiltinToolError> {
        let parsed: WriteArgs = parse(WRITE, raw)?;
        require_non_empty(WRITE, "path", &parsed.path)?;
        let workdir = self.open(workdir);
        blocking(move || {
            let path = workdir?.resolve(&parsed.path)?;
            let io = |error| BuiltinToolError::io("write", path.clone(), error);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(io)?;
            }
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .write(true)
                .append(parsed.append)
                .truncate(!parsed.append)
                .open(&path)
                .map_err(io)?;
            file.write_all(parsed.content.as_bytes()).map_err(io)?;
            let size = file.metadata().map_err(io)?.len();
            Ok(json!({"path": path, "size": size, "written": true, "append": parsed.append}))
        })
        .await
    }

    /// `list`: directory entries sorted by path, optionally recursive.
    pub async fn list(
        &self,
        workdir: &Path,
        raw: &JsonObject,
    ) -> Result<JsonValue, BuiltinToolError> {
        let parsed: ListArgs = parse(LIST, raw)?;
        let max_entries = self.config.max_list_entries;
        let workdir = self.open(workdir);
        blocking(move || {
            let path = workdir?.resolve(parsed.path.as_deref().unwrap_or("."))?;
            let mut listing = Listing {
                entries: Vec::new(),
                max_entries,
                truncated: false,
            };
            listing.collect(&path, &parsed)?;
            listing
                .entries
                .sort_by(|left, right| left["path"].as_str().cmp(&right["path"].as_str()));
            Ok(json!({
                "path": path,
                "recursive": parsed.recursive,
                "count": listing.entries.len(),
                "truncated": listing.truncated,
                "entries": listing.entries,
            }))
        })
        .await
    }

    /// `mkdir`: creates a directory (and its parents unless `recursive` is false).
    pub async fn mkdir(
        &self,
        workdir: &Path,
        raw: &JsonObject,
    ) -> Result<JsonValue, BuiltinToolError> {
        let parsed: MkdirArgs = parse(MKDIR, raw)?;
        require_non_empty(MKDIR, "path", &parsed.path)?;
        let workdir = self.open(workdir);
        blocking(move || {
            let path = workdir?.resolve(&parsed.path)?;
            let result = if parsed.recursive {
                std::fs::create_dir_all(&path)
            } else {
                std::fs::create_dir(&path)
            };
            result.map_err(|error| BuiltinToolError::io("mkdir", path.clone(), error))?;
            Ok(json!({"path": path, "created": true, "recursive": parsed.recursive}))
        })
        .await
    }

    fn open(&self, workdir: &Path) -> Result<Workdir, BuiltinToolError> {
        Workdir::open(workdir, self.config.allow_outside_workdir)
    }
}

struct Listing {
    entries: Vec<JsonValue>,
    max_entries: usize,
    truncated: bool,
}

impl Listing {
    fn collect(&mut self, directory: &Path, options: &ListArgs) -> Result<(), BuiltinToolError> {
        let io = |error| BuiltinToolError::io("list", directory.to_path_buf(), error);
        let mut children: Vec<(PathBuf, std::fs::FileType, String)> = Vec::new();
        for entry in std::fs::read_dir(directory).map_err(io)? {
            let entry = entry.map_err(io)?;
            let file_type = entry.file_type().map_err(io)?;
            children.push((
                entry.path(),
                file_type,
                entry.file_name().to_string_lossy().into_owned(),
            ));
        }
        children.sort_by(|left, right| left.0.cmp(&right.0));
        for (path, file_type, name) in children {
            if self.entries.len() >= self.max_entries {
                self.truncated = true;
                return Ok(());
            }
            if file_type.is_dir() {
                if options.include_dirs {
                    self.entries
                        .push(json!({"name": name, "path": path, "type": "dir"}));
                }
                if options.recursive {
                    self.collect(&path, options)?;
                }
            } else if file_type.is_file() && options.include_files {
                let size = std::fs::metadata(&path)
                    .map(|metadata| metadata.len())
                    .unwrap_or(0);
                self.entries
                    .push(json!({"name": name, "path": path, "type": "file", "size": size}));
            }
        }
        Ok(())
    }
}

async fn blocking<F>(work: F) -> Result<JsonValue, BuiltinToolError>
where
    F: FnOnce() -> Result<JsonValue, BuiltinToolError> + Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .expect("file-system work does not panic")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(value: JsonValue) -> JsonObject {
        value.as_object().unwrap().clone()
    }

    #[tokio::test]
    async fn write_read_append_and_truncate() {
        let dir = tempfile::tempdir().unwrap();
        let tool = FileSystemTool::default();
        let written = tool
            .write(
                dir.path(),
                &object(json!({"path": "notes/a.txt", "content": "héllo"})),
            )
            .await
            .unwrap();
        assert_eq!(written["size"], json!(6));
        tool.write(
            dir.path(),
            &object(json!({"path": "notes/a.txt", "content": "!", "append": true})),
        )
        .await
        .unwrap();
        let read = tool
            .read(dir.path(), &object(json!({"path": "notes/a.txt"})))
            .await
            .unwrap();
        assert_eq!(read["content"], json!("héllo!"));
        assert_eq!(read["truncated"], json!(false));
        // Two bytes cut "é" in half: the half character is dropped.
        let cut = tool
            .read(
                dir.path(),
                &object(json!({"path": "notes/a.txt", "maxBytes": 2})),
            )
            .await
            .unwrap();
        assert_eq!(cut["content"], json!("h"));
        assert_eq!(cut["truncated"], json!(true));
        assert_eq!(cut["size"], json!(7));
    }

    #[tokio::test]
    async fn list_and_mkdir() {
        let dir = tempfile::tempdir().unwrap();
        let tool = FileSystemTool::default();
        tool.mkdir(dir.path(), &object(json!({"path": "a/b"})))
            .await
            .unwrap();
        std::fs::write(dir.path().join("a/b/f.txt"), "x").unwrap();
        std::fs::write(dir.path().join("top.txt"), "xy").unwrap();
        std::os::unix::fs::symlink("/", dir.path().join("root-link")).unwrap();
        let flat = tool.list(dir.path(), &object(json!({}))).await.unwrap();
        let names: Vec<&str> = flat["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["a", "top.txt"]);
        let deep = tool
            .list(
                dir.path(),
                &object(json!({"recursive": true, "includeDirs": false})),
            )
            .await
            .unwrap();
        let names: Vec<&str> = deep["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["f.txt", "top.txt"]);
        assert_eq!(deep["entries"][1]["size"], json!(2));
        let error = tool
            .mkdir(
                dir.path(),
                &object(json!({"path": "x/y", "recursive": false})),
            )
            .await
            .unwrap_err();
        assert_eq!(error.code(), "FILE_NOT_FOUND");
    }

    #[tokio::test]
    async fn list_stops_at_the_entry_cap() {
        let dir = tempfile::tempdir().unwrap();
        for index in 0..5 {
            std::fs::write(dir.path().join(format!("{index}.txt")), "").unwrap();
        }
        let tool = FileSystemTool::new(FileSystemConfig {
            max_list_entries: 3,
            ..FileSystemConfig::default()
        });
        let listed = tool.list(dir.path(), &object(json!({}))).await.unwrap();
        assert_eq!(listed["count"], json!(3));
        assert_eq!(listed["truncated"], json!(true));
    }

    #[tokio::test]
    async fn escapes_and_bad_input_are_structured_errors() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("out")).unwrap();
        let tool = FileSystemTool::default();
        let cases: [(&str, JsonValue, &str); 8] = [
            (
                "read",
                json!({"path": "../../etc/passwd"}),
                "E_PATH_OUTSIDE_WORKDIR",
            ),
            (
                "read",
                json!({"path": "/etc/passwd"}),
                "E_PATH_OUTSIDE_WORKDIR",
            ),
            (
                "write",
                json!({"path": "out/evil.txt", "content": "x"}),
                "E_PATH_OUTSIDE_WORKDIR",
            ),
            ("read", json!({"path": "nope.txt"}), "FILE_NOT_FOUND"),
            (
                "read",
                json!({"path": "a", "maxBytes": 0}),
                "E_TOOL_INVALID_ARGS",
            ),
            ("write", json!({"path": "a"}), "E_TOOL_INVALID_ARGS"),
            ("list", json!({"path": "out"}), "E_PATH_OUTSIDE_WORKDIR"),
            ("mkdir", json!({}), "E_TOOL_INVALID_ARGS"),
        ];
        for (export, input, code) in cases {
            let args = object(input.clone());
            let result = match export {
                "read" => tool.read(dir.path(), &args).await,
                "write" => tool.write(dir.path(), &args).await,
                "list" => tool.list(dir.path(), &args).await,
                _ => tool.mkdir(dir.path(), &args).await,
            };
            assert_eq!(result.unwrap_err().code(), code, "{export} {input}");
        }
        assert!(!outside.path().join("evil.txt").exists());

        let permissive = FileSystemTool::new(FileSystemConfig {
            allow_outside_workdir: true,
            ..FileSystemConfig::default()
        });
        permissive
            .write(
                dir.path(),
                &object(json!({"path": "out/allowed.txt", "content": "x"})),
            )
            .await
            .unwrap();
        assert!(outside.path().join("allowed.txt").exists());
    }
}
