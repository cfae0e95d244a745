//! The Kubernetes manifests and the Helm chart (issue 49, item 7): every
//! object in `deploy/kubernetes/` and every object the chart renders, for
//! its default values and for each `deploy/helm/examples/*.yaml`, is valid
//! against the Kubernetes schemas (PyPI's `kubernetes-validate`, offline,
//! strict); each port a pod opens for outside clients has a Service port
//! (and an Ingress route only where one is asked for); and the arguments
//! of the `gdn serve`, `gdn mcp serve` and `gdn studio` containers are
//! flags the real `gdn` accepts, with the bearer token they require from a
//! Secret.
//!
//! The chart is rendered, and linted, by Helm's own engine (the Go SDK of
//! Helm 4, through PyPI's `helm-python-sdk`), since Debian has no `helm`. Without
//! those packages these tests pass without checking anything unless
//! `GOONDAN_REQUIRE_K8S_VALIDATE` is set (`.ci/run` sets it and installs
//! them). It does not cover the image itself (`deploy_image`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::workspace_root;

/// The Kubernetes versions the objects must be valid for: the oldest
/// release the manifests are meant for and the newest the schemas know.
const KUBERNETES_VERSIONS: [&str; 2] = ["1.29.0", "1.37.0"];

/// What the tests ask of Python: `render CHART VALUES|- OUT` renders the
/// chart as release `goondan` in namespace `goondan`, writes each
/// rendered manifest into OUT and prints `{"values", "objects"}` (the
/// merged values, every object, and what `helm lint` says of the chart
/// with those values); `load FILE...` prints the objects of the
/// files. A render error goes to stderr, exit 1.
const PYTHON_HELPER: &str = r#"
import json, pathlib, sys
import yaml

def objects(text):
    return [item for item in yaml.safe_load_all(text) if item]

if sys.argv[1] == "load":
    print(json.dumps([item for name in sys.argv[2:] for item in objects(pathlib.Path(name).read_text())]))
    sys.exit(0)
import helm_python as helm
chart_dir, values_file, out = sys.argv[2:5]
values = {} if values_file == "-" else (yaml.safe_load(pathlib.Path(values_file).read_text()) or {})
try:
    with helm.Chart.load(chart_dir) as chart:
        merged = chart.merge_values(values)
        manifests = chart.render(values, name="goondan", namespace="goondan")
except helm.HelmError as error:
    print(error, file=sys.stderr)
    sys.exit(1)
found = []
for name, text in sorted(manifests.items()):
    if not name.endswith(".yaml") or not objects(text):
        continue
    path = pathlib.Path(out) / name.replace("/", "_")
    path.write_text(text)
    found += objects(text)
lint = helm.lint(chart_dir, values)
print(json.dumps({"values": merged, "objects": found, "lint": lint}))
"#;

/// Whether `kubernetes-validate`, `helm-python-sdk` and PyYAML are there;
/// panics when they are not but `GOONDAN_REQUIRE_K8S_VALIDATE` is set.
fn tools_installed() -> bool {
    let found = Command::new("python3")
        .args(["-c", "import kubernetes_validate, helm_python, yaml"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !found {
        assert!(
            std::env::var_os("GOONDAN_REQUIRE_K8S_VALIDATE").is_none(),
            "GOONDAN_REQUIRE_K8S_VALIDATE is set but kubernetes-validate or helm-python-sdk is missing \
             (python3 -m pip install kubernetes-validate==1.37.0 helm-python-sdk==0.2.2)"
        );
        eprintln!("skipped: kubernetes-validate or helm-python-sdk is not installed");
    }
    found
}

fn python(args: &[&str]) -> std::process::Output {
    Command::new("python3")
        .args(["-c", PYTHON_HELPER])
        .args(args)
        .output()
        .unwrap()
}

/// Checks `files` against the schemas of every version, strictly (an
/// unknown field is an error).
fn validate(files: &[PathBuf]) {
    assert!(!files.is_empty());
    for version in KUBERNETES_VERSIONS {
        let output = Command::new("python3")
            .args([
                "-m",
                "kubernetes_validate",
                "--strict",
                "--quiet",
                "-k",
                version,
            ])
            .args(files)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "not valid for Kubernetes {version}:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// The objects of the chart rendered with `values` (defaults for `None`),
/// written into `out` and validated; or Helm's error.
fn render(values: Option<&Path>, out: &Path) -> Result<(Value, Vec<Value>), String> {
    let chart = workspace_root().join("deploy/helm/goondan");
    let values = values.map_or("-".to_owned(), |path| path.display().to_string());
    let output = python(&[
        "render",
        chart.to_str().unwrap(),
        &values,
        out.to_str().unwrap(),
    ]);
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    let mut rendered: Value = serde_json::from_slice(&output.stdout).unwrap();
    // `helm lint`: no error, and nothing above INFO (severity 1, such as
    // "icon is recommended").
    let lint = &rendered["lint"];
    assert_eq!(
        lint["errors"],
        Value::Array(Vec::new()),
        "helm lint: {lint}"
    );
    for message in lint["messages"].as_array().unwrap() {
        assert!(
            message["severity"].as_u64() <= Some(1),
            "helm lint: {message}"
        );
    }
    let objects = rendered["objects"].as_array().unwrap().clone();
    Ok((rendered["values"].take(), objects))
}

fn of_kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|item| item["kind"] == kind).collect()
}

fn named<'a>(objects: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    of_kind(objects, kind)
        .into_iter()
        .find(|item| item["metadata"]["name"] == name)
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|item| item.as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Every container port of the pod template, by name: (container, port).
fn container_ports(stateful_set: &Value) -> BTreeMap<String, (String, u64)> {
    let mut ports = BTreeMap::new();
    for container in stateful_set["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
    {
        for port in container["ports"].as_array().into_iter().flatten() {
            let previous = ports.insert(
                port["name"].as_str().unwrap().to_owned(),
                (
                    container["name"].as_str().unwrap().to_owned(),
                    port["containerPort"].as_u64().unwrap(),
                ),
            );
            assert!(
                previous.is_none(),
                "two container ports named {}",
                port["name"]
            );
        }
    }
    ports
}

/// A Service's ports as `name -> (port, targetPort)`; each must target a
/// container port of `stateful_set` by name, at the same number.
fn service_ports(service: &Value, stateful_set: &Value) -> BTreeMap<String, u64> {
    let targets = container_ports(stateful_set);
    let mut ports = BTreeMap::new();
    for port in service["spec"]["ports"].as_array().unwrap() {
        let name = port["name"].as_str().unwrap().to_owned();
        let number = port["port"].as_u64().unwrap();
        let target = port["targetPort"].as_str().unwrap_or_else(|| {
            panic!(
                "Service port {name} targets {} by number, not by name",
                port["targetPort"]
            )
        });
        let (_, container_port) = targets.get(target).unwrap_or_else(|| {
            panic!("Service port {name} targets {target}, which no container opens")
        });
        assert_eq!(*container_port, number, "Service port {name}");
        ports.insert(name, number);
    }
    assert_eq!(
        service["spec"]["selector"],
        stateful_set["spec"]["selector"]["matchLabels"]
    );
    ports
}

/// The value following `flag` in `args`.
fn flag_value<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    args.iter()
        .position(|arg| arg == flag)
        .map(|index| args[index + 1].as_str())
}

/// The sidecar containers (`serve`, `mcp`, `studio`): each has its token
/// from a Secret (in `expected_secrets`, by container name) and listens on
/// every interface; then its arguments are run by this test's `gdn`.
fn check_sidecars(stateful_set: &Value, expected_secrets: &BTreeMap<String, String>) {
    let containers = stateful_set["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap();
    let sidecars: Vec<&Value> = containers
        .iter()
        .filter(|container| container["name"] != "gdn")
        .collect();
    let mut names: Vec<String> = sidecars
        .iter()
        .map(|container| container["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        expected_secrets.keys().cloned().collect::<Vec<_>>(),
        "the containers beside the host"
    );
    for container in sidecars {
        let name = container["name"].as_str().unwrap();
        let args = strings(&container["args"]);
        let token_env = match name {
            "studio" => "GOONDAN_STUDIO_TOKEN".to_owned(),
            _ => flag_value(&args, "--token-env")
                .unwrap_or_else(|| panic!("{name}: no --token-env in {args:?}"))
                .to_owned(),
        };
        let env = container["env"].as_array().unwrap();
        let token = env
            .iter()
            .find(|item| item["name"] == token_env.as_str())
            .unwrap_or_else(|| panic!("{name}: {token_env} is not in its env"));
        assert_eq!(
            token["valueFrom"]["secretKeyRef"]["name"], expected_secrets[name],
            "{name}: the token's Secret"
        );
        let listen = match name {
            "serve" => flag_value(&args, "--addr"),
            "mcp" => flag_value(&args, "--http"),
            _ => flag_value(&args, "--addr"),
        }
        .unwrap_or_else(|| panic!("{name}: no address in {args:?}"));
        assert!(
            listen.starts_with("0.0.0.0:"),
            "{name} listens on {listen}: the Service cannot reach it"
        );
        run_sidecar(name, &args, &token_env);
    }
}

/// Runs a sidecar's arguments with this test's `gdn`, on a copy of
/// examples/two-agents in place of the mounted bundle and a System Root of
/// its own where no orchestrator runs: `serve` and `mcp serve` (both with
/// `--no-start`) then pass their argument and token checks and stop at
/// E_ORCHESTRATOR_NOT_RUNNING, as in a pod whose host has not started;
/// the Studio, on a loopback port of its own, prints its address.
fn run_sidecar(name: &str, args: &[String], token_env: &str) {
    let work = tempfile::tempdir().unwrap();
    let bundle = work.path().join("bundle");
    let copied = Command::new("cp")
        .arg("-r")
        .arg(workspace_root().join("examples/two-agents"))
        .arg(&bundle)
        .status()
        .unwrap();
    assert!(copied.success());
    let mut args: Vec<String> = args.to_vec();
    let config = args.iter().position(|arg| arg == "--config").unwrap() + 1;
    args[config] = bundle.display().to_string();
    if name == "studio" {
        let addr = args.iter().position(|arg| arg == "--addr").unwrap() + 1;
        args[addr] = "127.0.0.1:0".to_owned();
    }
    let mut command = Command::new(env!("CARGO_BIN_EXE_gdn"));
    command
        .args(&args)
        .arg("--state-root")
        .arg(work.path().join("state"))
        .env(token_env, "a-token-of-more-than-24-characters")
        .env_remove("GOONDAN_STATE_ROOT")
        .current_dir(work.path());
    if name != "studio" {
        let output = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "gdn {args:?}:\n{stderr}");
        assert!(
            stderr.contains("error[E_ORCHESTRATOR_NOT_RUNNING]"),
            "gdn {args:?}:\n{stderr}"
        );
        return;
    }
    let stdout_file = work.path().join("studio.out");
    command
        .stdout(std::fs::File::create(&stdout_file).unwrap())
        .stderr(Stdio::null());
    let mut child = command.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let started = loop {
        let printed = std::fs::read_to_string(&stdout_file).unwrap_or_default();
        if printed.contains("Goondan Studio: http://127.0.0.1:") {
            break true;
        }
        if child.try_wait().unwrap().is_some() || Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        started,
        "gdn {args:?} printed no address: {}",
        std::fs::read_to_string(&stdout_file).unwrap_or_default()
    );
}

#[test]
fn the_plain_manifests_are_valid_and_their_public_service_reaches_gdn_serve() {
    if !tools_installed() {
        return;
    }
    let folder = workspace_root().join("deploy/kubernetes");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&folder)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    files.sort();
    validate(&files);

    let mut args = vec!["load"];
    args.extend(files.iter().map(|path| path.to_str().unwrap()));
    let output = python(&args);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let objects: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    let gdn = named(&objects, "StatefulSet", "gdn").unwrap();
    let public = named(&objects, "Service", "gdn-public").expect("the Service gdn-public");
    assert_eq!(
        service_ports(public, gdn),
        BTreeMap::from([("serve".to_owned(), 4180)])
    );
    check_sidecars(
        gdn,
        &BTreeMap::from([("serve".to_owned(), "goondan-serve-token".to_owned())]),
    );
    // The names the serve container accepts in `Host` are the Service's.
    let serve = &gdn["spec"]["template"]["spec"]["containers"][1];
    let args = strings(&serve["args"]);
    for host in ["gdn-public", "gdn-public.goondan.svc"] {
        assert!(
            args.windows(2)
                .any(|pair| pair[0] == "--allowed-host" && pair[1] == host),
            "{args:?}"
        );
    }
}

/// What the values ask for: the public Service's ports by name, and the
/// Secret of each sidecar's token.
fn expected_from(values: &Value) -> (BTreeMap<String, u64>, BTreeMap<String, String>) {
    let mut ports = BTreeMap::new();
    for port in values["connectorPorts"].as_array().into_iter().flatten() {
        ports.insert(
            port["name"].as_str().unwrap().to_owned(),
            port["port"].as_u64().unwrap(),
        );
    }
    let mut secrets = BTreeMap::new();
    for name in ["serve", "mcp", "studio"] {
        let settings = &values[name];
        if settings["enabled"] == true {
            ports.insert(name.to_owned(), settings["port"].as_u64().unwrap());
            secrets.insert(
                name.to_owned(),
                settings["tokenSecret"]["name"].as_str().unwrap().to_owned(),
            );
        }
    }
    (ports, secrets)
}

/// The rendered chart against the values it was rendered with.
fn check_rendered(what: &str, values: &Value, objects: &[Value]) {
    let gdn = named(objects, "StatefulSet", "goondan").unwrap();
    let (ports, secrets) = expected_from(values);
    let public = named(objects, "Service", "goondan-public");
    match public {
        None => assert!(ports.is_empty(), "{what}: no public Service for {ports:?}"),
        Some(public) => assert_eq!(service_ports(public, gdn), ports, "{what}"),
    }
    check_sidecars(gdn, &secrets);
    let ingresses = of_kind(objects, "Ingress");
    assert_eq!(
        ingresses.len(),
        usize::from(values["ingress"]["enabled"] == true),
        "{what}: Ingresses"
    );
    for ingress in ingresses {
        let rules = ingress["spec"]["rules"].as_array().unwrap();
        assert!(!rules.is_empty(), "{what}: an Ingress without rules");
        for rule in rules {
            for path in rule["http"]["paths"].as_array().unwrap() {
                let backend = &path["backend"]["service"];
                assert_eq!(backend["name"], "goondan-public", "{what}");
                let port = backend["port"]["name"].as_str().unwrap();
                assert!(
                    ports.contains_key(port),
                    "{what}: the Ingress routes to port {port}, which the Service lacks"
                );
            }
        }
    }
}

#[test]
fn the_chart_renders_valid_objects_with_a_service_port_for_each_open_port() {
    if !tools_installed() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    // Every port at once, beside the examples.
    let all_ports = work.path().join("all-ports.yaml");
    std::fs::write(
        &all_ports,
        "connectorPorts:\n  - {name: webhook, port: 8080}\n  - {name: github, port: 8081}\n\
         serve: {enabled: true, port: 9000, tokenSecret: {name: serve-token}, publicUrl: https://a.example.com}\n\
         mcp: {enabled: true, tokenSecret: {name: mcp-token, key: bearer}, allowedHosts: [mcp.example.com]}\n\
         studio: {enabled: true, allowActions: true, tokenSecret: {name: studio-token}}\n\
         service: {type: LoadBalancer}\n\
         ingress:\n  enabled: true\n  hosts:\n    - host: a.example.com\n      paths:\n\
         \x20       - {path: /, port: serve}\n        - {path: /mcp, pathType: Exact, port: mcp}\n",
    )
    .unwrap();
    let examples = workspace_root().join("deploy/helm/examples");
    let mut cases: Vec<Option<PathBuf>> = vec![None, Some(all_ports)];
    let mut names: Vec<String> = Vec::new();
    for entry in std::fs::read_dir(&examples).unwrap() {
        let path = entry.unwrap().path();
        names.push(path.file_name().unwrap().to_string_lossy().into_owned());
        cases.push(Some(path));
    }
    names.sort();
    assert_eq!(names, ["serve.yaml", "webhook-bot.yaml"]);

    for (index, values) in cases.iter().enumerate() {
        let what = values
            .as_deref()
            .map_or("the default values".to_owned(), |path| {
                path.display().to_string()
            });
        let out = work.path().join(format!("rendered-{index}"));
        std::fs::create_dir(&out).unwrap();
        let (merged, objects) = render(values.as_deref(), &out)
            .unwrap_or_else(|error| panic!("{what} did not render: {error}"));
        let files: Vec<PathBuf> = std::fs::read_dir(&out)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .collect();
        validate(&files);
        check_rendered(&what, &merged, &objects);
        let kinds: Vec<&str> = objects
            .iter()
            .map(|item| item["kind"].as_str().unwrap())
            .collect();
        match index {
            // The defaults: cluster hosts only, as before.
            0 => assert_eq!(kinds, ["PodDisruptionBudget", "Service", "StatefulSet"]),
            1 => assert_eq!(
                kinds,
                [
                    "Ingress",
                    "PodDisruptionBudget",
                    "Service",
                    "Service",
                    "StatefulSet"
                ]
            ),
            _ => assert!(kinds.contains(&"Ingress"), "{what}: {kinds:?}"),
        }
    }
}

#[test]
fn the_chart_refuses_a_port_without_its_token_secret_or_an_ingress_without_ports() {
    if !tools_installed() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    for (values, expected) in [
        (
            "serve: {enabled: true}\n",
            "serve.tokenSecret.name must name the Secret holding the serve token",
        ),
        (
            "studio: {enabled: true}\n",
            "studio.tokenSecret.name must name the Secret holding the studio token",
        ),
        (
            "ingress: {enabled: true, hosts: [{host: a.example.com, paths: [{path: /, port: serve}]}]}\n",
            "ingress.enabled needs a port to route to",
        ),
    ] {
        let file = work.path().join("values.yaml");
        std::fs::write(&file, values).unwrap();
        let error = render(Some(&file), work.path()).expect_err(values);
        assert!(error.contains(expected), "{values}: {error}");
    }
}
