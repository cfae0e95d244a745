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

/// Issue 35: what a plugin starts and then cuts loose does not outlive
/// `gdn stop`. A Python tool double-forks a `setsid` child, a JavaScript
/// tool spawns a detached, unref'd one; both leave the plugin's process
/// group, so only the plugin host's PID namespace (when the platform
/// allows one) ends them. Before it, both kept running after the stop.
#[test]
fn what_a_plugin_cut_loose_is_gone_after_gdn_stop() {
    use crate::mock_llm::{MockLlm, Reply};
    use crate::swarm::{alive, wait_until, Swarm};
    use serde_json::json;

    // `sleep` with a duration unique to this run, found by its command line.
    let python_sleep = format!("601.{}", std::process::id());
    let node_sleep = format!("602.{}", std::process::id());
    let swarm = Swarm {
        bundle: tempfile::tempdir().unwrap(),
        state: tempfile::tempdir().unwrap(),
        mock: MockLlm::start(|request| {
            match request
                .messages()
                .iter()
                .filter(|message| message["role"] == "tool")
                .count()
            {
                0 => Reply::tool("escape-py__start", json!({})),
                1 => Reply::tool("escape-js__start", json!({})),
                _ => Reply::text("started"),
            }
        }),
    };
    let bundle = format!(
        r#"apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: llm
spec:
  provider: openai
  model: gpt-mock
  endpoint: "{endpoint}"
  apiKey:
    valueFrom:
      env: OPENAI_API_KEY
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: alpha
spec:
  modelConfig:
    modelRef: Model/llm
  tools:
    - ref: Tool/escape-py
    - ref: Tool/escape-js
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
  name: escape-py
spec:
  entry: ./escape.py
  exports:
    - name: start
      description: Starts a job that leaves the process group.
      parameters: {{ type: object }}
---
apiVersion: goondan.ai/v1
kind: Tool
metadata:
  name: escape-js
spec:
  entry: ./escape.mjs
  exports:
    - name: start
      description: Starts a detached job.
      parameters: {{ type: object }}
"#,
        endpoint = swarm.mock.endpoint()
    );
    std::fs::write(swarm.bundle.path().join("goondan.yaml"), bundle).unwrap();
    std::fs::write(
        swarm.bundle.path().join("escape.py"),
        format!(
            r#"import os


def start(_ctx, _input):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            os.execvp("sleep", ["sleep", "{python_sleep}"])
        os._exit(0)
    os.wait()
    return {{"started": True}}


handlers = {{"start": start}}
"#
        ),
    )
    .unwrap();
    std::fs::write(
        swarm.bundle.path().join("escape.mjs"),
        format!(
            r#"import {{ spawn }} from "node:child_process";

export const handlers = {{
  start: async () => {{
    spawn("sleep", ["{node_sleep}"], {{ detached: true, stdio: "ignore" }}).unref();
    return {{ started: true }};
  }},
}};
"#
        ),
    )
    .unwrap();

    let resident = swarm.start_resident();
    let answer = swarm.run(&["run", "--input", "start the jobs"]);
    assert_eq!(
        code(&answer),
        0,
        "{}",
        String::from_utf8_lossy(&answer.stderr)
    );
    assert_eq!(stdout(&answer).trim(), "started");
    let jobs = wait_until("both jobs to run", || {
        let jobs = [sleeping(&python_sleep), sleeping(&node_sleep)].concat();
        (jobs.len() == 2).then_some(jobs)
    });

    let stop = swarm.run(&["stop"]);
    assert_eq!(code(&stop), 0, "{}", String::from_utf8_lossy(&stop.stderr));
    let left = wait_until_gone(&jobs);
    // Whatever the assertion says, leave nothing running.
    for pid in &left {
        crate::swarm::sigkill(*pid);
    }
    assert!(
        left.is_empty(),
        "jobs a plugin cut loose outlived gdn stop: {left:?}"
    );
    assert!(jobs.iter().all(|pid| !alive(*pid)));
    drop(resident);
}

/// Live processes whose command line is `sleep <seconds>`.
fn sleeping(seconds: &str) -> Vec<i32> {
    let wanted = format!("sleep\0{seconds}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|line| line == wanted.as_bytes())
        })
        .filter(|pid| crate::swarm::alive(*pid))
        .collect()
}

/// The pids of `jobs` still alive after up to five seconds.
fn wait_until_gone(jobs: &[i32]) -> Vec<i32> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let left: Vec<i32> = jobs
            .iter()
            .copied()
            .filter(|pid| crate::swarm::alive(*pid))
            .collect();
        if left.is_empty() || std::time::Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
