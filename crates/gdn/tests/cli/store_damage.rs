//! End to end: what the real `gdn` binary does with a System Root that was
//! damaged between runs or is looked at by other users (issue 16 #11, #18,
//! #22). Each test runs the `pair` swarm of [`crate::swarm`] against the
//! mock LLM of [`crate::mock_llm`], damages or inspects the files of the
//! entry agent's instance, and runs again.

use crate::mock_llm::{MockLlm, Reply};
use crate::swarm::{code, fixture, gdn_command, run_with_deadline, stderr, stdout};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use tempfile::TempDir;

/// The `pair` bundle on a System Root that does not exist yet (so `gdn`
/// creates every folder of it), with a mock that echoes each input.
struct Damage {
    bundle: TempDir,
    parent: TempDir,
    _mock: MockLlm,
}

impl Damage {
    fn new() -> Damage {
        let mock =
            MockLlm::start(|request| Reply::text(format!("heard {}", request.last_user_text())));
        let bundle = fixture(
            "pair",
            &[
                ("@ENDPOINT@", mock.endpoint()),
                ("@GRACE@", "2".to_string()),
            ],
        );
        Damage {
            bundle,
            parent: tempfile::tempdir().unwrap(),
            _mock: mock,
        }
    }

    fn state(&self) -> PathBuf {
        self.parent.path().join("state")
    }

    fn command(&self, args: &[&str]) -> Command {
        gdn_command(self.bundle.path(), &self.state(), args)
    }
}

/// Every path under `root`, `root` included, depth first.
fn walk(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(path) = stack.pop() {
        let Ok(metadata) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if metadata.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap() {
                stack.push(entry.unwrap().path());
            }
        }
        found.push(path);
    }
    found
}

#[test]
fn issue_16_22_state_files_and_folders_are_owner_only_whatever_the_umask() {
    let damage = Damage::new();
    // The umask most systems default to: without explicit modes, files
    // come out 0644 and folders 0755.
    let command = damage.command(&["run", "--input", "hello"]);
    let mut wrapped = Command::new("sh");
    wrapped
        .arg("-c")
        .arg("umask 022 && exec \"$@\"")
        .arg("sh")
        .arg(command.get_program())
        .args(command.get_args());
    for (key, value) in command.get_envs() {
        match value {
            Some(value) => wrapped.env(key, value),
            None => wrapped.env_remove(key),
        };
    }
    wrapped.current_dir(command.get_current_dir().unwrap());
    let output = run_with_deadline(wrapped);
    assert_eq!(code(&output), 0, "stderr: {}", stderr(&output));
    assert_eq!(stdout(&output), "heard hello\n");

    let entries = walk(&damage.state());
    assert!(
        entries.iter().any(|path| path.ends_with("base.jsonl")),
        "the run stored its conversation: {entries:#?}"
    );
    assert!(
        entries
            .iter()
            .any(|path| path.extension().is_some_and(|e| e == "log")),
        "the run wrote its runtime logs: {entries:#?}"
    );
    let exposed: Vec<String> = entries
        .iter()
        .filter_map(|path| {
            let mode = std::fs::symlink_metadata(path).ok()?.permissions().mode() & 0o777;
            (mode & 0o077 != 0).then(|| format!("{:o} {}", mode, path.display()))
        })
        .collect();
    assert!(
        exposed.is_empty(),
        "group or world can reach these: {exposed:#?}"
    );
}
