//! The terminal UI: `rtune run` on a terminal shows its sweep live (fed by callback events over
//! a channel: the controller never waits for the screen), `rtune watch DIR` shows a running
//! sweep live through its driver's stream (`stream`) and any other experiment from its files
//! (re-read every second). Drawn on its own thread, at most 10 times a second.

pub mod view;

use std::io::Stdout;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ratatui::DefaultTerminal;
use ratatui::crossterm::event::{self, Event as TermEvent, KeyCode, KeyEventKind, KeyModifiers};
use rtune_searchers::TrialStatus;

use super::model::{Event, Follow, Model, View};
use super::progress::Progress;
use rtune_driver::tune::Control;

/// At most 10 redraws a second.
const FRAME: Duration = Duration::from_millis(100);
/// How often the header's GPU line is sampled (NVML) while a sweep runs.
const GPU_SAMPLE: Duration = Duration::from_secs(1);

/// Feeds a live TUI: it only sends events (the controller never waits for the screen).
#[derive(Clone)]
pub(crate) struct Feed(mpsc::Sender<Event>);

impl Feed {
    pub fn new() -> (Feed, mpsc::Receiver<Event>) {
        let (tx, rx) = mpsc::channel();
        (Feed(tx), rx)
    }

    /// Tells the TUI the sweep is over (also when it ended without `on_experiment_end`).
    pub fn end(&self) {
        let _ = self.0.send(Event::End);
    }
}

impl Follow for Feed {
    fn name(&self) -> &'static str {
        "tui"
    }
    fn follow(&self, event: Event) {
        let _ = self.0.send(event);
    }
}

/// What a key asks for.
#[derive(Debug, PartialEq)]
enum Action {
    Nothing,
    /// Leave the view (the sweep goes on).
    Quit,
    /// Stop the sweep, resumable.
    Stop,
    /// End the selected trial (as a scheduler would).
    StopTrial(String),
    /// Hold the selected trial (`resume`: a paused one runs again).
    HoldTrial {
        id: String,
        resume: bool,
    },
    /// Ctrl-C: as SIGINT (raw mode keeps the terminal from sending it).
    CtrlC,
}

fn on_key(code: KeyCode, modifiers: KeyModifiers, view: &mut View, model: &Model) -> Action {
    let rows = model.rows(view);
    let at = view.selected_row(model, &rows);
    let columns = 4 + model.param_names().len();
    match code {
        KeyCode::Char('c') if modifiers.contains(KeyModifiers::CONTROL) => return Action::CtrlC,
        // Esc closes the help first, as it does in other terminal programs.
        KeyCode::Esc if view.help => view.help = false,
        KeyCode::Char('q') | KeyCode::Esc => return Action::Quit,
        KeyCode::Char('x') => return Action::Stop,
        KeyCode::Char('t') | KeyCode::Char('p') => {
            // The trial the viewer sees highlighted, however the rows moved since.
            if let Some(row) = at {
                let trial = &model.trials()[rows[row]];
                let id = trial.id.clone();
                return match code {
                    KeyCode::Char('t') => Action::StopTrial(id),
                    _ => Action::HoldTrial { id, resume: trial.status == TrialStatus::Paused },
                };
            }
        }
        KeyCode::Up | KeyCode::Char('k') => {
            view.select(model, &rows, at.unwrap_or(0).saturating_sub(1))
        }
        KeyCode::Down | KeyCode::Char('j') => view.select(model, &rows, at.map_or(0, |a| a + 1)),
        KeyCode::PageUp => view.select(model, &rows, at.unwrap_or(0).saturating_sub(10)),
        KeyCode::PageDown => view.select(model, &rows, at.map_or(0, |a| a + 10)),
        KeyCode::Char('s') => {
            view.sort = (view.sort + 1) % columns;
            // The metric sorts best first; other columns smallest first.
            view.descending = view.sort == 3;
        }
        KeyCode::Char('r') => view.descending = !view.descending,
        KeyCode::Char('f') => {
            let at = super::model::FILTERS.iter().position(|f| *f == view.filter).unwrap_or(0);
            view.filter = super::model::FILTERS[(at + 1) % super::model::FILTERS.len()];
            (view.selected, view.trial) = (0, None);
        }
        KeyCode::Char('?') | KeyCode::Char('h') => view.help = !view.help,
        _ => {}
    }
    Action::Nothing
}

/// The keys pressed within `wait`.
fn keys(wait: Duration) -> std::io::Result<Vec<(KeyCode, KeyModifiers)>> {
    let mut out = Vec::new();
    let mut wait = wait;
    while event::poll(wait)? {
        if let TermEvent::Key(k) = event::read()?
            && k.kind == KeyEventKind::Press
        {
            out.push((k.code, k.modifiers));
        }
        wait = Duration::ZERO;
    }
    Ok(out)
}

/// Takes the terminal (raw mode, alternate screen) and gives it back when dropped, also when
/// the thread unwinds.
struct Screen(DefaultTerminal);

impl Screen {
    fn take() -> std::io::Result<Screen> {
        rtune_driver::log::mute_stderr(true);
        Ok(Screen(ratatui::try_init()?))
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let _ = ratatui::try_restore();
        rtune_driver::log::mute_stderr(false);
    }
}

/// `rtune run` on a terminal: shows the sweep live until it ends or the viewer leaves (then
/// plain progress lines go on). `x` and Ctrl-C interrupt the sweep; a second Ctrl-C ends the
/// process at once.
pub fn live(
    mut model: Model,
    events: mpsc::Receiver<Event>,
    control: Control,
    progress: Progress<Stdout>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let began = Instant::now();
        let base = model.elapsed_s;
        let mut view = View { sort: 3, descending: true, live: true, ..View::default() };
        let mut screen = match Screen::take() {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!("no terminal UI ({e}); progress lines instead");
                progress.know(model.clone());
                None
            }
        };
        let mut ctrl_c = 0;
        let mut last_draw = Instant::now() - FRAME;
        let mut gpus_at = Instant::now() - GPU_SAMPLE;
        loop {
            // Events first, all that came: the screen shows the newest state.
            let mut ended = false;
            loop {
                let event = match events.try_recv() {
                    Ok(e) => e,
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => {
                        ended = true;
                        break;
                    }
                };
                let over = matches!(event, Event::End);
                // Without the screen the progress lines follow the sweep instead.
                match screen {
                    None => progress.follow(event),
                    Some(_) => model.apply(&event),
                }
                if over {
                    ended = true;
                    break;
                }
            }
            if ended {
                return;
            }
            model.elapsed_s = base + began.elapsed().as_secs_f64();
            if screen.is_some() && gpus_at.elapsed() >= GPU_SAMPLE {
                model.sample_gpus();
                gpus_at = Instant::now();
            }
            let Some(s) = screen.as_mut() else {
                std::thread::sleep(FRAME);
                continue;
            };
            if last_draw.elapsed() >= FRAME {
                let _ = s.0.draw(|f| view::render(f, &model, &view));
                last_draw = Instant::now();
            }
            let pressed = keys(FRAME.saturating_sub(last_draw.elapsed())).unwrap_or_default();
            for (code, modifiers) in pressed {
                match on_key(code, modifiers, &mut view, &model) {
                    Action::Nothing => {}
                    Action::Quit => {
                        screen = None;
                        progress.know(model.clone());
                    }
                    Action::Stop => control.interrupt(),
                    Action::StopTrial(id) => control.stop_trial(&id),
                    Action::HoldTrial { id, resume: false } => control.pause_trial(&id),
                    Action::HoldTrial { id, resume: true } => control.resume_trial(&id),
                    Action::CtrlC => {
                        ctrl_c += 1;
                        if ctrl_c == 1 {
                            control.interrupt();
                        } else {
                            drop(screen.take());
                            eprintln!("rtune: stopped at once");
                            std::process::exit(crate::exit::EXIT_INTERRUPTED);
                        }
                    }
                }
                if screen.is_none() {
                    println!("left the view; the sweep goes on (Ctrl-C stops it, resumable)");
                    break;
                }
            }
        }
    })
}

/// Whether this process may draw on stdout's terminal: stdout is one, and this process is in
/// its foreground process group. `rtune run .. &` in an interactive shell and `timeout N rtune
/// run ..` run in a background group, where setting the terminal up would stop the process
/// (SIGTTOU) before it did anything: they print progress lines instead.
pub(crate) fn owns_terminal() -> bool {
    use std::io::IsTerminal;
    // SAFETY: both only read process group ids (the terminal's, this process's).
    let (foreground, ours) = unsafe { (libc::tcgetpgrp(libc::STDOUT_FILENO), libc::getpgrp()) };
    std::io::stdout().is_terminal() && foreground == ours
}

/// `rtune watch DIR`: live from the sweep's driver while it runs (`x` and `t` reach it), else
/// from the experiment's files (re-read every second), until `q`.
pub fn watch(dir: &Path) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    anyhow::ensure!(
        std::io::stdout().is_terminal(),
        "rtune watch needs a terminal; `rtune show {}` prints the same as text",
        dir.display()
    );
    let mut remote = super::stream::attach(dir);
    let mut model = match remote {
        Some(_) => Model::new(String::new(), dir.to_owned(), Default::default()),
        None => Model::read(dir)?,
    };
    let mut view = View { sort: 3, descending: true, live: remote.is_some(), ..View::default() };
    let mut screen = Screen::take()?;
    let mut read_at = Instant::now();
    // The driver's clock at its last snapshot, and ours then.
    let mut clock = (model.elapsed_s, Instant::now());
    let mut gpus_at = Instant::now() - GPU_SAMPLE;
    loop {
        if let Some(live) = &remote {
            loop {
                match live.updates.try_recv() {
                    Ok(super::stream::Update::Snapshot(m)) => {
                        let gpus = std::mem::take(&mut model.gpus);
                        model = *m;
                        model.gpus = gpus;
                        clock = (model.elapsed_s, Instant::now());
                    }
                    Ok(super::stream::Update::Event(event)) => model.apply(&event),
                    Ok(super::stream::Update::Lost(why)) => {
                        tracing::info!("watch: {why}; reading the files now");
                        model.over = true;
                    }
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => {
                        model.over = true;
                        break;
                    }
                }
            }
            if model.over {
                // The sweep ended (or its driver went away): its files have the last word.
                remote = None;
                view.live = false;
                model = Model::read(dir).unwrap_or(model);
            } else {
                model.elapsed_s = clock.0 + clock.1.elapsed().as_secs_f64();
                if gpus_at.elapsed() >= GPU_SAMPLE {
                    model.sample_gpus();
                    gpus_at = Instant::now();
                }
            }
        } else if read_at.elapsed() >= Duration::from_secs(1) {
            if let Ok(m) = Model::read(dir) {
                model = m;
            }
            read_at = Instant::now();
        }
        screen.0.draw(|f| view::render(f, &model, &view))?;
        for (code, modifiers) in keys(FRAME)? {
            match (on_key(code, modifiers, &mut view, &model), &remote) {
                (Action::Quit | Action::CtrlC, _) => return Ok(()),
                (Action::Stop, Some(live)) => live.interrupt(),
                (Action::StopTrial(id), Some(live)) => live.stop_trial(&id),
                (Action::HoldTrial { id, resume }, Some(live)) => live.hold_trial(&id, resume),
                // From the files there is no driver to ask.
                (
                    Action::Stop
                    | Action::StopTrial(_)
                    | Action::HoldTrial { .. }
                    | Action::Nothing,
                    _,
                ) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests;
