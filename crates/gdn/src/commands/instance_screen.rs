//! `gdn instance` on a terminal: the instances as a list to move through
//! (↑/↓ or k/j), restart the selected one (`r`), delete it (`d` or Delete,
//! then `y` to confirm), leave (`q`, Esc, Ctrl-C, or Enter on "exit").
//! Each row shows `started=` (when its state last changed) and the pid of
//! its process, so a restart can be seen to take effect (`cli.md` §7.3).
//!
//! The terminal is put in raw mode for the screen's life and restored on
//! every way out, a panic included (the guard's `Drop`). Reading a key
//! blocks; an Escape alone is told from the start of an arrow key by
//! waiting 50 ms for what follows it.

use super::target::{delete_instances, instance_rows, restart_live, Target};
use crate::cli::GlobalArgs;
use crate::exit::Outcome;
use goondan_orchestrator::control::ControlResponse;
use nix::sys::termios::{self, SetArg, Termios};
use serde_json::Value as JsonValue;
use std::io::Write;
use std::os::fd::AsFd;

/// The most instances the screen lists.
const MAX_ROWS: usize = 100;

/// How long the rest of an escape sequence may take to follow its ESC.
const ESCAPE_FOLLOW_MS: u16 = 50;

/// A key the screen acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    Up,
    Down,
    Enter,
    Restart,
    Delete,
    Yes,
    Quit,
    Other,
}

/// Raw mode for as long as it lives.
struct RawMode {
    saved: Termios,
}

impl RawMode {
    fn enter() -> anyhow::Result<RawMode> {
        let stdin = std::io::stdin();
        let saved = termios::tcgetattr(stdin.as_fd())?;
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        termios::tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &raw)?;
        Ok(RawMode { saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = termios::tcsetattr(std::io::stdin().as_fd(), SetArg::TCSANOW, &self.saved);
        // Show the cursor again.
        let _ = std::io::stdout().write_all(b"\x1b[?25h");
        let _ = std::io::stdout().flush();
    }
}

/// Runs the screen until the user leaves it.
pub(crate) fn run(global: &GlobalArgs, target: &Target) -> anyhow::Result<Outcome> {
    let colored = crate::progress::colored(global);
    let title = match &target.workspace {
        Some(workspace) => format!(
            "Instances of {}",
            super::target::SwarmName::of(workspace).short()
        ),
        None => "Instances".to_string(),
    };
    let _raw = RawMode::enter()?;
    let mut cursor = 0usize;
    let mut status = String::new();
    let mut confirming: Option<String> = None;
    loop {
        let (rows, _) = instance_rows(target, None, Some(MAX_ROWS))?;
        cursor = cursor.min(rows.len());
        draw(
            &title,
            &rows,
            cursor,
            &status,
            confirming.as_deref(),
            colored,
        )?;
        let key = read_key()?;
        if let Some(doomed) = confirming.take() {
            status = if key == Key::Yes {
                match delete_instances(target, &doomed) {
                    Ok((deleted, _)) => format!("deleted {doomed} ({deleted} instance(s))"),
                    Err(error) => format!("could not delete {doomed}: {error:#}"),
                }
            } else {
                format!("kept {doomed}")
            };
            continue;
        }
        let selected = rows.get(cursor).map(row_key);
        match (key, selected) {
            (Key::Quit, _) | (Key::Enter, None) => break,
            (Key::Up, _) => cursor = cursor.saturating_sub(1),
            (Key::Down, _) => cursor = (cursor + 1).min(rows.len()),
            (Key::Restart, Some(key)) => {
                status = match restart_live(target, &key, false) {
                    Ok(Some(ControlResponse::Restarted { .. })) => format!("restarted {key}"),
                    Ok(Some(ControlResponse::Failed(goondan_types::ErrorBody {
                        code,
                        message,
                        ..
                    }))) => {
                        format!("error[{code}]: {message}")
                    }
                    Ok(Some(other)) => format!("unexpected answer: {other:?}"),
                    Ok(None) => "no orchestrator is running for this bundle".into(),
                    Err(error) => format!("could not restart {key}: {error:#}"),
                }
            }
            (Key::Delete, Some(key)) => confirming = Some(key),
            _ => {}
        }
    }
    // Leave the screen clean for the shell prompt.
    let mut out = std::io::stdout().lock();
    out.write_all(b"\x1b[H\x1b[2J")?;
    out.flush()?;
    Ok(Outcome::Success)
}

/// `agent:instanceKey` of a row.
fn row_key(row: &JsonValue) -> String {
    format!(
        "{}:{}",
        row["agentName"].as_str().unwrap_or_default(),
        row["instanceKey"].as_str().unwrap_or_default()
    )
}

fn paint(text: &str, code: &str, colored: bool) -> String {
    if colored {
        format!("\x1b[{code}m{text}\x1b[0m")
    } else {
        text.to_string()
    }
}

/// Redraws the whole screen (raw mode: lines end with `\r\n`).
fn draw(
    title: &str,
    rows: &[JsonValue],
    cursor: usize,
    status: &str,
    confirming: Option<&str>,
    colored: bool,
) -> std::io::Result<()> {
    let mut frame = String::from("\x1b[?25l\x1b[H\x1b[2J");
    frame.push_str(&paint(title, "1", colored));
    frame.push_str(&paint(
        "  (↑↓ move, r restart, d delete, q quit)",
        "2",
        colored,
    ));
    frame.push_str("\r\n\r\n");
    for (index, row) in rows.iter().enumerate() {
        let selected = index == cursor;
        let state = row["process"]
            .as_str()
            .or(row["status"].as_str())
            .unwrap_or("-");
        let state_color = match state {
            "processing" | "idle" => "32",
            "crashed" | "crashLoopBackOff" => "31",
            _ => "33",
        };
        let started = row["updatedAt"]
            .as_str()
            .or(row["createdAt"].as_str())
            .unwrap_or("unknown");
        let pid = row["pid"]
            .as_u64()
            .map_or_else(|| "-".to_string(), |pid| pid.to_string());
        frame.push_str(&format!(
            "{} {:<32} {:<16} {}  pid={pid}  {}\r\n",
            if selected { ">●" } else { " ○" },
            row_key(row),
            row["workspace"].as_str().unwrap_or("-"),
            paint(&format!("{state:<16}"), state_color, colored),
            paint(&format!("started={started}"), "2", colored),
        ));
    }
    frame.push_str(if cursor == rows.len() {
        ">  exit\r\n"
    } else {
        "   exit\r\n"
    });
    frame.push_str(&format!("\r\n{} instance(s)\r\n", rows.len()));
    if let Some(key) = confirming {
        frame.push_str(&format!(
            "delete every message and extension state of {key}? [y/N]\r\n"
        ));
    } else if !status.is_empty() {
        frame.push_str(status);
        frame.push_str("\r\n");
    }
    let mut out = std::io::stdout().lock();
    out.write_all(frame.as_bytes())?;
    out.flush()
}

/// Reads one byte of stdin, unbuffered (a buffer would hide the rest of an
/// escape sequence from [`more_follows`]); `None` at its end.
fn read_byte() -> std::io::Result<Option<u8>> {
    let mut byte = [0u8; 1];
    loop {
        match nix::unistd::read(std::io::stdin().as_fd(), &mut byte) {
            Ok(0) => return Ok(None),
            Ok(_) => return Ok(Some(byte[0])),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(error) => return Err(error.into()),
        }
    }
}

/// Reads one key press.
fn read_key() -> std::io::Result<Key> {
    let Some(byte) = read_byte()? else {
        return Ok(Key::Quit);
    };
    Ok(match byte {
        b'q' | b'Q' | 3 | 4 => Key::Quit,
        b'\r' | b'\n' => Key::Enter,
        b'k' => Key::Up,
        b'j' => Key::Down,
        b'r' | b'R' => Key::Restart,
        b'd' | b'D' => Key::Delete,
        b'y' | b'Y' => Key::Yes,
        0x1b => {
            if !more_follows()? {
                return Ok(Key::Quit);
            }
            match (read_byte()?, read_byte()?) {
                (Some(b'['), Some(b'A')) => Key::Up,
                (Some(b'['), Some(b'B')) => Key::Down,
                // Delete is ESC [ 3 ~.
                (Some(b'['), Some(b'3')) => {
                    read_byte()?;
                    Key::Delete
                }
                _ => Key::Other,
            }
        }
        _ => Key::Other,
    })
}

/// Whether more bytes arrive on stdin within [`ESCAPE_FOLLOW_MS`].
fn more_follows() -> std::io::Result<bool> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let stdin = std::io::stdin();
    let mut fds = [PollFd::new(stdin.as_fd(), PollFlags::POLLIN)];
    let ready = poll(&mut fds, PollTimeout::from(ESCAPE_FOLLOW_MS))?;
    Ok(ready > 0)
}
