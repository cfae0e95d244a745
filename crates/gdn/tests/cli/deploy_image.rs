//! The deploy image (issue 38, item 8): the Dockerfile, the buildah script
//! `deploy/image/build.sh` and the Kubernetes manifests describe one image
//! (user, paths, environment, entrypoint, name); the script refuses bad
//! input clearly; and, where buildah is installed, the script builds the
//! image from this test's `gdn`, runs `gdn --version` and offline scripted
//! Turns inside it (one a `bash` tool call), and loads its OCI archive into
//! another store as the same image. Without buildah that last test passes
//! without building unless `GOONDAN_REQUIRE_BUILDAH` is set (`.ci/run`
//! sets it).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

use super::workspace_root;

fn read(relative: &str) -> String {
    std::fs::read_to_string(workspace_root().join(relative))
        .unwrap_or_else(|error| panic!("{relative}: {error}"))
}

/// What a runtime stage of the Dockerfile declares, as an image config
/// says it: `Entrypoint`, `Cmd`, `User`, `WorkingDir`, `Env`, `Volumes`.
#[derive(Debug, PartialEq)]
struct ImageConfig {
    entrypoint: Vec<String>,
    cmd: Vec<String>,
    user: String,
    working_dir: String,
    env: BTreeMap<String, String>,
    volumes: Vec<String>,
}

/// Reads the instructions of the stage `FROM … AS <stage>` (one per line,
/// continuation lines skipped; a later instruction replaces an earlier
/// one); exec forms are JSON, as Docker parses them.
fn dockerfile_stage(dockerfile: &str, stage: &str) -> ImageConfig {
    let mut config = ImageConfig {
        entrypoint: Vec::new(),
        cmd: Vec::new(),
        user: String::new(),
        working_dir: String::new(),
        env: BTreeMap::new(),
        volumes: Vec::new(),
    };
    let mut inside = false;
    for line in dockerfile.lines() {
        let Some((instruction, rest)) = line.split_once(' ') else {
            continue;
        };
        if instruction == "FROM" {
            inside = rest.ends_with(&format!(" AS {stage}"));
            continue;
        }
        if !inside {
            continue;
        }
        let json = |text: &str| -> Vec<String> {
            serde_json::from_str(text).unwrap_or_else(|error| panic!("{line}: {error}"))
        };
        match instruction {
            "ENTRYPOINT" => config.entrypoint = json(rest),
            "CMD" => config.cmd = json(rest),
            "USER" => config.user = rest.to_owned(),
            "WORKDIR" => config.working_dir = rest.to_owned(),
            "VOLUME" => config.volumes = json(rest),
            "ENV" => {
                let (key, value) = rest.split_once('=').expect("ENV KEY=value");
                config.env.insert(key.to_owned(), value.to_owned());
            }
            _ => {}
        }
    }
    config
}

/// The value of `name=value` (quotes removed) in deploy/image/build.sh.
fn script_variable(script: &str, name: &str) -> String {
    let prefix = format!("{name}=");
    let line = script
        .lines()
        .find(|line| line.starts_with(&prefix))
        .unwrap_or_else(|| panic!("build.sh sets no {name}"));
    line[prefix.len()..].trim_matches('\'').to_owned()
}

/// What deploy/image/build.sh configures, as the Dockerfile would say it.
fn script_config(script: &str) -> ImageConfig {
    let state_root = script_variable(script, "state_root");
    ImageConfig {
        entrypoint: serde_json::from_str(&script_variable(script, "entrypoint")).unwrap(),
        cmd: vec!["--help".to_owned()],
        user: script_variable(script, "image_user"),
        working_dir: script_variable(script, "workdir"),
        env: BTreeMap::from([
            ("GOONDAN_STATE_ROOT".to_owned(), state_root.clone()),
            ("HOME".to_owned(), script_variable(script, "image_home")),
        ]),
        volumes: vec![state_root],
    }
}

fn workspace_version() -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_gdn"))
        .arg("--version")
        .output()
        .unwrap();
    let line = String::from_utf8(output.stdout).unwrap();
    line.trim().strip_prefix("gdn ").unwrap().to_owned()
}

#[test]
fn the_dockerfile_the_script_and_the_manifests_describe_one_image() {
    let dockerfile = read("Dockerfile");
    let script = read("deploy/image/build.sh");
    let runtime = dockerfile_stage(&dockerfile, "runtime");
    assert_eq!(runtime, script_config(&script));
    assert!(
        script.contains("--cmd '[\"--help\"]'"),
        "build.sh sets another CMD than the Dockerfile's [\"--help\"]"
    );
    // The `scripts` target adds runtimes, not another user or entrypoint.
    let scripts = dockerfile_stage(&dockerfile, "scripts");
    assert_eq!(scripts.user, runtime.user);
    assert!(dockerfile.contains("COPY --from=build /src/target/release/gdn /usr/local/bin/gdn"));
    assert_eq!(runtime.entrypoint.last().unwrap(), "/usr/local/bin/gdn");
    // The default target is the last stage; it must be the runtime.
    let last_from = dockerfile
        .lines()
        .rfind(|line| line.starts_with("FROM "))
        .unwrap();
    assert_eq!(last_from, "FROM runtime");

    // The manifests run what the script names, with the entrypoint's tini
    // as PID 1 (no `command:` replacing it) and the image's uid and state root.
    let version = workspace_version();
    let manifest = read("deploy/kubernetes/30-gdn.yaml");
    assert!(
        manifest.contains(&format!("image: localhost/goondan/gdn:{version}\n")),
        "30-gdn.yaml does not run localhost/goondan/gdn:{version}, build.sh's default name"
    );
    let values = read("deploy/helm/goondan/values.yaml");
    assert!(values.contains("repository: localhost/goondan/gdn\n"));
    let template = read("deploy/helm/goondan/templates/statefulset.yaml");
    for (file, text) in [("30-gdn.yaml", &manifest), ("statefulset.yaml", &template)] {
        // A probe's `exec:` has a `command:` of its own; the container's
        // would replace the entrypoint.
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        for (index, line) in lines.iter().enumerate() {
            assert!(
                !line.starts_with("command:") || index > 0 && lines[index - 1] == "exec:",
                "{file}:{}: a `command:` replaces the image's entrypoint",
                index + 1
            );
        }
    }
    let uid = runtime.user.split(':').next().unwrap();
    assert!(manifest.contains(&format!("runAsUser: {uid}\n")));
    assert!(values.contains(&format!("runAsUser: {uid}\n")));
    let state_root = &runtime.env["GOONDAN_STATE_ROOT"];
    assert!(manifest.contains(&format!("value: {state_root}\n")));
    assert!(values.contains(&format!("stateRoot: {state_root}\n")));
    for file in [
        "deploy/kubernetes/README.md",
        "deploy/helm/README.md",
        "deploy/README.md",
    ] {
        assert!(
            !read(file).contains("your-org"),
            "{file} names a placeholder image"
        );
    }
}

fn build_script() -> Command {
    Command::new(workspace_root().join("deploy/image/build.sh"))
}

#[test]
fn the_build_script_refuses_what_is_not_a_binary_with_a_suggestion() {
    let output = build_script().output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(
        stderr,
        "error: deploy/image/build.sh: no gdn binary given\n  = help: deploy/image/build.sh target/release/gdn (build it with: cargo build --release --locked -p gdn)\n"
    );

    let missing = tempfile::tempdir().unwrap();
    let missing = missing.path().join("gdn");
    let output = build_script().arg(&missing).output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.starts_with(&format!(
            "error: deploy/image/build.sh: {} is not an executable file\n  = help: build it first",
            missing.display()
        )),
        "{stderr}"
    );

    let output = build_script().arg("--archive").output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8(output.stderr)
        .unwrap()
        .starts_with("error: deploy/image/build.sh: --archive needs a value\n"));
}

fn buildah_installed() -> bool {
    Command::new("buildah")
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success())
}

#[test]
fn the_image_builds_from_scratch_and_runs_scripted_turns() {
    if !buildah_installed() {
        assert!(
            std::env::var_os("GOONDAN_REQUIRE_BUILDAH").is_none(),
            "GOONDAN_REQUIRE_BUILDAH is set but buildah is not installed (apt-get install buildah busybox-static tini)"
        );
        eprintln!("skipped: buildah is not installed");
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let storage = work.path().join("storage");
    let archive = work.path().join("gdn.tar");
    let tag = "localhost/goondan/gdn:cli-test";
    let output = build_script()
        .args(["--tag", tag, "--check", "--storage"])
        .arg(&storage)
        .arg("--archive")
        .arg(&archive)
        .arg(env!("CARGO_BIN_EXE_gdn"))
        .output()
        .unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(output.status.success(), "build.sh failed:\n{stderr}");
    let version = workspace_version();
    assert!(
        stderr.contains(&format!(
            "check: gdn {version} inside the image, as uid 10001\n"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("The researcher says: Notes: Goondan runs one process per agent instance"),
        "{stderr}"
    );
    assert!(
        stderr.contains("check: a bash tool call inside the image answered: Running it.\nexit 0: shell as 10001\n"),
        "{stderr}"
    );

    // What buildah recorded is what the Dockerfile's default target says.
    let config = image_config(&storage, tag);
    let strings = |value: &Value| -> Vec<String> {
        value
            .as_array()
            .unwrap()
            .iter()
            .map(|item| item.as_str().unwrap().to_owned())
            .collect()
    };
    let env = strings(&config["Env"])
        .into_iter()
        .filter_map(|pair| {
            let (key, value) = pair.split_once('=')?;
            (key != "PATH").then(|| (key.to_owned(), value.to_owned()))
        })
        .collect();
    let built = ImageConfig {
        entrypoint: strings(&config["Entrypoint"]),
        cmd: strings(&config["Cmd"]),
        user: config["User"].as_str().unwrap().to_owned(),
        working_dir: config["WorkingDir"].as_str().unwrap().to_owned(),
        env,
        volumes: config["Volumes"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect(),
    };
    assert_eq!(built, dockerfile_stage(&read("Dockerfile"), "runtime"));

    // The OCI archive is the same image: another store loads it by name.
    let other_storage = work.path().join("other-storage");
    let pull = buildah(&other_storage)
        .arg("pull")
        .arg("--quiet")
        .arg(format!("oci-archive:{}", archive.display()))
        .output()
        .unwrap();
    assert!(
        pull.status.success(),
        "{}",
        String::from_utf8_lossy(&pull.stderr)
    );
    assert_eq!(image_config(&other_storage, tag), config);
}

/// buildah on the store of build.sh --storage `storage`, with its driver.
fn buildah(storage: &Path) -> Command {
    let driver = std::env::var("STORAGE_DRIVER").unwrap_or_else(|_| "vfs".to_owned());
    let mut command = Command::new("buildah");
    command
        .args(["--storage-driver", &driver, "--root"])
        .arg(storage.join("root"))
        .arg("--runroot")
        .arg(storage.join("run"));
    command
}

/// The OCI configuration (`Entrypoint`, `User`, ...) of an image in a store.
fn image_config(storage: &Path, name: &str) -> Value {
    let inspect = buildah(storage)
        .args(["inspect", "--type", "image", name])
        .output()
        .unwrap();
    assert!(
        inspect.status.success(),
        "{}",
        String::from_utf8_lossy(&inspect.stderr)
    );
    let inspect: Value = serde_json::from_slice(&inspect.stdout).unwrap();
    inspect["OCIv1"]["config"].clone()
}
