//! The terminal and the event loop. One channel carries key presses, resizes and data
//! refreshes to the loop; a data thread refreshes every `interval`, an input thread reads
//! keys. `TerminalGuard` restores the terminal when dropped and from a panic hook, so the
//! shell is usable whatever happens.

use std::io::{self, Stdout};
use std::sync::mpsc;
use std::sync::Once;
use std::time::{Duration, Instant};

use crossterm::event::{self, Event as TermEvent};
use crossterm::execute;
use crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use ratatui::backend::CrosstermBackend;
use ratatui::Terminal;

use crate::app::{Action, App, Command};
use crate::model::ProcessKey;
use crate::Source;

/// Each request made while the monitor keeps GPU tracing on for a process lasts this long
/// (renewed at every refresh): tracing stops a few seconds after the monitor stops asking.
const GPU_REQUEST_SECS: u64 = 3;

/// What the loop waits for.
pub enum Event {
    Key(crossterm::event::KeyEvent),
    Resize,
    Data(Box<crate::model::Refresh>),
    /// The data thread stopped (it panicked): say so instead of freezing.
    SourceDied(String),
}

fn restore() {
    let _ = disable_raw_mode();
    let _ = execute!(io::stdout(), LeaveAlternateScreen, crossterm::cursor::Show);
}

/// Puts the terminal in raw mode on the alternate screen; undoes it when dropped.
pub struct TerminalGuard {
    pub terminal: Terminal<CrosstermBackend<Stdout>>,
}

impl TerminalGuard {
    pub fn new() -> io::Result<TerminalGuard> {
        static HOOK: Once = Once::new();
        HOOK.call_once(|| {
            let prev = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                restore();
                prev(info);
            }));
        });
        enable_raw_mode()?;
        if let Err(e) = execute!(io::stdout(), EnterAlternateScreen, crossterm::cursor::Hide) {
            restore();
            return Err(e);
        }
        let terminal = Terminal::new(CrosstermBackend::new(io::stdout()))?;
        Ok(TerminalGuard { terminal })
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore();
    }
}

/// Runs the monitor until `q`. `interval` is the refresh period.
pub fn run(mut source: Box<dyn Source>, mut app: App, interval: Duration) -> anyhow::Result<()> {
    let (tx, rx) = mpsc::channel::<Event>();
    let (cmd_tx, cmd_rx) = mpsc::channel::<Command>();

    // Data: refresh every interval; commands (reset, forget) are applied at once.
    let data_tx = tx.clone();
    std::thread::Builder::new()
        .name("syncspy-top-data".into())
        .spawn(move || {
            // The process whose GPU tracing the monitor keeps asking for (the `g` key).
            let mut gpu: Option<ProcessKey> = None;
            let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| loop {
                let started = Instant::now();
                let mut snap = source.step();
                if let Some(k) = gpu {
                    snap.gpu_request = Some((k, source.request_gpu_trace(k, GPU_REQUEST_SECS)));
                }
                if data_tx.send(Event::Data(Box::new(snap))).is_err() {
                    return;
                }
                let mut left = interval.saturating_sub(started.elapsed());
                loop {
                    match cmd_rx.recv_timeout(left) {
                        Ok(Command::Reset) => source.reset(),
                        Ok(Command::Forget(k)) => source.forget(k),
                        Ok(Command::TraceGpu(k)) => {
                            gpu = k;
                            if let Some(k) = k {
                                let _ = source.request_gpu_trace(k, GPU_REQUEST_SECS);
                            }
                        }
                        Err(mpsc::RecvTimeoutError::Timeout) => break,
                        Err(mpsc::RecvTimeoutError::Disconnected) => return,
                    }
                    left = interval.saturating_sub(started.elapsed());
                    if left.is_zero() {
                        break;
                    }
                }
            }));
            if let Err(p) = res {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "unknown panic".into());
                let _ = data_tx.send(Event::SourceDied(msg));
            }
        })?;

    // Input: blocking reads; a read error ends the monitor.
    let key_tx = tx;
    std::thread::Builder::new()
        .name("syncspy-top-input".into())
        .spawn(move || loop {
            let ev = match event::read() {
                Ok(TermEvent::Key(k)) => Event::Key(k),
                Ok(TermEvent::Resize(..)) => Event::Resize,
                Ok(_) => continue,
                Err(_) => return,
            };
            if key_tx.send(ev).is_err() {
                return;
            }
        })?;

    let mut guard = TerminalGuard::new()?;
    let size = guard.terminal.size()?;
    app.update(Action::Resize(size.width, size.height));
    guard.terminal.draw(|f| f.render_widget(&app, f.area()))?;
    while let Ok(ev) = rx.recv() {
        match ev {
            Event::Key(k) => {
                if let Some(a) = app.action_for(k) {
                    app.update(a);
                }
            }
            Event::Resize => {
                // The size the next drawing gets, whatever size the event said: more
                // resizes may have come since.
                guard.terminal.autoresize()?;
                let size = guard.terminal.size()?;
                app.update(Action::Resize(size.width, size.height));
            }
            Event::Data(s) => app.update(Action::Data(s)),
            Event::SourceDied(msg) => {
                app.refresh
                    .problems
                    .push(format!("data source stopped: {msg}; press q"));
            }
        }
        for c in app.commands.drain(..) {
            let _ = cmd_tx.send(c);
        }
        if app.quit {
            break;
        }
        guard.terminal.draw(|f| f.render_widget(&app, f.area()))?;
    }
    drop(guard);
    Ok(())
}

/// Longest `print_screen` waits, after `after`, for call sites still being symbolized.
const SETTLE: Duration = Duration::from_secs(15);

/// Follows for `after`, refreshing every `interval` (so the "last N seconds" rates have
/// data), then returns one screen of `width` x `height` as plain text. Waits up to 15 s more
/// for call sites still being symbolized.
///
/// Fails with the source's reason when its latest refresh could not read the data at all (an
/// agent unreachable, or refusing the token): a screen would show no process and hide why.
pub fn print_screen(
    mut source: Box<dyn Source>,
    mut app: App,
    interval: Duration,
    after: Duration,
    (width, height): (u16, u16),
) -> Result<String, String> {
    app.update(Action::Resize(width, height));
    let started = Instant::now();
    // With the GPU pane open (`--gpu`), its process's GPU is traced while the monitor follows.
    let mut gpu: Option<ProcessKey> = None;
    loop {
        let step = Instant::now();
        let mut snap = source.step();
        if let Some(k) = gpu {
            snap.gpu_request = Some((k, source.request_gpu_trace(k, GPU_REQUEST_SECS)));
        }
        app.update(Action::Data(Box::new(snap)));
        for c in std::mem::take(&mut app.commands) {
            match c {
                Command::TraceGpu(k) => {
                    gpu = k;
                    if let Some(k) = k {
                        let _ = source.request_gpu_trace(k, GPU_REQUEST_SECS);
                    }
                }
                Command::Reset => source.reset(),
                Command::Forget(k) => source.forget(k),
            }
        }
        let elapsed = started.elapsed();
        let settled = !source.busy() || elapsed >= after + SETTLE;
        if elapsed >= after && settled {
            break;
        }
        std::thread::sleep(interval.saturating_sub(step.elapsed()));
    }
    if let Some(e) = source.failure() {
        return Err(e);
    }
    // The process detailed is the top row (the GPU pane's stays the one it traced).
    if gpu.is_none() {
        app.select_top();
    }
    Ok(crate::ui::screen_text(&app, width, height))
}
