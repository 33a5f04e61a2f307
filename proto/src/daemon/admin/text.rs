//! Metrics a daemon renders itself, streamed after the registry's.
//!
//! The `prometheus` crate keeps every labelled child as its own object with its label pairs as
//! owned strings, and `gather` copies all of them again per scrape. For per-workload series (the
//! prober's tens of thousands of per-container series) that is most of the process's memory, so
//! such series live in the daemon's own compact structures and are written as Prometheus text
//! here, a bounded chunk at a time, so neither the series nor a scrape's body grow with copies.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

/// Bytes a chunk should reach before it is sent (a hint: a source may overshoot by one series).
pub const CHUNK_BYTES: usize = 64 * 1024;

/// A source of Prometheus text-format metric families.
pub trait TextMetrics: Send + Sync + 'static {
    /// Appends text after position `from` (0 = the start) to `out` until `out` holds about
    /// [`CHUNK_BYTES`]; returns the position to continue from, or `None` when done. Positions
    /// are the source's own; a series added or removed between chunks may be missed or not, but
    /// none is written twice and every family's lines stay together.
    fn render(&self, from: u64, out: &mut String) -> Option<u64>;
}

/// Writes `v` as a Prometheus label value (backslash, double quote and newline escaped): label
/// values come from pod metadata, which is not ours to trust.
pub fn write_label_value(out: &mut String, v: &str) {
    for ch in v.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Writes `name="value"` pairs in the given order (callers pass them sorted by name, as the
/// `prometheus` crate's encoder writes them) between braces.
pub fn write_labels(out: &mut String, pairs: &[(&str, &str)]) {
    out.push('{');
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(k);
        out.push_str("=\"");
        write_label_value(out, v);
        out.push('"');
    }
    out.push('}');
}

/// Writes a family's `# HELP` and `# TYPE` lines.
pub fn write_header(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// The `/metrics` text as the admin endpoint sends it: the registry's text, then each source's,
/// one chunk at a time. It is the response body (one chunk per frame), and an iterator of the
/// same chunks for a caller that renders `/metrics` without serving it (the prober benchmark
/// measures a scrape's cost this way).
pub struct MetricsText {
    head: Option<Bytes>,
    sources: Vec<Arc<dyn TextMetrics>>,
    /// Index of the source being written and the position within it.
    at: (usize, u64),
}

impl MetricsText {
    pub(crate) fn new(head: Vec<u8>, sources: Vec<Arc<dyn TextMetrics>>) -> Self {
        Self {
            head: Some(Bytes::from(head)),
            sources,
            at: (0, 0),
        }
    }
}

impl Iterator for MetricsText {
    type Item = Bytes;

    /// The next chunk: the registry's text first, then about [`CHUNK_BYTES`] at a time.
    fn next(&mut self) -> Option<Bytes> {
        if let Some(head) = self.head.take() {
            return Some(head);
        }
        let mut out = String::with_capacity(CHUNK_BYTES + 4096);
        while out.len() < CHUNK_BYTES {
            let (i, from) = self.at;
            let Some(src) = self.sources.get(i).cloned() else {
                break;
            };
            self.at = match src.render(from, &mut out) {
                Some(next) => (i, next),
                None => (i + 1, 0),
            };
        }
        (!out.is_empty()).then(|| Bytes::from(out))
    }
}

impl Body for MetricsText {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.next().map(|chunk| Ok(Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.head.is_none() && self.at.0 >= self.sources.len()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    /// A source of `n` one-line series, `per_call` per render call.
    struct Lines {
        n: u64,
        per_call: u64,
    }

    impl TextMetrics for Lines {
        fn render(&self, from: u64, out: &mut String) -> Option<u64> {
            let end = (from + self.per_call).min(self.n);
            for i in from..end {
                let _ = writeln!(out, "series_{i} 1");
            }
            (end < self.n).then_some(end)
        }
    }

    #[tokio::test]
    async fn body_is_the_head_then_every_source_in_bounded_frames() {
        let body = MetricsText::new(
            b"head 1\n".to_vec(),
            vec![
                Arc::new(Lines {
                    n: 20_000,
                    per_call: 500,
                }),
                Arc::new(Lines { n: 2, per_call: 1 }),
            ],
        );
        let mut body = std::pin::pin!(body);
        let mut text = String::new();
        let mut largest = 0;
        while let Some(frame) = body.frame().await {
            let data = frame.expect("infallible").into_data().expect("data frame");
            largest = largest.max(data.len());
            text.push_str(std::str::from_utf8(&data).expect("utf-8"));
        }
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1 + 20_000 + 2);
        assert_eq!(lines[0], "head 1");
        assert_eq!(lines[1], "series_0 1");
        assert_eq!(lines[20_000], "series_19999 1");
        assert_eq!(lines[20_001], "series_0 1");
        assert!(
            largest < CHUNK_BYTES + 16 * 1024,
            "a frame of {largest} bytes: the body is not chunked"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        let mut s = String::new();
        write_labels(&mut s, &[("a", "x\"y"), ("b", "back\\slash\nnl")]);
        assert_eq!(s, r#"{a="x\"y",b="back\\slash\nnl"}"#);
    }
}
