//! One HTTP exchange on a fresh connection: dial (probe dialer), TLS if https, send the GET,
//! read the status, `Location` and at most 10 KiB of body — all before the probe's deadline.
//! The hyper connection is driven in the same task as the request (no task spawned per probe).

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{HeaderValue, LOCATION};
use http::{Request, Response};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;

use super::request::ProbeHeaders;
use super::url::ProbeUrl;
use crate::dialer::{self, DialError, Options, ProbeStream, go_errno};
use crate::probe::MAX_OUTPUT_BYTES;
use crate::spec::HttpScheme;

/// Go's text when `Client.Timeout` fires before the response headers.
const HEADERS_TIMEOUT: &str =
    "context deadline exceeded (Client.Timeout exceeded while awaiting headers)";
/// Go's text when it fires while the body is read.
const BODY_TIMEOUT: &str =
    "context deadline exceeded (Client.Timeout or context cancellation while reading body)";

/// What came back.
#[derive(Debug)]
pub(crate) struct RawResponse {
    pub(crate) status: u16,
    /// First `Location` value.
    pub(crate) location: Option<String>,
    /// The first 10 KiB of the body, or the read error (kubelet's errored path).
    pub(crate) body: Result<Vec<u8>, String>,
}

/// One GET; `Err` is the text after `Get "<url>": ` in Go's error.
pub(crate) async fn get(
    url: &ProbeUrl,
    headers: &ProbeHeaders,
    host: &HeaderValue,
    referer: Option<&HeaderValue>,
    tls: Option<&Arc<ClientConfig>>,
    deadline: Instant,
) -> Result<RawResponse, String> {
    let conn = dialer::connect(&url.host, url.port(), deadline, Options::PROBE)
        .await
        .map_err(|e| match e {
            DialError::Timeout(_) => {
                format!("{e} (Client.Timeout exceeded while awaiting headers)")
            }
            e => e.to_string(),
        })?;
    let stream = ProbeStream::new(conn);
    // One timer for the whole exchange (a timer entry per body frame cost more than the rest of
    // the body loop); `head` records how far it got, to pick Go's text when the deadline fires.
    let mut head: Option<Head> = None;
    let work = async {
        match url.scheme {
            HttpScheme::Http => {
                let req = headers.request(url, host, referer, false)?;
                send(TokioIo::new(stream), false, req, &mut head).await
            }
            // Boxed: the TLS and HTTP/2 states would otherwise make every probe's future (boxed
            // per probe by the worker) several KiB larger.
            HttpScheme::Https => {
                Box::pin(send_tls(
                    stream, url, headers, host, referer, tls, &mut head,
                ))
                .await
            }
        }
    };
    match tokio::time::timeout_at(deadline, work).await {
        Ok(r) => r,
        // The head arrived: Go fails the body read, which kubelet treats as an error.
        Err(_) => match head {
            Some(Head { status, location }) => Ok(RawResponse {
                status,
                location,
                body: Err(BODY_TIMEOUT.to_owned()),
            }),
            None => Err(HEADERS_TIMEOUT.to_owned()),
        },
    }
}

/// Status line and `Location` of a response whose body is being read.
struct Head {
    status: u16,
    location: Option<String>,
}

async fn send_tls(
    stream: ProbeStream,
    url: &ProbeUrl,
    headers: &ProbeHeaders,
    host: &HeaderValue,
    referer: Option<&HeaderValue>,
    tls: Option<&Arc<ClientConfig>>,
    head: &mut Option<Head>,
) -> Result<RawResponse, String> {
    let tls = tls.ok_or("tls: no TLS configuration available")?;
    let name = ServerName::try_from(url.host.clone()).map_err(|e| format!("tls: {e}"))?;
    let conn = TlsConnector::from(Arc::clone(tls))
        .connect(name, stream)
        .await
        .map_err(|e| tls_error(&e))?;
    let h2 = conn.get_ref().1.alpn_protocol() == Some(b"h2");
    let req = headers.request(url, host, referer, h2)?;
    send(TokioIo::new(conn), h2, req, head).await
}

async fn send<IO>(
    io: IO,
    h2: bool,
    req: Request<Empty<Bytes>>,
    head: &mut Option<Head>,
) -> Result<RawResponse, String>
where
    IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    if h2 {
        return Box::pin(send_h2(io, req, head)).await;
    }
    let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
        .title_case_headers(true)
        .handshake(io)
        .await
        .map_err(|e| hyper_error(&e))?;
    drive(conn, async move {
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| hyper_error(&e))?;
        read(resp, head).await
    })
    .await
}

async fn send_h2<IO>(
    io: IO,
    req: Request<Empty<Bytes>>,
    head: &mut Option<Head>,
) -> Result<RawResponse, String>
where
    IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
        .await
        .map_err(|e| hyper_error(&e))?;
    drive(conn, async move {
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| hyper_error(&e))?;
        read(resp, head).await
    })
    .await
}

/// Polls the connection and the exchange together; once the connection is done (the server
/// closed it after the response) the rest of the body is already buffered for `work`.
async fn drive<C, W, T>(conn: C, work: W) -> Result<T, String>
where
    C: Future<Output = Result<(), hyper::Error>>,
    W: Future<Output = Result<T, String>>,
{
    tokio::pin!(conn);
    tokio::pin!(work);
    tokio::select! {
        biased;
        r = &mut work => r,
        _ = &mut conn => work.await,
    }
}

/// Reads the status, `Location` and at most 10 KiB of body; the caller's deadline bounds it.
async fn read(resp: Response<Incoming>, head: &mut Option<Head>) -> Result<RawResponse, String> {
    let status = resp.status().as_u16();
    let location = resp
        .headers()
        .get(LOCATION)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    *head = Some(Head {
        status,
        location: location.clone(),
    });
    let mut body = resp.into_body();
    let mut buf: Vec<u8> = Vec::new();
    let body = loop {
        if buf.len() >= MAX_OUTPUT_BYTES {
            // kubelet's ReadAtMost: more than 10 KiB is a non-fatal truncation.
            break Ok(buf);
        }
        match body.frame().await {
            None => break Ok(buf),
            Some(Err(e)) => break Err(hyper_error(&e)),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    let room = MAX_OUTPUT_BYTES - buf.len();
                    buf.extend_from_slice(&data[..data.len().min(room)]);
                }
            }
        }
    };
    Ok(RawResponse {
        status,
        location,
        body,
    })
}

/// hyper's errors in Go's words where the case is common.
fn hyper_error(e: &hyper::Error) -> String {
    if e.is_incomplete_message() || e.is_canceled() {
        return "EOF".to_owned();
    }
    if e.is_parse() {
        return format!(
            "net/http: HTTP/1.x transport connection broken: malformed HTTP response ({e})"
        );
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return format!("read: {}", go_errno(io));
        }
        source = s.source();
    }
    e.to_string()
}

fn tls_error(e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        return "EOF".to_owned();
    }
    match e.get_ref() {
        Some(inner) => format!("tls: {inner}"),
        None => format!("tls: {}", go_errno(e)),
    }
}
