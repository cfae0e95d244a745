//! The `bash` tool: `exec` runs one shell command, `script` runs a script
//! file from the workdir; both in the instance workdir, in their own
//! process group, with a deadline and capped output (see the `process`
//! module), with a cleared environment and, on Linux, in user, PID and
//! mount namespaces the agent's commands share (see the `sandbox`
//! module and `goondan_sandbox::shared`).

mod process;
mod sandbox;

use crate::args::{self, parse, primitive_map, require_non_empty, whole_number};
use crate::error::BuiltinToolError;
use crate::tools::workdir::Workdir;
use goondan_types::{JsonObject, JsonValue};
use process::{ProcessOutcome, ProcessSpec};
use serde::Deserialize;
use serde_json::json;
use std::path::Path;
use std::time::Duration;

const EXEC: &str = "bash__exec";
const SCRIPT: &str = "bash__script";
const DEFAULT_SCRIPT_SHELL: &str = "/bin/bash";

/// Options of the `bash` tool, from the Tool's config.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct BashConfig {
    /// The deadline when a call gives none.
    pub default_timeout_ms: u64,
    /// Bytes kept per stream (stdout and stderr each).
    pub max_output_bytes: usize,
    /// Lets `cwd` and script paths leave the workdir.
    pub allow_outside_workdir: bool,
}

impl Default for BashConfig {
    fn default() -> Self {
        BashConfig {
            default_timeout_ms: 30_000,
            max_output_bytes: 100_000,
            allow_outside_workdir: false,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ExecArgs {
    command: String,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default, deserialize_with = "whole_number")]
    timeout_ms: Option<u64>,
    #[serde(default)]
    env: Option<JsonObject>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ScriptArgs {
    path: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    shell: Option<String>,
    #[serde(default, deserialize_with = "whole_number")]
    timeout_ms: Option<u64>,
    #[serde(default)]
    env: Option<JsonObject>,
}

/// The `bash` tool.
#[derive(Debug, Clone, Default)]
pub struct BashTool {
    config: BashConfig,
}

impl BashTool {
    /// The tool with `config`.
    pub fn new(config: BashConfig) -> Self {
        BashTool { config }
    }

    /// `exec`: `/bin/sh -c <command>` in the workdir (or `cwd` under it).
    /// Not a login shell (`-l`), as the original runs `bash -c`: a login
    /// shell reads `/etc/profile` and `~/.profile` at every call (several
    /// milliseconds of `id` and `mesg` on Debian), and the command's
    /// environment is set here (`PATH`, `HOME`, `LANG`), not by a profile.
    pub async fn exec(
        &self,
        workdir: &Path,
        raw: &JsonObject,
    ) -> Result<JsonValue, BuiltinToolError> {
        let parsed: ExecArgs = parse(EXEC, raw)?;
        require_non_empty(EXEC, "command", &parsed.command)?;
        let timeout = self.timeout(EXEC, parsed.timeout_ms)?;
        let env = primitive_map(EXEC, "env", parsed.env.as_ref())?;
        let cwd = self
            .resolve(workdir, parsed.cwd.as_deref().unwrap_or("."))
            .await?;
        let is_dir = tokio::fs::metadata(&cwd)
            .await
            .map_err(|source| BuiltinToolError::io("stat", cwd.clone(), source))?
            .is_dir();
        if !is_dir {
            return Err(args::invalid(
                EXEC,
                format!("`cwd` {} is not a directory", cwd.display()),
            ));
        }
        let spec = ProcessSpec {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), parsed.command.clone()],
            cwd: cwd.clone(),
            env,
            isolation: sandbox::Isolation::from_env(),
            timeout,
            max_output_bytes: self.config.max_output_bytes,
        };
        let outcome = process::run(&spec).await?;
        let mut output = outcome_json(&outcome);
        output.insert("command".into(), json!(parsed.command));
        output.insert("cwd".into(), json!(cwd));
        Ok(JsonValue::Object(output))
    }

    /// `script`: runs a script file under the workdir with `shell` (default
    /// `/bin/bash`) and `args`, in the workdir.
    pub async fn script(
        &self,
        workdir: &Path,
        raw: &JsonObject,
    ) -> Result<JsonValue, BuiltinToolError> {
        let parsed: ScriptArgs = parse(SCRIPT, raw)?;
        require_non_empty(SCRIPT, "path", &parsed.path)?;
        let timeout = self.timeout(SCRIPT, parsed.timeout_ms)?;
        let env = primitive_map(SCRIPT, "env", parsed.env.as_ref())?;
        let shell = parsed
            .shell
            .unwrap_or_else(|| DEFAULT_SCRIPT_SHELL.to_string());
        require_non_empty(SCRIPT, "shell", &shell)?;
        let script_path = self.resolve(workdir, &parsed.path).await?;
        let is_file = tokio::fs::metadata(&script_path)
            .await
            .map_err(|source| BuiltinToolError::io("stat", script_path.clone(), source))?
            .is_file();
        if !is_file {
            return Err(args::invalid(
                SCRIPT,
                format!("`path` {} is not a file", script_path.display()),
            ));
        }
        let cwd = self.resolve(workdir, ".").await?;
        let mut process_args = vec![script_path.to_string_lossy().into_owned()];
        process_args.extend(parsed.args.iter().cloned());
        let spec = ProcessSpec {
            program: shell.clone(),
            args: process_args,
            cwd,
            env,
            isolation: sandbox::Isolation::from_env(),
            timeout,
            max_output_bytes: self.config.max_output_bytes,
        };
        let outcome = process::run(&spec).await?;
        let mut output = outcome_json(&outcome);
        output.insert("path".into(), json!(script_path));
        output.insert("shell".into(), json!(shell));
        output.insert("args".into(), json!(parsed.args));
        Ok(JsonValue::Object(output))
    }

    fn timeout(&self, tool: &str, requested: Option<u64>) -> Result<Duration, BuiltinToolError> {
        let millis = requested.unwrap_or(self.config.default_timeout_ms);
        if millis == 0 {
            return Err(args::invalid(tool, "`timeoutMs` must be at least 1"));
        }
        Ok(Duration::from_millis(millis))
    }

    async fn resolve(
        &self,
        workdir: &Path,
        requested: &str,
    ) -> Result<std::path::PathBuf, BuiltinToolError> {
        let workdir = workdir.to_path_buf();
        let requested = requested.to_string();
        let allow_outside = self.config.allow_outside_workdir;
        tokio::task::spawn_blocking(move || {
            Workdir::open(&workdir, allow_outside)?.resolve(&requested)
        })
        .await
        .expect("path resolution does not panic")
    }
}

fn outcome_json(outcome: &ProcessOutcome) -> JsonObject {
    let mut output = JsonObject::new();
    output.insert(
        "durationMs".into(),
        json!(outcome.duration.as_millis() as u64),
    );
    output.insert("stdout".into(), json!(outcome.stdout.text()));
    output.insert("stderr".into(), json!(outcome.stderr.text()));
    // -1 when a signal ended the process, as the original reports it.
    output.insert("exitCode".into(), json!(outcome.exit_code.unwrap_or(-1)));
    output.insert("signal".into(), json!(outcome.signal));
    output.insert("timedOut".into(), json!(outcome.timed_out));
    output.insert(
        "truncated".into(),
        json!(outcome.stdout.truncated || outcome.stderr.truncated),
    );
    output.insert("stdoutTruncated".into(), json!(outcome.stdout.truncated));
    output.insert("stderrTruncated".into(), json!(outcome.stderr.truncated));
    output
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(value: JsonValue) -> JsonObject {
        value.as_object().unwrap().clone()
    }

    #[tokio::test]
    async fn exec_runs_in_the_workdir_with_env() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let tool = BashTool::default();
        let output = tool
            .exec(
                dir.path(),
                &object(json!({"command": "pwd; echo $GREETING", "cwd": "sub", "env": {"GREETING": "hi"}})),
            )
            .await
            .unwrap();
        let canonical = std::fs::canonicalize(dir.path()).unwrap().join("sub");
        assert_eq!(
            output["stdout"],
            json!(format!("{}\nhi\n", canonical.display()))
        );
        assert_eq!(output["exitCode"], json!(0));
        assert_eq!(output["timedOut"], json!(false));
        assert_eq!(output["truncated"], json!(false));
    }

    #[tokio::test]
    async fn provider_keys_are_not_inherited_but_can_be_passed() {
        // Only this test touches this variable.
        std::env::set_var("GOOGLE_GENERATIVE_AI_API_KEY", "inherited-secret");
        let dir = tempfile::tempdir().unwrap();
        let tool = BashTool::default();
        let command = "echo \"[$GOOGLE_GENERATIVE_AI_API_KEY]\"";
        let inherited = tool
            .exec(dir.path(), &object(json!({"command": command})))
            .await
            .unwrap();
        assert_eq!(inherited["stdout"], json!("[]\n"));
        let passed = tool
            .exec(
                dir.path(),
                &object(
                    json!({"command": command, "env": {"GOOGLE_GENERATIVE_AI_API_KEY": "given"}}),
                ),
            )
            .await
            .unwrap();
        assert_eq!(passed["stdout"], json!("[given]\n"));
    }

    #[tokio::test]
    async fn exec_reports_timeouts_and_caps() {
        let dir = tempfile::tempdir().unwrap();
        let tool = BashTool::new(BashConfig {
            max_output_bytes: 10,
            ..BashConfig::default()
        });
        let output = tool
            .exec(
                dir.path(),
                &object(json!({"command": "echo 0123456789abcdef; sleep 5", "timeoutMs": 200})),
            )
            .await
            .unwrap();
        assert_eq!(output["timedOut"], json!(true));
        assert_eq!(output["exitCode"], json!(-1));
        assert_eq!(output["stdout"], json!("0123456789"));
        assert_eq!(output["stdoutTruncated"], json!(true));
    }

    #[tokio::test]
    async fn bad_exec_input_is_a_structured_error() {
        let dir = tempfile::tempdir().unwrap();
        let tool = BashTool::default();
        let cases = [
            (json!({}), "E_TOOL_INVALID_ARGS"),
            (json!({"command": ""}), "E_TOOL_INVALID_ARGS"),
            (
                json!({"command": "ls", "timeoutMs": 0}),
                "E_TOOL_INVALID_ARGS",
            ),
            (
                json!({"command": "ls", "env": {"A": [1]}}),
                "E_TOOL_INVALID_ARGS",
            ),
            (json!({"command": "ls", "bogus": 1}), "E_TOOL_INVALID_ARGS"),
            (
                json!({"command": "ls", "cwd": "../.."}),
                "E_PATH_OUTSIDE_WORKDIR",
            ),
            (json!({"command": "ls", "cwd": "missing"}), "FILE_NOT_FOUND"),
        ];
        for (input, code) in cases {
            let error = tool
                .exec(dir.path(), &object(input.clone()))
                .await
                .unwrap_err();
            assert_eq!(error.code(), code, "{input}");
        }
    }

    #[tokio::test]
    async fn script_runs_a_file_under_the_workdir_with_args() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("hello.sh"), "echo \"hello $1 $2\"\n").unwrap();
        let tool = BashTool::default();
        let output = tool
            .script(
                dir.path(),
                &object(json!({"path": "hello.sh", "args": ["a", "b"], "shell": "/bin/sh"})),
            )
            .await
            .unwrap();
        assert_eq!(output["stdout"], json!("hello a b\n"));
        assert_eq!(output["shell"], json!("/bin/sh"));

        for (input, code) in [
            (json!({"path": "../outside.sh"}), "E_PATH_OUTSIDE_WORKDIR"),
            (json!({"path": "absent.sh"}), "FILE_NOT_FOUND"),
            (json!({"path": "."}), "E_TOOL_INVALID_ARGS"),
            (
                json!({"path": "hello.sh", "args": "a"}),
                "E_TOOL_INVALID_ARGS",
            ),
        ] {
            let error = tool
                .script(dir.path(), &object(input.clone()))
                .await
                .unwrap_err();
            assert_eq!(error.code(), code, "{input}");
        }
    }
}
