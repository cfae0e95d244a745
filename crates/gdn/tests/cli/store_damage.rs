//! End to end: what the real `gdn` binary does with a System Root that was
//! damaged between runs or is looked at by other users (issue 16 #11, #18,
//! #22). Each test runs the `pair` swarm of [`crate::swarm`] against the
//! mock LLM of [`crate::mock_llm`], damages or inspects the files of the
//! entry agent's instance, and runs again.

use crate::mock_llm::{MockLlm, Reply};
use crate::swarm::{code, fixture, gdn_command, read_jsonl, run_with_deadline, stderr, stdout};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
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

    /// `gdn run --input TEXT`, to completion.
    fn ask(&self, text: &str) -> Output {
        run_with_deadline(self.command(&["run", "--input", text]))
    }

    /// `gdn run --input TEXT`, which must answer.
    fn ask_ok(&self, text: &str) {
        let output = self.ask(text);
        assert_eq!(code(&output), 0, "stderr: {}", stderr(&output));
        assert_eq!(stdout(&output), format!("heard {text}\n"));
    }

    /// The folder of `alpha:default`.
    fn alpha_dir(&self) -> PathBuf {
        let workspaces = self.state().join("workspaces");
        std::fs::read_dir(&workspaces)
            .unwrap()
            .map(|entry| entry.unwrap().path().join("instances/alpha:default"))
            .find(|dir| dir.is_dir())
            .expect("the folder of alpha:default")
    }

    fn base_log(&self) -> PathBuf {
        self.alpha_dir().join("messages/base.jsonl")
    }

    fn events_log(&self) -> PathBuf {
        self.alpha_dir().join("messages/events.jsonl")
    }

    /// Every log file of every process of the workspace, concatenated.
    fn runtime_logs(&self) -> String {
        let mut text = String::new();
        for entry in walk(&self.state().join("runtime/logs")) {
            if entry.is_file() {
                text.push_str(&std::fs::read_to_string(&entry).unwrap_or_default());
            }
        }
        text
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

/// The `id` of each line of a `base.jsonl`.
fn ids(base: &[Value]) -> Vec<String> {
    base.iter()
        .map(|message| message["id"].as_str().unwrap().to_string())
        .collect()
}

/// The text of each user and assistant message of a `base.jsonl`.
fn texts(base: &[Value]) -> Vec<String> {
    base.iter()
        .filter(|message| matches!(message["data"]["role"].as_str(), Some("user" | "assistant")))
        .map(|message| match &message["data"]["content"] {
            Value::String(text) => text.clone(),
            Value::Array(parts) => parts
                .iter()
                .filter_map(|part| part["text"].as_str())
                .collect::<String>(),
            other => other.to_string(),
        })
        .collect()
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

/// A commit marker edited to `baseBytesAfter: 0` used to make the next
/// start cut `base.jsonl` to nothing. Now the agent refuses to start with
/// E_STORE_CORRUPT_LOG naming the file, nothing is cut, and following the
/// suggestion (deleting the marker) brings the conversation back with
/// every message once.
#[test]
fn issue_16_11_an_impossible_commit_marker_stops_the_agent_and_keeps_history() {
    let damage = Damage::new();
    damage.ask_ok("one");
    let base_before = std::fs::read_to_string(damage.base_log()).unwrap();
    let base = read_jsonl(&damage.base_log());
    assert_eq!(texts(&base), ["one", "heard one"]);

    // What a crash after a finished append leaves (the Turn's events and
    // its marker), with the marker's end offset damaged.
    let answer_line = base_before.lines().last().unwrap();
    let n_before_answer = base_before.len() - answer_line.len() - 1;
    let mut answer_event: Value = serde_json::json!({
        "type": "append",
        "message": serde_json::from_str::<Value>(answer_line).unwrap(),
        "turnId": "t-damaged",
    });
    let event_line = format!("{answer_event}\n");
    answer_event = serde_json::json!({
        "type": "commit", "turnId": "t-damaged", "mode": "append",
        "baseBytes": n_before_answer, "baseBytesAfter": 0,
    });
    let events = format!("{event_line}{answer_event}\n");
    std::fs::write(damage.events_log(), &events).unwrap();

    let refused = damage.ask("two");
    assert_ne!(code(&refused), 0, "stdout: {}", stdout(&refused));
    let said = format!(
        "{}{}{}",
        stdout(&refused),
        stderr(&refused),
        damage.runtime_logs()
    );
    assert!(
        stderr(&refused).contains("error[E_STORE_CORRUPT_LOG]"),
        "{said}"
    );
    assert!(
        said.contains("events.jsonl:2: impossible commit marker"),
        "{said}"
    );
    assert!(said.contains("= help:"), "{said}");
    assert_eq!(
        std::fs::read_to_string(damage.base_log()).unwrap(),
        base_before,
        "nothing stored is cut"
    );
    assert_eq!(
        std::fs::read_to_string(damage.events_log()).unwrap(),
        events
    );

    // The suggested repair: delete the marker line. The answer it carried
    // is already in the base and is not appended again.
    std::fs::write(damage.events_log(), &event_line).unwrap();
    damage.ask_ok("two");
    let base = read_jsonl(&damage.base_log());
    assert_eq!(texts(&base), ["one", "heard one", "two", "heard two"]);
    let mut unique = ids(&base);
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), base.len(), "no message twice");
}

/// A `metadata.json` that does not parse (garbage, empty, cut short) used
/// to keep the agent from starting. It is advisory, so the next start
/// moves it aside, rebuilds it, says so in the agent's log and answers
/// with the whole conversation.
#[test]
fn issue_16_18_a_damaged_metadata_file_is_rebuilt_and_the_agent_answers() {
    let damage = Damage::new();
    damage.ask_ok("one");
    let metadata_file = damage.alpha_dir().join("metadata.json");
    let intact = std::fs::read_to_string(&metadata_file).unwrap();
    let cut = &intact[..intact.len() / 2];
    let damaged_versions: [&[u8]; 3] = [b"\xff\x00garbage{{", b"", cut.as_bytes()];

    let mut said = Vec::new();
    for (n, damaged) in damaged_versions.iter().enumerate() {
        std::fs::write(&metadata_file, damaged).unwrap();
        let text = format!("after damage {n}");
        damage.ask_ok(&text);
        said.push(text);

        let rebuilt: Value =
            serde_json::from_str(&std::fs::read_to_string(&metadata_file).unwrap()).unwrap();
        assert_eq!(rebuilt["agentName"], "alpha", "{rebuilt:#}");
        assert_eq!(rebuilt["instanceKey"], "default", "{rebuilt:#}");
        let moved_aside = if n == 0 {
            damage.alpha_dir().join("metadata.json.damaged")
        } else {
            damage
                .alpha_dir()
                .join(format!("metadata.json.damaged.{}", n + 1))
        };
        assert_eq!(
            std::fs::read(&moved_aside).unwrap(),
            *damaged,
            "the damaged bytes are kept in {}",
            moved_aside.display()
        );
    }
    let logs = damage.runtime_logs();
    assert!(logs.contains("metadata.json was damaged"), "{logs}");

    let base = read_jsonl(&damage.base_log());
    let mut expected = vec!["one".to_string(), "heard one".to_string()];
    for text in said {
        expected.push(format!("heard {text}"));
        expected.insert(expected.len() - 1, text);
    }
    assert_eq!(texts(&base), expected);
}
