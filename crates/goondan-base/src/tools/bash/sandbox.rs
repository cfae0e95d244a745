//! What a `bash` command may see: the environment it gets and, on Linux,
//! the namespaces it runs in (issue 16 #1).
//!
//! The cleared environment itself is built by
//! `goondan_runtime::tool::environment`, shared with the plugin hosts; the
//! namespaces are `goondan_sandbox`'s (`shared`: set up once per agent and
//! shared by its commands). This module owns the choice between the two
//! for a command ([`Isolation`]).

/// The variable that turns the namespaces off (`off`); the cleared
/// environment applies either way.
pub(crate) const SANDBOX_VARIABLE: &str = "GOONDAN_BASH_SANDBOX";

/// How much of the machine a command is kept from seeing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Isolation {
    /// The cleared environment, and on Linux the namespaces when the
    /// platform allows them.
    Namespaces,
    /// The cleared environment only.
    EnvironmentOnly,
}

impl Isolation {
    /// [`Isolation::EnvironmentOnly`] when `GOONDAN_BASH_SANDBOX=off`,
    /// else [`Isolation::Namespaces`]. Read per call: it is one lookup.
    pub(crate) fn from_env() -> Self {
        match std::env::var_os(SANDBOX_VARIABLE) {
            Some(value) if value.eq_ignore_ascii_case("off") => Isolation::EnvironmentOnly,
            _ => Isolation::Namespaces,
        }
    }

    /// How `goondan_sandbox` keeps the command.
    pub(crate) fn containment(self) -> goondan_sandbox::Containment {
        match self {
            Isolation::Namespaces => goondan_sandbox::Containment::Namespaces,
            Isolation::EnvironmentOnly => goondan_sandbox::Containment::ProcessGroup,
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
#[allow(unsafe_code)] // prctl and geteuid in the probe
mod tests {
    //! Issue 16 #1 with real processes. The agent's side of the test runs
    //! in a child copy of this test binary, so the secret sits in that
    //! process's environment without `set_var` racing other tests.

    use super::super::process::{run, ProcessSpec};
    use super::*;
    use std::collections::BTreeSet;
    use std::time::Duration;

    /// Set in the child copy: the secret the agent's environment holds.
    const SECRET_VARIABLE: &str = "MY_SECRET_KEY";
    const SECRET: &str = "sk-probe-SECRET-5e1d9c0b7a";
    /// Set in the child copy: run the probe rather than return.
    const PROBE_VARIABLE: &str = "GOONDAN_BASH_SANDBOX_PROBE";
    const PROBE_TEST: &str = "tools::bash::sandbox::tests::secrets_probe";

    fn spec(command: &str, isolation: Isolation) -> ProcessSpec {
        ProcessSpec {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), command.into()],
            cwd: std::env::temp_dir(),
            env: vec![("DECLARED".into(), "yes".into())],
            isolation,
            timeout: Duration::from_secs(20),
            max_output_bytes: 1_000_000,
        }
    }

    /// Runs the probe in a child copy of this binary with `SECRET` in its
    /// environment, as `uid` when given (through `setpriv`).
    fn run_probe(as_nobody: bool) -> std::process::Output {
        let exe = std::env::current_exe().unwrap();
        let mut command = if as_nobody {
            let mut command = std::process::Command::new("setpriv");
            command
                .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                .arg(exe);
            command
        } else {
            std::process::Command::new(exe)
        };
        command
            .args([PROBE_TEST, "--exact", "--nocapture", "--test-threads=1"])
            .env(SECRET_VARIABLE, SECRET)
            .env(PROBE_VARIABLE, "1")
            .env_remove(SANDBOX_VARIABLE)
            .current_dir(std::env::temp_dir())
            .output()
            .unwrap()
    }

    fn assert_probe_passed(output: &std::process::Output, who: &str) {
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains("1 passed"),
            "the probe failed as {who}:\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        print!("{stdout}");
    }

    #[test]
    fn the_model_cannot_read_the_agents_secrets_through_bash() {
        assert_probe_passed(&run_probe(false), "this user");
        // As root the id maps are written with privileges a normal user
        // lacks; run the probe as `nobody` too, where `setpriv` can.
        // SAFETY: geteuid cannot fail and touches no memory.
        let root = unsafe { nix::libc::geteuid() } == 0;
        let setpriv = std::path::Path::new("/usr/bin/setpriv").exists();
        let exe = std::env::current_exe().unwrap();
        if root && setpriv && others_can_run(&exe) {
            assert_probe_passed(&run_probe(true), "nobody");
        } else {
            println!(
                "note: not root, no setpriv, or {} is out of nobody's reach; the probe ran as this user only",
                exe.display()
            );
        }
    }

    /// True when a user who is neither the owner nor in the group can
    /// execute `exe`: every folder above it searchable, the file readable
    /// and executable by others (a checkout under `/root` is not).
    fn others_can_run(exe: &std::path::Path) -> bool {
        use std::os::unix::fs::PermissionsExt;
        let mode = |path: &std::path::Path| {
            std::fs::metadata(path).map_or(0, |metadata| metadata.permissions().mode())
        };
        mode(exe) & 0o005 == 0o005
            && exe
                .ancestors()
                .skip(1)
                .all(|folder| mode(folder) & 0o001 != 0)
    }

    /// The variable names `env` printed.
    fn names(env_output: &str) -> BTreeSet<String> {
        env_output
            .lines()
            .filter_map(|line| line.split_once('=').map(|(name, _)| name.to_string()))
            .collect()
    }

    /// The child half of the test above; returns at once unless that test
    /// started it.
    #[tokio::test]
    async fn secrets_probe() {
        if std::env::var_os(PROBE_VARIABLE).is_none() {
            return;
        }
        assert_eq!(std::env::var(SECRET_VARIABLE).unwrap(), SECRET);
        // Like `gdn agent`: the agent holds secrets, so it is non-dumpable
        // (which is also what the id maps must work around).
        // SAFETY: prctl with integer arguments.
        unsafe {
            nix::libc::prctl(nix::libc::PR_SET_DUMPABLE, 0 as nix::libc::c_ulong, 0, 0, 0);
        }
        let leaks = |text: &str| text.contains(SECRET);
        // Only what the shell itself exports may join the allowed list.
        let allowed: BTreeSet<String> = [
            "PATH", "HOME", "LANG", "DECLARED", "PWD", "SHLVL", "_", "OLDPWD",
        ]
        .into_iter()
        .map(String::from)
        .collect();

        for isolation in [Isolation::Namespaces, Isolation::EnvironmentOnly] {
            let outcome = run(&spec("env", isolation)).await.unwrap();
            let stdout = outcome.stdout.text();
            assert_eq!(outcome.exit_code, Some(0), "{isolation:?}: {stdout}");
            assert!(!leaks(&stdout), "{isolation:?}: {stdout}");
            let seen = names(&stdout);
            assert!(seen.is_subset(&allowed), "{isolation:?}: {seen:?}");
            for required in ["PATH", "LANG", "DECLARED"] {
                assert!(seen.contains(required), "{isolation:?}: {seen:?}");
            }
        }

        // Without namespaces another process's environment is only as safe
        // as its owner keeps it (the agent: non-dumpable), so the /proc
        // checks below are the sandbox's alone.
        if let Some(refusal) = goondan_sandbox::refusal() {
            println!("note: namespaces refused here ({refusal}); the /proc checks need them");
            return;
        }
        // Every environment and command line the command can find.
        let snoop = "cat /proc/$PPID/environ; cat /proc/1/environ; cat /proc/self/environ; \
                     for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do cat $f; done; true";
        let outcome = run(&spec(snoop, Isolation::Namespaces)).await.unwrap();
        let (stdout, stderr) = (outcome.stdout.text(), outcome.stderr.text());
        assert!(!leaks(&stdout) && !leaks(&stderr), "{stdout}\n{stderr}");

        // The command's parent is the namespace's init (PID 1, the agent's
        // sandbox helper, which every command of the agent shares), and
        // /proc lists only the sandbox: the init, the shell, `ls` and
        // `grep`. Unmounting /proc (possible for uid 0 inside, were it not
        // locked) changes nothing.
        let listing = "echo $PPID; ls /proc | grep -c '^[0-9]*$'; ps -e -o pid= | wc -l; \
                       umount /proc 2>/dev/null; umount -l /proc 2>/dev/null; \
                       ls /proc | grep -c '^[0-9]*$'";
        let outcome = run(&spec(listing, Isolation::Namespaces)).await.unwrap();
        let stdout = outcome.stdout.text();
        let numbers: Vec<u32> = stdout
            .split_whitespace()
            .map(|word| word.parse().unwrap())
            .collect();
        println!("sandbox listing ($PPID, /proc, ps, /proc after umount): {stdout:?}");
        assert_eq!(numbers.len(), 4, "{stdout}");
        assert_eq!(
            numbers[0], 1,
            "the command's parent is not the namespace's init: {stdout}"
        );
        for count in &numbers[1..] {
            assert!(*count <= 5, "the sandbox sees too many processes: {stdout}");
        }
    }
}
