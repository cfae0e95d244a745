//! Installed packages in the loader (issue 23): the lockfile pins the
//! version a dependency range accepts, the package's Tools load from its
//! folder under the packages root with entries resolved there, refs
//! resolve with and without `package:`, and every way a dependency can be
//! missing is a coded diagnostic that says to run `gdn package install`.

use goondan_config::{load_bundle, LoadOptions, LoadOutcome};
use std::path::Path;

const APP: &str = "\
apiVersion: goondan.ai/v1
kind: Package
metadata:
  name: app
spec:
  dependencies:
    - name: \"@acme/calc\"
      version: \"RANGE\"
---
apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: main
spec:
  provider: scripted
  model: demo
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: alpha
spec:
  modelConfig:
    modelRef: Model/main
  tools:
    - REF
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: Agent/alpha
  agents:
    - ref: Agent/alpha
";

const LOCKFILE: &str = "\
lockfileVersion: 1
packages:
  \"@acme/calc@1.2.0\":
    version: \"1.2.0\"
    resolved: \"http://127.0.0.1:9/@acme/calc/-/calc-1.2.0.tgz\"
    integrity: \"sha512-AAAA\"
    dependencies:
      \"@acme/util\": \"0.5.2\"
  \"@acme/util@0.5.2\":
    version: \"0.5.2\"
    resolved: \"http://127.0.0.1:9/@acme/util/-/util-0.5.2.tgz\"
    integrity: \"sha512-BBBB\"
";

fn tool(package: &str, version: &str, name: &str, entry: &str) -> String {
    format!(
        "apiVersion: goondan.ai/v1\nkind: Package\nmetadata:\n  name: \"{package}\"\nspec:\n  version: \"{version}\"\n---\napiVersion: goondan.ai/v1\nkind: Tool\nmetadata:\n  name: {name}\nspec:\n  entry: {entry}\n  exports:\n    - name: run\n      description: Runs.\n      parameters:\n        type: object\n"
    )
}

struct Setup {
    bundle: tempfile::TempDir,
    packages: tempfile::TempDir,
}

fn installed(range: &str, reference: &str, calc_entry: &str) -> Setup {
    let bundle = tempfile::tempdir().unwrap();
    let packages = tempfile::tempdir().unwrap();
    let app = APP.replace("RANGE", range).replace("REF", reference);
    std::fs::write(bundle.path().join("goondan.yaml"), app).unwrap();
    std::fs::write(bundle.path().join("goondan.lock.yaml"), LOCKFILE).unwrap();
    for (package, version, name) in [
        ("@acme/calc", "1.2.0", "calc"),
        ("@acme/util", "0.5.2", "util"),
    ] {
        let dir = packages.path().join(format!("{package}@{version}"));
        std::fs::create_dir_all(dir.join("tools")).unwrap();
        std::fs::write(dir.join("tools/run.mjs"), "export const handlers = {};\n").unwrap();
        let entry = if name == "calc" {
            calc_entry
        } else {
            "./tools/run.mjs"
        };
        std::fs::write(
            dir.join("goondan.yaml"),
            tool(package, version, name, entry),
        )
        .unwrap();
    }
    Setup { bundle, packages }
}

fn load(setup: &Setup) -> LoadOutcome {
    let options = LoadOptions {
        inherit_process_env: false,
        packages_root: Some(setup.packages.path().to_path_buf()),
        ..LoadOptions::default()
    };
    load_bundle(setup.bundle.path(), &options).unwrap()
}

fn codes(outcome: &LoadOutcome) -> Vec<String> {
    outcome.errors().map(|d| d.code.clone()).collect()
}

#[test]
fn a_locked_package_tool_loads_from_its_own_folder() {
    let setup = installed("^1.0.0", "ref: Tool/calc", "./tools/run.mjs");
    let outcome = load(&setup);
    let bundle = outcome
        .bundle
        .unwrap_or_else(|| panic!("{:#?}", outcome.diagnostics));
    let agent = bundle.agent("alpha").unwrap();
    let calc = agent.tools().next().unwrap();
    assert_eq!(calc.origin.package.as_deref(), Some("@acme/calc"));
    let expected = setup
        .packages
        .path()
        .canonicalize()
        .unwrap()
        .join("@acme/calc@1.2.0/tools/run.mjs");
    assert_eq!(Path::new(&calc.spec.entry), expected);
    // The transitive dependency is loaded too.
    assert!(bundle
        .tools()
        .iter()
        .any(|tool| tool.name() == "util" && tool.origin.package.as_deref() == Some("@acme/util")));
}

#[test]
fn package_qualified_refs_and_ambiguity() {
    let setup = installed(
        "^1.0.0",
        "ref: { kind: Tool, name: calc, package: \"@acme/calc\" }",
        "./tools/run.mjs",
    );
    assert!(load(&setup).bundle.is_some());

    // A local Tool/calc too: the plain ref is ambiguous, the qualified one
    // still names the package's.
    let local = "---\napiVersion: goondan.ai/v1\nkind: Tool\nmetadata:\n  name: calc\nspec:\n  entry: ./local.mjs\n  exports:\n    - name: run\n      description: Runs.\n      parameters:\n        type: object\n";
    for (reference, expected) in [
        ("ref: Tool/calc", Some("E_CONFIG_REF_AMBIGUOUS")),
        (
            "ref: { kind: Tool, name: calc, package: \"@acme/calc\" }",
            None,
        ),
    ] {
        let setup = installed("^1.0.0", reference, "./tools/run.mjs");
        let path = setup.bundle.path().join("goondan.yaml");
        let text = std::fs::read_to_string(&path).unwrap() + local;
        std::fs::write(&path, text).unwrap();
        std::fs::write(setup.bundle.path().join("local.mjs"), "").unwrap();
        let outcome = load(&setup);
        match expected {
            Some(code) => {
                assert_eq!(codes(&outcome), [code]);
                let message = &outcome.errors().next().unwrap().message;
                assert!(message.contains("@acme/calc"), "{message}");
            }
            None => assert!(outcome.bundle.is_some(), "{:#?}", outcome.diagnostics),
        }
    }

    let setup = installed(
        "^1.0.0",
        "ref: { kind: Tool, name: calc, package: \"@acme/nope\" }",
        "./tools/run.mjs",
    );
    assert_eq!(codes(&load(&setup)), ["E_CONFIG_PACKAGE_NOT_FOUND"]);
}

#[test]
fn a_package_entry_cannot_leave_its_folder() {
    let setup = installed("^1.0.0", "ref: Tool/calc", "../../../escape.mjs");
    let outcome = load(&setup);
    assert_eq!(codes(&outcome), ["E_CONFIG_PATH_ESCAPE"]);
    let diagnostic = outcome.errors().next().unwrap();
    assert_eq!(
        diagnostic.file.as_deref(),
        Some("@acme/calc@1.2.0/goondan.yaml")
    );
}

#[test]
fn missing_or_stale_installs_say_what_to_run() {
    // The range accepts no locked version.
    let setup_stale = installed("^2.0.0", "ref: Tool/calc", "./tools/run.mjs");
    let outcome = load(&setup_stale);
    assert!(
        codes(&outcome).contains(&"E_CONFIG_PACKAGE_LOCKFILE".to_string()),
        "{:#?}",
        outcome.diagnostics
    );

    // No lockfile at all.
    let no_lock = installed("^1.0.0", "ref: Tool/calc", "./tools/run.mjs");
    std::fs::remove_file(no_lock.bundle.path().join("goondan.lock.yaml")).unwrap();
    let outcome = load(&no_lock);
    let first = outcome.errors().next().unwrap();
    assert_eq!(first.code, "E_CONFIG_PACKAGE_NOT_FOUND");
    assert_eq!(first.field.as_deref(), Some("spec.dependencies[0].name"));
    assert!(first
        .suggestion
        .as_deref()
        .unwrap()
        .contains("gdn package install"));

    // Locked but not unpacked.
    let not_unpacked = installed("^1.0.0", "ref: Tool/calc", "./tools/run.mjs");
    std::fs::remove_dir_all(not_unpacked.packages.path().join("@acme/util@0.5.2")).unwrap();
    let outcome = load(&not_unpacked);
    let first = outcome.errors().next().unwrap();
    assert_eq!(first.code, "E_CONFIG_PACKAGE_NOT_FOUND");
    assert!(
        first.message.contains("@acme/util@0.5.2"),
        "{}",
        first.message
    );

    // A broken lockfile.
    let broken = installed("^1.0.0", "ref: Tool/calc", "./tools/run.mjs");
    std::fs::write(
        broken.bundle.path().join("goondan.lock.yaml"),
        "lockfileVersion: 7\n",
    )
    .unwrap();
    assert!(codes(&load(&broken)).contains(&"E_CONFIG_PACKAGE_LOCKFILE".to_string()));
}
