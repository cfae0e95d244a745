//! `gdn doctor`: checks this machine and the current project, and prints
//! each check as pass, warn or fail with a one-line detail and a fix.
//!
//! Checked: the binary's version; the System Root (resolved like every
//! command does, and proven writable with a probe file); the provider keys
//! (presence only, never more than a 4-character prefix of a value); the
//! runtimes future script entries will need (`node`, `bun`, `python3`);
//! whether the `OTEL_*` variables turn span export on, and are usable;
//! the project's bundle (found, valid). It exits 1 when a check fails and
//! 0 otherwise. It touches no network and leaves nothing behind: folders
//! it creates to probe the System Root are removed again.
//!
//! With `--fix` it repairs what has one safe repair, and says so in the
//! check: a System Root that does not exist is created with its layout
//! (`StateRoot::initialize`, as `gdn run` would), one that other users can
//! read (it holds conversations) is made private (0700), and the bundle
//! gets `gdn validate --fix`'s fixes before it is validated.

use super::init::shell_word;
use crate::cli::{DoctorArgs, GlobalArgs};
use crate::exit::Outcome;
use goondan_config::spec::ModelSpec;
use goondan_config::{load_bundle, Bundle, LoadError, LoadOptions, Resource};
use goondan_store::StateRootSources;
use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long all runtime probes together may take; a runtime that does not
/// print its version by then is reported, not waited for.
const RUNTIME_PROBE_BUDGET: Duration = Duration::from_secs(3);

/// The provider keys the HTTP providers read (`goondan-model` README),
/// with the provider that reads each.
const PROVIDER_KEYS: &[(&str, &str)] = &[
    ("ANTHROPIC_API_KEY", "anthropic"),
    ("OPENAI_API_KEY", "openai"),
    ("GOOGLE_GENERATIVE_AI_API_KEY", "google"),
];

/// Runtimes a script entry (`.js`/`.ts`/`.py`) will run on, with the
/// argument that prints their version.
const RUNTIMES: &[(&str, &str, &str)] = &[
    (
        "node",
        "--version",
        "Node.js runs .js and .mjs script entries",
    ),
    ("bun", "--version", "Bun runs .ts and .js script entries"),
    ("python3", "--version", "Python runs .py script entries"),
];

/// The verdict of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Pass,
    Warn,
    Fail,
}

impl Status {
    fn label(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }

    fn ansi(self) -> &'static str {
        match self {
            Status::Pass => "1;32",
            Status::Warn => "1;33",
            Status::Fail => "1;31",
        }
    }
}

/// One line of the report.
#[derive(Debug, Clone)]
struct Check {
    group: &'static str,
    name: String,
    status: Status,
    detail: String,
    fix: Option<String>,
}

impl Check {
    fn new(group: &'static str, name: impl Into<String>, status: Status, detail: String) -> Self {
        Check {
            group,
            name: name.into(),
            status,
            detail,
            fix: None,
        }
    }

    fn with_fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }
}

/// Runs `gdn doctor`.
pub(crate) fn run(global: &GlobalArgs, args: &DoctorArgs) -> anyhow::Result<Outcome> {
    // The runtimes answer while the other checks run.
    let runtime_probes = start_runtime_probes();
    let mut checks = vec![
        version_check(),
        state_root_check(global, args.fix),
        telemetry_check(),
    ];
    let (project_checks, bundle) = project_checks(global, args);
    checks.extend(finish_runtime_probes(runtime_probes));
    checks.extend(key_checks(bundle.as_ref()));
    checks.extend(project_checks);
    render(global, &checks)?;
    Ok(if checks.iter().any(|check| check.status == Status::Fail) {
        Outcome::Failure
    } else {
        Outcome::Success
    })
}

fn version_check() -> Check {
    Check::new(
        "system",
        "gdn",
        Status::Pass,
        format!(
            "version {} ({} {})",
            env!("CARGO_PKG_VERSION"),
            std::env::consts::OS,
            std::env::consts::ARCH
        ),
    )
}

/// Resolves the System Root as every command does, then proves it can be
/// written and that only its owner can read it; with `fix`, creates it or
/// makes it private.
fn state_root_check(global: &GlobalArgs, fix: bool) -> Check {
    const NAME: &str = "System Root";
    const FIX: &str =
        "point --state-root or GOONDAN_STATE_ROOT at a folder you can write (default ~/.goondan)";
    // clap already folded GOONDAN_STATE_ROOT into `--state-root`; comparing
    // with the variable tells the two apart for the report.
    let source = match &global.state_root {
        Some(path)
            if std::env::var_os("GOONDAN_STATE_ROOT").as_deref() == Some(path.as_os_str()) =>
        {
            "from GOONDAN_STATE_ROOT"
        }
        Some(_) => "from --state-root",
        None => "the default",
    };
    let root = match StateRootSources::from_process_env(global.state_root.clone()).resolve() {
        Ok(root) => root,
        Err(error) => {
            return Check::new(
                "system",
                NAME,
                Status::Fail,
                format!("cannot resolve it: {error}"),
            )
            .with_fix(FIX)
        }
    };
    let path = root.path();
    match probe_writable(path) {
        Ok(Probe::Existing) => private_root_check(path, source, fix),
        Ok(Probe::Creatable) if fix => match root.initialize() {
            Ok(()) => Check::new(
                "system",
                NAME,
                Status::Pass,
                format!("{} ({source}) created (fixed)", path.display()),
            ),
            Err(error) => Check::new(
                "system",
                NAME,
                Status::Fail,
                format!(
                    "{} ({source}) could not be created: {error}",
                    path.display()
                ),
            )
            .with_fix(FIX),
        },
        Ok(Probe::Creatable) => Check::new(
            "system",
            NAME,
            Status::Pass,
            format!(
                "{} ({source}) does not exist yet; gdn can create it",
                path.display()
            ),
        ),
        Err(error) => Check::new(
            "system",
            NAME,
            Status::Fail,
            format!("{} ({source}) is not writable: {error}", path.display()),
        )
        .with_fix(FIX),
    }
}

/// The System Root exists and is writable: is it private? With `fix`, a
/// root other users can read or enter becomes 0700.
fn private_root_check(path: &Path, source: &str, fix: bool) -> Check {
    use std::os::unix::fs::PermissionsExt;
    const NAME: &str = "System Root";
    let mode = match std::fs::metadata(path) {
        Ok(metadata) => metadata.permissions().mode() & 0o777,
        Err(error) => {
            return Check::new(
                "system",
                NAME,
                Status::Fail,
                format!("{} ({source}) cannot be read: {error}", path.display()),
            )
        }
    };
    if mode & 0o077 == 0 {
        return Check::new(
            "system",
            NAME,
            Status::Pass,
            format!("{} ({source}) is writable and private", path.display()),
        );
    }
    if fix {
        if let Err(error) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)) {
            return Check::new(
                "system",
                NAME,
                Status::Fail,
                format!(
                    "{} ({source}) could not be made private: {error}",
                    path.display()
                ),
            );
        }
        return Check::new(
            "system",
            NAME,
            Status::Pass,
            format!(
                "{} ({source}) was mode {mode:03o}; made private (0700) (fixed)",
                path.display()
            ),
        );
    }
    Check::new(
        "system",
        NAME,
        Status::Warn,
        format!(
            "{} ({source}) is mode {mode:03o}: other users can read its conversations",
            path.display()
        ),
    )
    .with_fix(format!(
        "chmod 700 {} (or run `gdn doctor --fix`)",
        shell_word(&path.display().to_string())
    ))
}

/// Whether the `OTEL_*` variables turn span export on, and whether
/// `gdn run` could use them (it refuses to start otherwise).
fn telemetry_check() -> Check {
    const NAME: &str = "OpenTelemetry export";
    match goondan_telemetry::OtlpSettings::from_env("goondan") {
        Ok(None) => Check::new(
            "system",
            NAME,
            Status::Pass,
            "off (no OTEL_EXPORTER_OTLP_ENDPOINT)".into(),
        ),
        Ok(Some(settings)) => Check::new(
            "system",
            NAME,
            Status::Pass,
            format!(
                "spans go to {} ({}), service `{}`{}",
                settings.traces_endpoint,
                settings.protocol.as_str(),
                settings.service_name,
                if settings.capture_message_content {
                    ", with message content"
                } else {
                    ""
                }
            ),
        ),
        Err(error) => Check::new(
            "system",
            NAME,
            Status::Fail,
            format!("[{}] {error}", error.code()),
        )
        .with_fix(error.suggestion()),
    }
}

/// What the probe found.
#[derive(Debug, PartialEq, Eq)]
enum Probe {
    /// The folder exists and a file could be created in it.
    Existing,
    /// The folder did not exist; it could be created (and was removed).
    Creatable,
}

/// Creates (when missing) `root`, writes and removes a probe file, then
/// removes the folders it created, deepest first.
fn probe_writable(root: &Path) -> std::io::Result<Probe> {
    let mut missing: Vec<&Path> = Vec::new();
    let mut cursor = Some(root);
    while let Some(dir) = cursor {
        if dir.symlink_metadata().is_ok() {
            break;
        }
        missing.push(dir);
        cursor = dir.parent();
    }
    let result = (|| {
        goondan_store::owner_only::create_dir_all(root)?;
        let probe = root.join(format!(".gdn-doctor-probe-{}", std::process::id()));
        goondan_store::owner_only::open_options()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&probe)
            .and_then(|mut file| std::io::Write::write_all(&mut file, b"probe"))?;
        std::fs::remove_file(&probe)
    })();
    for dir in &missing {
        // Only empty folders go (`remove_dir`), so nothing another process
        // put there meanwhile is lost; one left behind is harmless.
        let _ = std::fs::remove_dir(dir);
    }
    result.map(|()| {
        if missing.is_empty() {
            Probe::Existing
        } else {
            Probe::Creatable
        }
    })
}

/// A runtime probe under way.
struct RuntimeProbe {
    binary: &'static str,
    purpose: &'static str,
    child: std::io::Result<Child>,
}

fn start_runtime_probes() -> Vec<RuntimeProbe> {
    RUNTIMES
        .iter()
        .map(|&(binary, version_flag, purpose)| RuntimeProbe {
            binary,
            purpose,
            child: Command::new(binary)
                .arg(version_flag)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn(),
        })
        .collect()
}

fn finish_runtime_probes(probes: Vec<RuntimeProbe>) -> Vec<Check> {
    let deadline = Instant::now() + RUNTIME_PROBE_BUDGET;
    probes
        .into_iter()
        .map(|probe| {
            let check = |status, detail| Check::new("runtimes", probe.binary, status, detail);
            let fix = format!(
                "optional: install {} if you will write script entries ({})",
                probe.binary, probe.purpose
            );
            let mut child = match probe.child {
                Ok(child) => child,
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                    return check(Status::Warn, "not found on PATH".into()).with_fix(fix)
                }
                Err(error) => {
                    return check(Status::Warn, format!("cannot run it: {error}")).with_fix(fix)
                }
            };
            match wait_until(&mut child, deadline) {
                Some(status) if status.success() => {
                    check(Status::Pass, first_line_of_output(&mut child))
                }
                Some(status) => check(
                    Status::Warn,
                    format!("`{} --version` exited with {status}", probe.binary),
                )
                .with_fix(fix),
                None => {
                    // Ours to end: we started it, and it is not answering.
                    let _ = child.kill();
                    let _ = child.wait();
                    check(
                        Status::Warn,
                        format!(
                            "`{} --version` did not answer within {} s",
                            probe.binary,
                            RUNTIME_PROBE_BUDGET.as_secs()
                        ),
                    )
                    .with_fix(fix)
                }
            }
        })
        .collect()
}

/// Waits for `child` until `deadline`; `None` when it is still running.
fn wait_until(child: &mut Child, deadline: Instant) -> Option<std::process::ExitStatus> {
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) | Err(_) => return None,
        }
    }
}

/// The version line a runtime printed (old Pythons print it on stderr).
fn first_line_of_output(child: &mut Child) -> String {
    let mut text = String::new();
    for stream in [
        child.stdout.take().map(|s| Box::new(s) as Box<dyn Read>),
        child.stderr.take().map(|s| Box::new(s) as Box<dyn Read>),
    ]
    .into_iter()
    .flatten()
    {
        let mut buffer = String::new();
        if stream.take(4096).read_to_string(&mut buffer).is_ok() {
            if let Some(line) = buffer.lines().map(str::trim).find(|line| !line.is_empty()) {
                text = line.to_string();
                break;
            }
        }
    }
    if text.is_empty() {
        "found (it printed no version)".into()
    } else {
        text
    }
}

/// Presence of each key a Model reads, in the process environment or in
/// the project's env files, masked: each provider's default variable, and
/// every variable a Model names in `apiKey.valueFrom.env`. A missing key
/// warns only when a Model of the bundle reads it.
fn key_checks(bundle: Option<&Bundle>) -> Vec<Check> {
    type Model = Resource<ModelSpec>;
    let models = bundle.map(Bundle::models).unwrap_or_default();
    let reads_from = |model: &&Model| {
        model
            .spec
            .api_key
            .as_ref()
            .and_then(|key| key.value_from.as_ref())
            .and_then(|from| from.env.clone())
    };
    let mut checks: Vec<Check> = PROVIDER_KEYS
        .iter()
        .map(|&(variable, provider)| {
            let of_provider: Vec<&Model> = models
                .iter()
                .filter(|model| model.spec.provider == provider)
                .collect();
            let users: Vec<String> = of_provider
                .iter()
                .filter(|model| {
                    model.spec.api_key.is_none() || reads_from(model).as_deref() == Some(variable)
                })
                .map(|model| format!("Model/{}", model.name()))
                .collect();
            // Models of this provider that read their key elsewhere make
            // the default variable unneeded; say where they read it.
            let elsewhere: Vec<String> = of_provider
                .iter()
                .filter(|model| {
                    model.spec.api_key.is_some() && reads_from(model).as_deref() != Some(variable)
                })
                .map(|model| match reads_from(model) {
                    Some(other) => format!("Model/{} reads {other}", model.name()),
                    None => format!("Model/{} has its own apiKey", model.name()),
                })
                .collect();
            let unneeded = if elsewhere.is_empty() {
                format!("no Model here uses `provider: {provider}`")
            } else {
                format!("not needed: {}", elsewhere.join(", "))
            };
            key_check(
                bundle,
                variable,
                &users,
                &unneeded,
                &format!("`provider: {provider}`"),
            )
        })
        .collect();
    let mut named: Vec<String> = models
        .iter()
        .filter_map(|model| reads_from(&model))
        .filter(|variable| !PROVIDER_KEYS.iter().any(|(default, _)| default == variable))
        .collect();
    named.sort();
    named.dedup();
    for variable in named {
        let users: Vec<String> = models
            .iter()
            .filter(|model| reads_from(model).as_deref() == Some(variable.as_str()))
            .map(|model| format!("Model/{}", model.name()))
            .collect();
        let needed_for = users.join(", ");
        checks.push(key_check(bundle, &variable, &users, "", &needed_for));
    }
    checks
}

/// One key's check: `users` are the Models that read it; `unneeded` says
/// why a missing key does not matter when none does; `needed_for` names
/// what it is for in the fix.
fn key_check(
    bundle: Option<&Bundle>,
    variable: &str,
    users: &[String],
    unneeded: &str,
    needed_for: &str,
) -> Check {
    let from_process = std::env::var(variable).ok();
    let (value, place) = match from_process {
        Some(value) => (Some(value), "the environment"),
        None => (
            bundle
                .and_then(|bundle| bundle.env().get(variable))
                .map(str::to_string),
            "the env files",
        ),
    };
    let needed_by = if users.is_empty() {
        String::new()
    } else {
        format!("; needed by {}", users.join(", "))
    };
    match value {
        Some(value) if !value.trim().is_empty() => Check::new(
            "keys",
            variable,
            Status::Pass,
            format!("set in {place} ({}){needed_by}", mask(&value)),
        ),
        Some(_) => Check::new(
            "keys",
            variable,
            Status::Warn,
            format!("set in {place} but empty{needed_by}"),
        )
        .with_fix(format!("give {variable} a value in .env, or unset it")),
        // Only a key a Model of the bundle reads is worth a warning; the
        // others are just not needed here.
        None if users.is_empty() => Check::new(
            "keys",
            variable,
            Status::Pass,
            format!("not set; {unneeded}"),
        ),
        None => Check::new(
            "keys",
            variable,
            Status::Warn,
            format!("not set{needed_by}"),
        )
        .with_fix(format!(
            "only needed for {needed_for}: add {variable}=... to .env, or export it"
        )),
    }
}

/// At most a 4-character prefix and the length: enough to tell two keys
/// apart, too little to use one. Short values show proportionally less.
fn mask(value: &str) -> String {
    let length = value.chars().count();
    let prefix: String = value.chars().take((length / 4).min(4)).collect();
    format!("{prefix}…({length} chars)")
}

/// The bundle of `--config` (or `.`): found, then valid. Returns the
/// bundle when it loaded, for the key checks.
fn project_checks(global: &GlobalArgs, args: &DoctorArgs) -> (Vec<Check>, Option<Bundle>) {
    let path = global.config.clone().unwrap_or_else(|| PathBuf::from("."));
    let shown = path.display().to_string();
    let options = LoadOptions {
        env_file: args.env_file.clone(),
        inherit_process_env: true,
        ..LoadOptions::default()
    };
    let mut loaded = load_bundle(&path, &options);
    let mut fixed_check = None;
    if let (true, Ok(outcome)) = (args.fix, &loaded) {
        fixed_check = Some(
            match goondan_config::fix::fix_bundle(&path, &outcome.diagnostics) {
                Ok(fixed) if fixed.is_empty() => None,
                Ok(fixed) => {
                    loaded = load_bundle(&path, &options);
                    let places: Vec<String> = fixed
                        .iter()
                        .map(|fix| format!("{}:{} {}", fix.file, fix.line, fix.description))
                        .collect();
                    Some(Check::new(
                        "project",
                        "fixes",
                        Status::Pass,
                        format!("fixed: {}", places.join("; ")),
                    ))
                }
                Err(error) => Some(Check::new(
                    "project",
                    "fixes",
                    Status::Fail,
                    error.to_string(),
                )),
            },
        )
        .flatten();
    }
    let outcome = match loaded {
        Ok(outcome) => outcome,
        Err(error @ (LoadError::NotFound { .. } | LoadError::Empty { .. })) => {
            let check = Check::new("project", "bundle", Status::Warn, error.to_string())
                .with_fix("run `gdn init` to create a project, or pass --config DIR");
            return (vec![check], None);
        }
        Err(error) => {
            let mut check = Check::new(
                "project",
                "bundle",
                Status::Fail,
                format!("[{}] {error}", error.code()),
            );
            if let Some(suggestion) = error.suggestion() {
                check = check.with_fix(suggestion);
            }
            return (vec![check], None);
        }
    };
    let found = Check::new(
        "project",
        "bundle",
        Status::Pass,
        format!("found at {shown}"),
    );
    let errors: Vec<_> = outcome.errors().collect();
    let warnings: Vec<_> = outcome.warnings().collect();
    let fix = format!(
        "run `gdn validate {}` to see each problem with its place",
        shell_word(&shown)
    );
    let validation = if let Some(first) = errors.first() {
        Check::new(
            "project",
            "validation",
            Status::Fail,
            format!(
                "{} error(s), {} warning(s); first: [{}] {}",
                errors.len(),
                warnings.len(),
                first.code,
                first.message
            ),
        )
        .with_fix(fix)
    } else if let Some(first) = warnings.first() {
        Check::new(
            "project",
            "validation",
            Status::Warn,
            format!(
                "valid, with {} warning(s); first: [{}] {}",
                warnings.len(),
                first.code,
                first.message
            ),
        )
        .with_fix(fix)
    } else {
        let summary = outcome
            .bundle
            .as_ref()
            .map(|bundle| {
                format!(
                    "valid: {} model(s), {} agent(s), {} swarm(s)",
                    bundle.models().len(),
                    bundle.agents().len(),
                    bundle.swarms().len()
                )
            })
            .unwrap_or_else(|| "valid".into());
        Check::new("project", "validation", Status::Pass, summary)
    };
    let checks = std::iter::once(found)
        .chain(fixed_check)
        .chain(std::iter::once(validation))
        .collect();
    (checks, outcome.bundle)
}

fn render(global: &GlobalArgs, checks: &[Check]) -> anyhow::Result<()> {
    let count = |status| checks.iter().filter(|check| check.status == status).count();
    let (passed, warned, failed) = (
        count(Status::Pass),
        count(Status::Warn),
        count(Status::Fail),
    );
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if global.json {
        let report = serde_json::json!({
            "version": env!("CARGO_PKG_VERSION"),
            "checks": checks.iter().map(|check| serde_json::json!({
                "group": check.group,
                "name": check.name,
                "status": check.status.label(),
                "detail": check.detail,
                "fix": check.fix,
            })).collect::<Vec<_>>(),
            "summary": { "pass": passed, "warn": warned, "fail": failed },
        });
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
        return Ok(());
    }
    let colored =
        !global.no_color && std::env::var_os("NO_COLOR").is_none() && stdout.is_terminal();
    let paint = |status: Status| {
        if colored {
            format!("\x1b[{}m{}\x1b[0m", status.ansi(), status.label())
        } else {
            status.label().to_string()
        }
    };
    let mut group = "";
    for check in checks {
        if global.quiet && check.status == Status::Pass {
            continue;
        }
        if check.group != group && !global.quiet {
            group = check.group;
            writeln!(out, "{}", group_title(group))?;
        }
        writeln!(
            out,
            "  {}  {}: {}",
            paint(check.status),
            check.name,
            check.detail
        )?;
        if let Some(fix) = &check.fix {
            writeln!(out, "        fix: {fix}")?;
        }
    }
    writeln!(out, "pass {passed}, warn {warned}, fail {failed}")?;
    Ok(())
}

fn group_title(group: &str) -> &'static str {
    match group {
        "system" => "System",
        "runtimes" => "Script runtimes",
        "keys" => "Provider keys",
        _ => "Project",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_show_at_most_four_characters() {
        assert_eq!(
            mask(&format!("sk-ant-{}", "x".repeat(44))),
            "sk-a…(51 chars)"
        );
        assert_eq!(mask("abcdefgh"), "ab…(8 chars)");
        assert_eq!(mask("abc"), "…(3 chars)");
        assert_eq!(mask("ключ-ключ-ключ-ключ"), "ключ…(19 chars)");
    }

    #[test]
    fn probing_a_missing_root_creates_nothing_that_stays() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("a/b/state");
        assert_eq!(probe_writable(&root).unwrap(), Probe::Creatable);
        assert!(!dir.path().join("a").exists());
        std::fs::create_dir_all(&root).unwrap();
        assert_eq!(probe_writable(&root).unwrap(), Probe::Existing);
        assert_eq!(std::fs::read_dir(&root).unwrap().count(), 0);
    }

    #[test]
    fn a_root_under_a_file_is_not_writable() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, "x").unwrap();
        assert!(probe_writable(&file.join("state")).is_err());
        assert!(probe_writable(&file).is_err());
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
    }
}
