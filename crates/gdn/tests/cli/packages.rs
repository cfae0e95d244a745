//! Issue 23, packages end to end: `gdn registry serve` on 127.0.0.1,
//! `gdn package publish` of a package holding a JavaScript tool,
//! `gdn package add` of it to another bundle, a real turn in which the
//! mock LLM calls that tool, a lockfile install on a fresh System Root
//! that gives the same tree, a tampered tarball refused, and
//! `gdn run --no-install` refusing a bundle whose packages are missing.

use crate::mock_llm::{MockLlm, Reply};
use crate::swarm::gdn_command;
use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};

/// A token the registry accepts for publishing.
pub(crate) const TOKEN: &str = "e2e-token-0123456789abcdef";

const LIBRARY: &str = r#"apiVersion: goondan.ai/v1
kind: Package
metadata:
  name: "@acme/calc"
spec:
  version: "1.0.0"
  description: A calculator tool.
---
apiVersion: goondan.ai/v1
kind: Tool
metadata:
  name: calc
spec:
  entry: ./tools/calc.mjs
  exports:
    - name: add
      description: Adds two numbers.
      parameters:
        type: object
        properties:
          a: { type: number }
          b: { type: number }
"#;

const CALC: &str = r#"export const handlers = {
  add: async (ctx, input) => ({ sum: input.a + input.b, from: "package" }),
};
"#;

fn app_bundle(endpoint: &str) -> String {
    format!(
        r#"apiVersion: goondan.ai/v1
kind: Package
metadata:
  name: app
spec:
  version: "0.1.0"
---
apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: gpt
spec:
  provider: openai
  model: gpt-mock
  endpoint: "{endpoint}"
  options:
    maxRetries: 0
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: alpha
spec:
  modelConfig:
    modelRef: Model/gpt
  tools:
    - ref:
        kind: Tool
        name: calc
        package: "@acme/calc"
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: Agent/alpha
  agents:
    - ref: Agent/alpha
"#
    )
}

/// A `gdn registry serve` child on a free loopback port; killed on drop.
pub(crate) struct Registry {
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub(crate) url: String,
    /// The folder it stores packages in.
    pub(crate) dir: PathBuf,
    _home: tempfile::TempDir,
}

impl Registry {
    pub(crate) fn start() -> Registry {
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("store");
        let tokens = home.path().join("tokens");
        std::fs::write(&tokens, format!("# publishers\n{TOKEN}\n")).unwrap();
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_gdn"))
            .args(["registry", "serve", "--addr", "127.0.0.1:0", "--dir"])
            .arg(&dir)
            .arg("--token-file")
            .arg(&tokens)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut first = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        let url = first
            .split_whitespace()
            .find(|word| word.starts_with("http://"))
            .unwrap_or_else(|| panic!("no URL in {first:?}"))
            .to_string();
        Registry {
            child,
            url,
            dir,
            _home: home,
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn run(bundle: &Path, state: &Path, args: &[&str]) -> Output {
    gdn_command(bundle, state, args)
        .env("GOONDAN_REGISTRY_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn ok(output: &Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(
        output.status.code(),
        Some(0),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// Every file below `dir` and its bytes.
fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        for entry in std::fs::read_dir(&current).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                let relative = path.strip_prefix(dir).unwrap().display().to_string();
                out.insert(relative, std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

pub(crate) fn publish_library(registry: &Registry, state: &Path) {
    let library = tempfile::tempdir().unwrap();
    std::fs::create_dir(library.path().join("tools")).unwrap();
    std::fs::write(library.path().join("goondan.yaml"), LIBRARY).unwrap();
    std::fs::write(library.path().join("tools/calc.mjs"), CALC).unwrap();
    let published = ok(&run(
        library.path(),
        state,
        &["package", "publish", "--registry", &registry.url],
    ));
    assert!(
        published.contains("published @acme/calc@1.0.0"),
        "{published}"
    );
}

#[test]
fn a_published_package_tool_runs_in_another_bundle_and_its_lockfile_reproduces_the_tree() {
    let registry = Registry::start();
    let publisher_state = tempfile::tempdir().unwrap();
    publish_library(&registry, publisher_state.path());

    let mock = MockLlm::start(|request| match request.tool_result() {
        Some(result) => Reply::text(format!("tool said {result}")),
        None => Reply::tool("calc__add", serde_json::json!({"a": 2, "b": 3})),
    });
    let app = tempfile::tempdir().unwrap();
    std::fs::write(
        app.path().join("goondan.yaml"),
        app_bundle(&mock.endpoint()),
    )
    .unwrap();
    let state = tempfile::tempdir().unwrap();

    // Before `add`, the reference names a package that is not loaded.
    let refused = run(app.path(), state.path(), &["validate"]);
    assert_eq!(refused.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&refused.stdout).contains("E_CONFIG_PACKAGE_NOT_FOUND"));

    let added = ok(&run(
        app.path(),
        state.path(),
        &["package", "add", "@acme/calc", "--registry", &registry.url],
    ));
    assert!(added.contains("added @acme/calc@^1.0.0"), "{added}");
    let manifest = std::fs::read_to_string(app.path().join("goondan.yaml")).unwrap();
    assert!(
        manifest.contains("\"@acme/calc\"") && manifest.contains("\"^1.0.0\""),
        "{manifest}"
    );
    let lockfile = std::fs::read_to_string(app.path().join("goondan.lock.yaml")).unwrap();
    assert!(lockfile.starts_with("lockfileVersion: 1\n"), "{lockfile}");
    assert!(lockfile.contains("\"@acme/calc@1.0.0\":"), "{lockfile}");
    assert!(lockfile.contains("integrity: \"sha512-"), "{lockfile}");
    assert!(
        lockfile.contains(&format!(
            "resolved: \"{}/@acme/calc/-/calc-1.0.0.tgz\"",
            registry.url
        )),
        "{lockfile}"
    );
    ok(&run(app.path(), state.path(), &["validate"]));

    // A real turn: the mock asks for calc__add, the package's JavaScript
    // handler answers from the package's own folder.
    let answered = ok(&run(
        app.path(),
        state.path(),
        &["run", "--input", "add please"],
    ));
    assert!(answered.contains(r#""sum":5"#), "{answered}");
    assert!(answered.contains(r#""from":"package""#), "{answered}");

    // A fresh System Root: the lockfile alone reproduces the same tree.
    let fresh = tempfile::tempdir().unwrap();
    ok(&run(
        app.path(),
        fresh.path(),
        &["package", "install", "--frozen-lockfile"],
    ));
    let installed = tree(&state.path().join("packages/@acme"));
    assert!(
        installed.contains_key("calc@1.0.0/tools/calc.mjs"),
        "{:?}",
        installed.keys()
    );
    assert_eq!(installed, tree(&fresh.path().join("packages/@acme")));
    assert_eq!(
        std::fs::read_to_string(app.path().join("goondan.lock.yaml")).unwrap(),
        lockfile,
        "a lockfile install leaves the lockfile as it was"
    );

    // `--no-install` on a System Root without the package refuses to start.
    let empty = tempfile::tempdir().unwrap();
    let refused = run(
        app.path(),
        empty.path(),
        &["run", "--no-install", "--input", "x"],
    );
    assert_ne!(refused.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("E_CONFIG_PACKAGE_NOT_FOUND"), "{stderr}");
    assert!(stderr.contains("gdn package install"), "{stderr}");

    // Without --no-install, `gdn run` installs it first.
    let auto = tempfile::tempdir().unwrap();
    let auto_run = run(app.path(), auto.path(), &["run", "--input", "add again"]);
    let answered = ok(&auto_run);
    assert!(answered.contains(r#""sum":5"#), "{answered}");
    let progress = String::from_utf8_lossy(&auto_run.stderr);
    assert!(
        progress.contains("installed @acme/calc@1.0.0"),
        "{progress}"
    );
    // The next run finds it installed and says nothing about packages.
    let again = run(app.path(), auto.path(), &["run", "--input", "add again"]);
    ok(&again);
    let progress = String::from_utf8_lossy(&again.stderr);
    assert!(!progress.contains("package"), "{progress}");

    // A tarball changed on the registry after locking is refused, and
    // nothing of it is installed.
    let stored = registry.dir.join("@acme/calc/-/calc-1.0.0.tgz");
    let mut bytes = std::fs::read(&stored).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&stored, bytes).unwrap();
    let victim = tempfile::tempdir().unwrap();
    let tampered = run(app.path(), victim.path(), &["package", "install"]);
    assert_ne!(tampered.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&tampered.stderr);
    assert!(stderr.contains("error[E_PKG_INTEGRITY_FAIL]"), "{stderr}");
    assert!(!victim.path().join("packages/@acme/calc@1.0.0").exists());
    assert_eq!(
        std::fs::read_to_string(app.path().join("goondan.lock.yaml")).unwrap(),
        lockfile
    );
}

#[test]
fn publishing_needs_a_token_and_versions_are_immutable() {
    let registry = Registry::start();
    let state = tempfile::tempdir().unwrap();
    let library = tempfile::tempdir().unwrap();
    std::fs::create_dir(library.path().join("tools")).unwrap();
    std::fs::write(library.path().join("goondan.yaml"), LIBRARY).unwrap();
    std::fs::write(library.path().join("tools/calc.mjs"), CALC).unwrap();

    let anonymous = gdn_command(
        library.path(),
        state.path(),
        &["package", "publish", "--registry", &registry.url],
    )
    .env_remove("GOONDAN_REGISTRY_TOKEN")
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&anonymous.stderr);
    assert!(stderr.contains("error[E_PKG_AUTH_REQUIRED]"), "{stderr}");
    // A registry's refusal has its own exit code, not a model provider's 6.
    assert_eq!(anonymous.status.code(), Some(8), "{stderr}");
    assert!(!registry.dir.join("@acme/calc").exists());

    // Nothing listens on port 1: unreachable is 7, not a model provider's 5.
    let unreachable = run(
        library.path(),
        state.path(),
        &[
            "package",
            "info",
            "@acme/calc",
            "--registry",
            "http://127.0.0.1:1",
        ],
    );
    let stderr = String::from_utf8_lossy(&unreachable.stderr);
    assert!(
        stderr.contains("error[E_PKG_REGISTRY_UNREACHABLE]"),
        "{stderr}"
    );
    assert_eq!(unreachable.status.code(), Some(7), "{stderr}");

    ok(&run(
        library.path(),
        state.path(),
        &["package", "publish", "--registry", &registry.url],
    ));
    let again = run(
        library.path(),
        state.path(),
        &["package", "publish", "--registry", &registry.url],
    );
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(
        stderr.contains("409") && stderr.contains("immutable"),
        "{stderr}"
    );

    let info = ok(&run(
        library.path(),
        state.path(),
        &[
            "package",
            "deprecate",
            "@acme/calc@1.0.0",
            "use 2.x",
            "--registry",
            &registry.url,
        ],
    ));
    assert!(info.contains("deprecated @acme/calc@1.0.0"), "{info}");
    let info = ok(&run(
        library.path(),
        state.path(),
        &["package", "info", "@acme/calc", "--registry", &registry.url],
    ));
    assert!(
        info.contains("1.0.0") && info.contains("deprecated: use 2.x"),
        "{info}"
    );
    ok(&run(
        library.path(),
        state.path(),
        &[
            "package",
            "unpublish",
            "@acme/calc@1.0.0",
            "--registry",
            &registry.url,
        ],
    ));
    let gone = run(
        library.path(),
        state.path(),
        &["package", "info", "@acme/calc", "--registry", &registry.url],
    );
    assert!(String::from_utf8_lossy(&gone.stderr).contains("E_PKG_NOT_FOUND"));
}

/// Writes a package with no resources but its Package document and
/// dependencies, and publishes it.
fn publish_plain(
    registry: &Registry,
    state: &Path,
    name: &str,
    version: &str,
    dependencies: &[(&str, &str)],
) {
    let dir = tempfile::tempdir().unwrap();
    let mut text = format!(
        "apiVersion: goondan.ai/v1\nkind: Package\nmetadata:\n  name: \"{name}\"\nspec:\n  version: \"{version}\"\n"
    );
    if !dependencies.is_empty() {
        text.push_str("  dependencies:\n");
        for (dependency, range) in dependencies {
            text.push_str(&format!(
                "    - name: \"{dependency}\"\n      version: \"{range}\"\n"
            ));
        }
    }
    std::fs::write(dir.path().join("goondan.yaml"), text).unwrap();
    // Publishing validates the bundle, which needs its dependencies
    // installed first.
    if !dependencies.is_empty() {
        ok(&run(
            dir.path(),
            state,
            &["package", "install", "--registry", &registry.url],
        ));
    }
    ok(&run(
        dir.path(),
        state,
        &["package", "publish", "--registry", &registry.url],
    ));
}

#[test]
fn conflicting_ranges_stop_the_install_with_a_report_and_install_nothing() {
    let registry = Registry::start();
    let state = tempfile::tempdir().unwrap();
    publish_plain(&registry, state.path(), "@acme/util", "0.5.2", &[]);
    publish_plain(&registry, state.path(), "@acme/util", "1.0.0", &[]);
    publish_plain(
        &registry,
        state.path(),
        "@acme/old",
        "1.0.0",
        &[("@acme/util", "^0.5.0")],
    );
    publish_plain(
        &registry,
        state.path(),
        "@acme/new",
        "2.0.0",
        &[("@acme/util", "^1.0.0")],
    );

    let app = tempfile::tempdir().unwrap();
    std::fs::write(
        app.path().join("goondan.yaml"),
        "apiVersion: goondan.ai/v1\nkind: Package\nmetadata:\n  name: app\nspec:\n  dependencies:\n    - name: \"@acme/old\"\n      version: \"^1\"\n    - name: \"@acme/new\"\n      version: \"^2\"\n",
    )
    .unwrap();
    let fresh = tempfile::tempdir().unwrap();
    let refused = run(
        app.path(),
        fresh.path(),
        &["package", "install", "--registry", &registry.url],
    );
    assert_ne!(refused.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("error[E_PKG_VERSION_CONFLICT]"), "{stderr}");
    assert!(
        stderr.contains("@acme/old@1.0.0 requires @acme/util@^0.5.0"),
        "{stderr}"
    );
    assert!(
        stderr.contains("@acme/new@2.0.0 requires @acme/util@^1.0.0"),
        "{stderr}"
    );
    assert!(!app.path().join("goondan.lock.yaml").exists());
    assert!(!fresh.path().join("packages/@acme").exists());

    // Unpublishing a version others depend on warns and names them.
    let unpublished = run(
        app.path(),
        state.path(),
        &[
            "package",
            "unpublish",
            "@acme/util@1.0.0",
            "--registry",
            &registry.url,
        ],
    );
    ok(&unpublished);
    let warning = String::from_utf8_lossy(&unpublished.stderr);
    assert!(
        warning.contains("warning: @acme/new@2.0.0 depends on @acme/util@1.0.0"),
        "{warning}"
    );

    // Aligned ranges resolve to the one version both accept.
    std::fs::write(
        app.path().join("goondan.yaml"),
        "apiVersion: goondan.ai/v1\nkind: Package\nmetadata:\n  name: app\nspec:\n  dependencies:\n    - name: \"@acme/old\"\n      version: \"^1\"\n    - name: \"@acme/util\"\n      version: \"<1\"\n",
    )
    .unwrap();
    ok(&run(
        app.path(),
        fresh.path(),
        &["package", "install", "--registry", &registry.url],
    ));
    let lockfile = std::fs::read_to_string(app.path().join("goondan.lock.yaml")).unwrap();
    assert!(lockfile.contains("\"@acme/util@0.5.2\":"), "{lockfile}");
    assert!(!lockfile.contains("@acme/util@1.0.0"), "{lockfile}");
}

#[test]
fn add_creates_the_package_document_when_the_bundle_has_none() {
    let registry = Registry::start();
    let state = tempfile::tempdir().unwrap();
    publish_library(&registry, state.path());
    let app = tempfile::tempdir().unwrap();
    let model = "apiVersion: goondan.ai/v1\nkind: Model\nmetadata:\n  name: m\nspec:\n  provider: scripted\n  model: demo\n";
    std::fs::write(app.path().join("goondan.yaml"), model).unwrap();
    let added = ok(&run(
        app.path(),
        state.path(),
        &[
            "package",
            "add",
            "@acme/calc@1.0.0",
            "--exact",
            "--registry",
            &registry.url,
        ],
    ));
    assert!(added.contains("created the Package"), "{added}");
    assert!(added.contains("added @acme/calc@1.0.0"), "{added}");
    let text = std::fs::read_to_string(app.path().join("goondan.yaml")).unwrap();
    assert!(text.contains("kind: Package\n"), "{text}");
    assert!(
        text.contains("  dependencies:\n    - name: \"@acme/calc\"\n      version: \"1.0.0\"\n"),
        "{text}"
    );
    assert!(text.ends_with(model), "{text}");
    ok(&run(app.path(), state.path(), &["validate"]));

    // With --json, what a package command did is JSON lines, one event
    // each, and nothing else on stdout.
    let events = |args: &[&str]| -> Vec<serde_json::Value> {
        let args: Vec<&str> = std::iter::once("--json")
            .chain(args.iter().copied())
            .collect();
        ok(&run(app.path(), state.path(), &args))
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("not JSON: {line}")))
            .collect()
    };
    let removed = events(&["package", "remove", "@acme/calc"]);
    assert_eq!(removed[0]["event"], "removed", "{removed:?}");
    assert_eq!(removed[0]["package"], "@acme/calc", "{removed:?}");
    let added = events(&[
        "package",
        "add",
        "@acme/calc@1.0.0",
        "--registry",
        &registry.url,
    ]);
    assert_eq!(added[0]["event"], "added", "{added:?}");
    assert_eq!(added[0]["range"], "^1.0.0", "{added:?}");
    assert!(
        added
            .iter()
            .any(|event| event["event"] == "lockfileWritten"),
        "{added:?}"
    );
    let cache = events(&["package", "cache", "info"]);
    assert_eq!(cache.len(), 1, "{cache:?}");
    assert!(cache[0]["packages"].is_array(), "{cache:?}");
}

/// Issue 35: `gdn package update` refuses to re-lock a published version
/// whose bytes changed on the registry (as a compromised registry would
/// serve them), leaving the lockfile as it was, and re-locks it, saying
/// so, only with `--accept-changed-integrity`.
#[test]
fn update_refuses_a_changed_integrity_of_a_locked_version_unless_accepted() {
    let registry = Registry::start();
    let state = tempfile::tempdir().unwrap();
    publish_plain(&registry, state.path(), "@acme/util", "1.0.0", &[]);
    let app = tempfile::tempdir().unwrap();
    std::fs::write(
        app.path().join("goondan.yaml"),
        "apiVersion: goondan.ai/v1\nkind: Package\nmetadata:\n  name: app\nspec:\n  dependencies:\n    - name: \"@acme/util\"\n      version: \"^1\"\n",
    )
    .unwrap();
    ok(&run(
        app.path(),
        state.path(),
        &["package", "install", "--registry", &registry.url],
    ));
    let lockfile = std::fs::read_to_string(app.path().join("goondan.lock.yaml")).unwrap();

    // The same version with other bytes, published on a second registry
    // and copied into the first one's store, metadata included.
    let other = Registry::start();
    let changed = tempfile::tempdir().unwrap();
    std::fs::write(
        changed.path().join("goondan.yaml"),
        "apiVersion: goondan.ai/v1\nkind: Package\nmetadata:\n  name: \"@acme/util\"\nspec:\n  version: \"1.0.0\"\n  description: Not what was published first.\n",
    )
    .unwrap();
    ok(&run(
        changed.path(),
        state.path(),
        &["package", "publish", "--registry", &other.url],
    ));
    for file in ["metadata.json", "-/util-1.0.0.tgz"] {
        std::fs::copy(
            other.dir.join("@acme/util").join(file),
            registry.dir.join("@acme/util").join(file),
        )
        .unwrap();
    }
    let metadata: serde_json::Value = serde_json::from_slice(
        &std::fs::read(registry.dir.join("@acme/util/metadata.json")).unwrap(),
    )
    .unwrap();
    let new_integrity = metadata["versions"]["1.0.0"]["dist"]["integrity"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!lockfile.contains(&new_integrity), "{lockfile}");

    let refused = run(
        app.path(),
        state.path(),
        &["package", "update", "--registry", &registry.url],
    );
    assert_ne!(refused.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("error[E_PKG_INTEGRITY_CHANGED]"),
        "{stderr}"
    );
    assert!(stderr.contains("@acme/util@1.0.0"), "{stderr}");
    assert!(stderr.contains("--accept-changed-integrity"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(app.path().join("goondan.lock.yaml")).unwrap(),
        lockfile,
        "a refused update leaves the lockfile as it was"
    );

    let accepted = run(
        app.path(),
        state.path(),
        &[
            "package",
            "update",
            "--accept-changed-integrity",
            "--registry",
            &registry.url,
        ],
    );
    ok(&accepted);
    let warning = String::from_utf8_lossy(&accepted.stderr);
    assert!(
        warning
            .contains("warning: re-locked with the registry's changed integrity: @acme/util@1.0.0"),
        "{warning}"
    );
    let relocked = std::fs::read_to_string(app.path().join("goondan.lock.yaml")).unwrap();
    assert!(relocked.contains(&new_integrity), "{relocked}");
}

/// Issue 38: `package add`, `update` and `remove` change only the
/// dependency lines of a commented `goondan.yaml`; every other byte (the
/// comments, the key order, single quotes, a plain version) is kept.
#[test]
fn add_update_and_remove_keep_a_commented_file_byte_for_byte_but_the_dependency_lines() {
    let registry = Registry::start();
    let state = tempfile::tempdir().unwrap();
    publish_library(&registry, state.path());
    let app = tempfile::tempdir().unwrap();
    let head = "# My app: read me first.\napiVersion: goondan.ai/v1\nkind: Package\nmetadata:\n  name: 'app'   # keep the quotes\nspec:\n  description: Tools   # and this\n  dependencies:\n    # built in\n    - name: '@goondan/base'\n      version: ^1.0.0\n";
    let tail = "  version: '0.1.0'\n---\n# The model, untouched.\napiVersion: goondan.ai/v1\nkind: Model\nmetadata:\n  name: m\nspec:\n  provider: scripted\n  model: demo\n";
    let original = format!("{head}{tail}");
    std::fs::write(app.path().join("goondan.yaml"), &original).unwrap();
    let read = || std::fs::read_to_string(app.path().join("goondan.yaml")).unwrap();

    ok(&run(
        app.path(),
        state.path(),
        &[
            "package",
            "add",
            "@acme/calc@1.0.0",
            "--exact",
            "--registry",
            &registry.url,
        ],
    ));
    let added = "    - name: '@acme/calc'\n      version: '1.0.0'\n";
    assert_eq!(read(), format!("{head}{added}{tail}"));

    ok(&run(
        app.path(),
        state.path(),
        &[
            "package",
            "add",
            "@acme/calc@^1.0.0",
            "--registry",
            &registry.url,
        ],
    ));
    let updated = "    - name: '@acme/calc'\n      version: '^1.0.0'\n";
    assert_eq!(read(), format!("{head}{updated}{tail}"));

    ok(&run(
        app.path(),
        state.path(),
        &["package", "remove", "@acme/calc"],
    ));
    assert_eq!(read(), original);
}
