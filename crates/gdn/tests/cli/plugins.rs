//! Issue 19, script entries end to end: `gdn run` on a bundle whose Tool
//! is a JavaScript module and whose Extension is a Python module; the
//! loader accepts them, the AgentProcess runs them as plugins, and the
//! extension's toolCall middleware changes what the tool receives.

use super::{code, gdn, stdout};

const BUNDLE: &str = r#"apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: scripted
spec:
  provider: scripted
  model: scripted
  options:
    rulesFile: rules.yaml
  capabilities:
    toolCalling: true
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: alpha
spec:
  modelConfig:
    modelRef: Model/scripted
  tools:
    - ref: Tool/calc
  extensions:
    - ref: Extension/scale
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: Agent/alpha
  agents:
    - ref: Agent/alpha
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
---
apiVersion: goondan.ai/v1
kind: Extension
metadata:
  name: scale
spec:
  entry: ./extensions/scale.py
  config:
    factor: 10
"#;

const RULES: &str = r#"rules:
  - name: add
    when:
      user:
        regex: "^add"
    reply:
      toolCalls:
        - name: calc__add
          args:
            a: 2
            b: 3
  - name: summed
    when:
      toolResult:
        toolName: calc__add
    reply:
      text: "sum={{input.sum}}"
"#;

const CALC: &str = r#"export const handlers = {
  add: async (ctx, input) => ({ sum: input.a + input.b, workdir: ctx.workdir }),
};
"#;

const SCALE: &str = r#"def register(api, config):
    async def scale(ctx):
        ctx.args = dict(ctx.args, b=ctx.args["b"] * config["factor"])
        return await ctx.next()

    api.pipeline.register("toolCall", scale)
"#;

#[test]
fn a_javascript_tool_and_a_python_extension_run_in_gdn_run() {
    let bundle = tempfile::tempdir().unwrap();
    let root = bundle.path();
    std::fs::create_dir(root.join("tools")).unwrap();
    std::fs::create_dir(root.join("extensions")).unwrap();
    std::fs::write(root.join("goondan.yaml"), BUNDLE).unwrap();
    std::fs::write(root.join("rules.yaml"), RULES).unwrap();
    std::fs::write(root.join("tools/calc.mjs"), CALC).unwrap();
    std::fs::write(root.join("extensions/scale.py"), SCALE).unwrap();

    let validated = gdn(root, &["validate"]);
    assert_eq!(
        code(&validated),
        0,
        "{}{}",
        stdout(&validated),
        String::from_utf8_lossy(&validated.stderr)
    );
    let output = gdn(root, &["run", "--input", "add please"]);
    assert_eq!(
        code(&output),
        0,
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // 2 + 3 * 10: the Python middleware scaled `b` before the JavaScript
    // handler ran.
    assert_eq!(stdout(&output).trim(), "sum=32");
}

#[test]
fn a_javascript_connector_feeds_an_agent_in_a_resident_swarm() {
    use crate::mock_llm::{MockLlm, Reply};
    use crate::swarm::{fixture, gdn_command, Resident, Swarm};
    use std::process::Stdio;

    let mock = MockLlm::start(|request| Reply::text(format!("got: {}", request.last_user_text())));
    let bundle = fixture("ticker", &[("@ENDPOINT@", mock.endpoint())]);
    let swarm = Swarm {
        bundle,
        state: tempfile::tempdir().unwrap(),
        mock,
    };
    let log = std::fs::File::create(swarm.bundle.path().join("orchestrator.log")).unwrap();
    let child = gdn_command(swarm.bundle.path(), swarm.state.path(), &["run"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let resident = Resident { child: Some(child) };
    swarm.wait_for_socket();
    crate::connectors::wait_for_answer(&swarm, "alpha", "clock", "tick from a script");
    assert_eq!(resident.terminate(), 0);
}

/// `examples/plugins` answers through its TypeScript tool and extension,
/// and kill -9 of the agent leaves none of its plugin processes behind.
#[test]
fn the_plugins_example_runs_and_kill_9_of_its_agent_leaves_no_plugin() {
    use crate::mock_llm::{MockLlm, Reply};
    use crate::swarm::{gdn_command, sigkill, wait_until, Resident, Swarm};
    use std::process::Stdio;

    let bundle = tempfile::tempdir().unwrap();
    let example = super::workspace_root().join("examples/plugins");
    for folder in ["", "tools", "extensions", "connectors"] {
        std::fs::create_dir_all(bundle.path().join(folder)).unwrap();
        for entry in std::fs::read_dir(example.join(folder)).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() {
                let target = bundle.path().join(folder).join(path.file_name().unwrap());
                std::fs::copy(&path, target).unwrap();
            }
        }
    }
    let swarm = Swarm {
        bundle,
        state: tempfile::tempdir().unwrap(),
        // The example's model is the scripted one; nothing calls this.
        mock: MockLlm::start(|_| Reply::text("unused")),
    };
    let log = std::fs::File::create(swarm.state.path().join("orchestrator.log")).unwrap();
    let child = gdn_command(swarm.bundle.path(), swarm.state.path(), &["run"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let resident = Resident { child: Some(child) };
    swarm.wait_for_socket();
    let answer = swarm.run(&["run", "--input", "count   two    words"]);
    assert_eq!(
        code(&answer),
        0,
        "{}",
        String::from_utf8_lossy(&answer.stderr)
    );
    // The extension collapsed the spaces before the TypeScript tool counted.
    assert_eq!(stdout(&answer).trim(), "2 words, 9 characters");

    let agent = wait_until("the agent's pid", || swarm.pid_of("assistant"));
    let plugins = wait_until("the agent's plugin processes", || {
        let children = crate::swarm::children_of(agent);
        (children.len() >= 2).then_some(children)
    });
    sigkill(agent);
    wait_until("every plugin process to be gone", || {
        plugins
            .iter()
            .all(|pid| !crate::swarm::alive(*pid))
            .then_some(())
    });
    assert_eq!(resident.terminate(), 0);
}
