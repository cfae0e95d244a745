//! Issue 37, lean processes: what an agent process carries when idle.
//! The numbers are benchmarks (`cargo bench -p gdn --bench floor`); these
//! tests hold the properties the numbers rest on.

use crate::swarm::{relay, wait_until, Swarm};

/// The threads of process `pid`, by name.
fn threads_of(pid: i32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|tasks| {
            tasks
                .flatten()
                .map(|task| {
                    std::fs::read_to_string(task.path().join("comm"))
                        .unwrap_or_default()
                        .trim()
                        .to_string()
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn an_idle_agent_that_answered_and_asked_another_agent_runs_on_one_thread() {
    // Threads, not memory, are the first limit on agents per machine:
    // `kernel.pid_max` counts them. Reading and writing the IPC pipes
    // must not park a thread, nor must a finished Turn leave one.
    let swarm = Swarm::pair(1, relay);
    let resident = swarm.start_resident();
    let asked = crate::swarm::finish(swarm.spawn_input("ping"), "the relayed input");
    assert!(
        crate::swarm::stdout(&asked).contains("alpha heard: pong(ping)"),
        "{}",
        crate::swarm::stdout(&asked)
    );
    for agent in ["alpha", "beta"] {
        let pid = wait_until("the agent's pid", || swarm.pid_of(agent));
        let threads = threads_of(pid);
        assert_eq!(threads.len(), 1, "{agent} runs threads {threads:?}");
    }
    assert_eq!(resident.terminate(), 0);
}

#[cfg(target_os = "linux")]
#[test]
fn gdn_is_linked_at_a_fixed_address_so_its_processes_relocate_nothing() {
    // An ELF header's e_type (bytes 16-17, little-endian): 2 is a
    // position-dependent executable, 3 a PIE.
    if std::env::var("GOONDAN_PIE").is_ok_and(|value| value == "1") {
        return; // built as a PIE on purpose (SECURITY.md)
    }
    let header = std::fs::read(env!("CARGO_BIN_EXE_gdn")).unwrap();
    assert_eq!(&header[..4], b"\x7fELF");
    assert_eq!(u16::from_le_bytes([header[16], header[17]]), 2);
}

/// `gdn run` reading lines from a pipe it keeps open.
fn run_on_a_pipe(swarm: &Swarm) -> std::process::Child {
    swarm
        .command(&["run"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn gdn_run_on_a_pipe_starts_the_entry_agent_before_the_first_line_unless_told_not_to() {
    use std::io::{BufRead, Write};
    let swarm = Swarm::pair(1, relay);
    let mut run = run_on_a_pipe(&swarm);
    // No line yet: the entry agent's process is up, the other one is not.
    wait_until("the warm entry agent", || swarm.pid_of("alpha"));
    assert_eq!(swarm.pid_of("beta"), None);
    let mut stdin = run.stdin.take().unwrap();
    writeln!(stdin, "ping").unwrap();
    let mut answer = String::new();
    std::io::BufReader::new(run.stdout.take().unwrap())
        .read_line(&mut answer)
        .unwrap();
    assert!(answer.contains("alpha heard: pong(ping)"), "{answer}");
    drop(stdin);
    assert!(run.wait().unwrap().success());

    // A daemon (nothing to read) warms nothing: what it serves comes from
    // its Connections, to instances of their own.
    let resident = swarm.start_resident();
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(swarm.pid_of("alpha"), None, "{:?}", swarm.instances());
    assert_eq!(resident.terminate(), 0);

    let cold = Swarm::pair(1, relay);
    let yaml = cold.bundle.path().join("goondan.yaml");
    let text = std::fs::read_to_string(&yaml).unwrap();
    std::fs::write(
        &yaml,
        text.replace(
            "  policy:\n",
            "  policy:\n    processes:\n      warmEntry: false\n",
        ),
    )
    .unwrap();
    let mut run = run_on_a_pipe(&cold);
    cold.wait_for_socket();
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(cold.instances().is_empty(), "{:?}", cold.instances());
    drop(run.stdin.take());
    assert!(run.wait().unwrap().success());
}

/// Issue 48: with a cli Connection whose rule routes console lines to a
/// fixed instance (the original's brain-persona sends them to
/// `coordinator:cli-test`), `gdn run` warms that instance, not the
/// swarm's own, and the first line is answered there.
#[test]
fn gdn_run_warms_the_instance_the_cli_connections_rules_route_to() {
    use std::io::{BufRead, Write};
    let swarm = Swarm::pair(1, relay);
    let yaml = swarm.bundle.path().join("goondan.yaml");
    let text = std::fs::read_to_string(&yaml).unwrap();
    let cli = "---
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: cli-to-default
spec:
  connectorRef: Connector/cli
  swarmRef: Swarm/default
  ingress:
    rules:
      - match:
          event: stdin_message
        route:
          agentRef: Agent/alpha
          instanceKey: cli-test
";
    std::fs::write(&yaml, format!("{text}{cli}")).unwrap();
    let live = |swarm: &Swarm| -> Vec<String> {
        swarm
            .instances()
            .into_iter()
            .filter(|row| row["pid"].as_i64().is_some())
            .map(|row| {
                format!(
                    "{}:{}",
                    row["agentName"].as_str().unwrap_or_default(),
                    row["instanceKey"].as_str().unwrap_or_default()
                )
            })
            .collect()
    };
    let mut run = run_on_a_pipe(&swarm);
    // No line yet: the instance the rule names is up, and only it.
    let warmed = wait_until("the warm cli instance", || {
        let live = live(&swarm);
        (!live.is_empty()).then_some(live)
    });
    assert_eq!(warmed, ["alpha:cli-test"]);
    let warm_pid = swarm.pid_of("alpha").unwrap();
    let mut stdin = run.stdin.take().unwrap();
    writeln!(stdin, "ping").unwrap();
    let mut answer = String::new();
    std::io::BufReader::new(run.stdout.take().unwrap())
        .read_line(&mut answer)
        .unwrap();
    assert!(answer.contains("alpha heard: pong(ping)"), "{answer}");
    // The line was answered by the process that was warmed.
    let rows = swarm.instances();
    let alpha: Vec<_> = rows
        .iter()
        .filter(|row| row["agentName"] == "alpha")
        .collect();
    assert_eq!(alpha.len(), 1, "{rows:?}");
    assert_eq!(alpha[0]["instanceKey"], "cli-test");
    assert_eq!(alpha[0]["pid"].as_i64(), Some(i64::from(warm_pid)));
    drop(stdin);
    assert!(run.wait().unwrap().success());
}

#[test]
fn an_orchestrator_holds_one_descriptor_per_agent_process() {
    // Its hard limit on open descriptors (20,000 on the reference
    // machine) is what bounds how many agents one orchestrator serves:
    // a child's stdin and stdout are one socket, and no pidfd is kept.
    use std::io::{BufRead, Write};
    const AGENTS: usize = 12;
    let swarm = Swarm::pair(1, |_| crate::mock_llm::Reply::text("hello back"));
    let mut run = run_on_a_pipe(&swarm);
    let orchestrator = run.id();
    let descriptors = || {
        std::fs::read_dir(format!("/proc/{orchestrator}/fd"))
            .unwrap()
            .count()
    };
    let mut stdin = run.stdin.take().unwrap();
    let mut answers = std::io::BufReader::new(run.stdout.take().unwrap());
    let mut answer = String::new();
    writeln!(stdin, r#"{{"text": "hi", "instanceKey": "first"}}"#).unwrap();
    answers.read_line(&mut answer).unwrap();
    let before = descriptors();
    for n in 0..AGENTS {
        writeln!(stdin, r#"{{"text": "hi", "instanceKey": "k{n}"}}"#).unwrap();
    }
    for _ in 0..AGENTS {
        answer.clear();
        answers.read_line(&mut answer).unwrap();
        assert!(answer.contains("hello back"), "{answer}");
    }
    let live = swarm
        .instances()
        .iter()
        .filter(|row| row["pid"].as_i64().is_some())
        .count();
    let added = descriptors() - before;
    assert!(live > AGENTS, "{live} live agents");
    assert!(
        added <= AGENTS,
        "{added} more descriptors for {AGENTS} more agents"
    );
    drop(stdin);
    assert!(run.wait().unwrap().success());
}
