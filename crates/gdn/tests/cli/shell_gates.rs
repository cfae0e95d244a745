//! Issue 47 #2, approval gates that spelling cannot dodge: a
//! `bash__exec` gate reads the command as the shell would (every simple
//! command, quotes and escapes removed, through `bash -c` and
//! substitutions) and gates what it cannot read; the allow-list form
//! (`unless`) gates everything it does not allow; a gate in
//! `Swarm.spec.policy.approvals` holds a delegated agent that has no gate
//! of its own; a bad gate is a coded diagnostic of `gdn validate`.
//!
//! Gated requests are left waiting and the swarm stopped: nothing waits
//! for a timeout.

use crate::approvals::approvals;
use crate::mock_llm::{ChatRequest, MockLlm, Reply};
use crate::swarm::{code, finish, fixture, stderr, stdout, wait_until, Swarm};
use serde_json::{json, Value};
use std::process::{Child, Stdio};

/// Ways to delete the file `{}`. The first nine are shell spellings of
/// `rm`; the last two delete without naming `rm`, which only an allow
/// list catches.
const DELETIONS: [&str; 11] = [
    "rm {}",
    "/bin/rm {}",
    "rm\t{}",
    "bash -c 'rm {}'",
    "true; rm {}",
    "\"rm\" {}",
    "r\\m {}",
    "$(echo rm) {}",
    "`echo rm` {}",
    "find . -name {} -delete",
    "unlink {}",
];

/// The deny-list gate of the documentation's example.
const DENY_RM: &str = r#"{tools: [bash__exec], when: {command: "rm *"}}"#;
/// An allow list.
const ALLOW_READS: &str = r#"{tools: [bash__exec], unless: ["ls *", "ls", "echo *", "cat *"]}"#;

/// The mock: an input `DELEGATE:TEXT` to alpha asks beta with TEXT; any
/// other input (to either agent) is run as a `bash__exec` command; a
/// tool result is answered `done: …`.
fn decide(request: &ChatRequest) -> Reply {
    if let Some(result) = request.tool_result() {
        return Reply::text(format!("done: {result}"));
    }
    let text = request.last_user_text();
    match text.strip_prefix("DELEGATE:") {
        Some(input) if request.is_from("agent ALPHA") => {
            Reply::tool("agents__request", json!({"target": "beta", "input": input}))
        }
        _ => Reply::tool("bash__exec", json!({"command": text})),
    }
}

/// The `shell-gates` fixture with alpha's own gate (`config` of its
/// `tool-approval`, or none) and the Swarm's `policy.approvals`.
fn shell_swarm(alpha_gate: Option<&str>, swarm_gate: Option<&str>) -> Swarm {
    let mock = MockLlm::start(decide);
    let alpha_gate = alpha_gate
        .map(|config| format!("- ref: Extension/tool-approval\n      config: {config}"))
        .unwrap_or_default();
    let policy = swarm_gate
        .map(|gate| format!("approvals: {gate}"))
        .unwrap_or_default();
    let bundle = fixture(
        "shell-gates",
        &[
            ("@ENDPOINT@", mock.endpoint()),
            ("@GRACE@", "1".to_string()),
            ("@ALPHA_GATE@", alpha_gate),
            ("@POLICY@", policy),
        ],
    );
    Swarm {
        bundle,
        state: tempfile::tempdir().unwrap(),
        mock,
    }
}

/// `gdn run --instance-key KEY --input TEXT` in the background.
fn spawn_input_as(swarm: &Swarm, key: &str, text: &str) -> Child {
    swarm
        .command(&["run", "--instance-key", key, "--input", text])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Sends each deletion (of its own victim file, on its own instance) to
/// the running swarm and waits until each is a waiting request; checks
/// the requests are those commands and that every victim is still there.
/// Returns the attached inputs and the requests.
fn each_waits(swarm: &Swarm, deletions: &[&str]) -> (Vec<Child>, Vec<Value>) {
    let mut inputs = Vec::new();
    let mut commands = Vec::new();
    for (index, deletion) in deletions.iter().enumerate() {
        let victim = format!("victim-{index}");
        std::fs::write(swarm.bundle.path().join(&victim), "precious\n").unwrap();
        let command = deletion.replace("{}", &victim);
        inputs.push(spawn_input_as(swarm, &format!("k{index}"), &command));
        commands.push(command);
    }
    let waiting = wait_until("a request for every deletion", || {
        let waiting = approvals(swarm);
        (waiting.len() >= deletions.len()).then_some(waiting)
    });
    assert_eq!(waiting.len(), deletions.len(), "{waiting:#?}");
    for (index, command) in commands.iter().enumerate() {
        let request = waiting
            .iter()
            .find(|request| request["instanceKey"] == format!("k{index}").as_str())
            .unwrap_or_else(|| panic!("no request for {command:?}: {waiting:#?}"));
        assert_eq!(request["tool"], "bash__exec");
        assert_eq!(request["arguments"]["command"], command.as_str());
        assert!(
            swarm.bundle.path().join(format!("victim-{index}")).exists(),
            "{command:?} deleted its victim while its request waits"
        );
    }
    (inputs, waiting)
}

/// Runs an ungated command to its answer on its own instance.
fn runs_without_approval(swarm: &Swarm, command: &str) {
    let output = swarm.run(&["run", "--instance-key", "free", "--input", command]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(stdout(&output).starts_with("done:"), "{}", stdout(&output));
}

/// Stops the swarm with its requests still waiting, collects the inputs
/// that were attached to it, and checks that stopping ran none of them:
/// the first `victims` victims are all still there.
fn stop(swarm: &Swarm, resident: crate::swarm::Resident, inputs: Vec<Child>, victims: usize) {
    resident.terminate();
    for input in inputs {
        finish(input, "an input whose request was left waiting");
    }
    for index in 0..victims {
        assert!(
            swarm.bundle.path().join(format!("victim-{index}")).exists(),
            "victim-{index} was deleted as the swarm stopped"
        );
    }
}

#[test]
fn a_deny_gate_on_rm_holds_every_spelling_of_rm() {
    let swarm = shell_swarm(Some(DENY_RM), None);
    let resident = swarm.start_resident();
    let (inputs, waiting) = each_waits(&swarm, &DELETIONS[..9]);
    // A command name computed when it runs is gated, and says so.
    let computed = waiting
        .iter()
        .find(|request| request["instanceKey"] == "k7")
        .unwrap();
    assert!(
        computed["question"]
            .as_str()
            .is_some_and(|question| question.contains("only known when it runs")),
        "{computed}"
    );
    runs_without_approval(&swarm, "echo ok > free.txt && ls");
    assert_eq!(
        std::fs::read_to_string(swarm.bundle.path().join("free.txt")).unwrap(),
        "ok\n"
    );
    assert_eq!(approvals(&swarm).len(), 9, "the ungated command asked");
    stop(&swarm, resident, inputs, 9);
}

#[test]
fn an_allow_list_holds_every_deletion_and_lets_its_commands_run() {
    let swarm = shell_swarm(Some(ALLOW_READS), None);
    let resident = swarm.start_resident();
    let (inputs, _) = each_waits(&swarm, &DELETIONS);
    runs_without_approval(&swarm, "ls -la | cat -n; echo ok > free.txt");
    assert!(swarm.bundle.path().join("free.txt").exists());
    assert_eq!(approvals(&swarm).len(), DELETIONS.len());
    stop(&swarm, resident, inputs, DELETIONS.len());
}

#[test]
fn a_swarm_gate_holds_a_delegated_agent_without_a_gate_of_its_own() {
    let swarm = shell_swarm(None, Some(DENY_RM));
    std::fs::write(swarm.bundle.path().join("victim-0"), "precious\n").unwrap();
    let resident = swarm.start_resident();
    let input = swarm.spawn_input("DELEGATE:rm victim-0");
    let waiting = wait_until("beta's request", || {
        let waiting = approvals(&swarm);
        (!waiting.is_empty()).then_some(waiting)
    });
    assert_eq!(waiting.len(), 1, "{waiting:#?}");
    let request = &waiting[0];
    assert_eq!(request["agent"], "beta");
    assert_eq!(request["arguments"]["command"], "rm victim-0");
    assert!(
        request["question"]
            .as_str()
            .is_some_and(|question| question.contains("policy.approvals")),
        "{request}"
    );
    assert!(swarm.bundle.path().join("victim-0").exists());
    // The gate is every agent's: alpha's own commands pass it too.
    runs_without_approval(&swarm, "echo ok > free.txt");
    assert_eq!(approvals(&swarm).len(), 1);
    // Approved, the delegated command runs, once, and alpha hears back.
    let id = request["id"].as_str().unwrap();
    let approve = swarm.run(&["approve", id]);
    assert_eq!(code(&approve), 0, "{}", stderr(&approve));
    let answer = finish(input, "the delegating input");
    assert!(stdout(&answer).starts_with("done:"), "{}", stdout(&answer));
    assert!(!swarm.bundle.path().join("victim-0").exists());
    assert!(approvals(&swarm).is_empty());
    stop(&swarm, resident, Vec::new(), 0);
}

#[test]
fn a_bad_swarm_gate_is_a_coded_diagnostic() {
    let swarm = shell_swarm(
        None,
        Some(
            r#"{tools: [bash__exec], when: {command: "re:("}, unless: ["[a"], agents: [alpha, betta]}"#,
        ),
    );
    let output = swarm.run(&["validate"]);
    assert_eq!(code(&output), 4, "{}", stderr(&output));
    let text = stdout(&output) + &stderr(&output);
    for wanted in [
        "E_CONFIG_APPROVALS_GATE",
        "spec.policy.approvals.when.command",
        "spec.policy.approvals.unless[0]",
        "E_CONFIG_NOT_SWARM_MEMBER",
        "spec.policy.approvals.agents[1]",
        "did you mean `beta`?",
    ] {
        assert!(text.contains(wanted), "{wanted} in {text}");
    }
    assert!(!text.contains("agents[0]"), "{text}");
}
