//! `gdn init [path] [--name N] [--template T] [--git|--no-git] [--force]`:
//! writes a new project from one of the templates embedded in the binary
//! (`src/templates/`), optionally runs `git init`, and prints what it
//! created and what to run next.
//!
//! It owns the templates, the package-name slug and the overwrite policy;
//! it does not validate what it wrote (the templates are checked by the
//! CLI tests, which run `gdn validate` and `gdn run` on each of them).
//!
//! Every generated project runs right away on the offline `scripted`
//! provider; the YAML comments show how to switch to a real one.

use crate::cli::{GlobalArgs, InitArgs, Template};
use crate::exit::Outcome;
use crate::render::{Renderer, Style};
use goondan_types::Diagnostic;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The text every template file may hold where the package name goes.
/// No scripted-rules placeholder (`{{input}}`, `{{1}}`, ...) looks like it,
/// so replacing it in every file is safe.
const NAME_MARKER: &str = "{{packageName}}";

/// Names the convention allows at most (`resources.md`: 63 characters).
const MAX_NAME_LEN: usize = 63;

/// Used when the folder's name has nothing to build a name from.
const FALLBACK_NAME: &str = "goondan-project";

/// A first message every template's scripted rules answer.
const SAMPLE_INPUT: &str = "hello";

/// A file that may hold the user's keys: `--force` never replaces it.
const SECRETS_FILE: &str = ".env";

/// One file of a template.
struct TemplateFile {
    /// Where it goes, relative to the project folder, `/`-separated.
    path: &'static str,
    /// Its text, with [`NAME_MARKER`] where the package name goes.
    contents: &'static str,
}

/// A template file from `src/templates/<source>`, written to `dest`.
macro_rules! template_file {
    ($dest:literal, $source:literal) => {
        TemplateFile {
            path: $dest,
            contents: include_str!(concat!("../templates/", $source)),
        }
    };
}

const DEFAULT_FILES: &[TemplateFile] = &[
    template_file!("goondan.yaml", "default/goondan.yaml"),
    template_file!("prompts/assistant.md", "default/prompts/assistant.md"),
    template_file!("scripted-rules.yaml", "default/scripted-rules.yaml"),
    template_file!(".env", "common/env"),
    template_file!(".gitignore", "common/gitignore"),
];

const MULTI_AGENT_FILES: &[TemplateFile] = &[
    template_file!("goondan.yaml", "multi-agent/goondan.yaml"),
    template_file!(
        "prompts/coordinator.md",
        "multi-agent/prompts/coordinator.md"
    ),
    template_file!("prompts/researcher.md", "multi-agent/prompts/researcher.md"),
    template_file!("scripted-rules.yaml", "multi-agent/scripted-rules.yaml"),
    template_file!(".env", "common/env"),
    template_file!(".gitignore", "common/gitignore"),
];

const MINIMAL_FILES: &[TemplateFile] = &[
    template_file!("goondan.yaml", "minimal/goondan.yaml"),
    template_file!("scripted-rules.yaml", "minimal/scripted-rules.yaml"),
];

const PACKAGE_FILES: &[TemplateFile] = &[
    template_file!("goondan.yaml", "package/goondan.yaml"),
    template_file!("resources/models.yaml", "package/resources/models.yaml"),
    template_file!("resources/agents.yaml", "package/resources/agents.yaml"),
    template_file!("prompts/helper.md", "package/prompts/helper.md"),
    template_file!("scripted-rules.yaml", "package/scripted-rules.yaml"),
    template_file!("README.md", "package/README.md"),
    template_file!(".env", "common/env"),
    template_file!(".gitignore", "package/gitignore"),
];

impl Template {
    fn files(self) -> &'static [TemplateFile] {
        match self {
            Template::Default => DEFAULT_FILES,
            Template::MultiAgent => MULTI_AGENT_FILES,
            Template::Minimal => MINIMAL_FILES,
            Template::Package => PACKAGE_FILES,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Template::Default => "default",
            Template::MultiAgent => "multi-agent",
            Template::Minimal => "minimal",
            Template::Package => "package",
        }
    }

    /// Where the Model lives and how a key reaches it, for the closing
    /// hint.
    fn switch_hint(self) -> &'static str {
        match self {
            Template::Default | Template::MultiAgent => {
                "It answers with the offline `scripted` model; for a real one, follow the comments on Model/main in goondan.yaml and put the key in .env."
            }
            Template::Minimal => {
                "It answers with the offline `scripted` model; for a real one, change Model/main in goondan.yaml and export the provider's key."
            }
            Template::Package => {
                "It answers with the offline `scripted` model; for a real one, follow the comments in resources/models.yaml and put the key in .env."
            }
        }
    }
}

/// Why `gdn init` refused or failed.
#[derive(Debug)]
enum InitError {
    /// `--name` has nothing a package name can be built from.
    NameInvalid { given: String },
    /// The target exists and is not a folder.
    NotADirectory { path: PathBuf },
    /// A folder exists where the template writes a file.
    FolderInTheWay { path: PathBuf },
    /// Files the template would write already exist.
    FilesExist { dir: PathBuf, files: Vec<String> },
    /// A folder or file could not be written.
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl InitError {
    /// The stable code.
    fn code(&self) -> &'static str {
        match self {
            InitError::NameInvalid { .. } => "E_INIT_NAME_INVALID",
            InitError::NotADirectory { .. } => "E_INIT_NOT_A_DIRECTORY",
            InitError::FolderInTheWay { .. } => "E_INIT_FOLDER_IN_THE_WAY",
            InitError::FilesExist { .. } => "E_INIT_FILES_EXIST",
            InitError::Write { .. } => "E_INIT_WRITE",
        }
    }

    /// How to fix it.
    fn suggestion(&self) -> Option<String> {
        match self {
            InitError::NameInvalid { .. } => Some(
                "use lowercase letters, digits and `-`, starting with a letter (for example `my-agent` or `@my-org/my-agent`)".into(),
            ),
            InitError::NotADirectory { .. } => {
                Some("move it away, or pass another folder (it is created when missing)".into())
            }
            InitError::FolderInTheWay { .. } => {
                Some("move the folder away; --force replaces files, never folders".into())
            }
            InitError::FilesExist { .. } => Some(
                "pass --force to overwrite them (an existing .env is always kept), or choose another folder".into(),
            ),
            InitError::Write { .. } => Some("check the folder's permissions and free space".into()),
        }
    }

    /// The exit outcome (`cli.md` §12): a bad `--name` is a bad argument,
    /// a folder in the way is a configuration problem.
    fn outcome(&self) -> Outcome {
        match self {
            InitError::NameInvalid { .. } => Outcome::BadArguments,
            InitError::NotADirectory { .. }
            | InitError::FolderInTheWay { .. }
            | InitError::FilesExist { .. } => Outcome::ConfigError,
            InitError::Write { .. } => Outcome::Failure,
        }
    }

    fn diagnostic(&self) -> Diagnostic {
        let mut diagnostic = Diagnostic::error(self.code(), self.to_string());
        if let Some(suggestion) = self.suggestion() {
            diagnostic = diagnostic.with_suggestion(suggestion);
        }
        diagnostic
    }
}

impl fmt::Display for InitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InitError::NameInvalid { given } => {
                write!(
                    f,
                    "--name `{given}` has no letter to build a package name from"
                )
            }
            InitError::NotADirectory { path } => {
                write!(f, "{} exists and is not a folder", path.display())
            }
            InitError::FolderInTheWay { path } => write!(
                f,
                "{} is a folder, where the template writes a file",
                path.display()
            ),
            InitError::FilesExist { dir, files } => write!(
                f,
                "{} file(s) already exist in {}: {}; nothing was written",
                files.len(),
                dir.display(),
                files.join(", ")
            ),
            InitError::Write { path, source } => {
                write!(f, "cannot write {}: {source}", path.display())
            }
        }
    }
}

impl std::error::Error for InitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            InitError::Write { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// What happened with `git init`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum GitOutcome {
    Initialized,
    Skipped(String),
    Failed(String),
}

/// What `gdn init` produced.
struct Created {
    dir: PathBuf,
    name: String,
    written: Vec<&'static str>,
    kept: Vec<&'static str>,
}

/// Runs `gdn init`.
pub(crate) fn run(global: &GlobalArgs, args: &InitArgs) -> anyhow::Result<Outcome> {
    let dir = args.path.clone().unwrap_or_else(|| PathBuf::from("."));
    let created = match create(&dir, args) {
        Ok(created) => created,
        Err(error) => return report_error(global, &error),
    };
    let git = init_git(&dir, args);
    report_success(global, args, &created, &git)?;
    Ok(Outcome::Success)
}

/// Checks for conflicts, then writes every file of the template.
fn create(dir: &Path, args: &InitArgs) -> Result<Created, InitError> {
    let name = match &args.name {
        Some(given) => package_name(given).ok_or_else(|| InitError::NameInvalid {
            given: given.clone(),
        })?,
        None => folder_name(dir)
            .and_then(|folder| package_name(&folder))
            .unwrap_or_else(|| FALLBACK_NAME.to_string()),
    };
    if dir.exists() && !dir.is_dir() {
        return Err(InitError::NotADirectory {
            path: dir.to_path_buf(),
        });
    }
    let files = args.template.files();
    // symlink_metadata: a dangling symlink is in the way too, and writing
    // through a symlink would land outside the project.
    let existing: Vec<&'static str> = files
        .iter()
        .map(|file| file.path)
        .filter(|path| dir.join(path).symlink_metadata().is_ok())
        .collect();
    // Shapes `--force` cannot fix are refused before anything is written:
    // a folder where a file goes, or a file where a folder goes.
    if let Some(folder) = existing.iter().find(|path| dir.join(path).is_dir()) {
        return Err(InitError::FolderInTheWay {
            path: dir.join(folder),
        });
    }
    for file in files {
        let parents = Path::new(file.path)
            .ancestors()
            .skip(1)
            .filter(|parent| !parent.as_os_str().is_empty());
        for parent in parents {
            let target = dir.join(parent);
            if target.exists() && !target.is_dir() {
                return Err(InitError::NotADirectory { path: target });
            }
        }
    }
    if !existing.is_empty() && !args.force {
        return Err(InitError::FilesExist {
            dir: dir.to_path_buf(),
            files: existing.iter().map(|path| path.to_string()).collect(),
        });
    }
    let mut written = Vec::new();
    let mut kept = Vec::new();
    for file in files {
        if file.path == SECRETS_FILE && existing.contains(&file.path) {
            kept.push(file.path);
            continue;
        }
        let target = dir.join(file.path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|source| InitError::Write {
                path: parent.to_path_buf(),
                source,
            })?;
        }
        // A symlink is replaced, not followed.
        if target
            .symlink_metadata()
            .is_ok_and(|meta| meta.is_symlink())
        {
            std::fs::remove_file(&target).map_err(|source| InitError::Write {
                path: target.clone(),
                source,
            })?;
        }
        std::fs::write(&target, file.contents.replace(NAME_MARKER, &name)).map_err(|source| {
            InitError::Write {
                path: target.clone(),
                source,
            }
        })?;
        written.push(file.path);
    }
    Ok(Created {
        dir: dir.to_path_buf(),
        name,
        written,
        kept,
    })
}

/// The last component of `dir` made absolute (`.` is the current folder).
fn folder_name(dir: &Path) -> Option<String> {
    let absolute = std::path::absolute(dir).ok()?;
    // `absolute` keeps `..` and `.` components; the name the user sees is
    // the folder they end up in.
    let normalized = absolute.canonicalize().unwrap_or(absolute);
    normalized
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
}

/// A package name following the naming convention, built from `text`:
/// `@scope/name` keeps its scope, each part slugged. `None` when a part has
/// no letter to start with.
fn package_name(text: &str) -> Option<String> {
    let trimmed = text.trim();
    if let Some((scope, name)) = trimmed
        .strip_prefix('@')
        .and_then(|scoped| scoped.split_once('/'))
    {
        return Some(format!("@{}/{}", slug(scope)?, slug(name)?));
    }
    slug(trimmed)
}

/// Lowercase ASCII letters and digits, every other run of characters
/// turned into one `-`, starting with a letter, at most 63 characters.
fn slug(text: &str) -> Option<String> {
    let mut out = String::new();
    for c in text.chars() {
        let lower = c.to_ascii_lowercase();
        if lower.is_ascii_lowercase() || lower.is_ascii_digit() {
            out.push(lower);
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    let start = out.find(|c: char| c.is_ascii_lowercase())?;
    let mut name: String = out[start..].chars().take(MAX_NAME_LEN).collect();
    while name.ends_with('-') {
        name.pop();
    }
    Some(name)
}

/// Runs `git init` when asked, or by default when git exists and `dir` is
/// not already inside a work tree.
fn init_git(dir: &Path, args: &InitArgs) -> GitOutcome {
    if args.no_git {
        return GitOutcome::Skipped("--no-git".into());
    }
    let inside = Command::new("git")
        .args(["rev-parse", "--is-inside-work-tree"])
        .current_dir(dir)
        .stdin(Stdio::null())
        .output();
    match inside {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return if args.git {
                GitOutcome::Failed("git is not on PATH".into())
            } else {
                GitOutcome::Skipped("git is not on PATH".into())
            };
        }
        Err(error) => return GitOutcome::Failed(format!("cannot run git: {error}")),
        Ok(output) if output.status.success() && !args.git => {
            return GitOutcome::Skipped("the folder is already inside a git repository".into());
        }
        Ok(_) => {}
    }
    match Command::new("git")
        .args(["init", "--quiet"])
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
    {
        Ok(output) if output.status.success() => GitOutcome::Initialized,
        Ok(output) => GitOutcome::Failed(format!(
            "git init failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )),
        Err(error) => GitOutcome::Failed(format!("cannot run git: {error}")),
    }
}

fn report_error(global: &GlobalArgs, error: &InitError) -> anyhow::Result<Outcome> {
    if global.json {
        // Like every command's error: one JSON line on stderr, so stdout
        // holds only the report of a project that was made.
        crate::render::error(error.code(), error, error.suggestion().as_deref());
    } else {
        let renderer = Renderer {
            style: Style { colored: false },
            base: PathBuf::new(),
        };
        let mut err = std::io::stderr().lock();
        renderer.report(
            &mut err,
            crate::cli::Format::Text,
            &[error.diagnostic()],
            true,
        )?;
    }
    Ok(error.outcome())
}

fn report_success(
    global: &GlobalArgs,
    args: &InitArgs,
    created: &Created,
    git: &GitOutcome,
) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if global.json {
        let (git_status, git_detail) = match git {
            GitOutcome::Initialized => ("initialized", None),
            GitOutcome::Skipped(why) => ("skipped", Some(why)),
            GitOutcome::Failed(why) => ("failed", Some(why)),
        };
        let report = serde_json::json!({
            "ok": true,
            "projectDir": created.dir.display().to_string(),
            "name": created.name,
            "template": args.template.label(),
            "filesCreated": created.written,
            "filesKept": created.kept,
            "git": { "status": git_status, "detail": git_detail },
        });
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
        return Ok(());
    }
    if let GitOutcome::Failed(why) = git {
        // Not fatal: the project is complete without a repository.
        eprintln!("warning[W_INIT_GIT]: {why}; the project was created without a git repository");
    }
    if global.quiet {
        return Ok(());
    }
    if let Some(given) = &args.name {
        if given.trim() != created.name {
            writeln!(
                out,
                "note: --name `{given}` became `{}` (names are lowercase letters, digits and `-`)",
                created.name
            )?;
        }
    }
    writeln!(
        out,
        "Created `{}` from the {} template in {}:",
        created.name,
        args.template.label(),
        if created.dir == Path::new(".") {
            "the current folder".to_string()
        } else {
            created.dir.display().to_string()
        }
    )?;
    for path in &created.written {
        writeln!(out, "  {path}")?;
    }
    for path in &created.kept {
        writeln!(out, "  {path} (kept: it may hold your keys)")?;
    }
    match git {
        GitOutcome::Initialized => writeln!(out, "Initialized a git repository.")?,
        GitOutcome::Skipped(why) if global.verbose > 0 => {
            writeln!(out, "No git repository: {why}.")?
        }
        GitOutcome::Skipped(_) | GitOutcome::Failed(_) => {}
    }
    writeln!(out, "\nNext:")?;
    if created.dir != Path::new(".") {
        writeln!(
            out,
            "  cd {}",
            shell_word(&created.dir.display().to_string())
        )?;
    }
    writeln!(out, "  gdn validate")?;
    writeln!(out, "  gdn run --input \"{SAMPLE_INPUT}\"")?;
    writeln!(out, "\n{}", args.template.switch_hint())?;
    Ok(())
}

/// `text` quoted for a POSIX shell when it needs to be.
pub(super) fn shell_word(text: &str) -> String {
    let plain = text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_./@:+=,".contains(c));
    if plain && !text.is_empty() {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_slugged_to_the_convention() {
        for (given, expected) in [
            ("my-agent", Some("my-agent")),
            ("My Agent", Some("my-agent")),
            ("  spaced__out  ", Some("spaced-out")),
            ("2fast", Some("fast")),
            (".tmpAbC12", Some("tmpabc12")),
            ("@MyOrg/My Tools", Some("@myorg/my-tools")),
            ("@org/123", None),
            ("123", None),
            ("---", None),
            ("", None),
        ] {
            assert_eq!(package_name(given).as_deref(), expected, "{given:?}");
        }
        let long = "a".repeat(70) + "-b";
        assert_eq!(package_name(&long).unwrap().len(), MAX_NAME_LEN);
        let cut_on_dash = "a".repeat(62) + "-b";
        assert_eq!(package_name(&cut_on_dash).unwrap(), "a".repeat(62));
    }

    #[test]
    fn every_template_names_its_package_and_has_unique_paths() {
        for template in [
            Template::Default,
            Template::MultiAgent,
            Template::Minimal,
            Template::Package,
        ] {
            let files = template.files();
            assert_eq!(files[0].path, "goondan.yaml", "{}", template.label());
            assert!(
                files[0]
                    .contents
                    .contains(&format!("name: \"{NAME_MARKER}\"")),
                "{}: the Package document takes the name",
                template.label()
            );
            let mut paths: Vec<&str> = files.iter().map(|file| file.path).collect();
            paths.sort_unstable();
            paths.dedup();
            assert_eq!(paths.len(), files.len(), "{}", template.label());
        }
    }

    #[test]
    fn shell_words_are_quoted_only_when_needed() {
        assert_eq!(shell_word("my-agent"), "my-agent");
        assert_eq!(shell_word("my agent"), "'my agent'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
    }
}
