//! `gdn strip-types <FILE>` (hidden), the command the plugin host's Node
//! shim runs on Node without type stripping: JavaScript on stdout and exit
//! 0, or `error[E_TYPESCRIPT_STRIP]` with file, line:column and a fix on
//! stderr and a non-zero exit. When `node` is on PATH the output is run as
//! an ES module and must print what the TypeScript would.

use super::{code, gdn, stdout, workspace_root};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

fn fixture(name: &str) -> PathBuf {
    workspace_root()
        .join("crates/gdn/tests/fixtures/strip-types")
        .join(name)
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Runs `javascript` with `node --input-type=module`; `None` when there
/// is no `node`.
fn run_with_node(javascript: &str) -> Option<std::process::Output> {
    let mut child = match Command::new("node")
        .arg("--input-type=module")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return None,
        Err(error) => panic!("node: {error}"),
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(javascript.as_bytes())
        .unwrap();
    Some(child.wait_with_output().unwrap())
}

#[test]
fn strip_types_prints_javascript_that_node_runs() {
    let output = gdn(
        &workspace_root(),
        &["strip-types", fixture("tool.ts").to_str().unwrap()],
    );
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let javascript = stdout(&output);
    assert!(javascript.contains("from \"node:path\""), "{javascript}");
    for leftover in [
        "interface",
        "import type",
        "satisfies",
        ": string",
        "private",
    ] {
        assert!(
            !javascript.contains(leftover),
            "`{leftover}` survived:\n{javascript}"
        );
    }
    assert!(stderr(&output).is_empty());

    let Some(node) = run_with_node(&javascript) else {
        eprintln!("node is not on PATH: did not run the output");
        return;
    };
    assert!(node.status.success(), "node failed:\n{}", stderr(&node));
    assert_eq!(String::from_utf8_lossy(&node.stdout), "hello work\n");
}

#[test]
fn strip_types_reports_a_syntax_error_with_its_place() {
    let output = gdn(
        &workspace_root(),
        &[
            "strip-types",
            "crates/gdn/tests/fixtures/strip-types/broken.ts",
        ],
    );
    assert_eq!(code(&output), 4);
    assert_eq!(stdout(&output), "");
    let text = stderr(&output);
    assert!(text.starts_with("error[E_TYPESCRIPT_STRIP]: "), "{text}");
    assert!(
        text.contains("--> crates/gdn/tests/fixtures/strip-types/broken.ts:2:13"),
        "{text}"
    );
    assert!(text.contains("= help: "), "{text}");
}

#[test]
fn strip_types_refuses_tsx_and_missing_files() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("view.tsx"), "export const v = <b />;\n").unwrap();
    let output = gdn(dir.path(), &["strip-types", "view.tsx"]);
    assert_eq!(code(&output), 2);
    assert_eq!(
        stderr(&output).lines().next().unwrap(),
        "error[E_TYPESCRIPT_STRIP]: cannot strip types from a TSX file"
    );
    assert!(stderr(&output).contains("JSX is not supported"));

    let output = gdn(dir.path(), &["strip-types", "missing.ts"]);
    assert_eq!(code(&output), 3);
    assert!(
        stderr(&output).contains("--> missing.ts"),
        "{}",
        stderr(&output)
    );
    assert_eq!(stdout(&output), "");
}

#[test]
fn strip_types_is_hidden_from_help() {
    let output = gdn(&workspace_root(), &["--help"]);
    assert!(!stdout(&output).contains("strip-types"));
}
