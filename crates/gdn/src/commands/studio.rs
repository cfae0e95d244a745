//! `gdn studio [--allow-actions]`: serves the Studio (`goondan-studio`)
//! for the System Root until Ctrl-C or SIGTERM, printing the URL to open
//! (with the token when one is needed: beyond loopback, or for actions).

use crate::cli::{GlobalArgs, StudioArgs};
use crate::exit::Outcome;
use crate::project;
use goondan_studio::{Access, Limits, Studio, StudioError};
use std::io::Write;

/// The variable a token for a non-loopback address comes from.
const TOKEN_VARIABLE: &str = "GOONDAN_STUDIO_TOKEN";

/// Runs `gdn studio`.
pub(crate) fn run(global: &GlobalArgs, args: &StudioArgs) -> anyhow::Result<Outcome> {
    crate::logging::init_console(crate::logging::console_level(global));
    let state_root = project::state_root(global)?;
    let token = std::env::var(TOKEN_VARIABLE)
        .ok()
        .filter(|token| !token.is_empty());
    // File reads go to the blocking pool, so one thread serves the rest.
    let runtime = crate::runtime::current_thread()?;
    runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(args.addr).await {
            Ok(listener) => listener,
            Err(source) => {
                return Ok(report(&StudioError::Bind {
                    addr: args.addr,
                    source,
                }))
            }
        };
        let bound = listener.local_addr()?;
        let access = match Access::for_address(bound, token, args.allow_actions) {
            Ok(access) => access,
            Err(error) => return Ok(report(&error)),
        };
        let host = if bound.ip().is_unspecified() {
            "127.0.0.1".to_string()
        } else {
            bound.ip().to_string()
        };
        let host = if bound.is_ipv6() && !bound.ip().is_unspecified() {
            format!("[{host}]")
        } else {
            host
        };
        let url = match access.token() {
            Some(token) => format!("http://{host}:{}/?token={token}", bound.port()),
            None => format!("http://{host}:{}/", bound.port()),
        };
        // A closed stdout (`gdn studio | head -1`) must not stop the
        // server, so printing is best effort.
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "Goondan Studio: {url}");
        if !global.quiet {
            let mode = if args.allow_actions {
                "actions allowed: sending messages, deciding approvals, cancelling, forking and rewinding Turns, editing messages, re-running eval cases"
            } else {
                "read-only"
            };
            let _ = writeln!(
                out,
                "reading {} ({mode}); Ctrl-C stops",
                state_root.path().display()
            );
        }
        let _ = out.flush();
        drop(out);
        let studio = Studio {
            state_root,
            access,
            limits: Limits::default(),
            actions: args.allow_actions,
            // The Evals page's Re-run runs `gdn eval` with this very
            // binary.
            eval_command: std::env::current_exe().ok(),
        };
        goondan_studio::serve(listener, studio, super::port::stop_signal()).await?;
        Ok(Outcome::Success)
    })
}

/// Prints a start failure in the house format and picks the exit code.
fn report(error: &StudioError) -> Outcome {
    crate::render::error(error.code(), error, Some(error.suggestion()));
    match error {
        StudioError::Bind { .. } => Outcome::Failure,
        StudioError::WeakToken { .. } => Outcome::BadArguments,
    }
}
