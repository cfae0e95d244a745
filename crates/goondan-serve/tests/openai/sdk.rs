//! The official `openai` Python package against the server: the fixture
//! `tests/fixtures/openai_client.py` lists the models, asks for chat
//! completions and responses, plain and streamed, and checks the unknown
//! model, the wrong key and a failing Turn. Skipped when `import openai`
//! fails, unless `GOONDAN_REQUIRE_OPENAI_SDK` is set (CI installs the
//! package and sets it, so there it never is).

use crate::double::{Ending, Server};
use std::time::Duration;

/// Whether the `openai` package can be imported.
async fn sdk_available() -> bool {
    let importable = tokio::process::Command::new("python3")
        .args(["-c", "import openai"])
        .output()
        .await
        .is_ok_and(|output| output.status.success());
    if !importable && std::env::var_os("GOONDAN_REQUIRE_OPENAI_SDK").is_some() {
        panic!(
            "GOONDAN_REQUIRE_OPENAI_SDK is set but `import openai` fails: \
             python3 -m pip install \"openai==3.57.0\""
        );
    }
    importable
}

#[tokio::test]
async fn the_official_openai_package_is_a_client() {
    if !sdk_available().await {
        eprintln!("skipped: the `openai` Python package is not installed");
        return;
    }
    let server = Server::start().await;
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/openai_client.py");
    let run = tokio::process::Command::new("python3")
        .arg(script)
        .args(["--model", "writer", "--fail-text", "FAIL on purpose"])
        .env("OPENAI_BASE_URL", format!("{}/v1", server.base))
        .env("OPENAI_API_KEY", &server.token)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the client finished in two minutes")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "client failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.trim_end().ends_with("ok"), "{stdout}");
    // Every Turn it asked for ran to its end once, the failing ones too.
    let requests = server.requests();
    assert!(requests.iter().all(|request| request.agent == "writer"));
    let endings = server.endings();
    assert_eq!(endings.len(), requests.len(), "{endings:?}");
    assert!(endings
        .iter()
        .all(|(_, ending)| *ending == Ending::Committed));
    let follow_up = requests
        .iter()
        .position(|request| request.text == "ping four")
        .unwrap();
    assert_eq!(
        requests[follow_up].instance_key,
        requests[follow_up - 1].instance_key,
        "previous_response_id continued the instance"
    );
}
