//! The deploy image (issue 38, item 8): the Dockerfile, the buildah script
//! `deploy/image/build.sh` and the Kubernetes manifests describe one image
//! (user, paths, environment, entrypoint, name); the script refuses bad
//! input clearly; and, where buildah is installed, the script builds the
//! image from this test's `gdn`, runs `gdn --version` and offline scripted
//! Turns inside it (one a `bash` tool call), and loads its OCI archive into
//! another store as the same image; and the Dockerfile itself builds with
//! `buildah build --pull=never` on stand-ins for its base images that the
//! script makes from scratch (`--dockerfile-bases`), into an image with
//! the same configuration that passes the same checks (`--check-only`).
//! Without buildah those two tests pass without building unless
//! `GOONDAN_REQUIRE_BUILDAH` is set (`.ci/run` sets it).

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
    // Every base image is an argument whose default is the Docker Hub
    // image, so that a builder that pulls nothing can name stand-ins.
    for (argument, default) in [
        ("RUST_IMAGE", "rust:1.95-bookworm"),
        ("DEBIAN_IMAGE", "debian:bookworm-slim"),
        ("NODE_IMAGE", "node:22-bookworm-slim"),
    ] {
        assert!(
            dockerfile.contains(&format!("\nARG {argument}={default}\n")),
            "the Dockerfile has no ARG {argument}={default}"
        );
    }
    let stages: Vec<&str> = dockerfile
        .lines()
        .filter_map(|line| line.strip_prefix("FROM "))
        .collect();
    assert_eq!(
        stages,
        [
            "${RUST_IMAGE} AS build",
            "${DEBIAN_IMAGE} AS runtime",
            "${NODE_IMAGE} AS node",
            "runtime AS scripts",
            "runtime"
        ]
    );
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
    let installed = Command::new("buildah")
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success());
    if !installed {
        assert!(
            std::env::var_os("GOONDAN_REQUIRE_BUILDAH").is_none(),
            "GOONDAN_REQUIRE_BUILDAH is set but buildah is not installed (apt-get install buildah busybox-static tini)"
        );
        eprintln!("skipped: buildah is not installed");
    }
    installed
}

/// What an image's OCI configuration says, as the Dockerfile would say it
/// (`PATH` left out: the Dockerfile inherits it from its base).
fn built_config(config: &Value) -> ImageConfig {
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
    ImageConfig {
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
    }
}

/// The lines build.sh --check prints for this test's `gdn`.
fn assert_checked(stderr: &str) {
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
}

#[test]
fn the_image_builds_from_scratch_and_runs_scripted_turns() {
    if !buildah_installed() {
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
    assert_checked(&stderr);

    // What buildah recorded is what the Dockerfile's default target says.
    let config = image_config(&storage, tag);
    let built = built_config(&config);
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

/// Issue 49, item 7: the Dockerfile's own steps run in CI, which pulls no
/// image. build.sh --dockerfile-bases makes stand-ins for its base images
/// from scratch (a `cargo` that puts this test's `gdn` where the release
/// build would, an `apt-get` carrying tini and the CA certificates);
/// `buildah build --pull=never` runs every step of the `build` and
/// `runtime` stages on them; the image has the configuration the
/// Dockerfile declares and passes build.sh's checks (scripted Turns, a
/// bash tool call) as uid 10001.
#[test]
fn the_dockerfile_builds_offline_on_stand_in_bases_and_runs_scripted_turns() {
    if !buildah_installed() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let storage = work.path().join("storage");
    let output = build_script()
        .arg("--dockerfile-bases")
        .arg("--storage")
        .arg(&storage)
        .arg(env!("CARGO_BIN_EXE_gdn"))
        .output()
        .unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        output.status.success(),
        "build.sh --dockerfile-bases failed:\n{stderr}"
    );
    let build_args: Vec<String> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    let version = workspace_version();
    assert_eq!(
        build_args,
        [
            format!("RUST_IMAGE=localhost/goondan/stand-in-rust:{version}"),
            format!("DEBIAN_IMAGE=localhost/goondan/stand-in-debian:{version}"),
        ]
    );

    let tag = "localhost/goondan/gdn:dockerfile-test";
    let isolation = std::env::var("BUILDAH_ISOLATION").unwrap_or_else(|_| "chroot".to_owned());
    let mut build = buildah(&storage);
    build.args(["build", "--pull=never", "--isolation", &isolation]);
    for build_arg in &build_args {
        build.args(["--build-arg", build_arg]);
    }
    let build = build
        .args(["--tag", tag, "--file"])
        .arg(workspace_root().join("Dockerfile"))
        .arg(workspace_root())
        .output()
        .unwrap();
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&build.stdout),
        String::from_utf8_lossy(&build.stderr)
    );
    assert!(
        build.status.success(),
        "buildah build of the Dockerfile failed:\n{log}"
    );
    // The `build` stage ran, on the sources without target/ (the stand-in
    // cargo refuses otherwise); the `scripts` stage, unused, did not.
    assert!(
        log.contains("stand-in cargo: put the prebuilt gdn at /src/target/release/gdn"),
        "{log}"
    );
    assert!(!log.contains("AS scripts"), "{log}");

    let config = image_config(&storage, tag);
    assert_eq!(
        built_config(&config),
        dockerfile_stage(&read("Dockerfile"), "runtime")
    );
    let output = build_script()
        .args(["--check-only", "--tag", tag, "--storage"])
        .arg(&storage)
        .arg(env!("CARGO_BIN_EXE_gdn"))
        .output()
        .unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        output.status.success(),
        "build.sh --check-only failed:\n{stderr}"
    );
    assert_checked(&stderr);
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
