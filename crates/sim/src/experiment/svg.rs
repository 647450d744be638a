//! A small line-chart writer: enough SVG to see an experiment's curves
//! beside the paper's figure, with no plotting dependency.

use std::fmt::Write;

/// Points sorted by x, with the mean of y at equal x (over seeds).
pub fn mean_by_x(mut pts: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut merged: Vec<(f64, f64, u32)> = Vec::new();
    for (px, py) in pts {
        match merged.last_mut() {
            Some(last) if last.0 == px => {
                last.1 += py;
                last.2 += 1;
            }
            _ => merged.push((px, py, 1)),
        }
    }
    merged
        .into_iter()
        .map(|(x, y, n)| (x, y / n as f64))
        .collect()
}

pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_log: bool,
    pub series: Vec<Series>,
}

const W: f64 = 640.0;
const H: f64 = 400.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 120.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
const COLORS: [&str; 6] = [
    "#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
];

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

impl Chart {
    pub fn render(&self) -> String {
        let all: Vec<(f64, f64)> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().copied())
            .collect();
        let fx = |x: f64| if self.x_log { x.max(1e-9).log2() } else { x };
        let (mut x0, mut x1) = all.iter().fold((f64::MAX, f64::MIN), |(a, b), p| {
            (a.min(fx(p.0)), b.max(fx(p.0)))
        });
        let y1 = all.iter().fold(0.0f64, |m, p| m.max(p.1)) * 1.1;
        if all.is_empty() || x1 <= x0 {
            x0 = 0.0;
            x1 = x0 + 1.0;
        }
        let y1 = if y1 <= 0.0 { 1.0 } else { nice_ceiling(y1) };
        let px = |x: f64| LEFT + (fx(x) - x0) / (x1 - x0) * (W - LEFT - RIGHT);
        let py = |y: f64| H - BOTTOM - y / y1 * (H - TOP - BOTTOM);
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{}" y="20" text-anchor="middle" font-size="14">{}</text>"#,
            W / 2.0,
            escape(&self.title)
        );
        let _ = writeln!(
            s,
            r#"<line x1="{LEFT}" y1="{}" x2="{}" y2="{}" stroke="black"/>"#,
            H - BOTTOM,
            W - RIGHT,
            H - BOTTOM
        );
        let _ = writeln!(
            s,
            r#"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{}" stroke="black"/>"#,
            H - BOTTOM
        );
        for i in 0..=5 {
            let y = y1 * i as f64 / 5.0;
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{:.1}" text-anchor="end">{}</text>"#,
                LEFT - 5.0,
                py(y) + 4.0,
                fmt_num(y)
            );
        }
        let mut xs: Vec<f64> = all.iter().map(|p| p.0).collect();
        xs.sort_by(|a, b| a.total_cmp(b));
        xs.dedup();
        let step = xs.len().div_ceil(8).max(1);
        for &x in xs.iter().step_by(step) {
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
                px(x),
                H - BOTTOM + 16.0,
                fmt_num(x)
            );
        }
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            (LEFT + W - RIGHT) / 2.0,
            H - 10.0,
            escape(&self.x_label)
        );
        let _ = writeln!(
            s,
            r#"<text x="15" y="{}" text-anchor="middle" transform="rotate(-90 15 {})">{}</text>"#,
            H / 2.0,
            H / 2.0,
            escape(&self.y_label)
        );
        for (i, series) in self.series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let pts: Vec<String> = series
                .points
                .iter()
                .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
                .collect();
            let _ = writeln!(
                s,
                r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
                pts.join(" ")
            );
            for &(x, y) in &series.points {
                let _ = writeln!(
                    s,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"/>"#,
                    px(x),
                    py(y)
                );
            }
            let ly = TOP + 20.0 * i as f64;
            let _ = writeln!(
                s,
                r#"<line x1="{}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="2"/>"#,
                W - RIGHT + 10.0,
                W - RIGHT + 30.0
            );
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{}">{}</text>"#,
                W - RIGHT + 35.0,
                ly + 4.0,
                escape(&series.name)
            );
        }
        s.push_str("</svg>\n");
        s
    }
}

/// The smallest 1, 2, 2.5 or 5 times a power of ten at or above `v`, so the
/// five y ticks fall on round numbers.
fn nice_ceiling(v: f64) -> f64 {
    let magnitude = 10f64.powf(v.log10().floor());
    for step in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if step * magnitude >= v {
            return step * magnitude;
        }
    }
    10.0 * magnitude
}

fn fmt_num(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    if v >= 10.0 {
        format!("{:.0}", v)
    } else {
        format!("{:.2}", v)
    }
}
