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
use crate::dialer::{self, DialError, go_errno};
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
    let stream = dialer::dial(&url.host, url.port(), deadline)
        .await
        .map_err(|e| match e {
            DialError::Timeout(_) => {
                format!("{e} (Client.Timeout exceeded while awaiting headers)")
            }
            e => e.to_string(),
        })?;
    let work = async {
        match url.scheme {
            HttpScheme::Http => {
                let req = headers.request(url, host, referer, false)?;
                send(TokioIo::new(stream), false, req, deadline).await
            }
            HttpScheme::Https => {
                let tls = tls.ok_or("tls: no TLS configuration available")?;
                let name =
                    ServerName::try_from(url.host.clone()).map_err(|e| format!("tls: {e}"))?;
                let conn = TlsConnector::from(Arc::clone(tls))
                    .connect(name, stream)
                    .await
                    .map_err(|e| tls_error(&e))?;
                let h2 = conn.get_ref().1.alpn_protocol() == Some(b"h2");
                let req = headers.request(url, host, referer, h2)?;
                send(TokioIo::new(conn), h2, req, deadline).await
            }
        }
    };
    match tokio::time::timeout_at(deadline, work).await {
        Ok(r) => r,
        Err(_) => Err(HEADERS_TIMEOUT.to_owned()),
    }
}

async fn send<IO>(
    io: IO,
    h2: bool,
    req: Request<Empty<Bytes>>,
    deadline: Instant,
) -> Result<RawResponse, String>
where
    IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    if h2 {
        let (mut sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
            .await
            .map_err(|e| hyper_error(&e))?;
        drive(conn, async move {
            read(
                sender
                    .send_request(req)
                    .await
                    .map_err(|e| hyper_error(&e))?,
                deadline,
            )
            .await
        })
        .await
    } else {
        let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
            .title_case_headers(true)
            .handshake(io)
            .await
            .map_err(|e| hyper_error(&e))?;
        drive(conn, async move {
            read(
                sender
                    .send_request(req)
                    .await
                    .map_err(|e| hyper_error(&e))?,
                deadline,
            )
            .await
        })
        .await
    }
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

async fn read(resp: Response<Incoming>, deadline: Instant) -> Result<RawResponse, String> {
    let status = resp.status().as_u16();
    let location = resp
        .headers()
        .get(LOCATION)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let mut body = resp.into_body();
    let mut buf: Vec<u8> = Vec::new();
    let body = loop {
        if buf.len() >= MAX_OUTPUT_BYTES {
            // kubelet's ReadAtMost: more than 10 KiB is a non-fatal truncation.
            break Ok(buf);
        }
        match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => break Err(BODY_TIMEOUT.to_owned()),
            Ok(None) => break Ok(buf),
            Ok(Some(Err(e))) => break Err(hyper_error(&e)),
            Ok(Some(Ok(frame))) => {
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
