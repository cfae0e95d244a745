//! Issue 47 #1: what `hide_from_children` hides is not there for a child
//! in the namespaces, whether it runs alone (`Contained`) or in the shared
//! bash sandbox, and cannot be uncovered from inside. Its own test binary:
//! the hidden set is fixed once per process.

#![cfg(target_os = "linux")]

use goondan_sandbox::shared::{SharedChild, SharedCommand, SharedStdio};
use goondan_sandbox::{Contained, Containment};
use std::process::Stdio;

#[tokio::test]
async fn hidden_folders_and_files_are_empty_inside_the_sandbox() {
    let root = tempfile::tempdir().unwrap();
    let secret_dir = root.path().join("runtime");
    std::fs::create_dir_all(secret_dir.join("sockets")).unwrap();
    std::fs::write(secret_dir.join("sockets/ws.sock"), "socket").unwrap();
    let secret_file = root.path().join("config.json");
    std::fs::write(&secret_file, "{\"token\":\"t0p\"}").unwrap();
    let kept = root.path().join("packages");
    std::fs::create_dir_all(&kept).unwrap();
    std::fs::write(kept.join("tool.js"), "kept").unwrap();
    assert!(goondan_sandbox::hide_from_children([
        secret_dir.clone(),
        secret_file.clone(),
        root.path().join("absent"),
    ]));
    assert!(!goondan_sandbox::hide_from_children([kept.clone()]));

    let script = format!(
        "ls -A {dir}; echo '|'; cat {file}; echo '|'; cat {kept}/tool.js; echo '|'; \
         umount {dir} 2>/dev/null && echo uncovered; touch {dir}/x 2>/dev/null && echo wrote; true",
        dir = secret_dir.display(),
        file = secret_file.display(),
        kept = kept.display()
    );
    let build = || {
        let mut command = tokio::process::Command::new("/bin/sh");
        command
            .arg("-c")
            .arg(&script)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        command
    };
    let mut contained = Contained::spawn(build, Containment::Namespaces).unwrap();
    if !contained.in_namespaces() {
        eprintln!(
            "skipped: the platform refuses the namespaces ({:?})",
            goondan_sandbox::refusal()
        );
        return;
    }
    let mut out = String::new();
    use tokio::io::AsyncReadExt;
    contained
        .child_mut()
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .await
        .unwrap();
    contained.status().await;
    assert_eq!(out, "|\n|\nkept|\n", "a contained child saw: {out:?}");

    let (reader, writer) = std::io::pipe().unwrap();
    let null = || std::os::fd::OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
    let shared = SharedChild::spawn(
        &SharedCommand {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script.clone().into()],
            cwd: std::env::temp_dir(),
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        },
        SharedStdio {
            stdin: null(),
            stdout: writer.into(),
            stderr: null(),
        },
    )
    .await
    .unwrap();
    let mut shared = shared.expect("the namespaces worked for a contained child");
    shared.status().await;
    let mut out = String::new();
    std::io::Read::read_to_string(
        &mut std::fs::File::from(std::os::fd::OwnedFd::from(reader)),
        &mut out,
    )
    .unwrap();
    assert_eq!(out, "|\n|\nkept|\n", "a shared bash command saw: {out:?}");

    // Outside, nothing changed.
    assert_eq!(
        std::fs::read_to_string(&secret_file).unwrap(),
        "{\"token\":\"t0p\"}"
    );
    assert!(secret_dir.join("sockets/ws.sock").exists());
}
