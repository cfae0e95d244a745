//! The `mcp` extension's `config`, parsed strictly, and its resolution
//! into what a connection needs (`valueFrom.env` looked up, one transport
//! chosen per server).

use crate::McpError;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// The default deadline of one tool call, in milliseconds.
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
/// The default deadline of connecting (starting the server, `initialize`)
/// and of listing its tools, in milliseconds: a server fetched by `npx` on
/// its first start may take a while.
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 30_000;

/// `config` of the `mcp` extension.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct McpConfig {
    /// The servers, by the name that prefixes their tools.
    #[serde(default)]
    pub servers: BTreeMap<String, ServerConfig>,
    /// The deadline of one tool call, in milliseconds.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// The deadline of connecting and of listing tools, in milliseconds.
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
}

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            servers: BTreeMap::new(),
            timeout_ms: DEFAULT_TIMEOUT_MS,
            connect_timeout_ms: DEFAULT_CONNECT_TIMEOUT_MS,
        }
    }
}

fn default_timeout_ms() -> u64 {
    DEFAULT_TIMEOUT_MS
}

fn default_connect_timeout_ms() -> u64 {
    DEFAULT_CONNECT_TIMEOUT_MS
}

/// One server: either a stdio `command` or a streamable HTTP `url`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ServerConfig {
    /// The program to start (stdio transport).
    pub command: Option<String>,
    /// Its arguments.
    pub args: Vec<String>,
    /// Variables added to its environment.
    pub env: BTreeMap<String, ConfigValue>,
    /// Its working directory.
    pub cwd: Option<PathBuf>,
    /// The MCP endpoint (streamable HTTP transport).
    pub url: Option<String>,
    /// Headers sent with every HTTP request (an `Authorization` token).
    pub headers: BTreeMap<String, ConfigValue>,
    /// Only these tools (MCP names, without the prefix) are exposed.
    pub include: Option<Vec<String>>,
    /// These tools are not exposed.
    pub exclude: Vec<String>,
    /// This server's call deadline, over the extension's `timeoutMs`.
    pub timeout_ms: Option<u64>,
    /// This server's connect deadline, over the extension's
    /// `connectTimeoutMs`.
    pub connect_timeout_ms: Option<u64>,
    /// Expose the server's resources as the tools `<server>__list_resources`
    /// and `<server>__read_resource`.
    pub resources: bool,
    /// Expose the server's prompts as the tools `<server>__list_prompts`
    /// and `<server>__get_prompt`.
    pub prompts: bool,
}

/// A string given inline or read from a variable. Its `Debug` hides an
/// inline value, which may be a token.
#[derive(Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum ConfigValue {
    /// The value itself.
    Literal(String),
    /// `{ valueFrom: { env: NAME } }`.
    From {
        /// Where the value comes from.
        #[serde(rename = "valueFrom")]
        value_from: ValueFrom,
    },
}

impl std::fmt::Debug for ConfigValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigValue::Literal(_) => f.write_str("Literal(..)"),
            ConfigValue::From { value_from } => f
                .debug_struct("From")
                .field("env", &value_from.env)
                .finish(),
        }
    }
}

/// `valueFrom` of a [`ConfigValue`].
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValueFrom {
    /// The variable's name.
    pub env: String,
}

/// How to reach one server, with every value resolved. Its `Debug` shows
/// the names of `env` and `headers`, never their values, which may be
/// secrets.
#[derive(Clone, PartialEq)]
pub enum TransportConfig {
    /// A child process speaking JSON lines on stdin and stdout.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables added to its environment.
        env: Vec<(String, String)>,
        /// Its working directory.
        cwd: Option<PathBuf>,
    },
    /// A streamable HTTP endpoint.
    Http {
        /// The endpoint.
        url: String,
        /// Headers for every request.
        headers: Vec<(String, String)>,
    },
}

impl std::fmt::Debug for TransportConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = |pairs: &[(String, String)]| -> Vec<String> {
            pairs.iter().map(|(name, _)| name.clone()).collect()
        };
        match self {
            TransportConfig::Stdio {
                command,
                args,
                env,
                cwd,
            } => f
                .debug_struct("Stdio")
                .field("command", command)
                .field("args", args)
                .field("env", &names(env))
                .field("cwd", cwd)
                .finish(),
            TransportConfig::Http { url, headers } => f
                .debug_struct("Http")
                .field("url", url)
                .field("headers", &names(headers))
                .finish(),
        }
    }
}

/// One server, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedServer {
    /// Its name in the config (the tool prefix).
    pub name: String,
    /// How to reach it.
    pub transport: TransportConfig,
    /// The tool filter.
    pub include: Option<Vec<String>>,
    /// The tools left out.
    pub exclude: Vec<String>,
    /// The deadline of one tool call.
    pub timeout: Duration,
    /// The deadline of connecting and of listing tools.
    pub connect_timeout: Duration,
    /// Whether its resources are exposed as tools.
    pub resources: bool,
    /// Whether its prompts are exposed as tools.
    pub prompts: bool,
}

impl ResolvedServer {
    /// Whether MCP tool `tool` is exposed.
    pub fn exposes(&self, tool: &str) -> bool {
        let included = self
            .include
            .as_ref()
            .is_none_or(|names| names.iter().any(|name| name == tool));
        included && !self.exclude.iter().any(|name| name == tool)
    }
}

impl McpConfig {
    /// Parses the extension's `config` (`null` is no servers).
    pub fn parse(config: &serde_json::Value) -> Result<McpConfig, McpError> {
        if config.is_null() {
            return Ok(McpConfig::default());
        }
        serde_json::from_value(config.clone()).map_err(|error| McpError::Config {
            message: error.to_string(),
        })
    }

    /// Every server resolved; `lookup` reads a `valueFrom.env` variable.
    pub fn resolve(
        &self,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Vec<ResolvedServer>, McpError> {
        self.servers
            .iter()
            .map(|(name, server)| server.resolve(name, self, lookup))
            .collect()
    }
}

impl ServerConfig {
    fn resolve(
        &self,
        name: &str,
        defaults: &McpConfig,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ResolvedServer, McpError> {
        let invalid = |message: String| McpError::Config {
            message: format!("servers.{name}: {message}"),
        };
        // The name prefixes `<server>__<tool>`, which must keep exactly one
        // `__` and stay a plain identifier a model can echo.
        let name_ok = goondan_types::tool::ToolName::is_plain_resource(name);
        if !name_ok {
            return Err(invalid(
                "a server name uses letters, digits, `-` and `_`, without `__`".into(),
            ));
        }
        let value = |field: &str, key: &str, value: &ConfigValue| match value {
            ConfigValue::Literal(text) => Ok(text.clone()),
            ConfigValue::From { value_from } => lookup(&value_from.env).ok_or_else(|| {
                invalid(format!(
                    "{field}.{key}: variable `{}` is not set",
                    value_from.env
                ))
            }),
        };
        let transport = match (&self.command, &self.url) {
            (Some(command), None) => {
                if !self.headers.is_empty() {
                    return Err(invalid("`headers` applies only to a `url` server".into()));
                }
                TransportConfig::Stdio {
                    command: command.clone(),
                    args: self.args.clone(),
                    env: self
                        .env
                        .iter()
                        .map(|(key, item)| Ok((key.clone(), value("env", key, item)?)))
                        .collect::<Result<_, McpError>>()?,
                    cwd: self.cwd.clone(),
                }
            }
            (None, Some(url)) => {
                if !self.args.is_empty() || !self.env.is_empty() || self.cwd.is_some() {
                    return Err(invalid(
                        "`args`, `env` and `cwd` apply only to a `command` server".into(),
                    ));
                }
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(invalid(format!("url `{url}` is not http(s)")));
                }
                TransportConfig::Http {
                    url: url.clone(),
                    headers: self
                        .headers
                        .iter()
                        .map(|(key, item)| Ok((key.clone(), value("headers", key, item)?)))
                        .collect::<Result<_, McpError>>()?,
                }
            }
            _ => return Err(invalid("give exactly one of `command` and `url`".into())),
        };
        Ok(ResolvedServer {
            name: name.to_string(),
            transport,
            include: self.include.clone(),
            exclude: self.exclude.clone(),
            timeout: Duration::from_millis(self.timeout_ms.unwrap_or(defaults.timeout_ms)),
            connect_timeout: Duration::from_millis(
                self.connect_timeout_ms
                    .unwrap_or(defaults.connect_timeout_ms),
            ),
            resources: self.resources,
            prompts: self.prompts,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn resolve(config: serde_json::Value) -> Result<Vec<ResolvedServer>, String> {
        let lookup = |name: &str| (name == "TOKEN").then(|| "s3cret".to_string());
        McpConfig::parse(&config)
            .and_then(|config| config.resolve(&lookup))
            .map_err(|error| error.to_string())
    }

    #[test]
    fn stdio_and_http_servers_resolve_with_their_values() {
        let servers = resolve(json!({
            "timeoutMs": 500,
            "servers": {
                "fs": {"command": "npx", "args": ["-y", "x"], "env": {"A": "1", "B": {"valueFrom": {"env": "TOKEN"}}}, "exclude": ["rm"]},
                "web": {"url": "http://127.0.0.1:1/mcp", "headers": {"Authorization": {"valueFrom": {"env": "TOKEN"}}}, "timeoutMs": 7}
            }
        }))
        .unwrap();
        assert_eq!(
            servers[0].transport,
            TransportConfig::Stdio {
                command: "npx".into(),
                args: vec!["-y".into(), "x".into()],
                env: vec![("A".into(), "1".into()), ("B".into(), "s3cret".into())],
                cwd: None,
            }
        );
        assert_eq!(servers[0].timeout, Duration::from_millis(500));
        assert!(servers[0].exposes("read") && !servers[0].exposes("rm"));
        assert_eq!(
            servers[1].transport,
            TransportConfig::Http {
                url: "http://127.0.0.1:1/mcp".into(),
                headers: vec![("Authorization".into(), "s3cret".into())],
            }
        );
        assert_eq!(servers[1].timeout, Duration::from_millis(7));
        assert_eq!(
            servers[1].connect_timeout,
            Duration::from_millis(DEFAULT_CONNECT_TIMEOUT_MS)
        );
    }

    #[test]
    fn bad_configs_name_the_server_and_the_field() {
        let cases = [
            (json!({"servers": {"a": {}}}), "servers.a: give exactly one"),
            (
                json!({"servers": {"a": {"command": "x", "url": "http://h"}}}),
                "servers.a: give exactly one",
            ),
            (
                json!({"servers": {"a__b": {"command": "x"}}}),
                "servers.a__b: a server name",
            ),
            (
                json!({"servers": {"a": {"url": "http://h", "headers": {"X": {"valueFrom": {"env": "NOPE"}}}}}}),
                "headers.X: variable `NOPE` is not set",
            ),
            (
                json!({"servers": {"a": {"url": "ftp://h"}}}),
                "url `ftp://h` is not http(s)",
            ),
            (
                json!({"servers": {"a": {"comand": "x"}}}),
                "unknown field `comand`",
            ),
        ];
        for (config, expected) in cases {
            let error = resolve(config.clone()).unwrap_err();
            assert!(error.contains(expected), "{config}: {error}");
        }
    }

    #[test]
    fn debug_output_names_headers_and_env_without_their_values() {
        let servers = resolve(json!({"servers": {
            "a": {"url": "http://h", "headers": {"Authorization": {"valueFrom": {"env": "TOKEN"}}}},
            "b": {"command": "x", "env": {"KEY": {"valueFrom": {"env": "TOKEN"}}}}
        }}))
        .unwrap();
        let shown = format!("{servers:?}");
        assert!(
            shown.contains("Authorization") && shown.contains("KEY"),
            "{shown}"
        );
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    #[test]
    fn include_narrows_and_exclude_wins() {
        let server = &resolve(json!({"servers": {"a": {"command": "x", "include": ["one", "two"], "exclude": ["two"]}}})).unwrap()[0];
        assert!(server.exposes("one"));
        assert!(!server.exposes("two"));
        assert!(!server.exposes("three"));
    }
}
