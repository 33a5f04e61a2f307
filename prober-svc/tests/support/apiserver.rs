//! The HTTP boundary of the prober's Kubernetes API side, tested the way kube-rs tests itself: a
//! `tower_test` mock service behind a real `kube::Client`, which sees every request the client
//! sends (method, path, query, headers, body) and answers what the test feeds it, including
//! streamed watch responses that can be cut like a dropped connection.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use kube::client::Body;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

pub type RespBody = BoxBody<Bytes, io::Error>;
pub type Handle = tower_test::mock::Handle<Request<Body>, Response<RespBody>>;
type Respond = tower_test::mock::SendResponse<Response<RespBody>>;

/// How long a test waits for the client's next request.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// The fake API server's end of the mock service.
pub struct ApiServer {
    handle: Handle,
}

/// A `kube::Client` whose requests go to the returned [`ApiServer`].
pub fn mock() -> (kube::Client, ApiServer) {
    let (svc, handle) = tower_test::mock::pair::<Request<Body>, Response<RespBody>>();
    (kube::Client::new(svc, "default"), ApiServer { handle })
}

/// One request, read in full, with the means to answer it.
pub struct Exchange {
    pub method: String,
    pub path: String,
    pub query: BTreeMap<String, String>,
    pub content_type: String,
    pub body: Value,
    respond: Respond,
}

impl ApiServer {
    /// The server end of a mock pair the test built itself.
    pub fn from_handle(handle: Handle) -> Self {
        Self { handle }
    }

    /// The client's next request (panics after [`PATIENCE`]).
    pub async fn next(&mut self) -> Exchange {
        let (req, respond) = tokio::time::timeout(PATIENCE, self.handle.next_request())
            .await
            .expect("the client sent no request in time")
            .expect("the client went away");
        let (parts, body) = req.into_parts();
        let bytes = body.collect_bytes().await.expect("request body");
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
        };
        let query = parts
            .uri
            .query()
            .unwrap_or("")
            .split('&')
            .filter(|kv| !kv.is_empty())
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                (k.to_owned(), decode(v))
            })
            .collect();
        Exchange {
            method: parts.method.to_string(),
            path: parts.uri.path().to_owned(),
            query,
            content_type: parts
                .headers
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned(),
            body,
            respond,
        }
    }

    /// Asserts that the client sends nothing for `d`.
    pub async fn quiet_for(&mut self, d: Duration) {
        if let Ok(Some((req, _))) = tokio::time::timeout(d, self.handle.next_request()).await {
            panic!("unexpected request: {} {}", req.method(), req.uri());
        }
    }
}

fn decode(v: &str) -> String {
    let bytes = v.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let h = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match h.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn full(status: StatusCode, body: &Value, headers: &[(&str, &str)]) -> Response<RespBody> {
    let mut b = Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "application/json");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(
        Full::new(Bytes::from(body.to_string()))
            .map_err(|e: Infallible| match e {})
            .boxed(),
    )
    .expect("response")
}

impl Exchange {
    /// Answers `status` with a JSON body.
    pub fn reply(self, status: u16, body: Value) {
        self.reply_with(status, body, &[]);
    }

    /// Answers `status` with a JSON body and headers.
    pub fn reply_with(self, status: u16, body: Value, headers: &[(&str, &str)]) {
        let status = StatusCode::from_u16(status).expect("status");
        self.respond.send_response(full(status, &body, headers));
    }

    /// Answers with a `metav1.Status` failure.
    pub fn reply_status(self, code: u16, reason: &str, message: &str, headers: &[(&str, &str)]) {
        let mut details = json!({});
        if let Some((_, v)) = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("retry-after"))
        {
            details = json!({"retryAfterSeconds": v.parse::<u32>().unwrap_or(1)});
        }
        self.reply_with(code, status(code, reason, message, details), headers);
    }

    /// Fails the request as a connection that went away would.
    pub fn drop_connection(self) {
        self.respond.send_error(io::Error::new(
            io::ErrorKind::ConnectionReset,
            "connection reset by peer",
        ));
    }

    /// Answers 200 with a streamed body (a watch); the test feeds it lines.
    pub fn stream(self) -> Feed {
        let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, io::Error>>(64);
        let body = StreamBody::new(ReceiverStream::new(rx)).boxed();
        let resp = Response::builder()
            .status(StatusCode::OK)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body)
            .expect("response");
        self.respond.send_response(resp);
        Feed { tx }
    }
}

/// The server side of a streamed watch response.
pub struct Feed {
    tx: mpsc::Sender<Result<Frame<Bytes>, io::Error>>,
}

impl Feed {
    /// Sends one watch event line (`{"type": ..., "object": ...}`).
    pub async fn event(&self, ty: &str, object: Value) {
        let line = format!("{}\n", json!({"type": ty, "object": object}));
        let _ = self.tx.send(Ok(Frame::data(Bytes::from(line)))).await;
    }

    /// Sends a BOOKMARK at `rv`.
    pub async fn bookmark(&self, rv: &str) {
        self.event(
            "BOOKMARK",
            json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": rv}}),
        )
        .await;
    }

    /// Cuts the stream with an error, as a dropped connection does.
    pub async fn cut(self) {
        let _ = self
            .tx
            .send(Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "connection reset by peer",
            )))
            .await;
    }
}

/// A `metav1.Status` failure.
pub fn status(code: u16, reason: &str, message: &str, details: Value) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code, "details": details})
}

/// A pod on `node` as the API server returns it.
pub fn pod(name: &str, uid: &str, rv: &str, gated: bool, condition: Option<(&str, &str)>) -> Value {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "shop", "uid": uid, "resourceVersion": rv,
                     "annotations": {"podward.io/probes": "{\"app\":{\"readinessProbe\":{\"tcpSocket\":{\"port\":8080}}}}"}},
        "spec": {"nodeName": "node-a", "restartPolicy": "Always",
                 "containers": [{"name": "app", "image": "registry.example/app:1"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    });
    if gated {
        p["spec"]["readinessGates"] = json!([{"conditionType": "podward.io/ready"}]);
    }
    if let Some((st, ltt)) = condition {
        p["status"]["conditions"]
            .as_array_mut()
            .expect("conditions")
            .push(json!({"type": "podward.io/ready", "status": st, "lastTransitionTime": ltt}));
    }
    p
}

/// A `PodList` page.
pub fn pod_list(rv: &str, items: Vec<Value>, cont: Option<&str>) -> Value {
    let mut meta = json!({"resourceVersion": rv});
    if let Some(c) = cont {
        meta["continue"] = json!(c);
    }
    json!({"apiVersion": "v1", "kind": "PodList", "metadata": meta, "items": items})
}
