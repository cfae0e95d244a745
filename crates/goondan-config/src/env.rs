//! The environment a bundle sees: the process environment overlaid by
//! `.env`, `.env.local` and `--env-file` (`cli.md` §4.4: a key in a later
//! file wins; a key in no file falls back to the process environment).
//! The process environment itself is never modified.

use crate::codes::Code;
use crate::error::{LoadError, ResolveError};
use goondan_types::{Diagnostic, SecretRef, Secrets, ValueSource};
use std::collections::HashMap;
use std::path::Path;

/// Environment variables, resolved once at load time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvMap {
    vars: HashMap<String, String>,
}

impl EnvMap {
    /// A map holding exactly these variables.
    pub fn from_vars<K: Into<String>, V: Into<String>>(
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        EnvMap {
            vars: vars
                .into_iter()
                .map(|(key, value)| (key.into(), value.into()))
                .collect(),
        }
    }

    /// The value of a variable.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }

    /// Turns a ValueSource into its value: the literal, or the variable
    /// `valueFrom.env` names. Call it when the value is needed (starting a
    /// model or a connector), so an unused missing variable never blocks.
    pub fn resolve(&self, source: &ValueSource) -> Result<String, ResolveError> {
        if let Some(value) = &source.value {
            return Ok(value.clone());
        }
        let Some(value_from) = &source.value_from else {
            return Err(ResolveError::Empty);
        };
        if let Some(name) = &value_from.env {
            return self
                .get(name)
                .map(str::to_string)
                .ok_or_else(|| ResolveError::EnvMissing { name: name.clone() });
        }
        if let Some(secret) = &value_from.secret_ref {
            let candidates = secret_variables(secret);
            return candidates
                .iter()
                .find_map(|name| self.get(name).filter(|value| !value.trim().is_empty()))
                .map(str::to_string)
                .ok_or_else(|| ResolveError::SecretUnavailable {
                    reference: secret.reference.clone(),
                    key: secret.key.clone(),
                    candidates,
                });
        }
        Err(ResolveError::Empty)
    }
}

/// The environment variables a `valueFrom.secretRef` is read from, in the
/// order the original tries them: `GOONDAN_SECRET_<NAME>_<KEY>`,
/// `GOONDAN_SECRET_<NAME>`, `SECRET_<NAME>_<KEY>`, `SECRET_<NAME>`, where
/// `<NAME>` is the `Secret/<name>` part and both are upper-cased with
/// every run of other characters turned into `_`. Empty for a ref that is
/// not `Secret/<name>` (validation reports it).
pub(crate) fn secret_variables(secret: &SecretRef) -> Vec<String> {
    let Some(name) = secret
        .reference
        .trim()
        .strip_prefix("Secret/")
        .map(env_token)
        .filter(|name| !name.is_empty())
    else {
        return Vec::new();
    };
    let key = env_token(&secret.key);
    let mut candidates = Vec::new();
    for prefix in ["GOONDAN_SECRET", "SECRET"] {
        if !key.is_empty() {
            candidates.push(format!("{prefix}_{name}_{key}"));
        }
        candidates.push(format!("{prefix}_{name}"));
    }
    candidates
}

/// `slack-oauth` as `SLACK_OAUTH`: upper case, each run of characters
/// other than ASCII letters and digits one `_`, none at either end.
fn env_token(text: &str) -> String {
    let mut token = String::new();
    for c in text.trim().chars() {
        if c.is_ascii_alphanumeric() {
            token.push(c.to_ascii_uppercase());
        } else if !token.is_empty() && !token.ends_with('_') {
            token.push('_');
        }
    }
    token.trim_end_matches('_').to_string()
}

/// Builds the environment of a bundle rooted at `root`.
pub(crate) fn load_env(
    root: &Path,
    env_file: Option<&Path>,
    inherit_process_env: bool,
    process_env_overlay: &Secrets,
    diagnostics: &mut Vec<Diagnostic>,
) -> Result<EnvMap, LoadError> {
    let mut vars: HashMap<String, String> = if inherit_process_env {
        std::env::vars_os()
            .filter_map(|(key, value)| Some((key.into_string().ok()?, value.into_string().ok()?)))
            .collect()
    } else {
        HashMap::new()
    };
    for (name, value) in process_env_overlay.iter() {
        vars.insert(name.to_string(), value.to_string());
    }
    let mut layers = vec![
        (root.join(".env"), ".env".to_string()),
        (root.join(".env.local"), ".env.local".to_string()),
    ];
    if let Some(path) = env_file {
        if !path.is_file() {
            return Err(LoadError::EnvFileNotFound {
                path: path.to_path_buf(),
            });
        }
        layers.push((path.to_path_buf(), path.display().to_string()));
    }
    for (path, display) in layers {
        if !path.is_file() {
            continue;
        }
        let iter = match dotenvy::from_path_iter(&path) {
            Ok(iter) => iter,
            Err(error) => {
                diagnostics.push(env_file_problem(&display, &error));
                continue;
            }
        };
        for item in iter {
            match item {
                Ok((key, value)) => {
                    vars.insert(key, value);
                }
                Err(error) => {
                    diagnostics.push(env_file_problem(&display, &error));
                    break;
                }
            }
        }
    }
    Ok(EnvMap { vars })
}

fn env_file_problem(display: &str, error: &dotenvy::Error) -> Diagnostic {
    let mut diagnostic = Code::EnvFile
        .diagnostic(format!("{display} cannot be read as an env file: {error}"))
        .with_file(display)
        .with_suggestion("write one KEY=value per line; quote values with spaces");
    if let dotenvy::Error::LineParse(_, index) = error {
        diagnostic = diagnostic.with_location(*index + 1, 1);
    }
    diagnostic
}

#[cfg(test)]
mod tests {
    use super::*;
    use goondan_types::{SecretRef, ValueFrom};

    #[test]
    fn later_files_win_and_process_env_is_the_fallback() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".env"), "A=env\nB=env\nC=env\n").unwrap();
        std::fs::write(dir.path().join(".env.local"), "B=local\nC=local\n").unwrap();
        let custom = dir.path().join("custom.env");
        std::fs::write(&custom, "C=custom\n").unwrap();
        let mut diagnostics = Vec::new();
        let env = load_env(
            dir.path(),
            Some(&custom),
            true,
            &Secrets::new(),
            &mut diagnostics,
        )
        .unwrap();
        assert!(diagnostics.is_empty());
        assert_eq!(
            (env.get("A"), env.get("B"), env.get("C")),
            (Some("env"), Some("local"), Some("custom"))
        );
        assert!(env.get("PATH").is_some(), "process env is inherited");
        let missing = dir.path().join("nope.env");
        assert!(matches!(
            load_env(
                dir.path(),
                Some(&missing),
                false,
                &Secrets::new(),
                &mut diagnostics
            ),
            Err(LoadError::EnvFileNotFound { .. })
        ));
    }

    #[test]
    fn the_handshake_overlay_acts_as_process_env_without_entering_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".env"), "FROM_FILE=file\n").unwrap();
        let overlay: Secrets = [
            ("GOONDAN_TEST_OVERLAY_ONLY", "handed-over"),
            ("FROM_FILE", "overlay"),
        ]
        .into_iter()
        .collect();
        let mut diagnostics = Vec::new();
        let env = load_env(dir.path(), None, true, &overlay, &mut diagnostics).unwrap();
        assert_eq!(env.get("GOONDAN_TEST_OVERLAY_ONLY"), Some("handed-over"));
        assert_eq!(env.get("FROM_FILE"), Some("file"), "env files still win");
        assert!(std::env::var_os("GOONDAN_TEST_OVERLAY_ONLY").is_none());
    }

    #[test]
    fn resolves_value_env_and_reports_missing_and_secrets() {
        let env = EnvMap::from_vars([("KEY", "secret")]);
        let literal = ValueSource {
            value: Some("v".into()),
            value_from: None,
        };
        assert_eq!(env.resolve(&literal).unwrap(), "v");
        let from_env = |name: &str| ValueSource {
            value: None,
            value_from: Some(ValueFrom {
                env: Some(name.into()),
                secret_ref: None,
            }),
        };
        assert_eq!(env.resolve(&from_env("KEY")).unwrap(), "secret");
        let missing = env.resolve(&from_env("NOPE")).unwrap_err();
        assert_eq!(missing.code(), Code::EnvMissing);
        let secret = ValueSource {
            value: None,
            value_from: Some(ValueFrom {
                env: None,
                secret_ref: Some(SecretRef {
                    reference: "Secret/x".into(),
                    key: "k".into(),
                }),
            }),
        };
        assert_eq!(
            env.resolve(&secret).unwrap_err().code(),
            Code::SecretUnavailable
        );
        let with = |vars: &[(&str, &str)]| EnvMap::from_vars(vars.iter().copied());
        let slack = ValueSource {
            value: None,
            value_from: Some(ValueFrom {
                env: None,
                secret_ref: Some(SecretRef {
                    reference: "Secret/slack-oauth".into(),
                    key: "client_secret".into(),
                }),
            }),
        };
        assert_eq!(
            secret_variables(
                slack
                    .value_from
                    .as_ref()
                    .unwrap()
                    .secret_ref
                    .as_ref()
                    .unwrap()
            ),
            [
                "GOONDAN_SECRET_SLACK_OAUTH_CLIENT_SECRET",
                "GOONDAN_SECRET_SLACK_OAUTH",
                "SECRET_SLACK_OAUTH_CLIENT_SECRET",
                "SECRET_SLACK_OAUTH",
            ]
        );
        let env = with(&[
            ("SECRET_SLACK_OAUTH", "late"),
            ("GOONDAN_SECRET_SLACK_OAUTH_CLIENT_SECRET", "first"),
        ]);
        assert_eq!(env.resolve(&slack).unwrap(), "first");
        let env = with(&[
            ("SECRET_SLACK_OAUTH", "late"),
            ("GOONDAN_SECRET_SLACK_OAUTH_CLIENT_SECRET", " "),
        ]);
        assert_eq!(env.resolve(&slack).unwrap(), "late");
        let missing = with(&[]).resolve(&slack).unwrap_err();
        assert!(
            missing.to_string().contains("SECRET_SLACK_OAUTH"),
            "{missing}"
        );
        assert_eq!(
            env.resolve(&ValueSource::default()).unwrap_err(),
            ResolveError::Empty
        );
    }
}
