//! The Studio's Evals page re-runs a case (issue 49 #6): `POST
//! /api/actions/rerun` against a real `gdn studio --allow-actions` over
//! HTTP on 127.0.0.1, which runs `gdn eval … --case NAME` (this binary)
//! in the run's bundle folder with the Studio's System Root, live or from
//! the run's cassettes; its refusals (no token, no CSRF token, an unknown
//! run or case, a bad body); and its Re-run button in headless Chromium.
//!
//! The helpers that talk to a Studio (`start_studio`, `exchange`,
//! `csrf_of`) are small copies of `studio.rs`'s, so the two files change
//! apart. The browser test is skipped, with a message, only when
//! Chromium is not installed and `GOONDAN_REQUIRE_CHROMIUM` is unset.

use crate::cdp::{chromium_path, Browser};
use crate::mock_llm::{ChatRequest, MockLlm, Reply};
use crate::studio::{artifact, csrf_of, exchange, port_and_token, Killed};
use crate::swarm::{code, gdn_command, run_with_deadline, stderr, stdout};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::process::Stdio;

/// A one-agent bundle on `@ENDPOINT@` with an Eval of a case that passes
/// and one, with hostile markup in it, whose checks miss on purpose.
const EVAL_BUNDLE: &str = "apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: llm
spec:
  provider: openai
  model: gpt-mock
  endpoint: \"@ENDPOINT@\"
  options:
    maxRetries: 0
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: echo
spec:
  modelConfig:
    modelRef: Model/llm
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: Agent/echo
  agents:
    - ref: Agent/echo
---
apiVersion: goondan.ai/v1
kind: Eval
metadata:
  name: checks
spec:
  timeoutSeconds: 30
  cases:
    - name: holds
      input: tides
      assert:
        - contains: \"echo: tides\"
    - name: misses
      input: \"<img src=x onerror='window.__pwned = 7'>\"
      assert:
        - contains: volcanoes
";

fn echo(request: &ChatRequest) -> Reply {
    Reply::text(format!("echo: {}", request.last_user_text()))
}

/// A bundle folder on a new echoing mock, and a System Root.
struct Project {
    bundle: tempfile::TempDir,
    state: tempfile::TempDir,
    mock: Option<MockLlm>,
}

impl Project {
    fn new() -> Project {
        let mock = MockLlm::start(echo);
        let bundle = tempfile::tempdir().unwrap();
        std::fs::write(
            bundle.path().join("goondan.yaml"),
            EVAL_BUNDLE.replace("@ENDPOINT@", &mock.endpoint()),
        )
        .unwrap();
        Project {
            bundle,
            state: tempfile::tempdir().unwrap(),
            mock: Some(mock),
        }
    }

    fn command(&self, args: &[&str]) -> std::process::Command {
        gdn_command(self.bundle.path(), self.state.path(), args)
    }

    /// `gdn eval --json ARGS…`: its stored run's id.
    fn eval(&self, args: &[&str]) -> String {
        let output = run_with_deadline(self.command(&[&["eval", "--json"], args].concat()));
        assert!(matches!(code(&output), 0 | 1), "{}", stderr(&output));
        let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
        report["runId"].as_str().unwrap().to_string()
    }

    fn requests(&self) -> usize {
        self.mock.as_ref().map_or(0, |mock| mock.requests().len())
    }

    /// The stored report of run `id`.
    fn stored(&self, id: &str) -> Value {
        let path = self.state.path().join("evals").join(id).join("run.json");
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }
}

/// Starts `command` (a `gdn studio --allow-actions`); it, its port and
/// the token its URL carries.
fn start_studio(command: std::process::Command) -> (Killed, u16, String) {
    let (studio, url) = crate::studio::start_studio(command);
    let (port, token) = port_and_token(&url);
    let token = token.unwrap_or_else(|| panic!("no token in {url}"));
    (studio, port, token)
}

/// The body of an answer, as JSON.
fn json_of(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|error| panic!("{error}: {body}"))
}

/// The run ids `/api/evals` lists, newest first.
fn listed_runs(port: u16) -> Vec<String> {
    let (status, body) = exchange(port, "GET", "/api/evals", "", "");
    assert_eq!(status, 200, "{body}");
    json_of(&body)["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|run| run["runId"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn issue_49_a_case_re_run_from_the_studio_is_a_new_run_live_or_from_its_cassettes() {
    let mut project = Project::new();
    let first = project.eval(&[]);
    let (_studio, port, token) =
        start_studio(project.command(&["studio", "--addr", "127.0.0.1:0", "--allow-actions"]));
    let csrf = csrf_of(port);
    let origin = format!("Origin: http://127.0.0.1:{port}\r\n");
    let cookie = format!("Cookie: gdn_studio={token}\r\n");
    let csrf_header = format!("X-Goondan-Csrf: {csrf}\r\n");
    let all = format!("{origin}{cookie}{csrf_header}");
    let rerun =
        |headers: &str, body: &str| exchange(port, "POST", "/api/actions/rerun", headers, body);

    // Refused before anything runs: no token, no CSRF token, a bad body,
    // an unknown run or case.
    let ask = json!({"run": first, "case": 1}).to_string();
    let refusals: [(&str, String, &str, u16, &str); 9] = [
        (
            "no token",
            format!("{origin}{csrf_header}"),
            &ask,
            401,
            "E_STUDIO_UNAUTHORIZED",
        ),
        (
            "no CSRF token",
            format!("{origin}{cookie}"),
            &ask,
            403,
            "E_STUDIO_CSRF",
        ),
        (
            "no Origin",
            format!("{cookie}{csrf_header}"),
            &ask,
            403,
            "E_STUDIO_ORIGIN",
        ),
        (
            "not JSON",
            all.clone(),
            "{not json",
            400,
            "E_STUDIO_BAD_REQUEST",
        ),
        (
            "no case",
            all.clone(),
            r#"{"run":"x"}"#,
            400,
            "E_STUDIO_BAD_REQUEST",
        ),
        (
            "a negative case",
            all.clone(),
            r#"{"run":"x","case":-1}"#,
            400,
            "E_STUDIO_BAD_REQUEST",
        ),
        (
            "a case by name",
            all.clone(),
            r#"{"run":"x","case":"misses"}"#,
            400,
            "E_STUDIO_BAD_REQUEST",
        ),
        (
            "an unknown run",
            all.clone(),
            r#"{"run":"20001122T000000Z","case":0}"#,
            404,
            "E_STUDIO_NOT_FOUND",
        ),
        (
            "a path for a run",
            all.clone(),
            r#"{"run":"..","case":0}"#,
            404,
            "E_STUDIO_NOT_FOUND",
        ),
    ];
    for (what, headers, body, expected, code) in refusals {
        let (status, answer) = rerun(&headers, body);
        assert_eq!(status, expected, "{what}: {answer}");
        assert_eq!(json_of(&answer)["code"], code, "{what}: {answer}");
    }
    let (status, answer) = rerun(&all, &json!({"run": first, "case": 2}).to_string());
    assert_eq!(status, 404, "{answer}");
    assert_eq!(
        listed_runs(port),
        std::slice::from_ref(&first),
        "a refusal ran something"
    );

    // Live: the case that missed runs again, as a new run of that case
    // alone, which the model was asked for again.
    let n_requests = project.requests();
    let (status, answer) = rerun(&all, &ask);
    assert_eq!(status, 200, "{answer}");
    let answer = json_of(&answer);
    let second = answer["runId"].as_str().unwrap().to_string();
    assert_ne!(second, first);
    assert_eq!(answer["case"]["eval"], "checks");
    assert_eq!(answer["case"]["name"], "misses");
    assert_eq!(answer["case"]["status"], "failed");
    assert_eq!(answer["case"]["failures"][0]["assertion"], "contains");
    assert_eq!(answer["case"]["index"], 0);
    assert!(project.requests() > n_requests);
    assert_eq!(listed_runs(port), [second.clone(), first.clone()]);
    let stored = project.stored(&second);
    assert_eq!(stored["cases"].as_array().unwrap().len(), 1, "{stored}");
    assert_eq!(stored["bundle"], project.stored(&first)["bundle"]);
    assert_eq!(stored["cases"][0]["timeoutMs"], 30_000);

    // From cassettes: a recorded run replayed, then its case re-run with
    // the mock gone, so only the cassettes can answer.
    let cassettes = project.bundle.path().join("cassettes");
    let cassettes_arg = cassettes.to_str().unwrap();
    project.eval(&["--record", cassettes_arg]);
    let replayed = project.eval(&["--replay", cassettes_arg]);
    let replayed_report = project.stored(&replayed);
    assert_eq!(replayed_report["replay"], true);
    assert_eq!(replayed_report["cassettes"], cassettes_arg);
    project.mock = None;
    let (status, answer) = rerun(&all, &json!({"run": replayed, "case": 0}).to_string());
    assert_eq!(status, 200, "{answer}");
    let answer = json_of(&answer);
    assert_eq!(answer["replay"], true, "{answer}");
    assert_eq!(answer["case"]["name"], "holds");
    assert_eq!(answer["case"]["status"], "passed", "{answer}");
    let third = answer["runId"].as_str().unwrap();
    assert_eq!(listed_runs(port)[0], third);
    assert_eq!(project.stored(third)["cassettes"], cassettes_arg);

    // A replay whose cassettes are gone is refused, and says so.
    std::fs::remove_dir_all(&cassettes).unwrap();
    let (status, answer) = rerun(&all, &json!({"run": replayed, "case": 0}).to_string());
    assert_eq!(status, 409, "{answer}");
    assert_eq!(json_of(&answer)["code"], "E_STUDIO_RERUN_NO_CASSETTES");
}

/// A case whose bundle changed under it: the child's own coded error
/// comes back, and a read-only Studio refuses the action outright.
#[test]
fn issue_49_a_re_run_of_a_case_no_longer_in_the_bundle_answers_gdn_evals_error() {
    let project = Project::new();
    let first = project.eval(&[]);
    let text = std::fs::read_to_string(project.bundle.path().join("goondan.yaml")).unwrap();
    std::fs::write(
        project.bundle.path().join("goondan.yaml"),
        text.replace("name: misses", "name: renamed"),
    )
    .unwrap();
    let (_studio, port, token) =
        start_studio(project.command(&["studio", "--addr", "127.0.0.1:0", "--allow-actions"]));
    let headers = format!(
        "Origin: http://127.0.0.1:{port}\r\nCookie: gdn_studio={token}\r\nX-Goondan-Csrf: {}\r\n",
        csrf_of(port)
    );
    let (status, answer) = exchange(
        port,
        "POST",
        "/api/actions/rerun",
        &headers,
        &json!({"run": first, "case": 1}).to_string(),
    );
    assert_eq!(status, 409, "{answer}");
    let answer = json_of(&answer);
    assert_eq!(answer["code"], "E_EVAL_CASE_NOT_FOUND", "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .contains("(there are: holds, renamed)"),
        "{answer}"
    );
}

/// The page's selector of case `index`'s row in run `run`.
fn row(run: &str, index: usize) -> String {
    format!(r#"section.eval-run[data-run="{run}"] tr.eval-case[data-case="{index}"]"#)
}

#[test]
fn issue_49_the_evals_page_re_runs_a_case_and_shows_the_new_result() {
    let Some(chromium) = chromium_path() else {
        assert!(
            std::env::var_os("GOONDAN_REQUIRE_CHROMIUM").is_none(),
            "GOONDAN_REQUIRE_CHROMIUM is set but /usr/bin/chromium is missing"
        );
        eprintln!("SKIPPED the Studio evals re-run browser test: no /usr/bin/chromium");
        return;
    };
    let project = Project::new();
    let first = project.eval(&[]);
    // A read-only Studio shows no Re-run button.
    let (read_only, read_only_port) = {
        let mut command = project.command(&["studio", "--addr", "127.0.0.1:0"]);
        let mut child = Killed(
            command
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let mut line = String::new();
        BufReader::new(child.0.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .strip_prefix("Goondan Studio: http://127.0.0.1:")
            .and_then(|rest| rest.strip_suffix('/'))
            .unwrap_or_else(|| panic!("no URL in {line:?}"))
            .parse::<u16>()
            .unwrap();
        (child, port)
    };
    let (_studio, port, token) =
        start_studio(project.command(&["studio", "--addr", "127.0.0.1:0", "--allow-actions"]));
    let mut browser = Browser::start(&chromium);
    let page = browser.page();
    page.navigate(&format!("http://127.0.0.1:{read_only_port}/#/evals"));
    page.wait_for(
        "the read-only list without Re-run buttons",
        &format!(
            "!!document.querySelector('{}') && document.querySelectorAll('button.rerun').length === 0",
            row(&first, 1)
        ),
    );
    drop(read_only);

    page.navigate(&format!("http://127.0.0.1:{port}/?token={token}"));
    page.wait_for(
        "the page without the token",
        "location.search === '' && !!document.getElementById('swarms')",
    );
    page.navigate(&format!("http://127.0.0.1:{port}/#/evals"));
    let button = format!("{} button.rerun", row(&first, 1));
    let buttons = format!(r#"section.eval-run[data-run="{first}"] button.rerun"#);
    page.wait_for(
        "a Re-run button on each case",
        &format!(
            "document.querySelectorAll('{buttons}').length === 2 && !!document.querySelector('{button}')"
        ),
    );
    // The click shows "Running…" at once, with the button off.
    let running = page.evaluate(&format!(
        r#"(() => {{
            document.querySelector('{button}').click();
            const now = document.querySelector('{button}');
            return now.textContent + '|' + now.disabled;
        }})()"#
    ));
    assert_eq!(running, json!("Running…|true"));
    page.wait_for(
        "the new result beside the case, and the new run on top",
        &format!(
            r#"(() => {{
                const status = document.querySelector('{} .rerun-status');
                const runs = [...document.querySelectorAll('section.eval-run')];
                const checks = {{
                    status: !!status && status.classList.contains('rerun-done') && status.classList.contains('status-error')
                        && /^checks\/misses: failed \(new run \S+\)/.test(status.innerText),
                    trace: !!status && !!status.querySelector('a.rerun-link'),
                    again: document.querySelector('{button}').textContent === 'Re-run',
                    onTop: runs.length === 2 && runs[0].getAttribute('data-run') !== '{first}'
                        && runs[0].querySelectorAll('tr.eval-case').length === 1
                        && runs[0].querySelector('.eval-rerun-of').innerText.includes('checks/misses of run {first}'),
                    named: !!status && runs.length === 2 && status.innerText.includes(runs[0].getAttribute('data-run')),
                }};
                const failed = Object.keys(checks).filter((name) => !checks[name]);
                return failed.length === 0 || failed;
            }})()"#,
            row(&first, 1)
        ),
    );
    page.screenshot(&artifact("eval-rerun.png"));
    // The hostile input and answer of the case stayed text.
    assert_eq!(
        page.evaluate(
            "window.__pwned === undefined && document.querySelectorAll('main img').length === 0"
        ),
        json!(true),
        "hostile markup became HTML"
    );
    // An error is shown as text: the run's bundle folder is gone.
    let bundle = project.bundle.path().to_path_buf();
    let moved = bundle.with_extension("moved");
    std::fs::rename(&bundle, &moved).unwrap();
    let other_button = format!("{} button.rerun", row(&first, 0));
    page.evaluate(&format!(
        "document.querySelector('{other_button}').click(); true"
    ));
    page.wait_for(
        "the refusal as text",
        &format!(
            r#"(() => {{
                const status = document.querySelector('{} .rerun-status');
                return !!status && status.classList.contains('rerun-refused')
                    && status.innerText.startsWith('Re-run failed: E_STUDIO_RERUN_NO_BUNDLE: ');
            }})()"#,
            row(&first, 0)
        ),
    );
    std::fs::rename(&moved, &bundle).unwrap();
}

/// `gdn studio --help` names the re-run among the actions
/// `--allow-actions` allows, and `gdn eval --help` names `--case`.
#[test]
fn issue_49_help_names_the_re_run_and_case() {
    let here = tempfile::tempdir().unwrap();
    let help = |args: &[&str]| {
        let output = run_with_deadline(gdn_command(here.path(), here.path(), args));
        stdout(&output)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    let studio = help(&["studio", "--help"]);
    assert!(
        studio.contains("re-run a case of a stored eval run"),
        "{studio}"
    );
    let eval = help(&["eval", "--help"]);
    assert!(
        eval.contains("--case <NAME> Run only the cases of this name"),
        "{eval}"
    );
}
