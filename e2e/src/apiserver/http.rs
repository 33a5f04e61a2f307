//! The mock API server's HTTP side: one hyper HTTP/1.1 connection task per client connection,
//! routing to the store, and watch streams fed from its change broadcast.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;

use super::store::{Failure, Filter, Selector, status};
use super::{Recorded, Shared};

type Body = BoxBody<Bytes, io::Error>;

/// Accepts connections until the task is aborted.
pub(crate) async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| handle(shared.clone(), req));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

fn json_response(code: u16, body: &Value) -> Response<Body> {
    Response::builder()
        .status(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header("content-type", "application/json")
        .body(
            Full::new(Bytes::from(body.to_string()))
                .map_err(|e: Infallible| match e {})
                .boxed(),
        )
        .unwrap_or_else(|_| {
            Response::new(BodyExt::boxed(
                Full::new(Bytes::new()).map_err(|e: Infallible| match e {}),
            ))
        })
}

fn parse_query(q: Option<&str>) -> BTreeMap<String, String> {
    q.unwrap_or("")
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (k.to_owned(), percent_decode(v))
        })
        .collect()
}

fn percent_decode(v: &str) -> String {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Some(x) = std::str::from_utf8(&b[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(x);
            i += 3;
            continue;
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let (parts, body) = req.into_parts();
    let bytes = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let query = parse_query(parts.uri.query());
    let body: Value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap_or(Value::Null)
    };
    let path = parts.uri.path().to_owned();
    let method = parts.method.to_string();
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    // Recorded on arrival, before the store changes (a test that sees the change sees the
    // request); its status once answered.
    let seen = {
        let mut requests = shared.requests.lock();
        requests.push(Recorded {
            at: SystemTime::now(),
            method: method.clone(),
            path: path.clone(),
            query: query.clone(),
            content_type: header("content-type"),
            user_agent: header("user-agent"),
            body: if shared.keep_bodies {
                body.clone()
            } else {
                Value::Null
            },
            code: None,
        });
        requests.len() - 1
    };
    let ua = header("user-agent");
    let mut stalls = shared.stalls.subscribe();
    loop {
        let held = stalls
            .borrow_and_update()
            .iter()
            .any(|(who, frag)| *who == ua && path.contains(frag.as_str()));
        if !held || stalls.changed().await.is_err() {
            break;
        }
    }
    let resp = route(&shared, &method, &path, &query, body);
    if let Some(r) = shared.requests.lock().get_mut(seen) {
        r.code = Some(resp.status().as_u16());
    }
    Ok(resp)
}

/// The answer to one request.
fn route(
    shared: &Arc<Shared>,
    method: &str,
    path: &str,
    query: &BTreeMap<String, String>,
    body: Value,
) -> Response<Body> {
    if !shared.available.load(Ordering::SeqCst) {
        return json_response(
            503,
            &status(503, "ServiceUnavailable", "the mock API server is down"),
        );
    }
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (method, segs.as_slice()) {
        ("GET", ["api", "v1", "pods"]) => {
            let node = query
                .get("fieldSelector")
                .and_then(|f| f.strip_prefix("spec.nodeName="))
                .map(str::to_owned);
            if is_watch(query) {
                watch(shared, query, Filter::Pods { node })
            } else {
                let limit = query.get("limit").and_then(|l| l.parse().ok());
                let list = shared.store.lock().list(
                    node.as_deref(),
                    limit,
                    query.get("continue").map(String::as_str),
                );
                json_response(200, &list)
            }
        }
        ("PATCH", ["api", "v1", "namespaces", ns, "pods", name, "status"]) => {
            let refused = shared
                .refused
                .lock()
                .get(&((*ns).to_owned(), (*name).to_owned()))
                .cloned();
            if let Some((code, message)) = refused {
                let reason = match code {
                    403 => "Forbidden",
                    422 => "Invalid",
                    _ => "InternalError",
                };
                return json_response(code, &status(code, reason, &message));
            }
            let r = shared.store.lock().patch_status(ns, name, &body);
            match r {
                Ok((pod, change)) => {
                    let _ = shared.changes.send(change);
                    json_response(200, &pod)
                }
                Err((code, st)) => json_response(code, &st),
            }
        }
        ("POST", ["api", "v1", "namespaces", ns, "events"])
        | ("POST", ["apis", "events.k8s.io", "v1", "namespaces", ns, "events"]) => {
            match shared.store.lock().create_event(ns, body) {
                Ok(ev) => json_response(201, &ev),
                Err((code, st)) => json_response(code, &st),
            }
        }
        ("PATCH", ["api", "v1", "namespaces", ns, "events", name])
        | (
            "PATCH",
            [
                "apis",
                "events.k8s.io",
                "v1",
                "namespaces",
                ns,
                "events",
                name,
            ],
        ) => match shared.store.lock().patch_event(ns, name, &body) {
            Ok(ev) => json_response(200, &ev),
            Err((code, st)) => json_response(code, &st),
        },
        ("GET", ["apis", "coordination.k8s.io", "v1", "leases"]) => lease_list(shared, query, None),
        (
            "GET",
            [
                "apis",
                "coordination.k8s.io",
                "v1",
                "namespaces",
                ns,
                "leases",
            ],
        ) => lease_list(shared, query, Some(ns)),
        (
            "GET",
            [
                "apis",
                "coordination.k8s.io",
                "v1",
                "namespaces",
                ns,
                "leases",
                name,
            ],
        ) => answer(shared.store.lock().get_lease(ns, name), 200),
        ("GET", ["api", "v1", "nodes", name]) => answer(shared.store.lock().node(name), 200),
        (
            "POST",
            [
                "apis",
                "coordination.k8s.io",
                "v1",
                "namespaces",
                ns,
                "leases",
            ],
        ) => {
            let r = shared.store.lock().create_lease(ns, body);
            publish(shared, r, 201)
        }
        (
            "PUT",
            [
                "apis",
                "coordination.k8s.io",
                "v1",
                "namespaces",
                ns,
                "leases",
                name,
            ],
        ) => {
            let r = shared.store.lock().replace_lease(ns, name, body);
            publish(shared, r, 200)
        }
        (
            "DELETE",
            [
                "apis",
                "coordination.k8s.io",
                "v1",
                "namespaces",
                ns,
                "leases",
                name,
            ],
        ) => {
            let r = shared.store.lock().delete_lease(ns, name);
            publish(shared, r, 200)
        }
        _ => json_response(
            404,
            &status(
                404,
                "NotFound",
                &format!("{method} {path}: not served by the mock"),
            ),
        ),
    }
}

fn is_watch(query: &BTreeMap<String, String>) -> bool {
    query.get("watch").is_some_and(|w| w == "true" || w == "1")
}

/// The object, or the failure's `Status`.
fn answer(r: Result<Value, Failure>, code: u16) -> Response<Body> {
    match r {
        Ok(v) => json_response(code, &v),
        Err((code, st)) => json_response(code, &st),
    }
}

/// A write's answer; its change goes to the watches.
fn publish(
    shared: &Shared,
    r: Result<(Value, super::store::Change), Failure>,
    code: u16,
) -> Response<Body> {
    answer(
        r.map(|(v, change)| {
            let _ = shared.changes.send(change);
            v
        }),
        code,
    )
}

/// A lease list or watch (`labelSelector`; a bad one is `400`, as the API server answers).
fn lease_list(
    shared: &Arc<Shared>,
    query: &BTreeMap<String, String>,
    namespace: Option<&str>,
) -> Response<Body> {
    let selector = match Selector::parse(query.get("labelSelector").map_or("", String::as_str)) {
        Ok(s) => s,
        Err(e) => return json_response(400, &status(400, "BadRequest", &e)),
    };
    if is_watch(query) {
        return watch(
            shared,
            query,
            Filter::Leases {
                namespace: namespace.map(str::to_owned),
                selector,
            },
        );
    }
    let list = shared.store.lock().list_leases(
        namespace,
        &selector,
        query.get("limit").and_then(|l| l.parse().ok()),
        query.get("continue").map(String::as_str),
    );
    json_response(200, &list)
}

/// A watch response: the history after `resourceVersion` that `filter` wants, then live changes
/// and bookmarks, until `timeoutSeconds` or the client goes.
fn watch(shared: &Arc<Shared>, query: &BTreeMap<String, String>, filter: Filter) -> Response<Body> {
    let from: Option<u64> = query
        .get("resourceVersion")
        .and_then(|r| r.parse().ok())
        .filter(|r| *r > 0);
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|t| t.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(1800));
    let bookmarks = query
        .get("allowWatchBookmarks")
        .is_some_and(|b| b == "true");
    let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, io::Error>>(1024);
    let (live, backlog, start) = {
        let store = shared.store.lock();
        let live = shared.changes.subscribe();
        let start = from.unwrap_or(store.rv());
        (live, store.since(start, &filter), start)
    };
    let mut drops = shared.drops.subscribe();
    let shared = shared.clone();
    tokio::spawn(async move {
        let send = |line: String| {
            let tx = tx.clone();
            async move { tx.send(Ok(Frame::data(Bytes::from(line)))).await.is_ok() }
        };
        let backlog = match backlog {
            Ok(b) => b,
            Err((_, st)) => {
                let _ = send(format!("{}\n", json!({"type": "ERROR", "object": st}))).await;
                return;
            }
        };
        let mut last = start;
        for (rv, line) in backlog {
            if !send(line).await {
                return;
            }
            last = rv;
        }
        let mut live = live;
        let end = tokio::time::sleep(timeout);
        tokio::pin!(end);
        let mut tick = tokio::time::interval(shared.bookmark_every);
        tick.tick().await;
        loop {
            tokio::select! {
                () = &mut end => return,
                () = tx.closed() => return,
                _ = drops.changed() => {
                    // Broken off: an error in the body ends the response without its last chunk.
                    let _ = tx.send(Err(io::Error::other("watch dropped by the API server"))).await;
                    return;
                }
                _ = tick.tick(), if bookmarks => {
                    let (api_version, kind) = filter.bookmark_kind();
                    let bm = json!({"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": api_version,
                        "metadata": {"resourceVersion": last.to_string()}}});
                    if !send(format!("{bm}\n")).await {
                        return;
                    }
                }
                change = live.recv() => match change {
                    Ok((rv, scope, line)) => {
                        if rv <= last {
                            continue;
                        }
                        last = rv;
                        if filter.wants(&scope) && !send(line).await {
                            return;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        let st = status(410, "Expired", "the watch fell behind");
                        let _ = send(format!("{}\n", json!({"type": "ERROR", "object": st}))).await;
                        return;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
            }
        }
    });
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(StreamBody::new(ReceiverStream::new(rx)).boxed())
        .unwrap_or_else(|_| json_response(500, &status(500, "InternalError", "response")))
}
