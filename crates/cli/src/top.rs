//! `wcache top`: a live terminal view of a running server (ratatui) —
//! throughput and response-time percentiles per export and kind over the
//! last interval, occupancy and dirty pages, destage rate, with sparklines
//! of the last two minutes. It exists for the operator who wants to watch a
//! cache work; it reads only the control socket's `status` and `stats`,
//! the same snapshot as every other reader, and never changes anything.
//! `q`, Esc or Ctrl-C quits.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use clap::Args;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::widgets::{Block, Gauge, Paragraph, Row, Sparkline, Table};
use ratatui::Frame;
use wcache_io::ops::client::ControlClient;
use wcache_io::ops::protocol::Request;
use wcache_io::ops::snapshot::interval_quantile_us;
use wcache_io::ops::{RequestStats, Snapshot, Status};

use crate::limits;
use crate::ops::ControlArgs;
use crate::tools::AnyError;

/// Points kept per sparkline (one per interval).
const HISTORY_MAX: usize = 240;

/// A live view of a running server's numbers (q quits).
#[derive(Args, Debug)]
pub struct TopArgs {
    #[command(flatten)]
    control: ControlArgs,
    /// Seconds between refreshes.
    #[arg(long, default_value_t = 1.0, value_parser = limits::refresh_s)]
    interval: f64,
}

/// One refresh: the answers and when they came.
struct Sample {
    at: Instant,
    status: Status,
    stats: Snapshot,
}

/// What the view shows, computed from the last two samples.
#[derive(Default)]
struct View {
    title: String,
    rows: Vec<[String; 7]>,
    occupancy: f64,
    dirty_ratio: f64,
    dirty_pages: u64,
    destaged_per_s: f64,
    writes: VecDeque<u64>,
    reads: VecDeque<u64>,
    destaged: VecDeque<u64>,
    dirty: VecDeque<u64>,
}

fn take(client: &mut ControlClient) -> Result<Sample, AnyError> {
    let status = client.call(&Request::new("status"), &mut |_| {})?;
    let stats = client.call(&Request::new("stats"), &mut |_| {})?;
    Ok(Sample {
        at: Instant::now(),
        status: serde_json::from_value(status)?,
        stats: serde_json::from_value(stats)?,
    })
}

pub fn top(args: TopArgs) -> Result<(), AnyError> {
    let path = args.control.path(None);
    let mut client = ControlClient::connect(&path)?;
    let every = Duration::from_secs_f64(args.interval);
    let mut last = take(&mut client)?;
    let mut view = View::default();
    let mut terminal = ratatui::init();
    let result = (|| -> Result<(), AnyError> {
        loop {
            terminal.draw(|f| draw(f, &view))?;
            if quit_within(every)? {
                return Ok(());
            }
            let now = take(&mut client)?;
            view.update(&last, &now);
            last = now;
        }
    })();
    ratatui::restore();
    result
}

/// True when a quit key comes within `wait`.
fn quit_within(wait: Duration) -> Result<bool, AnyError> {
    let deadline = Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || !event::poll(left)? {
            return Ok(false);
        }
        if let Event::Key(key) = event::read()? {
            let ctrl_c =
                key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c');
            let quit = matches!(key.code, KeyCode::Char('q') | KeyCode::Esc) || ctrl_c;
            if key.kind == KeyEventKind::Press && quit {
                return Ok(true);
            }
        }
    }
}

/// A percentile of the requests between two snapshots of one export and
/// kind, interpolated within its histogram bucket ("-" with none).
fn interval_percentile(a: &RequestStats, b: &RequestStats, q: f64) -> String {
    interval_quantile_us(&a.buckets, &b.buckets, q).map_or("-".into(), |us| format!("{us:.0}"))
}

fn push(history: &mut VecDeque<u64>, value: f64) {
    if history.len() == HISTORY_MAX {
        history.pop_front();
    }
    history.push_back(value.max(0.0) as u64);
}

impl View {
    fn update(&mut self, a: &Sample, b: &Sample) {
        let seconds = (b.at - a.at).as_secs_f64().max(1e-3);
        let s = &b.status;
        self.title = format!(
            " wcache top | pid {} up {:.0} s {} | {} {} {} {} | q quits ",
            s.pid,
            s.uptime_s,
            s.state,
            s.write_policy,
            s.admission,
            s.destage_order,
            s.destage_rate
        );
        self.rows.clear();
        let (mut reads, mut writes) = (0.0, 0.0);
        for (ra, rb) in a.stats.requests.iter().zip(&b.stats.requests) {
            let per_s = rb.count.saturating_sub(ra.count) as f64 / seconds;
            match rb.kind.as_str() {
                "read" => reads += per_s,
                "write" => writes += per_s,
                _ => {}
            }
            if rb.count == 0 {
                continue;
            }
            self.rows.push([
                rb.export.clone(),
                rb.kind.clone(),
                format!("{per_s:.0}"),
                interval_percentile(ra, rb, 0.5),
                interval_percentile(ra, rb, 0.99),
                rb.count.to_string(),
                rb.errors.to_string(),
            ]);
        }
        let value = |snap: &Snapshot, name| snap.engine_value(name).unwrap_or(0);
        let destaged =
            value(&b.stats, "destaged_pages").saturating_sub(value(&a.stats, "destaged_pages"));
        self.destaged_per_s = destaged as f64 / seconds;
        self.occupancy = s.occupancy_ratio.clamp(0.0, 1.0);
        self.dirty_ratio = s.dirty_ratio.clamp(0.0, 1.0);
        self.dirty_pages = s.dirty_pages;
        push(&mut self.reads, reads);
        push(&mut self.writes, writes);
        push(&mut self.destaged, self.destaged_per_s);
        push(&mut self.dirty, s.dirty_pages as f64);
    }
}

fn draw(frame: &mut Frame, view: &View) {
    let [table, gauges, sparks] = Layout::vertical([
        Constraint::Min(6),
        Constraint::Length(3),
        Constraint::Length(16),
    ])
    .areas(frame.area());
    let header = Row::new([
        "export", "kind", "req/s", "p50 us", "p99 us", "total", "errors",
    ]);
    let rows = view.rows.iter().map(|r| Row::new(r.clone()));
    let widths = [Constraint::Length(12), Constraint::Length(13)]
        .into_iter()
        .chain([Constraint::Length(10); 5]);
    let title = if view.title.is_empty() {
        " wcache top: waiting for the first interval | q quits "
    } else {
        view.title.as_str()
    };
    frame.render_widget(
        Table::new(rows, widths)
            .header(header)
            .block(Block::bordered().title(title)),
        table,
    );
    let [occupancy, dirty] = Layout::horizontal([Constraint::Fill(1); 2]).areas(gauges);
    let gauge = |name: &str, ratio: f64, label: String| {
        Gauge::default()
            .block(Block::bordered().title(name.to_string()))
            .ratio(ratio)
            .label(label)
    };
    frame.render_widget(
        gauge(
            " occupancy ",
            view.occupancy,
            format!("{:.1} %", view.occupancy * 100.0),
        ),
        occupancy,
    );
    let dirty_label = format!(
        "{} dirty pages ({:.1} %)",
        view.dirty_pages,
        view.dirty_ratio * 100.0
    );
    frame.render_widget(gauge(" dirty ", view.dirty_ratio, dirty_label), dirty);
    draw_sparklines(frame, view, sparks);
}

fn draw_sparklines(frame: &mut Frame, view: &View, area: Rect) {
    let areas: [Rect; 4] = Layout::vertical([Constraint::Length(4); 4]).areas(area);
    let last = |h: &VecDeque<u64>| h.back().copied().unwrap_or(0);
    let lines = [
        (format!(" write/s {} ", last(&view.writes)), &view.writes),
        (format!(" read/s {} ", last(&view.reads)), &view.reads),
        (
            format!(" destaged pages/s {:.0} ", view.destaged_per_s),
            &view.destaged,
        ),
        (format!(" dirty pages {} ", view.dirty_pages), &view.dirty),
    ];
    for ((title, history), area) in lines.into_iter().zip(areas) {
        // The newest points that fit, right-aligned.
        let width = area.width.saturating_sub(2) as usize;
        let data: Vec<u64> = history
            .iter()
            .skip(history.len().saturating_sub(width))
            .copied()
            .collect();
        frame.render_widget(
            Sparkline::default()
                .block(Block::bordered().title(title))
                .data(&data),
            area,
        );
    }
    if view.rows.is_empty() && !view.title.is_empty() {
        let note = Paragraph::new("no request yet");
        frame.render_widget(
            note,
            Rect {
                height: 1,
                ..areas[0]
            },
        );
    }
}
