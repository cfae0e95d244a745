//! `gdn package ...` and `gdn registry serve`: argument glue around
//! `goondan-package`. Every failure is printed once as
//! `error[E_PKG_...]: message` with a `help:` line and mapped to an exit
//! code; nothing here resolves, packs or serves by itself.

use crate::cli::{
    GlobalArgs, PackageCacheCommand, PackageCommand, RegistryFlag, RegistryServeArgs,
};
use crate::exit::Outcome;
use goondan_config::lockfile::LOCKFILE_NAME;
use goondan_package::install::{InstallOptions, InstallReport};
use goondan_package::manifest::PackageManifest;
use goondan_package::name::PackageRef;
use goondan_package::registry::client::RegistryClient;
use goondan_package::settings::ClientSettings;
use goondan_package::PackageError;
use std::path::{Path, PathBuf};

/// Runs one `gdn package` subcommand.
pub(crate) fn run(global: &GlobalArgs, command: &PackageCommand) -> anyhow::Result<Outcome> {
    let runtime = crate::runtime::current_thread()?;
    let context = match Session::new(global) {
        Ok(context) => context,
        Err(error) => return Ok(report(&error)),
    };
    let long_work = match command {
        PackageCommand::Install { .. } => Some("installing packages"),
        _ => None,
    };
    let result = runtime.block_on(async {
        let _progress = long_work.and_then(|label| crate::progress::Progress::start(global, label));
        context.run(command).await
    });
    match result {
        Ok(()) => Ok(Outcome::Success),
        Err(error) => Ok(report(&error)),
    }
}

/// Installs the bundle's missing dependencies before `gdn run` (skipped
/// with `--no-install`). A bundle without registry dependencies costs one
/// read of its `goondan.yaml`.
pub(crate) fn install_before_run(global: &GlobalArgs) -> Result<(), Outcome> {
    let context = Session::new(global).map_err(|error| report(&error))?;
    if !context.has_registry_dependencies() {
        return Ok(());
    }
    let runtime = crate::runtime::current_thread().map_err(|error| {
        crate::render::uncoded_error(&format!("{error:#}"));
        Outcome::Failure
    })?;
    runtime
        .block_on(async {
            let _progress = crate::progress::Progress::start(global, "installing packages");
            context.install_missing(global.quiet).await
        })
        .map_err(|error| {
            let outcome = report(&error);
            crate::render::after_error(
                "nothing was started (`gdn run --no-install` skips installing)",
            );
            outcome
        })
}

/// Installs the missing dependencies of the bundle at `bundle_root` (one
/// a cluster host fetched), as `gdn run` does for its own.
async fn install_for_bundle(global: &GlobalArgs, bundle_root: &Path) -> Result<(), PackageError> {
    let mut context = Session::new(global)?;
    context.bundle_root = bundle_root.to_path_buf();
    if !context.has_registry_dependencies() {
        return Ok(());
    }
    context.install_missing(global.quiet).await
}

/// What a cluster host installs the packages of a bundle it fetched
/// with: [`install_for_bundle`], as `gdn run` does for its own.
pub(crate) fn installer(global: &GlobalArgs) -> goondan_host::PackageInstaller {
    let global = global.clone();
    std::sync::Arc::new(move |bundle_root: PathBuf| {
        let global = global.clone();
        Box::pin(async move { install_for_bundle(&global, &bundle_root).await })
    })
}

/// Prints `error` with its code and help; the exit outcome for it.
fn report(error: &PackageError) -> Outcome {
    crate::render::error(error.code(), error, Some(&error.suggestion()));
    match error {
        PackageError::Unreachable { .. } => Outcome::RegistryUnreachable,
        PackageError::AuthRequired { .. } => Outcome::RegistryAuth,
        PackageError::NoPackageDocument { .. }
        | PackageError::ManifestInvalid { .. }
        | PackageError::Lockfile(_)
        | PackageError::NoRegistry
        | PackageError::UrlInvalid { .. }
        | PackageError::TokenFile { .. } => Outcome::ConfigError,
        PackageError::BundleInvalid { .. } => Outcome::ValidationFailed,
        _ => Outcome::Failure,
    }
}

/// How a package command says what it did: a line for people, or with
/// `--json` one JSON object per line (`{"event": …}`) for machines.
#[derive(Clone, Copy)]
struct Voice {
    quiet: bool,
    json: bool,
}

impl Voice {
    /// Says `text` to people, or `event` (with its fields) to machines.
    fn say(self, out: &mut dyn std::io::Write, text: &str, event: &str, fields: serde_json::Value) {
        // A closed output is no reason to fail a command that succeeded.
        if self.json {
            let mut line = serde_json::json!({ "event": event });
            if let (Some(line), serde_json::Value::Object(fields)) = (line.as_object_mut(), fields)
            {
                line.extend(fields);
            }
            let _ = writeln!(out, "{line}");
        } else if !self.quiet {
            let _ = writeln!(out, "{text}");
        }
    }
}

/// What an install prints. `gdn run` says only what it changed (each
/// package it installed, a lockfile it wrote), so a run whose packages are
/// all there prints nothing; `gdn package` also counts what was there.
fn print_install(
    report: &InstallReport,
    voice: Voice,
    count_cached: bool,
    out: &mut dyn std::io::Write,
) {
    crate::progress::clear();
    for warning in &report.deprecated {
        eprintln!("warning: deprecated: {warning}");
    }
    // Printed even when quiet: the lockfile now trusts bytes the registry
    // changed after they were published.
    for relocked in &report.relocked {
        eprintln!("warning: re-locked with the registry's changed integrity: {relocked}");
    }
    for key in &report.installed {
        voice.say(
            out,
            &format!("installed {key}"),
            "installed",
            serde_json::json!({"package": key}),
        );
    }
    if count_cached && !report.cached.is_empty() {
        voice.say(
            out,
            &format!("{} package(s) already installed", report.cached.len()),
            "alreadyInstalled",
            serde_json::json!({"packages": report.cached}),
        );
    }
    if report.lockfile_written {
        voice.say(
            out,
            &format!("wrote {LOCKFILE_NAME}"),
            "lockfileWritten",
            serde_json::json!({"file": LOCKFILE_NAME}),
        );
    }
}

/// What every package command needs: the bundle, the System Root's
/// packages folder and its client settings.
struct Session {
    bundle_root: PathBuf,
    packages_root: PathBuf,
    config_file: PathBuf,
    settings: ClientSettings,
    quiet: bool,
    json: bool,
}

impl Session {
    fn new(global: &GlobalArgs) -> Result<Session, PackageError> {
        let path = global.config.clone().unwrap_or_else(|| PathBuf::from("."));
        let bundle_root = if path.is_file() {
            path.parent().map(Path::to_path_buf).unwrap_or_default()
        } else {
            path
        };
        let state_root =
            goondan_store::StateRootSources::from_process_env(global.state_root.clone())
                .resolve()
                .map_err(|error| PackageError::Io {
                    path: global.state_root.clone().unwrap_or_default(),
                    source: std::io::Error::other(error.to_string()),
                })?;
        let config_file = state_root.config_file();
        Ok(Session {
            bundle_root,
            packages_root: state_root.packages_dir(),
            settings: ClientSettings::read(&config_file)?,
            config_file,
            quiet: global.quiet,
            json: global.json,
        })
    }

    /// Whether the bundle depends on registry packages (false without a
    /// Package, or with a file the loader will report).
    fn has_registry_dependencies(&self) -> bool {
        PackageManifest::read(&self.bundle_root)
            .is_ok_and(|manifest| manifest.is_some_and(|m| !m.registry_dependencies().is_empty()))
    }

    /// Installs what the lockfile names and the System Root lacks; the
    /// report goes to stderr (stdout carries a run's answer).
    async fn install_missing(&self, quiet: bool) -> Result<(), PackageError> {
        let options = self.install_options(None, false);
        let report = goondan_package::install::install(&self.bundle_root, &options).await?;
        let voice = Voice { quiet, json: false };
        print_install(&report, voice, false, &mut std::io::stderr());
        Ok(())
    }

    fn voice(&self) -> Voice {
        Voice {
            quiet: self.quiet,
            json: self.json,
        }
    }

    /// Says what the command did on stdout (see [`Voice`]).
    fn say(&self, text: &str, event: &str, fields: serde_json::Value) {
        self.voice()
            .say(&mut std::io::stdout(), text, event, fields);
    }

    fn install_options(&self, registry: Option<&RegistryFlag>, frozen: bool) -> InstallOptions {
        InstallOptions {
            packages_root: self.packages_root.clone(),
            registry: registry.and_then(|flag| flag.registry.clone()),
            frozen,
            settings: self.settings.clone(),
            accept_changed_integrity: false,
        }
    }

    fn manifest(&self) -> Result<PackageManifest, PackageError> {
        PackageManifest::read(&self.bundle_root)?.ok_or_else(|| PackageError::NoPackageDocument {
            path: goondan_package::manifest::manifest_path(&self.bundle_root),
        })
    }

    /// A client of the registry named by `flag`, else the Package's,
    /// else the settings'.
    fn client(&self, flag: &RegistryFlag) -> Result<RegistryClient, PackageError> {
        let manifest = PackageManifest::read(&self.bundle_root).ok().flatten();
        let explicit = flag.registry.as_deref().or(manifest
            .as_ref()
            .and_then(|manifest| manifest.spec.registry.as_ref())
            .map(|registry| registry.url.as_str()));
        let base = self.settings.registry(explicit)?;
        let token = self.settings.token(&base);
        RegistryClient::new(base, token)
    }

    async fn install(&self, flag: &RegistryFlag, frozen: bool) -> Result<(), PackageError> {
        let report = goondan_package::install::install(
            &self.bundle_root,
            &self.install_options(Some(flag), frozen),
        )
        .await?;
        print_install(&report, self.voice(), true, &mut std::io::stdout());
        Ok(())
    }

    /// Runs one subcommand: each has its own method below.
    async fn run(mut self, command: &PackageCommand) -> Result<(), PackageError> {
        match command {
            PackageCommand::Add {
                reference,
                exact,
                dev,
                registry,
            } => {
                if *dev {
                    eprintln!(
                        "note: --dev changes nothing: a Package has no devDependencies, so {reference} is added as a dependency (the original ignores --dev too)"
                    );
                }
                self.add(reference, *exact, registry).await
            }
            PackageCommand::Install {
                frozen_lockfile,
                registry,
            } => self.install(registry, *frozen_lockfile).await,
            PackageCommand::Update {
                name,
                accept_changed_integrity,
                registry,
            } => {
                self.update(name.as_deref(), *accept_changed_integrity, registry)
                    .await
            }
            PackageCommand::Remove { name } => self.remove(name).await,
            PackageCommand::Publish {
                tag,
                access,
                dry_run,
                registry,
            } => {
                self.publish(tag, access.as_deref(), *dry_run, registry)
                    .await
            }
            PackageCommand::Unpublish {
                reference,
                force,
                registry,
            } => self.unpublish(reference, *force, registry).await,
            PackageCommand::Deprecate {
                reference,
                message,
                registry,
            } => self.deprecate(reference, message, registry).await,
            PackageCommand::Login { registry } => self.login(registry),
            PackageCommand::Logout { registry } => self.logout(registry),
            PackageCommand::Pack { out } => self.pack(out.as_deref()),
            PackageCommand::Info {
                reference,
                registry,
            } => self.info(reference, registry).await,
            PackageCommand::Cache { command } => self.cache(command),
        }
    }

    /// `gdn package update [NAME] [--accept-changed-integrity]`: resolves
    /// `name` (every dependency when `None`) again and installs.
    async fn update(
        &self,
        name: Option<&str>,
        accept_changed_integrity: bool,
        registry: &RegistryFlag,
    ) -> Result<(), PackageError> {
        let manifest = self.manifest()?;
        if let Some(name) = name {
            if !manifest.registry_dependencies().contains_key(name) {
                return Err(PackageError::NotFound {
                    name: name.to_string(),
                    registry: "the Package's dependencies".into(),
                });
            }
        }
        let options = InstallOptions {
            accept_changed_integrity,
            ..self.install_options(Some(registry), false)
        };
        let report = goondan_package::install::update(&self.bundle_root, &options, name).await?;
        print_install(&report, self.voice(), true, &mut std::io::stdout());
        Ok(())
    }

    /// `gdn package remove NAME`: drops the dependency and installs.
    async fn remove(&self, name: &str) -> Result<(), PackageError> {
        let mut manifest = self.manifest()?;
        if !manifest.remove_dependency(name)? {
            return Err(PackageError::NotFound {
                name: name.to_string(),
                registry: "the Package's dependencies".into(),
            });
        }
        self.say(
            &format!("removed {name} from the Package"),
            "removed",
            serde_json::json!({"package": name}),
        );
        self.install(&RegistryFlag { registry: None }, false).await
    }

    /// `gdn package unpublish REF [--force]`: a version, or every version
    /// with `--force`.
    async fn unpublish(
        &self,
        reference: &str,
        force: bool,
        registry: &RegistryFlag,
    ) -> Result<(), PackageError> {
        let parsed = PackageRef::parse(reference)?;
        if parsed.selector.is_none() && !force {
            return Err(PackageError::VersionInvalid {
                name: parsed.name,
                text: String::new(),
                what: "version (or --force to remove every version)",
            });
        }
        let warnings = self
            .client(registry)?
            .unpublish(&parsed.name, parsed.selector.as_deref())
            .await?;
        for warning in warnings {
            eprintln!("warning: {warning}");
        }
        self.say(
            &format!("unpublished {reference}"),
            "unpublished",
            serde_json::json!({"reference": reference}),
        );
        Ok(())
    }

    /// `gdn package deprecate NAME@VERSION MESSAGE`.
    async fn deprecate(
        &self,
        reference: &str,
        message: &str,
        registry: &RegistryFlag,
    ) -> Result<(), PackageError> {
        let parsed = PackageRef::parse(reference)?;
        let Some(version) = parsed.selector else {
            return Err(PackageError::VersionInvalid {
                name: parsed.name,
                text: String::new(),
                what: "version",
            });
        };
        self.client(registry)?
            .deprecate(&parsed.name, &version, message)
            .await?;
        self.say(
            &format!("deprecated {}@{version}", parsed.name),
            "deprecated",
            serde_json::json!({"package": parsed.name, "version": version}),
        );
        Ok(())
    }

    /// `gdn package login`: stores the token read from stdin for the
    /// registry.
    fn login(&mut self, registry: &RegistryFlag) -> Result<(), PackageError> {
        let base = self.client(registry)?.base().clone();
        eprintln!("token for {base} (read from stdin):");
        let mut line = String::new();
        std::io::stdin()
            .read_line(&mut line)
            .map_err(goondan_package_io(&self.config_file))?;
        let token = line.trim();
        if token.is_empty() {
            return Err(PackageError::TokenFile {
                path: PathBuf::from("stdin"),
                problem: "no token was given".into(),
            });
        }
        self.settings.login(&base, token)?;
        self.say(
            &format!(
                "stored the token for {base} in {}",
                self.config_file.display()
            ),
            "loggedIn",
            serde_json::json!({"registry": base.as_str(), "configFile": self.config_file}),
        );
        Ok(())
    }

    /// `gdn package logout`: forgets the registry's token.
    fn logout(&mut self, registry: &RegistryFlag) -> Result<(), PackageError> {
        let base = self.client(registry)?.base().clone();
        let removed = self.settings.logout(&base)?;
        let text = if removed {
            format!("forgot the token of {base}")
        } else {
            format!("no token stored for {base}")
        };
        self.say(
            &text,
            "loggedOut",
            serde_json::json!({"registry": base.as_str(), "removed": removed}),
        );
        Ok(())
    }

    /// `gdn package pack [--out DIR]`: writes the tarball (to the bundle
    /// folder by default) and prints its integrity.
    fn pack(&self, out: Option<&Path>) -> Result<(), PackageError> {
        let packed = goondan_package::publish::pack(&self.bundle_root)?;
        let dir = out.map_or_else(|| self.bundle_root.clone(), Path::to_path_buf);
        let path = dir.join(&packed.file_name);
        std::fs::create_dir_all(&dir).map_err(goondan_package_io(&dir))?;
        std::fs::write(&path, &packed.tarball).map_err(goondan_package_io(&path))?;
        if self.json {
            println!(
                "{}",
                serde_json::json!({"file": path, "integrity": packed.integrity, "size": packed.tarball.len()})
            );
        } else if !self.quiet {
            println!(
                "{} ({} bytes)\nintegrity {}",
                path.display(),
                packed.tarball.len(),
                packed.integrity
            );
        }
        Ok(())
    }

    /// `gdn package info NAME[@VERSION]`: the registry's metadata, as JSON
    /// or as lines.
    async fn info(&self, reference: &str, registry: &RegistryFlag) -> Result<(), PackageError> {
        let parsed = PackageRef::parse(reference)?;
        let metadata = self.client(registry)?.metadata(&parsed.name).await?;
        if self.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&metadata).unwrap_or_default()
            );
            return Ok(());
        }
        println!("{} ({})", metadata.name, metadata.access);
        if !metadata.description.is_empty() {
            println!("{}", metadata.description);
        }
        for (tag, version) in &metadata.dist_tags {
            println!("dist-tag {tag}: {version}");
        }
        for (version, entry) in &metadata.versions {
            if parsed
                .selector
                .as_deref()
                .is_some_and(|wanted| wanted != version)
            {
                continue;
            }
            let deprecated = if entry.deprecated.is_empty() {
                String::new()
            } else {
                format!(" (deprecated: {})", entry.deprecated)
            };
            println!("{version}  {}{deprecated}", entry.dist.integrity);
            for (name, range) in &entry.dependencies {
                println!("  depends on {name}@{range}");
            }
        }
        Ok(())
    }

    async fn add(
        &self,
        reference: &str,
        exact: bool,
        registry: &RegistryFlag,
    ) -> Result<(), PackageError> {
        let parsed = PackageRef::parse(reference)?;
        let metadata = self.client(registry)?.metadata(&parsed.name).await?;
        let mut manifest = match PackageManifest::read(&self.bundle_root)? {
            Some(manifest) => manifest,
            None => {
                let created = PackageManifest::create(&self.bundle_root)?;
                self.say(
                    &format!("created the Package `{}` in goondan.yaml", created.name),
                    "packageCreated",
                    serde_json::json!({"name": created.name}),
                );
                created
            }
        };
        let selector = parsed.selector.as_deref().unwrap_or("latest");
        // A dist-tag or an exact version picks one version; a range is
        // kept as written (with --exact, pinned to what it resolves to).
        let pinned = metadata
            .dist_tags
            .get(selector)
            .cloned()
            .or_else(|| semver::Version::parse(selector).ok().map(|v| v.to_string()));
        let range = match pinned {
            Some(version) if exact => version,
            Some(version) => format!("^{version}"),
            None => {
                let requirement = semver::VersionReq::parse(selector).map_err(|_| {
                    PackageError::VersionInvalid {
                        name: parsed.name.clone(),
                        text: selector.to_string(),
                        what: "range or dist-tag",
                    }
                })?;
                let best = metadata
                    .versions
                    .keys()
                    .filter_map(|text| semver::Version::parse(text).ok())
                    .filter(|version| requirement.matches(version))
                    .max()
                    .ok_or_else(|| PackageError::NoMatchingVersion {
                        name: parsed.name.clone(),
                        range: selector.to_string(),
                        available: metadata
                            .versions
                            .keys()
                            .cloned()
                            .collect::<Vec<_>>()
                            .join(", "),
                    })?;
                if exact {
                    best.to_string()
                } else {
                    selector.to_string()
                }
            }
        };
        manifest.set_dependency(&parsed.name, &range)?;
        self.say(
            &format!("added {}@{range} to the Package", parsed.name),
            "added",
            serde_json::json!({"package": parsed.name, "range": range}),
        );
        self.install(registry, false).await
    }

    async fn publish(
        &self,
        tag: &str,
        access: Option<&str>,
        dry_run: bool,
        registry: &RegistryFlag,
    ) -> Result<(), PackageError> {
        goondan_package::publish::validate(&self.bundle_root, &self.packages_root)?;
        let packed = goondan_package::publish::pack(&self.bundle_root)?;
        let body = goondan_package::publish::publish_body(&packed, Some(tag), access);
        if dry_run {
            self.say(
                &format!(
                    "{}@{} is ready to publish ({} bytes, {}); nothing was uploaded",
                    packed.name,
                    packed.version,
                    packed.tarball.len(),
                    packed.integrity
                ),
                "readyToPublish",
                serde_json::json!({"package": packed.name, "version": packed.version, "size": packed.tarball.len(), "integrity": packed.integrity}),
            );
            return Ok(());
        }
        let client = self.client(registry)?;
        client.publish(&body).await?;
        self.say(
            &format!(
                "published {}@{} to {} ({})",
                packed.name,
                packed.version,
                client.base(),
                packed.integrity
            ),
            "published",
            serde_json::json!({"package": packed.name, "version": packed.version, "registry": client.base().as_str(), "integrity": packed.integrity}),
        );
        Ok(())
    }

    fn cache(&self, command: &PackageCacheCommand) -> Result<(), PackageError> {
        match command {
            PackageCacheCommand::Info => {
                let mut installed = Vec::new();
                installed_packages(&self.packages_root, &self.packages_root, &mut installed);
                installed.sort();
                if self.json {
                    let packages: Vec<_> = installed
                        .iter()
                        .map(|(name, bytes)| serde_json::json!({"package": name, "bytes": bytes}))
                        .collect();
                    println!(
                        "{}",
                        serde_json::json!({"packagesRoot": self.packages_root, "packages": packages})
                    );
                    return Ok(());
                }
                for (name, bytes) in &installed {
                    println!("{name}  {bytes} bytes");
                }
                if !self.quiet {
                    println!(
                        "{} package(s) in {}",
                        installed.len(),
                        self.packages_root.display()
                    );
                }
                Ok(())
            }
            PackageCacheCommand::Clean => {
                if self.packages_root.exists() {
                    std::fs::remove_dir_all(&self.packages_root)
                        .map_err(goondan_package_io(&self.packages_root))?;
                }
                self.say(
                    &format!("removed {}", self.packages_root.display()),
                    "cacheCleaned",
                    serde_json::json!({"packagesRoot": self.packages_root}),
                );
                Ok(())
            }
        }
    }
}

fn goondan_package_io(path: &Path) -> impl FnOnce(std::io::Error) -> PackageError {
    let path = path.to_path_buf();
    move |source| PackageError::Io { path, source }
}

/// Installed package folders (those holding an integrity marker) below
/// `dir`, as `name@version` (their path below the packages root) and
/// their size.
fn installed_packages(root: &Path, dir: &Path, out: &mut Vec<(String, u64)>) {
    if dir
        .join(goondan_package::install::INTEGRITY_MARKER)
        .is_file()
    {
        let relative = dir.strip_prefix(root).unwrap_or(dir);
        let key = relative
            .components()
            .map(|part| part.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/");
        out.push((key, folder_size(dir)));
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if entry.path().is_dir() && !name.to_string_lossy().starts_with('.') {
            installed_packages(root, &entry.path(), out);
        }
    }
}

fn folder_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(kind) if kind.is_dir() => folder_size(&entry.path()),
            Ok(kind) if kind.is_file() => entry.metadata().map(|m| m.len()).unwrap_or(0),
            _ => 0,
        })
        .sum()
}

/// Runs `gdn registry serve` until Ctrl-C or SIGTERM.
pub(crate) fn serve_registry(args: &RegistryServeArgs) -> anyhow::Result<Outcome> {
    use goondan_package::registry::server::{self, RegistryConfig};
    let tokens = match &args.token_file {
        Some(path) => match server::read_token_file(path) {
            Ok(tokens) => tokens,
            Err(error) => return Ok(report(&error)),
        },
        None => Vec::new(),
    };
    let public_url = match &args.public_url {
        Some(text) => goondan_package::settings::parse_registry_url(text),
        None => goondan_package::settings::parse_registry_url(&format!("http://{}", args.addr)),
    };
    let public_url = match public_url {
        Ok(url) => url,
        Err(error) => return Ok(report(&error)),
    };
    if !args.addr.ip().is_loopback() {
        eprintln!(
            "warning: listening on {}, beyond this machine; tokens travel in clear over plain HTTP, so put TLS in front of it",
            args.addr
        );
    }
    crate::runtime::current_thread()?.block_on(async {
        let listener = match tokio::net::TcpListener::bind(args.addr).await {
            Ok(listener) => listener,
            Err(error) => {
                crate::render::error(
                    "E_PKG_REGISTRY_BIND",
                    &format_args!("cannot listen on {}: {error}", args.addr),
                    Some("pick another --addr (port 0 picks a free one)"),
                );
                return Ok(Outcome::Failure);
            }
        };
        let bound = listener.local_addr()?;
        let public_url = match &args.public_url {
            Some(_) => public_url,
            // Port 0: the URL carries the port actually bound.
            None => goondan_package::settings::parse_registry_url(&format!("http://{bound}"))
                .unwrap_or(public_url),
        };
        println!(
            "registry listening on http://{bound} ({}), packages in {}",
            if tokens.is_empty() {
                "read-only"
            } else {
                "publishing with a token"
            },
            args.dir.display()
        );
        let config = RegistryConfig {
            dir: args.dir.clone(),
            tokens,
            public_url,
            max_body_bytes: args.max_body_bytes,
            body_timeout: server::DEFAULT_BODY_TIMEOUT,
            limits: {
                let limits = goondan_http::AcceptLimits::new(
                    args.max_connections,
                    std::time::Duration::from_secs(args.header_timeout),
                );
                goondan_http::AcceptLimits {
                    max_connections_per_client: args
                        .max_connections_per_client
                        .unwrap_or(limits.max_connections_per_client),
                    ..limits
                }
            },
        };
        let shutdown = async {
            let mut terminate =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                () = async {
                    match terminate.as_mut() {
                        Some(signal) => { signal.recv().await; }
                        None => std::future::pending::<()>().await,
                    }
                } => {}
            }
        };
        server::serve(listener, config, shutdown).await?;
        Ok(Outcome::Success)
    })
}
