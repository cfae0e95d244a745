//! A spinner on stderr for long work a person waits for at a terminal
//! (installing packages, joining a cluster): `⠋ installing packages`,
//! redrawn in place and erased when the work ends. Nothing is drawn when
//! stderr is not a terminal, nor with `--json` or `--quiet`. Output that
//! the work prints meanwhile calls [`clear`] first, so no line is written
//! over the spinner.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The frames of every spinner `gdn` draws.
pub(crate) const FRAMES: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
const TICK: Duration = Duration::from_millis(100);

/// Whether the terminal may be colored (`--no-color`, `NO_COLOR`).
pub(crate) fn colored(global: &crate::cli::GlobalArgs) -> bool {
    !global.no_color && std::env::var_os("NO_COLOR").is_none()
}

/// Whether the spinner of the work under way is on the screen now.
static CURRENT: Mutex<Option<Arc<Mutex<bool>>>> = Mutex::new(None);

/// A spinner, shown until dropped.
pub(crate) struct Progress {
    drawn: Arc<Mutex<bool>>,
    task: tokio::task::JoinHandle<()>,
}

impl Progress {
    /// Starts a spinner saying `label` on the current tokio runtime, when
    /// a person watches stderr.
    pub(crate) fn start(global: &crate::cli::GlobalArgs, label: &str) -> Option<Progress> {
        if global.json || global.quiet || !std::io::stderr().is_terminal() {
            return None;
        }
        let colored = colored(global);
        let drawn = Arc::new(Mutex::new(false));
        *lock(&CURRENT) = Some(Arc::clone(&drawn));
        let label = label.to_string();
        let drawing = Arc::clone(&drawn);
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(TICK);
            for frame in FRAMES.iter().cycle() {
                tick.tick().await;
                let text = format!("{frame} {label}");
                let text = if colored {
                    format!("\x1b[2m{text}\x1b[0m")
                } else {
                    text
                };
                let mut drawn = lock(&drawing);
                let mut err = std::io::stderr().lock();
                let _ = write!(err, "\r\x1b[K{text}");
                let _ = err.flush();
                *drawn = true;
            }
        });
        Some(Progress { drawn, task })
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.task.abort();
        erase(&self.drawn);
        *lock(&CURRENT) = None;
    }
}

/// Erases the spinner of the work under way, if one is drawn, before
/// something else is printed; it comes back on the next tick, below.
pub(crate) fn clear() {
    if let Some(drawn) = lock(&CURRENT).as_ref() {
        erase(drawn);
    }
}

fn erase(drawn: &Mutex<bool>) {
    let mut drawn = lock(drawn);
    if *drawn {
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[K");
        let _ = err.flush();
        *drawn = false;
    }
}

fn lock<T>(value: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    value
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
