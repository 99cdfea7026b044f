//! What a server counts: Prometheus' series at `GET /metrics` (requests by model, protocol and
//! code; latency, batch rows and batch requests as histograms; queue depth by replica;
//! replicas and their restarts) and, once a second while requests come, a line of throughput
//! and latency percentiles on the terminal.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::monitor::registered;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    model: String,
    protocol: &'static str,
    code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabel {
    model: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReplicaLabel {
    replica: String,
}

/// Latency buckets, in seconds: from 0.1 ms to 10 s.
const LATENCY_BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];
/// Batch size buckets (rows, or requests).
const BATCH_BUCKETS: [f64; 12] =
    [1.0, 2.0, 4.0, 8.0, 10.0, 16.0, 32.0, 64.0, 128.0, 256.0, 1024.0, 4096.0];
/// Latencies the terminal's line keeps a second at most (its percentiles are of these).
const WINDOW_LATENCIES: usize = 200_000;

/// A server's counts.
pub(crate) struct Stats {
    registry: Registry,
    model: String,
    requests: Family<RequestLabels, Counter>,
    latency: Family<ModelLabel, Histogram, fn() -> Histogram>,
    batch_rows: Histogram,
    batch_requests: Histogram,
    batch_seconds: Histogram,
    queued: Family<ReplicaLabel, prometheus_client::metrics::gauge::Gauge>,
    pub(crate) replicas: Gauge,
    pub(crate) restarts: Counter,
    window: Mutex<Window>,
}

/// The requests since the terminal's last line.
#[derive(Default)]
struct Window {
    requests: u64,
    refused: u64,
    rows: u64,
    batches: u64,
    latencies: Vec<f64>,
}

impl Stats {
    pub(crate) fn new(model: &str) -> Stats {
        let mut registry = Registry::with_prefix("rtune_serve");
        let r = &mut registry;
        let what = "Inference requests answered, by model, protocol (http, grpc) and HTTP status";
        let requests = registered(r, "requests", what, Family::default());
        let what = "Inference requests' time from arrival to answer, in seconds";
        let latency: Family<ModelLabel, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(|| Histogram::new(LATENCY_BUCKETS));
        let latency = registered(r, "request_duration_seconds", what, latency);
        let what = "Rows of each batch a replica ran";
        let batch_rows = registered(r, "batch_rows", what, Histogram::new(BATCH_BUCKETS));
        let what = "Requests of each batch a replica ran";
        let batch_requests = registered(r, "batch_requests", what, Histogram::new(BATCH_BUCKETS));
        let what = "Each batch's time in the model, in seconds";
        let batch_seconds = registered(r, "batch_seconds", what, Histogram::new(LATENCY_BUCKETS));
        let what = "Requests sent to each replica and not answered yet";
        let queued = registered(r, "queue_depth", what, Family::default());
        let what = "Replicas serving the model";
        let replicas = registered(r, "replicas", what, Gauge::default());
        let what = "Replicas whose model failed and was loaded again";
        let restarts = registered(r, "replica_restarts", what, Counter::default());
        Stats {
            registry,
            model: model.to_owned(),
            requests,
            latency,
            batch_rows,
            batch_requests,
            batch_seconds,
            queued,
            replicas,
            restarts,
            window: Mutex::new(Window::default()),
        }
    }

    /// A request answered with `status` (HTTP's; gRPC's answers are counted by the status
    /// they map to) after `took`.
    pub(crate) fn request(&self, protocol: &'static str, status: u16, took: Duration) {
        let labels = RequestLabels { model: self.model.clone(), protocol, code: status };
        self.requests.get_or_create(&labels).inc();
        let seconds = took.as_secs_f64();
        let mut window = self.window.lock().unwrap_or_else(|e| e.into_inner());
        window.requests += 1;
        if status == 200 {
            self.latency.get_or_create(&ModelLabel { model: self.model.clone() }).observe(seconds);
            if window.latencies.len() < WINDOW_LATENCIES {
                window.latencies.push(seconds);
            }
        } else {
            window.refused += 1;
        }
    }

    /// A batch of `rows` rows from `requests` requests ran in the model for `took`.
    pub(crate) fn batch(&self, rows: usize, requests: usize, took: Duration) {
        self.batch_rows.observe(rows as f64);
        self.batch_requests.observe(requests as f64);
        self.batch_seconds.observe(took.as_secs_f64());
        let mut window = self.window.lock().unwrap_or_else(|e| e.into_inner());
        window.rows += rows as u64;
        window.batches += 1;
    }

    /// The series now, in OpenMetrics' text format, with each replica's queue.
    pub(crate) fn render(&self, in_flight: &[usize]) -> String {
        for (replica, n) in in_flight.iter().enumerate() {
            self.queued
                .get_or_create(&ReplicaLabel { replica: replica.to_string() })
                .set(*n as i64);
        }
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String cannot fail");
        text
    }

    /// The terminal's line for the time since the last one (None when no request came), and
    /// a fresh window.
    pub(crate) fn line(&self, since: Instant, in_flight: &[usize]) -> Option<String> {
        let window = std::mem::take(&mut *self.window.lock().unwrap_or_else(|e| e.into_inner()));
        if window.requests == 0 {
            return None;
        }
        let seconds = since.elapsed().as_secs_f64().max(1e-9);
        let mut latencies = window.latencies;
        latencies.sort_by(f64::total_cmp);
        let at = |q: f64| {
            let i = ((latencies.len() as f64 - 1.0) * q).round() as usize;
            latencies.get(i).map_or("-".to_owned(), |s| format!("{:.1} ms", s * 1e3))
        };
        let batch = if window.batches > 0 {
            format!("{:.1}", window.rows as f64 / window.batches as f64)
        } else {
            "-".to_owned()
        };
        let queued: usize = in_flight.iter().sum();
        Some(format!(
            "serve: {:.0} requests/s ({} refused), {:.0} rows/s, p50 {}, p99 {}, {batch} rows a \
             batch, {queued} in flight",
            window.requests as f64 / seconds,
            window.refused,
            window.rows as f64 / seconds,
            at(0.5),
            at(0.99),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_says_the_seconds_requests_and_the_metrics_keep_them() {
        let stats = Stats::new("m");
        let start = Instant::now();
        assert_eq!(stats.line(start, &[0]), None);
        for ms in 1..=100 {
            stats.request("http", 200, Duration::from_millis(ms));
        }
        stats.request("grpc", 503, Duration::from_millis(1));
        stats.batch(10, 4, Duration::from_millis(2));
        stats.batch(30, 6, Duration::from_millis(2));
        let line = stats.line(start, &[2, 1]).unwrap();
        assert!(line.contains("(1 refused)"), "{line}");
        assert!(line.contains("p50 51.0 ms") && line.contains("p99 99.0 ms"), "{line}");
        assert!(line.contains("20.0 rows a batch") && line.contains("3 in flight"), "{line}");
        assert_eq!(stats.line(start, &[0]), None);
        let text = stats.render(&[2, 1]);
        assert!(
            text.contains(r#"rtune_serve_requests_total{model="m",protocol="grpc",code="503"} 1"#),
            "{text}"
        );
        assert!(text.contains("rtune_serve_batch_rows_sum 40.0"), "{text}");
        assert!(text.contains(r#"rtune_serve_queue_depth{replica="1"} 1"#), "{text}");
    }
}
