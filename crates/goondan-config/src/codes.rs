//! Every diagnostic code the loader can report, in one table.
//!
//! Codes are a public contract: scripts and CI annotations match on them, so
//! a code is never renamed or reused for another meaning. Errors start with
//! `E_CONFIG_`, warnings with `W_CONFIG_`. The loader builds every
//! [`Diagnostic`] through [`Code::diagnostic`], so no code
//! string exists anywhere else in this crate.

use goondan_types::Diagnostic;

/// A stable diagnostic code of the bundle loader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Code {
    /// A document does not match its kind's schema: a missing or unknown
    /// field, a wrong type, an empty required list or string.
    Schema,
    /// `apiVersion` is missing or is not `goondan.ai/v1`.
    ApiVersion,
    /// `kind` names none of the eight known kinds.
    UnknownKind,
    /// Two resources of one kind share a name, or a Tool repeats an export
    /// name, or a Connector repeats an event name.
    DuplicateName,
    /// A reference names a resource that does not exist.
    RefNotFound,
    /// A reference without `package` matches more than one resource.
    RefAmbiguous,
    /// A reference is malformed or points at the wrong kind.
    RefInvalid,
    /// A path is absolute, contains `..`, or resolves (through a symlink)
    /// outside the bundle root.
    PathEscape,
    /// A file the bundle names (`entry`, `systemRef`, `--env-file`) does not
    /// exist.
    FileNotFound,
    /// A YAML file breaks a safety limit: size, document count, alias
    /// expansion or nesting depth.
    YamlLimit,
    /// A YAML file does not parse.
    YamlSyntax,
    /// A `Package` document is not the first document of `goondan.yaml`, or
    /// there is more than one.
    PackagePosition,
    /// A package dependency or a reference's `package` names a package that
    /// is neither `@goondan/base` (embedded) nor installed and locked.
    PackageNotFound,
    /// `goondan.lock.yaml` cannot be read, or does not hold a version of a
    /// dependency that its range accepts.
    PackageLockfile,
    /// An `entry` is a script of a kind whose plugin host is not
    /// available yet (a Python Connector).
    EntryUnsupported,
    /// A script `entry` that no plugin host can run: no known extension
    /// and no executable bit.
    EntryNoRuntime,
    /// A TypeScript or JavaScript `entry` does not parse.
    EntrySyntax,
    /// A `builtin:<name>` entry names no built-in of that kind.
    BuiltinNotFound,
    /// A Tool or export name contains `__`, the separator of LLM tool
    /// names, or an export name holds a character other than lowercase
    /// letters, digits, `_` and `-` (`tool.md` §6.2).
    ToolName,
    /// A Tool export's `parameters` is not a valid JSON Schema object.
    JsonSchema,
    /// A ValueSource breaks `value` xor `valueFrom`, `env` xor `secretRef`,
    /// or the `Secret/<name>` form.
    ValueSource,
    /// Two fields that exclude each other are both set.
    MutuallyExclusive,
    /// A number is outside its allowed range.
    OutOfRange,
    /// A Swarm's `entryAgent` is not one of its `agents`, or an ingress
    /// route targets an agent outside the Connection's Swarm.
    NotSwarmMember,
    /// An agent needs a capability its model declares it lacks.
    CapabilityMismatch,
    /// A name in `Agent.spec.requiredTools` is no tool the agent has.
    RequiredToolMissing,
    /// `Model.spec.provider` is not a provider this build implements.
    UnsupportedProvider,
    /// A URL field does not hold an absolute http(s) URL.
    InvalidUrl,
    /// `Connection.spec.approvals` on a Connection whose connector cannot
    /// post approval requests (only the base Telegram and Slack ones can).
    ApprovalsUnsupported,
    /// `Connection.spec.approvals` does not name where requests go the
    /// way its platform does (`chat` for Telegram, `channel` for Slack),
    /// or names an empty decider.
    ApprovalsTarget,
    /// `Swarm.spec.policy.approvals` holds a pattern that does not
    /// compile, names no tool, or has `unless` without `bash__exec`.
    ApprovalsGate,
    /// An env file (`.env`, `.env.local`, `--env-file`) does not parse.
    EnvFile,
    /// A bundle file exists but cannot be read.
    Unreadable,
    /// The bundle path holds no `goondan.yaml` and no recognized resource
    /// file, or its files hold no resource document (empty, or only
    /// comments and `---`).
    BundleEmpty,
    /// A `valueFrom.env` variable is unset (reported by the resolver when a
    /// value is needed; validation reports [`Code::EnvMissingWarning`]).
    EnvMissing,
    /// A `valueFrom.secretRef` cannot be resolved: none of the variables
    /// it is read from (`GOONDAN_SECRET_<NAME>_<KEY>`, ...) is set.
    SecretUnavailable,
    /// Warning: a name breaks the naming convention (lowercase letters,
    /// digits and `-`, starting with a letter, at most 63 characters).
    NamingConvention,
    /// Warning: an agent declares a `prompt` but none of its extensions
    /// injects it (the built-in `context-message` does).
    PromptUnused,
    /// Warning: an ingress rule matches an event its connector never emits.
    EventUndeclared,
    /// Warning: a `valueFrom.env` variable is unset at validation time.
    EnvMissingWarning,
}

impl Code {
    /// Every code, in documentation order.
    pub const ALL: [Code; 40] = [
        Code::Schema,
        Code::ApiVersion,
        Code::UnknownKind,
        Code::DuplicateName,
        Code::RefNotFound,
        Code::RefAmbiguous,
        Code::RefInvalid,
        Code::PathEscape,
        Code::FileNotFound,
        Code::YamlLimit,
        Code::YamlSyntax,
        Code::PackagePosition,
        Code::PackageNotFound,
        Code::PackageLockfile,
        Code::EntryUnsupported,
        Code::EntryNoRuntime,
        Code::EntrySyntax,
        Code::BuiltinNotFound,
        Code::ToolName,
        Code::JsonSchema,
        Code::ValueSource,
        Code::MutuallyExclusive,
        Code::OutOfRange,
        Code::NotSwarmMember,
        Code::CapabilityMismatch,
        Code::RequiredToolMissing,
        Code::UnsupportedProvider,
        Code::InvalidUrl,
        Code::ApprovalsUnsupported,
        Code::ApprovalsTarget,
        Code::ApprovalsGate,
        Code::EnvFile,
        Code::Unreadable,
        Code::BundleEmpty,
        Code::EnvMissing,
        Code::SecretUnavailable,
        Code::NamingConvention,
        Code::PromptUnused,
        Code::EventUndeclared,
        Code::EnvMissingWarning,
    ];

    /// The stable code string.
    pub const fn as_str(self) -> &'static str {
        match self {
            Code::Schema => "E_CONFIG_SCHEMA",
            Code::ApiVersion => "E_CONFIG_API_VERSION",
            Code::UnknownKind => "E_CONFIG_UNKNOWN_KIND",
            Code::DuplicateName => "E_CONFIG_DUPLICATE_NAME",
            Code::RefNotFound => "E_CONFIG_REF_NOT_FOUND",
            Code::RefAmbiguous => "E_CONFIG_REF_AMBIGUOUS",
            Code::RefInvalid => "E_CONFIG_REF_INVALID",
            Code::PathEscape => "E_CONFIG_PATH_ESCAPE",
            Code::FileNotFound => "E_CONFIG_FILE_NOT_FOUND",
            Code::YamlLimit => "E_CONFIG_YAML_LIMIT",
            Code::YamlSyntax => "E_CONFIG_YAML_SYNTAX",
            Code::PackagePosition => "E_CONFIG_PACKAGE_POSITION",
            Code::PackageNotFound => "E_CONFIG_PACKAGE_NOT_FOUND",
            Code::PackageLockfile => "E_CONFIG_PACKAGE_LOCKFILE",
            Code::EntryUnsupported => "E_CONFIG_ENTRY_UNSUPPORTED",
            Code::EntryNoRuntime => "E_CONFIG_ENTRY_NO_RUNTIME",
            Code::EntrySyntax => "E_CONFIG_ENTRY_SYNTAX",
            Code::BuiltinNotFound => "E_CONFIG_BUILTIN_NOT_FOUND",
            Code::ToolName => "E_CONFIG_TOOL_NAME",
            Code::JsonSchema => "E_CONFIG_JSON_SCHEMA",
            Code::ValueSource => "E_CONFIG_VALUE_SOURCE",
            Code::MutuallyExclusive => "E_CONFIG_MUTUALLY_EXCLUSIVE",
            Code::OutOfRange => "E_CONFIG_OUT_OF_RANGE",
            Code::NotSwarmMember => "E_CONFIG_NOT_SWARM_MEMBER",
            Code::CapabilityMismatch => "E_CONFIG_CAPABILITY_MISMATCH",
            Code::RequiredToolMissing => "E_CONFIG_REQUIRED_TOOL_MISSING",
            Code::UnsupportedProvider => "E_CONFIG_UNSUPPORTED_PROVIDER",
            Code::InvalidUrl => "E_CONFIG_INVALID_URL",
            Code::ApprovalsUnsupported => "E_CONFIG_APPROVALS_UNSUPPORTED",
            Code::ApprovalsTarget => "E_CONFIG_APPROVALS_TARGET",
            Code::ApprovalsGate => "E_CONFIG_APPROVALS_GATE",
            Code::EnvFile => "E_CONFIG_ENV_FILE",
            Code::Unreadable => "E_CONFIG_UNREADABLE",
            Code::BundleEmpty => "E_CONFIG_BUNDLE_EMPTY",
            Code::EnvMissing => "E_CONFIG_ENV_MISSING",
            Code::SecretUnavailable => "E_CONFIG_SECRET_UNAVAILABLE",
            Code::NamingConvention => "W_CONFIG_NAMING_CONVENTION",
            Code::PromptUnused => "W_CONFIG_PROMPT_UNUSED",
            Code::EventUndeclared => "W_CONFIG_EVENT_UNDECLARED",
            Code::EnvMissingWarning => "W_CONFIG_ENV_MISSING",
        }
    }

    /// True for the warning codes.
    pub const fn is_warning(self) -> bool {
        matches!(
            self,
            Code::NamingConvention
                | Code::PromptUnused
                | Code::EventUndeclared
                | Code::EnvMissingWarning
        )
    }

    /// The code whose string is `text`.
    pub fn parse(text: &str) -> Option<Code> {
        Code::ALL.into_iter().find(|code| code.as_str() == text)
    }

    /// The fix to offer when a diagnostic has no more specific one.
    pub const fn default_suggestion(self) -> &'static str {
        match self {
            Code::Schema => "compare the resource with its kind's schema (resources.md)",
            Code::ApiVersion => "set `apiVersion: goondan.ai/v1`",
            Code::UnknownKind => {
                "use Model, Agent, Swarm, Tool, Extension, Connector, Connection or Package"
            }
            Code::DuplicateName => "rename one of them",
            Code::RefNotFound => "define the resource or fix the reference",
            Code::RefAmbiguous => "add `package:` to the reference",
            Code::RefInvalid => "write the reference as `Kind/name`",
            Code::PathEscape => "use a relative path inside the bundle folder",
            Code::FileNotFound => "create the file or fix the path",
            Code::YamlLimit => {
                "keep files under 1 MiB and 100 documents, nest less, use fewer aliases"
            }
            Code::YamlSyntax => "fix the YAML at the position shown",
            Code::PackagePosition => "make the Package the first document of goondan.yaml",
            Code::PackageNotFound => "run `gdn package install`, or check the package name",
            Code::PackageLockfile => "run `gdn package install` to write goondan.lock.yaml again",
            Code::EntryUnsupported => "use a `builtin:<name>` entry",
            Code::EntryNoRuntime => "use a .ts, .js, .mjs or .py file, or make the file executable",
            Code::EntrySyntax => "fix the syntax at the position shown",
            Code::BuiltinNotFound => "use the name of an existing built-in",
            Code::ToolName => "remove `__` from the name",
            Code::JsonSchema => "write `type: object` with `properties` and `required`",
            Code::ValueSource => "write `value: ...` or `valueFrom: { env: NAME }`",
            Code::MutuallyExclusive => "keep only one of the two fields",
            Code::OutOfRange => "use a value inside the allowed range",
            Code::NotSwarmMember => "add the agent to the swarm's agents",
            Code::CapabilityMismatch => "use a model that declares the capability",
            Code::RequiredToolMissing => {
                "add the Tool that exports it to spec.tools, or remove it from spec.requiredTools"
            }
            Code::UnsupportedProvider => "use anthropic, openai, google, scripted or replay",
            Code::InvalidUrl => "write an absolute http(s) URL",
            Code::ApprovalsUnsupported => {
                "put `approvals` on a Connection of Connector/telegram or Connector/slack (@goondan/base), or decide with `gdn approve` or the Studio"
            }
            Code::ApprovalsTarget => {
                "write `approvals: { chat: <chat id> }` for Telegram or `approvals: { channel: <channel id> }` for Slack"
            }
            Code::ApprovalsGate => {
                "write each pattern as a glob (`rm *`) or a regex (`re:^rm `), and list `bash__exec` in `tools` to use `unless`"
            }
            Code::EnvFile => "write one KEY=value per line",
            Code::Unreadable => "check the file's permissions",
            Code::BundleEmpty => "create goondan.yaml",
            Code::EnvMissing | Code::EnvMissingWarning => {
                "set the variable in the environment, .env, .env.local or an --env-file"
            }
            Code::SecretUnavailable => {
                "set GOONDAN_SECRET_<NAME>_<KEY> (or SECRET_<NAME>) in the environment or an env file"
            }
            Code::NamingConvention => "use lowercase letters, digits and `-`",
            Code::PromptUnused => "add Extension/context-message to the agent's extensions",
            Code::EventUndeclared => "match an event the connector declares",
        }
    }

    /// Where the code is documented.
    pub fn help_url(self) -> String {
        format!("https://docs.goondan.ai/errors/{}", self.as_str())
    }

    /// A diagnostic of this code with its severity and help URL set.
    pub fn diagnostic(self, message: impl Into<String>) -> Diagnostic {
        let diagnostic = if self.is_warning() {
            Diagnostic::warning(self.as_str(), message)
        } else {
            Diagnostic::error(self.as_str(), message)
        };
        diagnostic.with_help_url(self.help_url())
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn codes_are_unique_and_prefixed_by_severity() {
        let mut seen = HashSet::new();
        for code in Code::ALL {
            assert!(seen.insert(code.as_str()), "{code} listed twice");
            let prefix = if code.is_warning() {
                "W_CONFIG_"
            } else {
                "E_CONFIG_"
            };
            assert!(code.as_str().starts_with(prefix), "{code}");
            assert_eq!(code.diagnostic("x").is_error(), !code.is_warning());
            assert_eq!(Code::parse(code.as_str()), Some(code));
            assert!(!code.default_suggestion().is_empty());
        }
    }
}
