//! The performance floor (issue 37): every row of the table in
//! BENCHMARKS.md "The floor", timed from outside on the release `gdn`
//! against a mock OpenAI server on 127.0.0.1, as a user runs it.
//!
//! Run: `cargo build --release -p gdn && cargo bench -p gdn --bench floor`
//! (`-- --runs 15` for more runs per row, `-- --instances 10000` to add the
//! many-instances row; `GDN=/path/to/gdn` to time another binary).
//!
//! Each timed row is a whole process tree, over several runs after a
//! warm-up: median [min–max]. Memory rows read `/proc/<pid>/smaps_rollup`
//! of every process of the tree once it is idle.

#[allow(dead_code)]
#[path = "../tests/cli/mock_llm.rs"]
mod mock_llm;
mod release_gdn;

use mock_llm::{ChatRequest, MockLlm, Reply};
use release_gdn::gdn_binary;
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

fn main() {
    let options = Options::parse();
    let gdn = gdn_binary();
    println!("binary: {} ({:.1} MB)", gdn.display(), file_mb(&gdn));
    // `go` asks for one `bash__exec`; anything else, and the command's
    // result, is answered with text.
    let mock = MockLlm::start(|request: &ChatRequest| {
        if request.tool_result().is_none() && request.last_user_text() == "go" {
            Reply::tool("bash__exec", json!({"command": "echo hello"}))
        } else {
            Reply::text("hello back")
        }
    });
    let plain = Bundle::new(&mock, 64);
    let many = Bundle::new(&mock, options.instances.max(10) + 16);
    let bench = Bench { gdn, options };

    println!();
    println!("{:<48} {:>22}", "row", "median [min–max]");
    bench.timed("gdn validate", || {
        bench.run(&plain, &["validate"], None).elapsed
    });
    let state = tempfile::tempdir().unwrap();
    bench.timed("cold one-shot turn, start → exit", || {
        bench
            .run(&plain, &["run", "--input", "hello"], Some(state.path()))
            .elapsed
    });
    let state = tempfile::tempdir().unwrap();
    bench.timed("tool turn (2 model calls + bash), start → exit", || {
        bench
            .run(&plain, &["run", "--input", "go"], Some(state.path()))
            .elapsed
    });

    let mut first_line = Vec::new();
    let mut idle = None;
    for _ in 0..bench.options.runs {
        let state = tempfile::tempdir().unwrap();
        let mut swarm = Resident::start(&bench.gdn, &plain, state.path());
        // Resident: running for a moment before its first line, as a swarm
        // someone types into (its entry agent warms meanwhile).
        std::thread::sleep(Duration::from_millis(300));
        let started = Instant::now();
        swarm.send(&["hello".to_string()]);
        first_line.push(started.elapsed());
        if idle.is_none() {
            std::thread::sleep(Duration::from_millis(500));
            idle = Some(swarm.memory());
        }
        swarm.finish();
    }
    print_row("resident swarm, first stdin line → answer", &first_line);
    let idle = idle.unwrap();
    println!(
        "{:<48} {:>22}",
        "idle swarm after one turn, PSS of the tree",
        format!("{:.1} MiB", idle.tree.pss_mib())
    );
    if let Some(agent) = idle.agents.first() {
        println!(
            "{:<48} {:>22}",
            "idle agent process RSS / PSS / anonymous",
            format!(
                "{:.1} / {:.1} / {:.1} MiB",
                agent.rss_mib(),
                agent.pss_mib(),
                agent.anonymous_mib()
            )
        );
        println!(
            "{:<48} {:>22}",
            "idle agent process threads",
            agent.threads.to_string()
        );
    }
    println!(
        "{:<48} {:>22}",
        "orchestrator (gdn run) RSS / threads",
        format!(
            "{:.1} MiB / {}",
            idle.orchestrator.rss_mib(),
            idle.orchestrator.threads
        )
    );

    let mut ten = Vec::new();
    let mut ten_memory = None;
    for _ in 0..bench.options.runs {
        let state = tempfile::tempdir().unwrap();
        let mut swarm = Resident::start(&bench.gdn, &many, state.path());
        let lines: Vec<String> = (0..10)
            .map(|i| json!({"text": "hello", "instanceKey": format!("k{i}")}).to_string())
            .collect();
        let started = Instant::now();
        swarm.send(&lines);
        ten.push(started.elapsed());
        if ten_memory.is_none() {
            std::thread::sleep(Duration::from_millis(500));
            ten_memory = Some(swarm.memory());
        }
        swarm.finish();
    }
    print_row("10 instances at once: all answered", &ten);
    println!(
        "{:<48} {:>22}",
        "10 instances: PSS of the tree",
        format!("{:.1} MiB", ten_memory.unwrap().tree.pss_mib())
    );

    if bench.options.instances > 0 {
        let n = bench.options.instances;
        let state = tempfile::tempdir().unwrap();
        let mut swarm = Resident::start(&bench.gdn, &many, state.path());
        let lines: Vec<String> = (0..n)
            .map(|i| json!({"text": "hello", "instanceKey": format!("k{i}")}).to_string())
            .collect();
        let started = Instant::now();
        swarm.send_reporting(lines, |answered| {
            if answered % 1000 == 0 {
                println!(
                    "{:<48} {:>22}",
                    format!("  {answered} answered"),
                    format!("{:.1} s", started.elapsed().as_secs_f64())
                );
            }
        });
        let took = started.elapsed();
        std::thread::sleep(Duration::from_secs(2));
        let memory = swarm.memory();
        println!(
            "{:<48} {:>22}",
            format!("{n} instances: all answered"),
            format!("{:.1} s", took.as_secs_f64())
        );
        println!(
            "{:<48} {:>22}",
            format!("{n} instances: orchestrator's descriptors"),
            swarm.descriptors().to_string()
        );
        println!(
            "{:<48} {:>22}",
            format!("{n} instances: PSS / anonymous of the tree"),
            format!(
                "{:.2} / {:.2} GiB",
                memory.tree.pss_mib() / 1024.0,
                memory.tree.anonymous_mib() / 1024.0
            )
        );
        println!(
            "{:<48} {:>22}",
            format!("{n} instances: PSS per agent"),
            format!("{:.2} MiB", memory.tree.pss_mib() / n as f64)
        );
        println!(
            "{:<48} {:>22}",
            format!("{n} instances: threads of the tree"),
            memory.tree.threads.to_string()
        );
        swarm.finish();
    }
}

struct Options {
    runs: usize,
    instances: usize,
}

impl Options {
    fn parse() -> Options {
        let mut options = Options {
            runs: 7,
            instances: 0,
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let mut value = || {
                args.next()
                    .and_then(|value| value.parse().ok())
                    .unwrap_or_else(|| panic!("{arg} takes a number"))
            };
            match arg.as_str() {
                "--runs" => options.runs = value(),
                "--instances" => options.instances = value(),
                // What `cargo bench` passes to every bench binary.
                "--bench" => {}
                other => panic!("unknown argument {other}: use --runs N, --instances N"),
            }
        }
        options
    }
}

fn file_mb(path: &Path) -> f64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0) as f64 / 1e6
}

/// A bundle folder: one agent on the mock, with `bash`.
struct Bundle {
    dir: tempfile::TempDir,
}

impl Bundle {
    fn new(mock: &MockLlm, max_live: usize) -> Bundle {
        let dir = tempfile::tempdir().unwrap();
        let yaml = format!(
            r#"apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: mock
spec:
  provider: openai
  model: gpt-mock
  endpoint: "{endpoint}"
  options:
    maxRetries: 0
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: assistant
spec:
  modelConfig:
    modelRef: Model/mock
  tools:
    - ref: Tool/bash
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: Agent/assistant
  agents:
    - ref: Agent/assistant
  policy:
    processes:
      maxLive: {max_live}
"#,
            endpoint = mock.endpoint()
        );
        std::fs::write(dir.path().join("goondan.yaml"), yaml).unwrap();
        Bundle { dir }
    }
}

struct Bench {
    gdn: PathBuf,
    options: Options,
}

struct Ran {
    elapsed: Duration,
}

impl Bench {
    fn command(&self, bundle: &Bundle, state: Option<&Path>) -> Command {
        let mut command = Command::new(&self.gdn);
        command.arg("--config").arg(bundle.dir.path());
        if let Some(state) = state {
            command.arg("--state-root").arg(state);
        }
        command.env("OPENAI_API_KEY", "sk-bench");
        command
    }

    fn run(&self, bundle: &Bundle, args: &[&str], state: Option<&Path>) -> Ran {
        let mut command = self.command(bundle, state);
        command.args(args).stdin(Stdio::null());
        let started = Instant::now();
        let output = command.output().expect("running gdn");
        let elapsed = started.elapsed();
        assert!(
            output.status.success(),
            "gdn {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        Ran { elapsed }
    }

    /// One warm-up, then `runs` timed runs.
    fn timed(&self, row: &str, mut run: impl FnMut() -> Duration) {
        run();
        let times: Vec<Duration> = (0..self.options.runs).map(|_| run()).collect();
        print_row(row, &times);
    }
}

fn print_row(row: &str, times: &[Duration]) {
    let mut ms: Vec<f64> = times.iter().map(|t| t.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    let median = ms[ms.len() / 2];
    println!(
        "{row:<48} {:>22}",
        format!("{median:.1} ms [{:.1}–{:.1}]", ms[0], ms[ms.len() - 1])
    );
}

/// A resident `gdn run` fed on a pipe, its answers read line by line.
struct Resident {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    state: PathBuf,
}

impl Resident {
    /// Starts it and waits until its control socket is ready (its active
    /// record is written then).
    fn start(gdn: &Path, bundle: &Bundle, state: &Path) -> Resident {
        let mut child = Command::new(gdn)
            .arg("--config")
            .arg(bundle.dir.path())
            .arg("--state-root")
            .arg(state)
            .arg("run")
            .env("OPENAI_API_KEY", "sk-bench")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting gdn run");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let active = state.join("runtime/active");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::read_dir(&active)
            .map(|mut entries| entries.next().is_none())
            .unwrap_or(true)
        {
            assert!(Instant::now() < deadline, "gdn run did not get ready");
            std::thread::sleep(Duration::from_micros(200));
        }
        Resident {
            child,
            stdin,
            stdout,
            state: state.to_path_buf(),
        }
    }

    /// Writes every line at once and reads one answer line per line.
    fn send(&mut self, lines: &[String]) {
        let stdin = self.stdin.as_mut().unwrap();
        let mut text = lines.join("\n");
        text.push('\n');
        stdin.write_all(text.as_bytes()).unwrap();
        stdin.flush().unwrap();
        let mut answer = String::new();
        for _ in lines {
            answer.clear();
            let read = self.stdout.read_line(&mut answer).unwrap();
            assert!(read > 0, "gdn run ended before answering");
        }
    }

    /// Writes every line from a thread of its own (so neither side's pipe
    /// fills while the other waits) and reads one answer line per line,
    /// telling `answered` the count after each.
    fn send_reporting(&mut self, lines: Vec<String>, mut answered: impl FnMut(usize)) {
        let mut stdin = self.stdin.take().unwrap();
        let n = lines.len();
        let writer = std::thread::spawn(move || {
            for line in lines {
                stdin.write_all(line.as_bytes()).unwrap();
                stdin.write_all(b"\n").unwrap();
            }
            stdin.flush().unwrap();
            stdin
        });
        let mut answer = String::new();
        for count in 1..=n {
            answer.clear();
            let read = self.stdout.read_line(&mut answer).unwrap();
            assert!(read > 0, "gdn run ended before answering");
            answered(count);
        }
        self.stdin = Some(writer.join().unwrap());
    }

    /// How many descriptors the orchestrator holds open.
    fn descriptors(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id()))
            .map(|entries| entries.count())
            .unwrap_or(0)
    }

    fn memory(&self) -> TreeMemory {
        TreeMemory::of(self.child.id())
    }

    /// Ends the input; the swarm finishes and exits.
    fn finish(mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
        let _ = &self.state;
    }
}

#[derive(Default, Clone, Copy)]
struct Memory {
    rss_kib: u64,
    pss_kib: u64,
    anonymous_kib: u64,
    threads: u64,
}

impl Memory {
    fn of(pid: u32) -> Memory {
        let rollup =
            std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
        let field = |name: &str| {
            rollup
                .lines()
                .find(|line| line.starts_with(name))
                .and_then(|line| line.split_whitespace().nth(1))
                .and_then(|kib| kib.parse().ok())
                .unwrap_or(0)
        };
        let threads = std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|tasks| tasks.count() as u64)
            .unwrap_or(0);
        Memory {
            rss_kib: field("Rss:"),
            pss_kib: field("Pss:"),
            anonymous_kib: field("Anonymous:"),
            threads,
        }
    }

    fn add(&mut self, other: Memory) {
        self.rss_kib += other.rss_kib;
        self.pss_kib += other.pss_kib;
        self.anonymous_kib += other.anonymous_kib;
        self.threads += other.threads;
    }

    fn rss_mib(&self) -> f64 {
        self.rss_kib as f64 / 1024.0
    }

    fn pss_mib(&self) -> f64 {
        self.pss_kib as f64 / 1024.0
    }

    fn anonymous_mib(&self) -> f64 {
        self.anonymous_kib as f64 / 1024.0
    }
}

/// The orchestrator, each agent process, and the whole tree.
struct TreeMemory {
    orchestrator: Memory,
    agents: Vec<Memory>,
    tree: Memory,
}

impl TreeMemory {
    fn of(root: u32) -> TreeMemory {
        let mut parents = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            // The parent is the second field after the command's `)`.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|ppid| ppid.parse::<u32>().ok());
            if let Some(ppid) = ppid {
                parents.push((pid, ppid));
            }
        }
        let mut tree = vec![root];
        let mut index = 0;
        while index < tree.len() {
            let parent = tree[index];
            tree.extend(
                parents
                    .iter()
                    .filter(|(_, ppid)| *ppid == parent)
                    .map(|(pid, _)| *pid),
            );
            index += 1;
        }
        let orchestrator = Memory::of(root);
        let mut total = Memory::default();
        let mut agents = Vec::new();
        for pid in &tree {
            let memory = Memory::of(*pid);
            total.add(memory);
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if cmdline.split(|b| *b == 0).any(|arg| arg == b"agent") {
                agents.push(memory);
            }
        }
        TreeMemory {
            orchestrator,
            agents,
            tree: total,
        }
    }
}
