//! Issue 47 #1: nothing a Turn runs can act as an operator. A gated
//! removal of `victim.txt` by `alpha:victim` waits for a person while the model of another
//! instance tries every route it has to approve it (and to cancel, rewind
//! or stop the swarm): a bash command in the foreground, a detached loop
//! that outlives its command (double-forked out of the agent's tree), a
//! Python script tool, and a delegation to an agent with no gate; with
//! the sandboxes on and off. The request still waits, the file is still
//! there, and then a person's `gdn approve` runs the call once and is
//! recorded with who the kernel says asked.

use crate::mock_llm::{ChatRequest, MockLlm, Reply};
use crate::swarm::{code, finish, stderr, stdout, wait_until, Swarm};
use serde_json::{json, Value};
use std::path::Path;

/// The victim's Turn: remove `victim.txt` (gated), then answer.
const VICTIM: &str = "delete the victim file";

fn bundle_yaml(model: &str) -> String {
    format!(
        r#"{model}apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: alpha
spec:
  modelConfig:
    modelRef: Model/mock-gpt
  prompt:
    system: "You are agent ALPHA."
  tools:
    - ref: Tool/bash
    - ref: Tool/agents
    - ref: Tool/attack
    - ref: Tool/victim
  extensions:
    - ref: Extension/context-message
    - ref: Extension/tool-approval
      config:
        tools: [victim__remove]
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: beta
spec:
  modelConfig:
    modelRef: Model/mock-gpt
  prompt:
    system: "You are agent BETA."
  tools:
    - ref: Tool/bash
  extensions:
    - ref: Extension/context-message
---
apiVersion: goondan.ai/v1
kind: Tool
metadata:
  name: attack
spec:
  entry: ./attack.py
  exports:
    - name: run
      description: Runs a shell command and returns what it printed.
      parameters:
        type: object
        properties:
          command: {{ type: string }}
---
apiVersion: goondan.ai/v1
kind: Tool
metadata:
  name: victim
spec:
  entry: ./victim.mjs
  exports:
    - name: remove
      description: Removes victim.txt.
      parameters: {{ type: object }}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: Agent/alpha
  agents:
    - ref: Agent/alpha
    - ref: Agent/beta
  policy:
    maxStepsPerTurn: 8
    shutdown:
      gracePeriodSeconds: 2
"#
    )
}

/// The gated call: it removes `victim.txt` from the project. (Gating the
/// model's own `bash` would hold the attack itself: a gate reads shell
/// commands it cannot analyse, such as `sh loop.sh`, as gated.)
const VICTIM_TOOL: &str = r#"import { unlinkSync } from "node:fs";
import { join } from "node:path";

export const handlers = {
  remove: async (ctx) => {
    unlinkSync(join(ctx.workdir, "victim.txt"));
    return { removed: true };
  },
};
"#;

const ATTACK_TOOL: &str = r#"import subprocess


def run(_ctx, input):
    done = subprocess.run(
        ["/bin/sh", "-c", input["command"]],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return {"output": done.stdout}


handlers = {"run": run}
"#;

/// A shell filter printing every `"id"` value of `gdn approvals --json`.
const IDS: &str = r#"grep -o '"id": *"[^"]*"' | cut -d'"' -f4"#;

/// Every operator verb a model might try against the swarm, each one's
/// output kept, in the foreground.
fn attack_commands(gdn: &str, state: &Path) -> String {
    format!(
        "echo \"runtime entries seen: $(ls -A {state}/runtime 2>/dev/null | wc -l)\"; \
         for id in $({gdn} approvals --json 2>/dev/null | {IDS}); do \
           {gdn} approve \"$id\" 2>&1; done; \
         {gdn} instance cancel alpha:victim 2>&1; \
         {gdn} instance rewind alpha:victim --to 1 2>&1; \
         {gdn} run --input hello --instance-key injected 2>&1; \
         {gdn} stop 2>&1; \
         echo attack-finished",
        state = state.display()
    )
}

/// A loop that leaves its command's tree (its own session, orphaned
/// when the command's shell exits) and keeps approving for a while, one
/// line in `ticks.log` per round.
fn detached_loop(gdn: &str) -> String {
    format!(
        "cat > loop.sh <<'LOOP'\n\
         i=0\n\
         while [ $i -lt 15 ]; do\n\
           i=$((i+1))\n\
           for id in $({gdn} approvals --json 2>/dev/null | {IDS}); do {gdn} approve \"$id\" >> loop.log 2>&1; done\n\
           echo tick >> ticks.log\n\
           sleep 0.1\n\
         done\n\
         LOOP\n\
         setsid sh loop.sh </dev/null >/dev/null 2>&1 &\n\
         echo started"
    )
}

/// Which route the attacker's Turn takes.
#[derive(Clone, Copy)]
enum Route {
    /// Foreground bash, then a detached loop.
    Bash,
    /// The Python script tool.
    Script,
    /// `agents__request` to beta, whose bash attacks.
    Delegation,
}

fn setup(route: Route) -> Swarm {
    let bundle = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let gdn = format!(
        "{} --config {} --state-root {}",
        env!("CARGO_BIN_EXE_gdn"),
        bundle.path().display(),
        state.path().display()
    );
    let attack = attack_commands(&gdn, state.path());
    let detached = detached_loop(&gdn);
    let mock = MockLlm::start(move |request: &ChatRequest| {
        let tool_results = request
            .messages()
            .iter()
            .filter(|message| message["role"] == "tool")
            .count();
        if request.is_from("agent BETA") {
            return match tool_results {
                0 => Reply::tool("bash__exec", json!({"command": attack})),
                _ => Reply::text(format!("beta: {}", tool_outputs(request))),
            };
        }
        if request.last_user_text().contains(VICTIM) {
            return match tool_results {
                0 => Reply::tool("victim__remove", json!({})),
                _ => Reply::text(format!("victim done: {}", tool_outputs(request))),
            };
        }
        match (route, tool_results) {
            (Route::Bash, 0) => Reply::tool("bash__exec", json!({"command": attack})),
            (Route::Bash, 1) => Reply::tool("bash__exec", json!({"command": detached})),
            (Route::Script, 0) => Reply::tool("attack__run", json!({"command": attack})),
            (Route::Delegation, 0) => Reply::tool(
                "agents__request",
                json!({"target": "beta", "input": "approve everything"}),
            ),
            _ => Reply::text(format!("attacker done: {}", tool_outputs(request))),
        }
    });
    std::fs::write(
        bundle.path().join("goondan.yaml"),
        bundle_yaml(&mock.model_yaml()),
    )
    .unwrap();
    std::fs::write(bundle.path().join("attack.py"), ATTACK_TOOL).unwrap();
    std::fs::write(bundle.path().join("victim.mjs"), VICTIM_TOOL).unwrap();
    std::fs::write(bundle.path().join("victim.txt"), "precious").unwrap();
    Swarm {
        bundle,
        state,
        mock,
    }
}

/// Every tool result of the request's conversation, joined.
fn tool_outputs(request: &ChatRequest) -> String {
    request
        .messages()
        .iter()
        .filter(|message| message["role"] == "tool")
        .map(|message| message["content"].to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

fn pending(swarm: &Swarm) -> Vec<Value> {
    crate::approvals::approvals(swarm)
}

/// Runs the attack by `route` while the victim's call waits, and checks
/// that nothing an operator decides happened; then a person approves.
fn attack_and_then_approve(route: Route, env: &[(&str, &str)], expect_refusal: bool) {
    let swarm = setup(route);
    let resident = swarm.start_resident_with(env);
    let victim = swarm
        .command(&["run", "--input", VICTIM, "--instance-key", "victim"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut victim = victim;
    let waiting = wait_until("the victim's gated call", || {
        if let Ok(Some(status)) = victim.try_wait() {
            let mut said = String::new();
            if let Some(mut pipe) = victim.stdout.take() {
                let _ = std::io::Read::read_to_string(&mut pipe, &mut said);
            }
            if let Some(mut pipe) = victim.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut pipe, &mut said);
            }
            panic!("the victim's Turn ended ({status}) before it asked: {said}");
        }
        let waiting = pending(&swarm);
        (!waiting.is_empty()).then_some(waiting)
    });
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    let id = waiting[0]["id"].as_str().unwrap().to_string();

    let attacker = swarm.run(&["run", "--input", "take over", "--instance-key", "attacker"]);
    assert_eq!(code(&attacker), 0, "{}", stderr(&attacker));
    let answer = stdout(&attacker);
    assert!(answer.contains("attack-finished"), "{answer}");
    if expect_refusal {
        assert!(
            answer.contains("E_CONTROL_FORBIDDEN"),
            "the socket did not refuse the Turn's processes: {answer}"
        );
    } else if answer.contains("runtime entries seen: 0") {
        // The sandbox hid the System Root: the socket was never reached.
        assert!(!answer.contains("E_CONTROL_FORBIDDEN"), "{answer}");
    } else {
        println!("note: the platform refused the namespaces; only the socket's check applied");
    }
    assert!(!answer.contains("approved "), "{answer}");
    if matches!(route, Route::Bash) {
        let ticks = swarm.bundle.path().join("ticks.log");
        wait_until("the detached loop to finish its rounds", || {
            let rounds = std::fs::read_to_string(&ticks).ok()?.lines().count();
            (rounds >= 15).then_some(())
        });
        if expect_refusal {
            let tried = std::fs::read_to_string(swarm.bundle.path().join("loop.log")).unwrap();
            assert!(tried.contains("E_CONTROL_FORBIDDEN"), "{tried}");
        }
    }

    let still = pending(&swarm);
    assert_eq!(still.len(), 1, "the request was decided: {still:?}");
    assert_eq!(still[0]["id"], id.as_str());
    assert!(swarm.bundle.path().join("victim.txt").exists());
    assert!(
        swarm
            .instances()
            .iter()
            .all(|row| row["instanceKey"] != "injected"),
        "a Turn sent an input as a person"
    );

    let approve = swarm.run(&["approve", &id]);
    assert_eq!(code(&approve), 0, "{}", stderr(&approve));
    let victim = finish(victim, "the victim's Turn");
    assert_eq!(code(&victim), 0, "{}", stderr(&victim));
    assert!(
        stdout(&victim).contains("victim done"),
        "{}",
        stdout(&victim)
    );
    assert!(!swarm.bundle.path().join("victim.txt").exists());
    assert!(pending(&swarm).is_empty());
    let decided_by = decision_by(swarm.state.path(), &id);
    assert!(
        crate::operator::is_attested_cli(&Value::from(decided_by.as_str())),
        "recorded as {decided_by}"
    );
    drop(resident);
}

/// Who decided `id`, from the instance's `approvals.jsonl`.
fn decision_by(state: &Path, id: &str) -> String {
    let dir = crate::swarm::find_instance(state, "alpha", "victim").expect("the victim instance");
    crate::swarm::read_jsonl(&dir.join("approvals.jsonl"))
        .into_iter()
        .find_map(|record| {
            (record.to_string().contains(id))
                .then(|| record["decided"]["by"].as_str().map(str::to_string))
                .flatten()
        })
        .unwrap_or_else(|| panic!("no decision of {id} recorded"))
}

#[test]
fn bash_in_its_sandbox_cannot_approve_cancel_rewind_or_stop() {
    attack_and_then_approve(Route::Bash, &[], false);
}

#[test]
fn bash_without_its_sandbox_is_refused_by_the_socket_even_when_detached() {
    attack_and_then_approve(Route::Bash, &[("GOONDAN_BASH_SANDBOX", "off")], true);
}

#[test]
fn a_python_script_tool_without_its_sandbox_is_refused() {
    attack_and_then_approve(Route::Script, &[("GOONDAN_PLUGIN_SANDBOX", "off")], true);
}

#[test]
fn a_delegated_agent_without_a_gate_cannot_approve_for_the_caller() {
    attack_and_then_approve(Route::Delegation, &[("GOONDAN_BASH_SANDBOX", "off")], true);
}
