//! `gdn init` and `gdn doctor` (issue #7): every template validates and
//! runs offline, nothing is overwritten without `--force`, and doctor's
//! checks (System Root, masked keys, bundle) decide its exit code.

use std::borrow::BorrowMut;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const TEMPLATES: [&str; 4] = ["default", "multi-agent", "minimal", "package"];

/// A fake key that must never be printed whole.
const FAKE_ANTHROPIC_KEY: &str = "sk-ant-FAKEKEY0123456789abcdefghijklmnopqrstuvwxyz0";

/// A fake key found only in the project's `.env`.
const DOTENV_OPENAI_KEY: &str = "sk-proj-FROMDOTENV-0123456789";

/// `gdn` in `cwd` with no provider key and no state root inherited from
/// the developer's environment.
fn gdn(cwd: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gdn"));
    command
        .args(args)
        .current_dir(cwd)
        .env_remove("GOONDAN_STATE_ROOT")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("GOOGLE_GENERATIVE_AI_API_KEY")
        .env("NO_COLOR", "1");
    command
}

/// Runs a command built by [`gdn`], owned or borrowed.
fn run(mut command: impl BorrowMut<Command>) -> Output {
    command.borrow_mut().output().expect("gdn starts")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn code(output: &Output) -> i32 {
    output.status.code().expect("gdn exited normally")
}

/// Every file under `dir` with its bytes, `.git` excluded.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        for entry in std::fs::read_dir(&current).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if path.file_name().unwrap() != ".git" {
                    pending.push(path);
                }
            } else {
                let bytes = std::fs::read(&path).unwrap();
                files.insert(path.strip_prefix(dir).unwrap().to_path_buf(), bytes);
            }
        }
    }
    files
}

fn git_available() -> bool {
    Command::new("git")
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success())
}

/// The scripted answer each template gives to "hello".
fn expected_answer(template: &str) -> &'static str {
    match template {
        "default" => "Hello from your new Goondan project!",
        // Only reachable through agents__request: the coordinator quotes
        // the researcher's notes.
        "multi-agent" => "The researcher says: Goondan runs one process per agent",
        "minimal" => "Hello from a minimal Goondan project!",
        "package" => "Hello from the helper package!",
        other => panic!("no expected answer for {other}"),
    }
}

#[test]
fn every_template_validates_and_runs_offline() {
    for template in TEMPLATES {
        let work = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let init = run(gdn(
            work.path(),
            &["init", "Hello World", "--template", template, "--no-git"],
        ));
        assert_eq!(code(&init), 0, "{template}: {}", stderr(&init));
        let text = stdout(&init);
        assert!(text.contains("goondan.yaml"), "{template}: {text}");
        assert!(
            text.contains("  gdn validate\n  gdn run --input \"hello\""),
            "{template}: {text}"
        );
        let project = work.path().join("Hello World");
        let manifest = std::fs::read_to_string(project.join("goondan.yaml")).unwrap();
        let first_document = manifest
            .lines()
            .filter(|line| !line.starts_with('#'))
            .take(4)
            .collect::<Vec<_>>()
            .join("\n");
        assert_eq!(
            first_document,
            "apiVersion: goondan.ai/v1\nkind: Package\nmetadata:\n  name: \"hello-world\"",
            "{template}"
        );
        assert!(project.join("scripted-rules.yaml").is_file(), "{template}");
        if template != "minimal" {
            let gitignore = std::fs::read_to_string(project.join(".gitignore")).unwrap();
            assert!(gitignore.lines().any(|line| line == ".env"), "{template}");
            assert!(
                gitignore.lines().any(|line| line == ".env.local"),
                "{template}"
            );
            let env = std::fs::read_to_string(project.join(".env")).unwrap();
            assert!(
                env.lines()
                    .all(|line| line.is_empty() || line.starts_with('#')),
                "{template}: .env holds only comments"
            );
            assert!(env.contains("# ANTHROPIC_API_KEY="), "{template}");
            assert!(
                manifest.contains("provider: anthropic") || template == "package",
                "{template}: shows how to switch"
            );
        }

        let validate = run(gdn(&project, &["validate"]));
        assert_eq!(
            (code(&validate), stdout(&validate)),
            (0, "Errors: 0, Warnings: 0\n".to_string()),
            "{template}"
        );

        let answer = run(gdn(
            work.path(),
            &[
                "--config",
                "Hello World",
                "--state-root",
                state.path().to_str().unwrap(),
                "run",
                "--input",
                "hello",
            ],
        ));
        assert_eq!(code(&answer), 0, "{template}: {}", stderr(&answer));
        assert!(
            stdout(&answer).contains(expected_answer(template)),
            "{template}: {}",
            stdout(&answer)
        );
    }
}

#[test]
fn the_default_template_calls_its_tool() {
    let work = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let init = run(gdn(work.path(), &["init", "--no-git", "--json"]));
    assert_eq!(code(&init), 0);
    let report: serde_json::Value = serde_json::from_str(&stdout(&init)).unwrap();
    assert_eq!(report["ok"], true);
    assert_eq!(report["template"], "default");
    assert_eq!(
        report["filesCreated"],
        serde_json::json!([
            "goondan.yaml",
            "prompts/assistant.md",
            "scripted-rules.yaml",
            ".env",
            ".gitignore"
        ])
    );
    assert_eq!(report["git"]["status"], "skipped");
    let answer = run(gdn(
        work.path(),
        &[
            "--state-root",
            state.path().to_str().unwrap(),
            "run",
            "--input",
            "shout hello world",
        ],
    ));
    assert_eq!(code(&answer), 0, "{}", stderr(&answer));
    assert!(
        stdout(&answer).contains("Here it is: HELLO WORLD"),
        "{}",
        stdout(&answer)
    );
}

#[test]
fn init_refuses_to_overwrite_without_force_and_keeps_env_with_force() {
    let work = tempfile::tempdir().unwrap();
    let project = work.path().join("proj");
    assert_eq!(
        code(&run(gdn(work.path(), &["init", "proj", "--no-git"]))),
        0
    );
    std::fs::write(project.join("goondan.yaml"), "# my own edits\n").unwrap();
    std::fs::write(project.join(".env"), "ANTHROPIC_API_KEY=mine\n").unwrap();
    let before = snapshot(&project);

    let refused = run(gdn(work.path(), &["init", "proj", "--no-git"]));
    assert_eq!(code(&refused), 3, "{}", stderr(&refused));
    let message = stderr(&refused);
    assert!(
        message.starts_with("error[E_INIT_FILES_EXIST]: 5 file(s) already exist in proj: goondan.yaml, prompts/assistant.md, scripted-rules.yaml, .env, .gitignore; nothing was written\n"),
        "{message}"
    );
    assert!(message.contains("help: pass --force"), "{message}");
    assert_eq!(snapshot(&project), before, "nothing changed");

    // Another template conflicts only on the files it writes.
    let json = run(gdn(
        work.path(),
        &["init", "proj", "-t", "minimal", "--no-git", "--json"],
    ));
    assert_eq!(code(&json), 3);
    // Like every command's error with --json: one line on stderr.
    assert_eq!(stdout(&json), "");
    assert_eq!(stderr(&json).lines().count(), 1, "{}", stderr(&json));
    let report: serde_json::Value = serde_json::from_str(&stderr(&json)).unwrap();
    assert_eq!(report["error"]["code"], "E_INIT_FILES_EXIST");
    assert!(report["error"]["message"]
        .as_str()
        .unwrap()
        .contains("goondan.yaml, scripted-rules.yaml;"));
    assert_eq!(snapshot(&project), before, "nothing changed");

    let forced = run(gdn(work.path(), &["init", "proj", "--no-git", "--force"]));
    assert_eq!(code(&forced), 0, "{}", stderr(&forced));
    assert!(stdout(&forced).contains(".env (kept: it may hold your keys)"));
    let manifest = std::fs::read_to_string(project.join("goondan.yaml")).unwrap();
    assert!(manifest.contains("kind: Package"), "overwritten");
    assert_eq!(
        std::fs::read_to_string(project.join(".env")).unwrap(),
        "ANTHROPIC_API_KEY=mine\n"
    );
}

#[test]
fn names_follow_the_convention_and_bad_ones_are_bad_arguments() {
    let work = tempfile::tempdir().unwrap();
    let scoped = run(gdn(
        work.path(),
        &["init", "tools", "--name", "@MyOrg/My Tools", "--no-git"],
    ));
    assert_eq!(code(&scoped), 0, "{}", stderr(&scoped));
    assert!(stdout(&scoped).starts_with("note: --name `@MyOrg/My Tools` became `@myorg/my-tools`"));
    let manifest = std::fs::read_to_string(work.path().join("tools/goondan.yaml")).unwrap();
    assert!(manifest.contains("  name: \"@myorg/my-tools\"\n"));
    let validate = run(gdn(work.path(), &["validate", "tools"]));
    assert_eq!(code(&validate), 0, "{}", stdout(&validate));

    let bad = run(gdn(
        work.path(),
        &["init", "never", "--name", "123", "--no-git"],
    ));
    assert_eq!(code(&bad), 2);
    assert!(stderr(&bad).starts_with("error[E_INIT_NAME_INVALID]"));
    assert!(!work.path().join("never").exists(), "nothing was written");

    let file = work.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let in_the_way = run(gdn(work.path(), &["init", "a-file", "--no-git"]));
    assert_eq!(code(&in_the_way), 3);
    assert!(stderr(&in_the_way).starts_with("error[E_INIT_NOT_A_DIRECTORY]"));
}

#[test]
fn shapes_force_cannot_fix_are_refused_before_anything_is_written() {
    let work = tempfile::tempdir().unwrap();
    let project = work.path().join("proj");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("prompts"), "a file where a folder goes").unwrap();
    let output = run(gdn(work.path(), &["init", "proj", "--no-git", "--force"]));
    assert_eq!(code(&output), 3);
    assert!(
        stderr(&output)
            .starts_with("error[E_INIT_NOT_A_DIRECTORY]: proj/prompts exists and is not a folder"),
        "{}",
        stderr(&output)
    );
    assert_eq!(snapshot(&project).len(), 1, "nothing was written");

    std::fs::remove_file(project.join("prompts")).unwrap();
    std::fs::create_dir(project.join("goondan.yaml")).unwrap();
    let output = run(gdn(work.path(), &["init", "proj", "--no-git", "--force"]));
    assert_eq!(code(&output), 3);
    assert!(stderr(&output).starts_with("error[E_INIT_FOLDER_IN_THE_WAY]"));
    assert!(snapshot(&project).is_empty(), "nothing was written");
}

#[test]
fn git_is_initialized_by_default_only_outside_a_repository() {
    let work = tempfile::tempdir().unwrap();
    if !git_available() {
        // Without git the project is still created, and git is skipped.
        let output = run(gdn(work.path(), &["init", "plain"]));
        assert_eq!(code(&output), 0);
        assert!(!work.path().join("plain/.git").exists());
        return;
    }
    let fresh = run(gdn(work.path(), &["init", "fresh"]));
    assert_eq!(code(&fresh), 0, "{}", stderr(&fresh));
    assert!(stdout(&fresh).contains("Initialized a git repository."));
    assert!(work.path().join("fresh/.git").is_dir());

    let nested = run(gdn(&work.path().join("fresh"), &["init", "nested"]));
    assert_eq!(code(&nested), 0, "{}", stderr(&nested));
    assert!(!work.path().join("fresh/nested/.git").exists());

    let forced = run(gdn(
        &work.path().join("fresh"),
        &["init", "forced", "--git"],
    ));
    assert_eq!(code(&forced), 0, "{}", stderr(&forced));
    assert!(work.path().join("fresh/forced/.git").is_dir());

    let skipped = run(gdn(work.path(), &["init", "skipped", "--no-git"]));
    assert_eq!(code(&skipped), 0);
    assert!(!work.path().join("skipped/.git").exists());
}

/// Runs `gdn doctor --json` and returns its exit code and report.
fn doctor_json(command: impl BorrowMut<Command>) -> (i32, serde_json::Value, String) {
    let output = run(command);
    let text = format!("{}{}", stdout(&output), stderr(&output));
    let report =
        serde_json::from_str(&stdout(&output)).unwrap_or_else(|error| panic!("{error}: {text}"));
    (code(&output), report, text)
}

fn check<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|check| check["name"] == name)
        .unwrap_or_else(|| panic!("no check {name}: {report:#}"))
}

#[test]
fn doctor_passes_a_writable_state_root_and_masks_keys() {
    let work = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    assert_eq!(
        code(&run(gdn(work.path(), &["init", "proj", "--no-git", "-q"]))),
        0
    );
    let project = work.path().join("proj");
    std::fs::write(
        project.join(".env"),
        format!("OPENAI_API_KEY={DOTENV_OPENAI_KEY}\n"),
    )
    .unwrap();
    let state_root = state.path().join("not-yet");
    let args = [
        "--config",
        "proj",
        "--state-root",
        state_root.to_str().unwrap(),
        "doctor",
    ];
    let (exit, report, text) = doctor_json(
        gdn(work.path(), &args)
            .arg("--json")
            .env("ANTHROPIC_API_KEY", FAKE_ANTHROPIC_KEY),
    );
    assert_eq!(exit, 0, "{text}");
    assert_eq!(check(&report, "System Root")["status"], "pass");
    assert!(!state_root.exists(), "the probe leaves nothing behind");
    assert_eq!(check(&report, "gdn")["status"], "pass");

    let anthropic = check(&report, "ANTHROPIC_API_KEY");
    assert_eq!(anthropic["status"], "pass");
    assert_eq!(
        anthropic["detail"],
        format!(
            "set in the environment (sk-a…({} chars))",
            FAKE_ANTHROPIC_KEY.len()
        )
    );
    let openai = check(&report, "OPENAI_API_KEY");
    assert_eq!(openai["status"], "pass");
    assert_eq!(
        openai["detail"],
        format!(
            "set in the env files (sk-p…({} chars))",
            DOTENV_OPENAI_KEY.len()
        )
    );
    let google = check(&report, "GOOGLE_GENERATIVE_AI_API_KEY");
    // No Model of the bundle uses it: nothing to warn about.
    assert_eq!(google["status"], "pass", "{google}");
    assert!(google["detail"]
        .as_str()
        .unwrap()
        .contains("provider: google"));
    for runtime in ["node", "bun", "python3"] {
        let status = &check(&report, runtime)["status"];
        assert!(status == "pass" || status == "warn", "{runtime}: {status}");
    }
    assert_eq!(check(&report, "bundle")["status"], "pass");
    assert_eq!(check(&report, "validation")["status"], "pass");
    assert_eq!(report["summary"]["fail"], 0);

    let text_output = run(gdn(work.path(), &args).env("ANTHROPIC_API_KEY", FAKE_ANTHROPIC_KEY));
    assert_eq!(code(&text_output), 0);
    let text = stdout(&text_output);
    assert!(text.contains("  pass  System Root: "), "{text}");
    assert!(text.contains("  pass  ANTHROPIC_API_KEY: set in the environment (sk-a…"));
    assert!(text.lines().last().unwrap().ends_with(", fail 0"), "{text}");
    for output in [&text, &format!("{report}")] {
        assert!(!output.contains(FAKE_ANTHROPIC_KEY));
        assert!(
            !output.contains(&FAKE_ANTHROPIC_KEY[..5]),
            "at most 4 characters"
        );
        assert!(!output.contains("FROMDOTENV"));
    }
}

#[test]
fn doctor_names_the_models_that_need_a_missing_key() {
    let work = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    assert_eq!(
        code(&run(gdn(
            work.path(),
            &["init", "proj", "-t", "minimal", "--no-git", "-q"]
        ))),
        0
    );
    let manifest = work.path().join("proj/goondan.yaml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(
        &manifest,
        text.replace("provider: scripted", "provider: anthropic"),
    )
    .unwrap();
    let (exit, report, output) = doctor_json(gdn(
        work.path(),
        &[
            "-c",
            "proj",
            "--state-root",
            state.path().to_str().unwrap(),
            "doctor",
            "--json",
        ],
    ));
    assert_eq!(exit, 0, "a missing key is a warning: {output}");
    let anthropic = check(&report, "ANTHROPIC_API_KEY");
    assert_eq!(anthropic["status"], "warn");
    assert_eq!(anthropic["detail"], "not set; needed by Model/main");
    assert_eq!(
        check(&report, "OPENAI_API_KEY")["detail"],
        "not set; no Model here uses `provider: openai`"
    );
    assert_eq!(check(&report, "OPENAI_API_KEY")["status"], "pass");

    std::fs::write(
        work.path().join("keys.env"),
        "ANTHROPIC_API_KEY=from-a-file-1234\n",
    )
    .unwrap();
    let quiet = run(gdn(
        work.path(),
        &[
            "-c",
            "proj",
            "--state-root",
            state.path().to_str().unwrap(),
            "-q",
            "doctor",
            "--env-file",
            "keys.env",
        ],
    ));
    assert_eq!(code(&quiet), 0);
    let text = stdout(&quiet);
    assert!(
        !text.contains("ANTHROPIC_API_KEY"),
        "-q shows only what is wrong: {text}"
    );
    assert!(
        !text.contains("OPENAI_API_KEY"),
        "no Model needs it, so it is not wrong: {text}"
    );
    assert!(!text.contains("from-a-file"), "{text}");
}

/// Issue 49 #5: a Model that reads its key from its own variable makes
/// doctor check that variable, not claim no Model uses the provider.
#[test]
fn doctor_checks_the_variable_a_model_reads_its_key_from() {
    let work = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    assert_eq!(
        code(&run(gdn(
            work.path(),
            &["init", "proj", "-t", "minimal", "--no-git", "-q"]
        ))),
        0
    );
    let manifest = work.path().join("proj/goondan.yaml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let line = text
        .lines()
        .find(|line| line.trim() == "provider: scripted")
        .expect("the template's Model");
    let indent = &line[..line.len() - line.trim_start().len()];
    std::fs::write(
        &manifest,
        text.replace(
            line,
            &format!("{indent}provider: openai\n{indent}apiKey:\n{indent}  valueFrom:\n{indent}    env: MY_KEY"),
        ),
    )
    .unwrap();
    let args = [
        "-c",
        "proj",
        "--state-root",
        state.path().to_str().unwrap(),
        "doctor",
        "--json",
    ];
    let (exit, report, output) = doctor_json(gdn(work.path(), &args));
    assert_eq!(exit, 0, "a missing key is a warning: {output}");
    let mine = check(&report, "MY_KEY");
    assert_eq!(mine["status"], "warn", "{output}");
    assert_eq!(mine["detail"], "not set; needed by Model/main");
    let openai = check(&report, "OPENAI_API_KEY");
    assert_eq!(openai["status"], "pass");
    assert_eq!(
        openai["detail"],
        "not set; not needed: Model/main reads MY_KEY"
    );

    let (_, report, output) = doctor_json(gdn(work.path(), &args).env("MY_KEY", "sk-mine-123456"));
    let mine = check(&report, "MY_KEY");
    assert_eq!(mine["status"], "pass", "{output}");
    assert!(!output.contains("sk-mine-123456"), "{output}");
}

#[test]
fn doctor_fails_when_the_state_root_cannot_be_written() {
    let work = tempfile::tempdir().unwrap();
    let file = work.path().join("regular-file");
    std::fs::write(&file, "keep me").unwrap();
    let state_root = file.join("state");
    let (exit, report, text) = doctor_json(gdn(
        work.path(),
        &[
            "doctor",
            "--json",
            "--state-root",
            state_root.to_str().unwrap(),
        ],
    ));
    assert_eq!(exit, 1, "{text}");
    let root = check(&report, "System Root");
    assert_eq!(root["status"], "fail");
    assert!(root["fix"].as_str().unwrap().contains("--state-root"));
    assert_eq!(report["summary"]["fail"], 1);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");

    // Through the environment variable, the same verdict.
    let output = run(gdn(work.path(), &["doctor"]).env("GOONDAN_STATE_ROOT", &state_root));
    assert_eq!(code(&output), 1);
    assert!(stdout(&output).contains("  fail  System Root: "));
    assert!(stdout(&output).contains("(from GOONDAN_STATE_ROOT) is not writable"));
    assert!(stdout(&output).ends_with("fail 1\n"), "{}", stdout(&output));
}

#[test]
fn doctor_reports_an_invalid_bundle_as_fail_and_a_missing_one_as_warn() {
    let work = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let state_root = state.path().to_str().unwrap();
    assert_eq!(
        code(&run(gdn(work.path(), &["init", "proj", "--no-git", "-q"]))),
        0
    );
    let manifest = work.path().join("proj/goondan.yaml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(
        &manifest,
        text.replace("modelRef: Model/main", "modelRef: Model/missing"),
    )
    .unwrap();
    let (exit, report, output) = doctor_json(gdn(
        work.path(),
        &["-c", "proj", "--state-root", state_root, "doctor", "--json"],
    ));
    assert_eq!(exit, 1, "{output}");
    assert_eq!(check(&report, "bundle")["status"], "pass");
    let validation = check(&report, "validation");
    assert_eq!(validation["status"], "fail");
    assert!(
        validation["detail"]
            .as_str()
            .unwrap()
            .starts_with("1 error(s), 0 warning(s); first: [E_CONFIG_REF_NOT_FOUND]"),
        "{validation}"
    );
    assert_eq!(
        validation["fix"],
        "run `gdn validate proj` to see each problem with its place"
    );

    let empty = tempfile::tempdir().unwrap();
    let (exit, report, output) = doctor_json(gdn(
        empty.path(),
        &["--state-root", state_root, "doctor", "--json"],
    ));
    assert_eq!(exit, 0, "{output}");
    let bundle = check(&report, "bundle");
    assert_eq!(bundle["status"], "warn");
    assert!(bundle["fix"].as_str().unwrap().contains("gdn init"));
}

#[test]
fn doctor_fix_creates_the_state_root_makes_it_private_and_fixes_the_bundle() {
    use std::os::unix::fs::PermissionsExt;
    let work = tempfile::tempdir().unwrap();
    assert_eq!(
        code(&run(gdn(work.path(), &["init", "proj", "--no-git", "-q"]))),
        0
    );
    let manifest = work.path().join("proj/goondan.yaml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    assert!(
        text.contains("apiVersion: goondan.ai/v1\nkind: Agent"),
        "{text}"
    );
    std::fs::write(
        &manifest,
        text.replacen("apiVersion: goondan.ai/v1\nkind: Agent", "kind: Agent", 1),
    )
    .unwrap();
    let state_root = work.path().join("state");
    let doctor = |fix: bool| {
        let mut args = vec![
            "-c",
            "proj",
            "--state-root",
            state_root.to_str().unwrap(),
            "doctor",
            "--json",
        ];
        if fix {
            args.push("--fix");
        }
        doctor_json(gdn(work.path(), &args))
    };

    // Without --fix: reported, nothing changed.
    let (exit, report, output) = doctor(false);
    assert_eq!(exit, 1, "{output}");
    assert_eq!(check(&report, "validation")["status"], "fail");
    assert!(!state_root.exists());

    let (exit, report, output) = doctor(true);
    assert_eq!(exit, 0, "{output}");
    assert!(check(&report, "System Root")["detail"]
        .as_str()
        .unwrap()
        .ends_with("created (fixed)"));
    assert_eq!(
        std::fs::read_to_string(state_root.join("config.json")).unwrap(),
        "{}\n"
    );
    assert!(state_root.join("packages").is_dir());
    let fixes = check(&report, "fixes");
    assert_eq!(fixes["status"], "pass");
    assert!(
        fixes["detail"].as_str().unwrap().contains("goondan.yaml:"),
        "{fixes}"
    );
    assert_eq!(check(&report, "validation")["status"], "pass");

    // A root other users can read: a warning, then made private.
    std::fs::set_permissions(&state_root, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (exit, report, output) = doctor(false);
    assert_eq!(exit, 0, "{output}");
    let root = check(&report, "System Root");
    assert_eq!(root["status"], "warn", "{root}");
    assert!(
        root["detail"].as_str().unwrap().contains("mode 755"),
        "{root}"
    );
    let (_, report, _) = doctor(true);
    assert!(check(&report, "System Root")["detail"]
        .as_str()
        .unwrap()
        .contains("made private"));
    let mode = std::fs::metadata(&state_root).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
}

#[test]
fn doctor_says_whether_spans_are_exported_and_fails_on_settings_gdn_run_would_refuse() {
    let work = tempfile::tempdir().unwrap();
    let state = work.path().join("state");
    let doctor = |env: &[(&str, &str)]| {
        let mut command = gdn(
            work.path(),
            &["--state-root", state.to_str().unwrap(), "doctor", "--json"],
        );
        for name in [
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            "OTEL_SDK_DISABLED",
        ] {
            command.env_remove(name);
        }
        command.envs(env.iter().copied());
        let (_, report, _) = doctor_json(command);
        check(&report, "OpenTelemetry export").clone()
    };
    let off = doctor(&[]);
    assert_eq!(off["status"], "pass");
    assert!(off["detail"].as_str().unwrap().starts_with("off"), "{off}");
    let on = doctor(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")]);
    assert_eq!(on["status"], "pass");
    assert!(
        on["detail"]
            .as_str()
            .unwrap()
            .contains("http://127.0.0.1:4318/v1/traces"),
        "{on}"
    );
    let unusable = doctor(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
    ]);
    assert_eq!(unusable["status"], "fail", "{unusable}");
    assert!(
        unusable["detail"]
            .as_str()
            .unwrap()
            .contains("E_OTEL_PROTOCOL"),
        "{unusable}"
    );
}
