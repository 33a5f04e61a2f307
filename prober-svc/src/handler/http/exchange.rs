//! One HTTP exchange on a fresh connection: dial (probe dialer), TLS if https, send the GET,
//! read the status, `Location` and at most 10 KiB of body — all before the probe's deadline.
//! HTTP/1 (plain, or TLS without `h2`) is the probe's own exchange (`h1`); HTTP/2 goes through
//! hyper, driven in the probe's scope. TLS is rustls's, or OpenSSL's as Go's client when rustls
//! refused the handshake only for its 64 KiB message cap (`tls`, `go_tls`): the same exchange
//! runs over either stream.

use std::future::Future;
use std::io;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{HeaderValue, LOCATION};
use http::{Request, Response};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;

use super::go_tls::{GoTls, HandshakeError};
use super::h1::{self, H1BodyError, H1Error};
use super::head::{self, HeadTooLarge};
use super::request::{ProbeHeaders, RequestError};
use super::tls::{self, Clients, FirstBytes};
use super::url::ProbeUrl;
use crate::handler::dial_error::DialError;
use crate::handler::dialer::stream::ProbeStream;
use crate::handler::dialer::{self, Options};
use crate::handler::go_text::go_errno;
use crate::handler::host_policy::Guard;
use crate::handler::resolve::Names;
use crate::handler::scoped;
use crate::handler::target_budget::{Account, BudgetExhausted, Meter, Metered, Waiting};
use crate::model::outcome::MAX_OUTPUT_BYTES;
use crate::spec::HttpScheme;

/// Go's text (`http.ErrSchemeMismatch`) for an HTTPS request whose server answered the TLS
/// handshake in plain HTTP: the first five bytes it sent were `HTTP/`.
pub(crate) const SCHEME_MISMATCH: &str = "http: server gave HTTP response to HTTPS client";

/// Go's HTTP/2 `MaxHeaderListSize` as kubelet's transport has it (its HTTP/1
/// `MaxResponseHeaderBytes`).
const H2_MAX_HEADER_LIST: u32 = head::MAX_HEAD_BYTES as u32;

/// Why a GET got no response. `Display` is Go's text after `Get "<url>": `.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GetError {
    /// The dial failed (a dial timeout is the client's timeout, as Go words it).
    #[error("{}", dial_text(.0))]
    Dial(DialError),
    /// The request could not be built.
    #[error(transparent)]
    Request(#[from] RequestError),
    /// HTTPS without a TLS configuration (it failed to build at start-up).
    #[error("tls: no TLS configuration available")]
    NoTls,
    /// The host is not a name TLS can be asked for.
    #[error("tls: {0}")]
    ServerName(rustls::pki_types::InvalidDnsNameError),
    /// The TLS handshake failed.
    #[error("{}", tls_text(.0))]
    Tls(io::Error),
    /// The handshake redone as Go's client (after rustls refused a message over its cap)
    /// failed.
    #[error(transparent)]
    GoTls(HandshakeError),
    /// The server answered the TLS handshake in plain HTTP (Go's `ErrSchemeMismatch`).
    #[error("{SCHEME_MISMATCH}")]
    SchemeMismatch,
    /// The HTTP/2 exchange failed before the response head.
    #[error("{}", hyper_text(.0))]
    Http(hyper::Error),
    /// The HTTP/1 exchange failed before the response head.
    #[error(transparent)]
    H1(#[from] H1Error),
    /// The probe waited for room in the node's budget for what targets send until its
    /// deadline.
    #[error(transparent)]
    Budget(BudgetExhausted),
    /// `timeoutSeconds` passed before the response head.
    #[error("context deadline exceeded (Client.Timeout exceeded while awaiting headers)")]
    HeadersTimeout,
}

/// Why the body of a response could not be read (kubelet's errored path: retried, then
/// discarded). `Display` is Go's text.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError {
    /// `timeoutSeconds` passed while the body was read.
    #[error(
        "context deadline exceeded (Client.Timeout or context cancellation while reading body)"
    )]
    Timeout,
    /// The connection failed while the body was read (HTTP/2).
    #[error("{}", hyper_text(.0))]
    Read(hyper::Error),
    /// The connection failed while the body was read (HTTP/1).
    #[error(transparent)]
    H1(#[from] H1BodyError),
}

/// What came back.
#[derive(Debug)]
pub(crate) struct RawResponse {
    pub(crate) status: u16,
    /// First `Location` value.
    pub(crate) location: Option<String>,
    /// The first 10 KiB of the body, or why it could not be read.
    pub(crate) body: Result<Vec<u8>, BodyError>,
}

/// What bounds the connection of a GET: where it may go, and the node's budget for what its
/// target sends (unmetered without a meter).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds<'a> {
    /// The host policy's check of every dialled address.
    pub(crate) guard: Guard,
    /// The probe's pod's way into the budget.
    pub(crate) meter: Option<&'a Meter>,
    /// Where the hop's host name resolves (the probe's pod's lookups).
    pub(crate) names: Names<'a>,
}

/// One GET.
pub(crate) async fn get(
    url: &ProbeUrl,
    headers: &ProbeHeaders,
    host: &HeaderValue,
    referer: Option<&HeaderValue>,
    tls: &Clients,
    deadline: Instant,
    bounds: Bounds<'_>,
) -> Result<RawResponse, GetError> {
    let Bounds {
        guard,
        meter,
        names,
    } = bounds;
    // One timer for the dial and the whole exchange (a timer entry per step, or per body frame,
    // cost more than the step); how far it got (`dialing`, `dialed`, `head`) picks Go's text
    // when the deadline fires.
    let mut dialing = None;
    let mut dialed = false;
    let mut head: Option<Head> = None;
    // Set once the connection's reads are charged to the node's budget (`meter`).
    let mut waiting: Option<Waiting> = None;
    let work = async {
        let conn = dialer::connect_untimed(
            &url.host,
            url.port(),
            Options::PROBE,
            guard,
            names,
            &mut dialing,
        )
        .await
        .map_err(GetError::Dial)?;
        dialed = true;
        // What the target sends is charged to the node's budget until the exchange ends.
        let account = meter.map(Meter::account);
        waiting = account.as_ref().map(Account::waiting);
        match url.scheme {
            // Boxed on its own: with the metered stream inline, the exchange's future would pass
            // the allocator's per-thread cache size (see the test of its size).
            HttpScheme::Http => {
                Box::pin(async {
                    let mut stream = Metered::new(ProbeStream::new(conn), account);
                    send_h1(&mut stream, url, headers, host, referer, &mut head).await
                })
                .await
            }
            // Boxed: the TLS and HTTP/2 states would otherwise make every probe's future (boxed
            // per probe by the worker) several KiB larger.
            HttpScheme::Https => {
                let stream = Metered::new(ProbeStream::new(conn), account);
                let first = Box::pin(send_tls(
                    stream,
                    url,
                    headers,
                    host,
                    referer,
                    tls.rustls.as_ref(),
                    &mut head,
                ))
                .await;
                let (Err(GetError::Tls(e)), Some(go)) = (&first, &tls.go) else {
                    return first;
                };
                if !tls::over_rustls_cap(e) {
                    return first;
                }
                // rustls refused the handshake only for its message cap (the first connection
                // is closed and its room given back): the handshake is redone as Go's client on
                // a new connection, dialled and charged like the first, before the same
                // deadline.
                tls.fallbacks.inc();
                let conn = Box::pin(dialer::connect_untimed(
                    &url.host,
                    url.port(),
                    Options::PROBE,
                    guard,
                    names,
                    &mut None,
                ))
                .await
                .map_err(GetError::Dial)?;
                let account = meter.map(Meter::account);
                waiting = account.as_ref().map(Account::waiting);
                let stream = Metered::new(ProbeStream::new(conn), account);
                Box::pin(send_go_tls(
                    stream, url, headers, host, referer, go, &mut head,
                ))
                .await
            }
        }
    };
    match tokio::time::timeout_at(deadline, work).await {
        Ok(r) => r,
        // Waiting for room in the node's budget: the budget is the reason.
        Err(_) if let Some(e) = budget_failure(meter, waiting.as_ref()) => Err(GetError::Budget(e)),
        // Still dialling: Go's dial timeout, which its client words as its own.
        Err(_) if !dialed => Err(GetError::Dial(dialer::timeout_text(
            &url.host,
            url.port(),
            dialing,
        ))),
        // The head arrived: Go fails the body read, which kubelet treats as an error.
        Err(_) => match head {
            Some(Head { status, location }) => Ok(RawResponse {
                status,
                location,
                body: Err(BodyError::Timeout),
            }),
            None => Err(GetError::HeadersTimeout),
        },
    }
}

/// The budget's failure if the exchange was waiting for room in it.
fn budget_failure(meter: Option<&Meter>, waiting: Option<&Waiting>) -> Option<BudgetExhausted> {
    waiting?.exhausted(meter?)
}

/// Status line and `Location` of a response whose body is being read.
use super::h1::H1Head as Head;

async fn send_tls(
    stream: Metered<ProbeStream>,
    url: &ProbeUrl,
    headers: &ProbeHeaders,
    host: &HeaderValue,
    referer: Option<&HeaderValue>,
    tls: Option<&Arc<ClientConfig>>,
    head: &mut Option<Head>,
) -> Result<RawResponse, GetError> {
    let tls = tls.ok_or(GetError::NoTls)?;
    let name = ServerName::try_from(url.host.clone()).map_err(GetError::ServerName)?;
    let conn = match TlsConnector::from(Arc::clone(tls))
        .connect(name, FirstBytes::new(stream))
        .into_fallible()
        .await
    {
        Ok(conn) => conn,
        Err((_, stream)) if stream.answered_http() => return Err(GetError::SchemeMismatch),
        Err((e, _)) => return Err(GetError::Tls(e)),
    };
    if conn.get_ref().1.alpn_protocol() == Some(b"h2") {
        let req = headers.request(url, host, referer, true)?;
        return Box::pin(send_h2(TokioIo::new(conn), req, head)).await;
    }
    let mut conn = conn;
    send_h1(&mut conn, url, headers, host, referer, head).await
}

/// The exchange over a handshake redone as Go's client ([`GoTls`]).
async fn send_go_tls(
    stream: Metered<ProbeStream>,
    url: &ProbeUrl,
    headers: &ProbeHeaders,
    host: &HeaderValue,
    referer: Option<&HeaderValue>,
    go: &GoTls,
    head: &mut Option<Head>,
) -> Result<RawResponse, GetError> {
    let mut conn = go
        .connect(&url.host, stream)
        .await
        .map_err(GetError::GoTls)?;
    if conn.ssl().selected_alpn_protocol() == Some(b"h2") {
        let req = headers.request(url, host, referer, true)?;
        return Box::pin(send_h2(TokioIo::new(conn), req, head)).await;
    }
    send_h1(&mut conn, url, headers, host, referer, head).await
}

/// The HTTP/1.1 exchange (`h1`): the request written as hyper wrote it, the response read
/// under Go's head limits with hyper's framing rules.
async fn send_h1<S>(
    io: &mut S,
    url: &ProbeUrl,
    headers: &ProbeHeaders,
    host: &HeaderValue,
    referer: Option<&HeaderValue>,
    head: &mut Option<Head>,
) -> Result<RawResponse, GetError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut request = h1::Spare::take();
    headers.write_h1(url, host, referer, &mut request)?;
    let (Head { status, location }, body) = h1::exchange(io, request, head).await?;
    Ok(RawResponse {
        status,
        location,
        body: body.map_err(BodyError::H1),
    })
}

async fn send_h2<IO>(
    io: IO,
    req: Request<Empty<Bytes>>,
    head: &mut Option<Head>,
) -> Result<RawResponse, GetError>
where
    IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    // hyper runs the HTTP/2 connection (and the socket) as a task: in the probe's own scope, so
    // it ends with the probe.
    let (exec, scope) = scoped::scope();
    scope
        .run(async move {
            // Go's HTTP/2 client takes header lists up to MaxResponseHeaderBytes (10 MiB), and
            // says so in its SETTINGS; hyper's default is 16 KiB.
            let (mut sender, conn) = hyper::client::conn::http2::Builder::new(exec)
                .max_header_list_size(H2_MAX_HEADER_LIST)
                .handshake(io)
                .await
                .map_err(GetError::Http)?;
            drive(conn, async move {
                let resp = sender.send_request(req).await.map_err(GetError::Http)?;
                read(resp, head).await
            })
            .await
        })
        .await
}

/// Polls the connection and the exchange together; once the connection is done (the server
/// closed it after the response) the rest of the body is already buffered for `work`.
async fn drive<C, W, T>(conn: C, work: W) -> Result<T, GetError>
where
    C: Future<Output = Result<(), hyper::Error>>,
    W: Future<Output = Result<T, GetError>>,
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
async fn read(resp: Response<Incoming>, head: &mut Option<Head>) -> Result<RawResponse, GetError> {
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
            Some(Err(e)) => break Err(BodyError::Read(e)),
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

/// A dial error as Go's client reports it: a dial timeout is the client's timeout.
fn dial_text(e: &DialError) -> String {
    match e {
        DialError::Timeout(_) | DialError::LookupTimeout(_) => {
            format!("{e} (Client.Timeout exceeded while awaiting headers)")
        }
        e => e.to_string(),
    }
}

/// hyper's errors in Go's words where the case is common.
pub(super) fn hyper_text(e: &hyper::Error) -> String {
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
        if let Some(io) = s.downcast_ref::<io::Error>() {
            if let Some(limit) = io.get_ref().and_then(|e| e.downcast_ref::<HeadTooLarge>()) {
                return limit.to_string();
            }
            return format!("read: {}", go_errno(io));
        }
        source = s.source();
    }
    e.to_string()
}

/// A TLS handshake error in Go's words.
fn tls_text(e: &io::Error) -> String {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        return "EOF".to_owned();
    }
    match e.get_ref() {
        Some(inner) => format!("tls: {inner}"),
        None => format!("tls: {}", go_errno(e)),
    }
}
