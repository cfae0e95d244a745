//! Public-API tests of the bundle loader: the invalid-bundle corpus, the
//! schemas of the built-in Tools, the
//! YAML safety limits, path escapes, the shipped examples, and the typed
//! view of a loaded bundle.

mod api;
mod base_tools;
mod corpus;
mod limits;
mod packages;

use goondan_config::{load_bundle, LoadOptions, LoadOutcome};
use std::path::{Path, PathBuf};

/// Loads without the process environment, so results do not depend on
/// the machine running the tests.
fn load(path: &Path) -> LoadOutcome {
    let options = LoadOptions {
        env_file: None,
        inherit_process_env: false,
        ..LoadOptions::default()
    };
    load_bundle(path, &options).expect("the bundle is readable")
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A minimal valid bundle; tests append or replace documents.
const VALID: &str = "\
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
  name: a
spec:
  modelConfig:
    modelRef: Model/main
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: Agent/a
  agents:
    - ref: Agent/a
";

fn codes(outcome: &LoadOutcome) -> Vec<String> {
    outcome.diagnostics.iter().map(|d| d.code.clone()).collect()
}
