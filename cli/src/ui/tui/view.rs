//! Drawing the model: a header (name, time, trials by status, the best, pool bars), the trial
//! table, the selected trial's learning curve and log tail, the scheduler's rungs or exploits,
//! and the keys. Pure: the same model
//! and view draw the same screen (tested on ratatui's TestBackend).

use ratatui::Frame;
use ratatui::layout::{Constraint, Direction, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{
    Axis, Block, Borders, Cell, Chart, Dataset, GraphType, Paragraph, Row, Table, TableState,
};
use rtune_searchers::{SchedulerStatus, TrialId, TrialStatus};

use crate::ui::format::{clock, number, status_name};
use crate::ui::model::{Model, View};
use rtune_driver::cluster::pool::GpuUsage;

/// Below this the screen says so instead of drawing garbage.
pub(crate) const MIN_WIDTH: u16 = 60;
pub(crate) const MIN_HEIGHT: u16 = 16;

const LIVE_KEYS: &str = concat!(
    "↑↓ select  s sort  r reverse  f filter  t stop trial  p pause/resume  x stop sweep  ",
    "q quit view  ? help"
);
const WATCH_KEYS: &str = "↑↓ select  s sort  r reverse  f filter  q quit  ? help";
/// The keys line where the whole one does not fit (`?` lists them all).
const SHORT_KEYS: &str = "↑↓ select  ? all keys  q quit";
/// The width from which the chart is drawn beside the table.
const WIDE: u16 = 110;

fn bar(label: &str, used: f64, total: f64, width: usize) -> String {
    if total <= 0.0 {
        return format!("{label} -");
    }
    let filled = ((used / total).clamp(0.0, 1.0) * width as f64).round() as usize;
    format!(
        "{label} {}{} {}/{}",
        "█".repeat(filled),
        "░".repeat(width - filled),
        number(used),
        number(total)
    )
}

fn status_color(status: TrialStatus) -> Color {
    match status {
        TrialStatus::Running => Color::Cyan,
        TrialStatus::Terminated => Color::Green,
        TrialStatus::Error => Color::Red,
        TrialStatus::Paused | TrialStatus::Interrupted => Color::Yellow,
        _ => Color::Gray,
    }
}

pub fn render(frame: &mut Frame<'_>, model: &Model, view: &View) {
    let area = frame.area();
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        let text = format!(
            "terminal too small: {}x{}; rtune needs at least {MIN_WIDTH}x{MIN_HEIGHT}",
            area.width, area.height
        );
        frame.render_widget(Paragraph::new(text), area);
        return;
    }
    let [header, middle, log, keys] = Layout::default()
        .direction(Direction::Vertical)
        .constraints([
            // A line more for the GPUs' use, where this machine's are in the sweep.
            Constraint::Length(if model.gpus.is_empty() { 3 } else { 4 }),
            Constraint::Min(6),
            Constraint::Length(7),
            Constraint::Length(1),
        ])
        .areas(area);
    render_header(frame, header, model);
    let rows = model.rows(view);
    let selected = view.selected_row(model, &rows).map(|row| rows[row]);
    // A narrow terminal gives the table the whole width (ids and statuses are read whole) and
    // the chart the rows under it, where there are enough (80x24 has).
    if middle.width >= WIDE {
        let [table, chart] = Layout::default()
            .direction(Direction::Horizontal)
            .constraints([Constraint::Percentage(62), Constraint::Percentage(38)])
            .areas(middle);
        render_table(frame, table, model, view, &rows);
        render_chart(frame, chart, model, selected);
    } else if middle.height >= 12 {
        let [table, chart] = Layout::default()
            .direction(Direction::Vertical)
            .constraints([Constraint::Min(6), Constraint::Length(middle.height / 2)])
            .areas(middle);
        render_table(frame, table, model, view, &rows);
        render_chart(frame, chart, model, selected);
    } else {
        render_table(frame, middle, model, view, &rows);
    }
    match &model.scheduler {
        Some(status) => {
            let [log, scheduler] = Layout::default()
                .direction(Direction::Horizontal)
                .constraints([Constraint::Percentage(62), Constraint::Percentage(38)])
                .areas(log);
            render_log(frame, log, model, selected);
            render_scheduler(frame, scheduler, status);
        }
        None => render_log(frame, log, model, selected),
    }
    if view.help {
        render_help(frame, middle, view.live);
    }
    let keys_text = match (view.live, keys.width as usize) {
        (true, w) if w >= LIVE_KEYS.chars().count() => LIVE_KEYS,
        (false, w) if w >= WATCH_KEYS.chars().count() => WATCH_KEYS,
        _ => SHORT_KEYS,
    };
    frame
        .render_widget(Paragraph::new(keys_text).style(Style::default().fg(Color::DarkGray)), keys);
}

/// The keys, one a line, over the table (`?`; `?` or Esc closes it).
fn render_help(frame: &mut Frame<'_>, area: Rect, live: bool) {
    let mut lines = vec![
        "↑ ↓        select a trial (the selection follows it as the table re-sorts)",
        "s          sort by the next column",
        "r          reverse the order",
        "f          filter by status: PENDING, RUNNING, TERMINATED, ERROR, PAUSED, all",
    ];
    if live {
        lines.extend([
            "t          stop the selected trial (TERMINATED, its results kept)",
            "p          pause the selected trial until p again (from its checkpoint)",
            "x          stop the sweep, resumable (rtune resume DIR)",
            "q          leave the view (the sweep goes on)",
        ]);
    } else {
        lines.push("q          quit");
    }
    lines.push("? or Esc   close this help");
    let width =
        (lines.iter().map(|l| l.chars().count()).max().unwrap_or(0) as u16 + 4).min(area.width);
    let height = (lines.len() as u16 + 2).min(area.height);
    let popup = Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    };
    frame.render_widget(ratatui::widgets::Clear, popup);
    let text: Vec<Line<'_>> = lines.into_iter().map(Line::from).collect();
    let block = Block::default().borders(Borders::ALL).title(" keys ");
    frame.render_widget(Paragraph::new(text).block(block), popup);
}

fn render_header(frame: &mut Frame<'_>, area: Rect, model: &Model) {
    let mut time = format!("elapsed {}", clock(model.elapsed_s));
    if let Some(budget) = model.time_budget_s {
        time.push_str(&format!(" of {} budget", clock(budget)));
    } else if let Some((share, left)) = model.progress(model.elapsed_s) {
        time.push_str(&format!(", {:.0}% done", share * 100.0));
        if let Some(left) = left {
            time.push_str(&format!(", ETA {}", clock(left)));
        }
    }
    let state = if model.count(TrialStatus::Interrupted) > 0 {
        " · interrupted (rtune resume goes on)"
    } else if model.over {
        " · ended"
    } else {
        ""
    };
    let title = Line::from(vec![
        Span::styled(
            format!("rtune · {}", model.name),
            Style::default().add_modifier(Modifier::BOLD),
        ),
        Span::raw(format!(" · {time}{state} · {}", model.path.display())),
    ]);
    let mut counts = Vec::new();
    for status in [
        TrialStatus::Running,
        TrialStatus::Paused,
        TrialStatus::Interrupted,
        TrialStatus::Terminated,
        TrialStatus::Error,
    ] {
        let n = model.count(status);
        if n > 0 {
            counts.push(Span::styled(
                format!("{n} {} ", status_name(status)),
                Style::default().fg(status_color(status)),
            ));
        }
    }
    if model.pending() > 0 {
        counts.push(Span::raw(format!("{} PENDING ", model.pending())));
    }
    if model.objectives.len() > 1 {
        let names: Vec<&str> = model.objectives.iter().map(|o| o.metric.as_str()).collect();
        counts.push(Span::styled(
            format!("· Pareto front of {}: {} trials", names.join(", "), model.front().len()),
            Style::default().fg(Color::Green),
        ));
    }
    if let (Some(best), Some(metric)) = (model.best(), model.objectives.metric()) {
        let t = &model.trials()[best];
        let v = t.last.get(metric).copied().unwrap_or(f64::NAN);
        counts.push(Span::styled(
            format!("· best {metric}={} ({})", number(v), t.id),
            Style::default().fg(Color::Green),
        ));
    }
    let (cpus, gpus) = model.held();
    let pool = format!(
        "{}   {}",
        bar("CPU", cpus, model.capacity.0, 20),
        bar("GPU", gpus, model.capacity.1, 10)
    );
    let mut text = vec![title, Line::from(counts), Line::from(pool)];
    if !model.gpus.is_empty() {
        let gpus: Vec<String> = model.gpus.iter().map(GpuUsage::short).collect();
        text.push(Line::from(gpus.join("   ")));
    }
    frame.render_widget(Paragraph::new(text), area);
}

fn render_table(frame: &mut Frame<'_>, area: Rect, model: &Model, view: &View, rows: &[usize]) {
    let params = model.param_names();
    let several = model.objectives.len() > 1;
    let trial = if several { "*front trial" } else { "trial" };
    let mut headers = vec![trial.to_owned(), "status".into(), "iter".into()];
    if model.elastic.is_some() {
        headers.push("ranks".into());
    }
    let metrics = model.shown_metrics();
    headers.push(if metrics.is_empty() { "-".into() } else { metrics.join(" / ") });
    headers.extend(params.iter().cloned());
    // The ranks column sorts nothing: the sort counts the columns without it.
    let sorts = |i: usize| match model.elastic {
        Some(_) if i == 3 => None,
        Some(_) if i > 3 => Some(i - 1),
        _ => Some(i),
    };
    let header = Row::new(headers.iter().enumerate().map(|(i, h)| {
        let sorted = sorts(i) == Some(view.sort);
        let mark = if sorted { if view.descending { "▼" } else { "▲" } } else { "" };
        Cell::from(format!("{h}{mark}"))
    }))
    .style(Style::default().add_modifier(Modifier::BOLD));
    // Only the rows on screen are built: a sweep of 10,000 trials draws as fast as one of 10.
    let visible = area.height.saturating_sub(3) as usize;
    let selected = view.selected_row(model, rows).unwrap_or(0);
    let first = selected.saturating_sub(visible.saturating_sub(1));
    let best = model.best();
    let front = model.front();
    let several = model.objectives.len() > 1;
    let body = rows.iter().skip(first).take(visible).map(|&i| {
        let t = &model.trials()[i];
        let get = |k: &str| t.last.get(k).map_or("-".into(), |v| number(*v));
        // The Pareto front marked as `rtune show` marks it.
        let id = match (several, front.contains(&i)) {
            (true, true) => format!("*{}", t.id),
            (true, false) => format!(" {}", t.id),
            _ => t.id.clone(),
        };
        let mut cells = vec![
            Cell::from(id),
            Cell::from(status_name(t.status)).style(Style::default().fg(status_color(t.status))),
            Cell::from(get("training_iteration")),
        ];
        // An elastic trial's ranks now, of its range: `3/2-4`.
        if let Some((min, max)) = model.elastic {
            cells.push(Cell::from(format!("{}/{min}-{max}", get("world_size"))));
        }
        cells.push(Cell::from(match metrics.as_slice() {
            [] => "-".into(),
            some => some.iter().map(|m| get(m)).collect::<Vec<_>>().join(" / "),
        }));
        for p in &params {
            cells.push(Cell::from(
                t.params.iter().find(|(k, _)| k == p).map_or(String::new(), |(_, v)| v.clone()),
            ));
        }
        let row = Row::new(cells);
        if Some(i) == best || front.contains(&i) {
            row.style(Style::default().add_modifier(Modifier::BOLD).fg(Color::Green))
        } else {
            row
        }
    });
    // Each metric shown 9 wide, with " / " between.
    let metric_width = (metrics.len().max(1) * 12 - 3) as u16;
    let id_width = if several { 14 } else { 13 };
    // The status column holds the longest status whole: INTERRUPTED.
    const STATUS_WIDTH: u16 = 11;
    let mut widths =
        vec![Constraint::Length(id_width), Constraint::Length(STATUS_WIDTH), Constraint::Length(5)];
    let ranks_width = if model.elastic.is_some() { 8 } else { 0 };
    if ranks_width > 0 {
        widths.push(Constraint::Length(ranks_width));
    }
    widths.push(Constraint::Length(metric_width));
    // Params while they fit whole (the table's spacing is a column each): the id and status
    // columns are never cut to fit more.
    let used = 2
        + id_width
        + STATUS_WIDTH
        + 5
        + ranks_width
        + u16::from(ranks_width > 0)
        + metric_width
        + 4;
    let mut room = area.width.saturating_sub(used) as usize;
    for p in &params {
        let width = p.len().max(7);
        if width + 1 > room {
            break;
        }
        room -= width + 1;
        widths.push(Constraint::Length(width as u16));
    }
    let filter = view.filter.map_or("all".into(), status_name);
    let title = format!(" trials ({} shown, filter: {filter}) ", rows.len());
    let table = Table::new(body, widths)
        .header(header)
        .block(Block::default().borders(Borders::ALL).title(title))
        .row_highlight_style(Style::default().add_modifier(Modifier::REVERSED));
    let mut state = TableState::default();
    if !rows.is_empty() {
        state.select(Some(selected - first));
    }
    frame.render_stateful_widget(table, area, &mut state);
}

fn render_chart(frame: &mut Frame<'_>, area: Rect, model: &Model, selected: Option<usize>) {
    let metric = model.charted().unwrap_or("-");
    // (legend, points, colour) of each line drawn; trials by their number (`_00003`): every
    // id of a sweep begins alike.
    type Curve<'m> = (String, &'m [(f64, f64)], Color);
    let number_of = |i: usize| {
        let id = &model.trials()[i].id;
        id.rsplit_once('_').map_or_else(|| id.clone(), |(_, n)| format!("_{n}"))
    };
    let mut curves: Vec<Curve<'_>> = Vec::new();
    if let Some(i) = selected {
        curves.push((number_of(i), &model.trials()[i].curve, Color::Cyan));
    }
    if let Some(b) = model.best().filter(|&b| Some(b) != selected) {
        curves.push((format!("best {}", number_of(b)), &model.trials()[b].curve, Color::Green));
    }
    // The legend is in the title, where it never hides the curves (ratatui's hides itself in
    // a small chart).
    let mut title = vec![Span::raw(format!(" {metric} by iteration "))];
    for (name, _, color) in &curves {
        title.push(Span::styled(format!("━ {name} "), Style::default().fg(*color)));
    }
    let block = Block::default().borders(Borders::ALL).title(Line::from(title));
    let points = curves.iter().flat_map(|(_, c, _)| c.iter());
    let (mut x_max, mut y_min, mut y_max) = (1.0f64, f64::INFINITY, f64::NEG_INFINITY);
    for &(x, y) in points.filter(|(_, y)| y.is_finite()) {
        x_max = x_max.max(x);
        y_min = y_min.min(y);
        y_max = y_max.max(y);
    }
    if !y_min.is_finite() {
        frame.render_widget(Paragraph::new("no results yet").block(block), area);
        return;
    }
    if y_max - y_min < 1e-12 {
        y_max = y_min + 1.0;
    }
    let datasets = curves
        .iter()
        .map(|(_, data, color)| {
            // Unnamed: ratatui draws no legend of its own over the newest points.
            Dataset::default()
                .marker(Marker::Braille)
                .graph_type(GraphType::Line)
                .style(Style::default().fg(*color))
                .data(data)
        })
        .collect();
    let chart = Chart::new(datasets)
        .block(block)
        .x_axis(Axis::default().bounds([0.0, x_max]).labels(vec!["0".to_owned(), number(x_max)]))
        .y_axis(Axis::default().bounds([y_min, y_max]).labels(vec![number(y_min), number(y_max)]));
    frame.render_widget(chart, area);
}

/// The selected trial's ranks (as its latest result measured them: a straggler marked, an
/// input-bound trial said), then its log's tail.
fn render_log(frame: &mut Frame<'_>, area: Rect, model: &Model, selected: Option<usize>) {
    let height = area.height.saturating_sub(2) as usize;
    let (title, text) = match selected {
        Some(i) => {
            let trial = &model.trials()[i];
            let mut text = rank_lines(&trial.last);
            let tail = model.log_tail(i, height.saturating_sub(text.len()));
            text.extend(tail.into_iter().map(Line::from));
            (format!(" log of {} ", trial.id), text)
        }
        None => (" log ".into(), Vec::new()),
    };
    frame.render_widget(
        Paragraph::new(text).block(Block::default().borders(Borders::ALL).title(title)),
        area,
    );
}

/// A line per rank of a trial with several (a straggler in yellow), one where its ranks wait
/// for data too long, and one where its checkpoints' uploads are behind (its latest report
/// waited for the previous one's); none otherwise.
fn rank_lines(last: &rtune_searchers::Metrics) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    let wait = rtune_driver::metrics::run_figures(last).checkpoint_wait_s;
    if wait > 0.0 {
        let text = format!(
            "uploads behind: the latest report waited {wait:.3}s for the previous checkpoint's"
        );
        lines.push(Line::styled(text, Style::default().fg(Color::Yellow)));
    }
    let Some(ranks) = crate::inspect::ranks(std::slice::from_ref(last)) else { return lines };
    if ranks.ranks.len() > 1 {
        for (rank, r) in ranks.ranks.iter().enumerate() {
            let text = format!(
                "rank {rank}: step {:.3}s, busy {:.3}s, data {:.0}%, collective {:.0}%{}",
                r.step_s,
                r.busy_s,
                r.data_share * 100.0,
                r.collective_share * 100.0,
                if r.straggler { "  straggler" } else { "" }
            );
            let style = match r.straggler {
                true => Style::default().fg(Color::Yellow),
                false => Style::default().fg(Color::DarkGray),
            };
            lines.push(Line::styled(text, style));
        }
    }
    if let Some(share) = ranks.input_bound {
        let text =
            format!("input-bound: the ranks wait for data {:.0}% of their steps", share * 100.0);
        lines.push(Line::styled(text, Style::default().fg(Color::Yellow)));
    }
    lines
}

/// ASHA's rungs (milestone, results recorded, the cutoff now) or PBT's latest exploits.
fn render_scheduler(frame: &mut Frame<'_>, area: Rect, status: &SchedulerStatus) {
    let short = |t: &TrialId| format!("_{:05}", t.0);
    let (title, lines): (String, Vec<String>) = if status.kind == "pbt" {
        let lines = status
            .exploits
            .iter()
            .map(|e| {
                format!(
                    "{}={}  {} ← {}",
                    status.time_attr,
                    number(e.time),
                    short(&e.trial),
                    short(&e.source)
                )
            })
            .collect();
        (format!(" PBT exploits · {} so far ", status.perturbations), lines)
    } else {
        let brackets = status.rungs.iter().map(|r| r.bracket).max().map_or(0, |b| b + 1);
        let lines = status
            .rungs
            .iter()
            .map(|r| {
                let bracket = if brackets > 1 { format!("b{} ", r.bracket) } else { String::new() };
                let cutoff = r.cutoff.map_or("-".to_owned(), number);
                let (milestone, recorded) = (number(r.milestone), r.recorded);
                // Short words in a narrow panel: the cutoff is what is read.
                if area.width >= 44 {
                    format!("{bracket}t≥ {milestone:>5}  {recorded:>4} recorded  cutoff {cutoff}")
                } else {
                    format!("{bracket}t≥{milestone:>4} {recorded:>3} rec cut {cutoff}")
                }
            })
            .collect();
        let rungs = if area.width >= 44 { " rungs" } else { "" };
        let kind = status.kind.to_uppercase();
        let title = format!(" {kind}{rungs} · {} stopped early ", status.stopped);
        (title, lines)
    };
    let text: Vec<Line> = lines.into_iter().map(Line::from).collect();
    frame.render_widget(
        Paragraph::new(text).block(Block::default().borders(Borders::ALL).title(title)),
        area,
    );
}

#[cfg(test)]
mod tests {
    /// A trial whose latest report waited for an earlier upload says its uploads are behind;
    /// one whose did not says nothing of them.
    #[test]
    fn uploads_behind_are_said() {
        let said = |metrics: &[(&str, f64)]| {
            let last = metrics.iter().map(|(k, v)| (k.to_string(), *v)).collect();
            super::rank_lines(&last).iter().map(|l| l.to_string()).collect::<Vec<_>>().join("\n")
        };
        let behind = said(&[("time_step_s", 0.5), ("time_checkpoint_wait_s", 1.25)]);
        assert!(behind.contains("uploads behind") && behind.contains("1.250s"), "{behind}");
        let keeping_up = said(&[("time_step_s", 0.5), ("time_checkpoint_upload_s", 1.25)]);
        assert!(!keeping_up.contains("uploads behind"), "{keeping_up}");
    }
}
