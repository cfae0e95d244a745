//! Issue 37 #2 with the real binary: the bash commands of an agent share
//! one sandbox helper, the PID 1 of the agent's namespaces, and a kill -9
//! of the agent ends everything its commands started, a job that
//! double-forked out of its session included.

use super::{code, stdout};
use crate::mock_llm::{MockLlm, Reply};
use crate::swarm::{alive, children_of, sigkill, wait_until, Swarm};
use serde_json::json;

#[test]
fn a_double_forked_bash_job_is_gone_after_kill_9_of_its_agent() {
    // `sleep` with a duration unique to this run, found by its command line.
    let seconds = format!("603.{}", std::process::id());
    let command = format!(
        "( setsid sh -c 'sleep {seconds}' </dev/null >/dev/null 2>&1 & ) ; readlink /proc/self/ns/pid"
    );
    let swarm = Swarm {
        bundle: tempfile::tempdir().unwrap(),
        state: tempfile::tempdir().unwrap(),
        mock: MockLlm::start(move |request| {
            let n_results = request
                .messages()
                .iter()
                .filter(|message| message["role"] == "tool")
                .count();
            match n_results {
                0 | 1 => Reply::tool("bash__exec", json!({ "command": command })),
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
    - ref: Tool/bash
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: Agent/alpha
  agents:
    - ref: Agent/alpha
"#,
        endpoint = swarm.mock.endpoint()
    );
    std::fs::write(swarm.bundle.path().join("goondan.yaml"), bundle).unwrap();

    let resident = swarm.start_resident();
    let answer = swarm.run(&["run", "--input", "start the jobs"]);
    assert_eq!(code(&answer), 0, "{}", stdout(&answer));
    let jobs = wait_until("both jobs", || {
        let jobs = sleeping(&seconds);
        (jobs.len() == 2).then_some(jobs)
    });
    let agent = wait_until("the agent's pid", || swarm.pid_of("alpha"));
    // Two commands, one helper (its P is the agent's only child); none
    // where the platform refuses namespaces.
    let children = children_of(agent);
    assert!(children.len() <= 1, "the agent's children: {children:?}");
    let sandboxed = children.len() == 1;
    sigkill(agent);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let left = loop {
        let left: Vec<i32> = jobs.iter().copied().filter(|pid| alive(*pid)).collect();
        if left.is_empty() || std::time::Instant::now() > deadline {
            break left;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    // Whatever the assertion says, leave nothing running.
    for pid in &left {
        sigkill(*pid);
    }
    drop(resident);
    if !sandboxed {
        // Where the platform refuses namespaces nothing ties the jobs to
        // the agent (SECURITY.md); the helper count is the namespace check.
        println!("note: no sandbox helper here; the jobs were not tied to the agent");
        return;
    }
    assert!(
        left.is_empty(),
        "jobs the bash commands cut loose outlived kill -9 of the agent: {left:?}"
    );
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
        .filter(|pid| alive(*pid))
        .collect()
}
