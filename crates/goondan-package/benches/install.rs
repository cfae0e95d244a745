//! `gdn package install` of a lockfile with 20 packages from a local
//! registry, cold (an empty packages folder: 20 downloads, integrity
//! checks, unpacks) and cached (everything already in place). Prints the
//! median and range of each over several runs.
//!
//! Run: `cargo bench -p goondan-package --bench install`.
//!
//! It drives the library entry `gdn package install` calls
//! (`install::install`), against `gdn registry serve`'s server on
//! 127.0.0.1, so the numbers leave out only the process start of `gdn`.

use goondan_package::install::{install, InstallOptions};
use goondan_package::registry::client::RegistryClient;
use goondan_package::registry::server::{self, RegistryConfig};
use goondan_package::settings::ClientSettings;
use std::path::Path;
use std::time::{Duration, Instant};

const N_PACKAGES: usize = 20;
const RUNS: usize = 9;
const TOKEN: &str = "bench-token-0123456789abcdef";

/// A package folder: a Package, a Tool with a script entry, and a few KiB
/// of files, about what a small tool package holds.
fn write_package(dir: &Path, index: usize) {
    std::fs::create_dir_all(dir.join("tools")).unwrap();
    std::fs::write(
        dir.join("goondan.yaml"),
        format!(
            "apiVersion: goondan.ai/v1\nkind: Package\nmetadata:\n  name: \"@bench/p{index}\"\nspec:\n  version: \"1.0.{index}\"\n---\napiVersion: goondan.ai/v1\nkind: Tool\nmetadata:\n  name: t{index}\nspec:\n  entry: ./tools/t.mjs\n  exports:\n    - name: run\n      description: Runs.\n      parameters:\n        type: object\n"
        ),
    )
    .unwrap();
    let body = "export const handlers = { run: async () => ({ ok: true }) };\n".repeat(40);
    std::fs::write(dir.join("tools/t.mjs"), body).unwrap();
    std::fs::write(dir.join("README.md"), "# bench package\n".repeat(100)).unwrap();
}

fn median(mut samples: Vec<Duration>) -> (Duration, Duration, Duration) {
    samples.sort();
    (
        samples[samples.len() / 2],
        samples[0],
        samples[samples.len() - 1],
    )
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let home = tempfile::tempdir().unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = url::Url::parse(&format!("http://{}", listener.local_addr().unwrap())).unwrap();
        let config = RegistryConfig {
            dir: home.path().join("registry"),
            tokens: vec![TOKEN.into()],
            public_url: url.clone(),
            max_body_bytes: server::DEFAULT_MAX_BODY_BYTES,
            body_timeout: server::DEFAULT_BODY_TIMEOUT,
            limits: goondan_http::AcceptLimits::new(64, Duration::from_secs(10)),
        };
        tokio::spawn(server::serve(listener, config, std::future::pending()));

        let client = RegistryClient::new(url.clone(), Some(TOKEN.into())).unwrap();
        let mut dependencies = String::new();
        for index in 0..N_PACKAGES {
            let dir = home.path().join(format!("src/p{index}"));
            write_package(&dir, index);
            let packed = goondan_package::publish::pack(&dir).unwrap();
            let body = goondan_package::publish::publish_body(&packed, None, None);
            client.publish(&body).await.unwrap();
            dependencies.push_str(&format!(
                "    - name: \"@bench/p{index}\"\n      version: \"^1.0.{index}\"\n"
            ));
        }
        let bundle = home.path().join("app");
        std::fs::create_dir_all(&bundle).unwrap();
        std::fs::write(
            bundle.join("goondan.yaml"),
            format!("apiVersion: goondan.ai/v1\nkind: Package\nmetadata:\n  name: app\nspec:\n  dependencies:\n{dependencies}"),
        )
        .unwrap();
        let options = |packages: &Path| InstallOptions {
            packages_root: packages.to_path_buf(),
            registry: Some(url.to_string()),
            frozen: false,
            settings: ClientSettings::read(&home.path().join("config.json")).unwrap(),
            accept_changed_integrity: false,
        };
        // The first install resolves and writes the lockfile; every
        // measured one installs from it.
        let resolved_at = Instant::now();
        let report = install(&bundle, &options(&home.path().join("first"))).await.unwrap();
        assert_eq!(report.installed.len(), N_PACKAGES);
        let resolve_time = resolved_at.elapsed();

        let mut cold = Vec::new();
        let mut cached = Vec::new();
        for run in 0..RUNS {
            let packages = home.path().join(format!("packages-{run}"));
            let started = Instant::now();
            let report = install(&bundle, &options(&packages)).await.unwrap();
            cold.push(started.elapsed());
            assert_eq!(report.installed.len(), N_PACKAGES);
            let started = Instant::now();
            let report = install(&bundle, &options(&packages)).await.unwrap();
            cached.push(started.elapsed());
            assert_eq!(report.cached.len(), N_PACKAGES);
        }
        let (median_cold, min_cold, max_cold) = median(cold);
        let (median_cached, min_cached, max_cached) = median(cached);
        println!("install {N_PACKAGES} packages, resolve + lockfile + install: {resolve_time:.2?}");
        println!("install {N_PACKAGES} packages from the lockfile, cold:   median {median_cold:.2?} [{min_cold:.2?}-{max_cold:.2?}] over {RUNS} runs");
        println!("install {N_PACKAGES} packages from the lockfile, cached: median {median_cached:.2?} [{min_cached:.2?}-{max_cached:.2?}] over {RUNS} runs");
    });
}
