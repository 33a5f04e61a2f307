//! HTTP(S) GET probe (kubelet `pkg/probe/http`, with `followNonLocalRedirects=false`).
//!
//! - 2xx: Success with the body (first 10 KiB); 3xx not followed: Warning
//!   "Probe terminated redirects, Response body: ..."; anything else: Failure
//!   "HTTP probe failed with statuscode: N" (no body).
//! - Redirects (301, 302, 303, 307, 308 with a `Location`) to the same host name, any port, are
//!   followed, at most 10 in all ("stopped after 10 redirects" → Failure); to another host name the
//!   3xx itself is the answer. A user `Host` header survives relative redirects, as in Go.
//! - Dial/TLS/timeout errors are a Failure with Go's error text; a body read error is an error
//!   (kubelet's `Failure, "", err`), retried by the prober; an unresolvable port is an error, and
//!   so is every URL that cannot be built (a `host` Go's URL parser refuses: kubelet's
//!   `http.NewRequest` error).
//! - One deadline, `timeoutSeconds`, covers every hop and the body, like Go's `Client.Timeout`.
//! - Go's head limits, not hyper's (`head`): any number of fields and of interim (1xx)
//!   responses, as long as all the heads of an exchange stay within 10 MiB
//!   ([`MAX_HEAD_BYTES`]); past it a Failure with Go's text. The body keeps kubelet's 10 KiB.

mod exchange;
mod go_tls;
mod h1;
mod head;
mod request;
mod tls;
mod url;

use std::time::Duration;

use bytes::Bytes;
use http::header::HeaderValue;
use tokio::time::Instant;

use self::exchange::{BodyError, RawResponse};
use self::request::{ProbeHeaders, RequestError};
use self::url::ProbeUrl;
use super::attempt::{Answer, ProbeTarget};
use super::dial_error::DialError;
use super::dialer::ip_string;
use super::host_policy::Guard;
use super::port::{PortError, resolve_port};
use super::resolve::Names;
use super::target_budget::Meter;
use crate::spec::{HttpGetSpec, HttpScheme};

pub(crate) use self::exchange::SCHEME_MISMATCH;
pub use self::head::MAX_HEAD_BYTES;

/// Go's `http.Client` redirect limit, as kubelet's checker enforces it.
pub const MAX_REDIRECTS: usize = 10;

/// Why an HTTP probe errored (kubelet: Unknown + err), rather than failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HttpError {
    /// The probe's port did not resolve.
    #[error(transparent)]
    Port(#[from] PortError),
    /// The final response's body could not be read.
    #[error(transparent)]
    Body(#[from] BodyError),
    /// The request cannot be built from the probe (kubelet's `http.NewRequest` error).
    #[error(transparent)]
    Url(#[from] url::UrlError),
    /// `--probe-host-policy` forbids every address of this hop's host.
    #[error("Get \"{url}\": {error}")]
    Denied {
        /// The URL of the hop.
        url: String,
        /// The dialer's refusal.
        error: DialError,
    },
}

/// HTTP prober with its per-process state (User-Agent, TLS config) built once.
pub(crate) struct HttpProber {
    user_agent: HeaderValue,
    /// The headers of a probe without `httpHeaders` (most of them), resolved once.
    default_headers: ProbeHeaders,
    tls: tls::Clients,
}

impl HttpProber {
    pub(crate) fn new(user_agent: &str) -> Self {
        let tls = tls::Clients::new();
        let user_agent = HeaderValue::from_str(user_agent)
            .unwrap_or_else(|_| HeaderValue::from_static("kube-probe"));
        let default_headers = ProbeHeaders::default_for(&user_agent);
        Self {
            user_agent,
            default_headers,
            tls,
        }
    }

    /// Counts the handshakes redone with OpenSSL on `fallbacks`.
    pub(crate) fn count_tls_fallbacks(&mut self, fallbacks: prometheus::IntCounter) {
        self.tls.fallbacks = fallbacks;
    }

    /// One HTTP probe (kubelet `DoHTTPProbe` over `NewRequestForHTTPGetAction`); `guard` checks
    /// every hop's addresses when the probe names a `host`; host names resolve through `names`.
    /// Its steps: the first URL and the
    /// headers, then one GET per hop, each answer either the probe's result or a redirect to
    /// follow (`next_hop`), all before one deadline.
    pub(crate) async fn probe(
        &self,
        get: &HttpGetSpec,
        timeout: Duration,
        target: &ProbeTarget<'_>,
        guard: Guard,
        meter: Option<&Meter>,
        names: Names<'_>,
    ) -> Result<Answer, HttpError> {
        let port = resolve_port(&get.port, target.ports)?;
        let deadline = Instant::now() + timeout;
        let (host, mut url) = first_url(get, target, port)?;
        let custom;
        let headers = if get.headers.is_empty() {
            &self.default_headers
        } else {
            custom = match ProbeHeaders::new(&get.headers, &self.user_agent) {
                Ok(h) => h,
                Err(e) => return Ok(Answer::Failure(format!("Get \"{url}\": {e}"))),
            };
            &custom
        };
        // Only a probe that names a host is checked: the pod's own IP is always allowed.
        let guard = if get.host.is_some() {
            guard
        } else {
            Guard::OPEN
        };
        let mut hop = Hop {
            host_override: headers.host_override.clone(),
            referer: None,
            requests: 0,
        };
        loop {
            let host_value = match host_value(&url, hop.host_override.as_ref()) {
                Ok(v) => v,
                Err(failed) => return Ok(failed),
            };
            // Boxed: the exchange's state is most of the probe's, and the probe's own future
            // must stay small (see `Prober::attempt`).
            let resp = match Box::pin(exchange::get(
                &url,
                headers,
                &host_value,
                hop.referer.as_ref(),
                &self.tls,
                deadline,
                exchange::Bounds {
                    guard,
                    meter,
                    names,
                },
            ))
            .await
            {
                Ok(r) => r,
                Err(exchange::GetError::Dial(error)) if error.is_denied() => {
                    return Err(HttpError::Denied {
                        url: url.to_string(),
                        error,
                    });
                }
                Err(e) => return Ok(Answer::Failure(format!("Get \"{url}\": {e}"))),
            };
            hop.requests += 1;
            match hop.next(resp, &url, &host, get.host.is_none()) {
                Next::Done(result) => return result,
                Next::Follow(next) => url = next,
            }
        }
    }
}

/// Go's `URL.Host` of the first request `get` makes of `target` (`host:port`, an IPv6 address
/// in brackets); `None` when its port does not resolve or its URL cannot be built.
pub(crate) fn authority(get: &HttpGetSpec, target: &ProbeTarget<'_>) -> Option<String> {
    let port = resolve_port(&get.port, target.ports).ok()?;
    first_url(get, target, port)
        .ok()
        .map(|(_, url)| url.authority())
}

/// The probe's host name (the pod IP when it names none) and its first URL. A bad `host` is a
/// probe error, as kubelet's `NewRequestForHTTPGetAction` failing is (discarded by the worker:
/// never a Failure, never a kill). The pod IP is always valid.
fn first_url(
    get: &HttpGetSpec,
    target: &ProbeTarget<'_>,
    port: u16,
) -> Result<(String, ProbeUrl), HttpError> {
    Ok(match &get.host {
        Some(h) => {
            let url = ProbeUrl::checked_for_probe(get.scheme, h, port, &get.path)?;
            (h.clone(), url)
        }
        None => {
            let host = ip_string(target.host_ip);
            let url = ProbeUrl::for_probe(get.scheme, &host, port, &get.path);
            (host, url)
        }
    })
}

/// The `Host` header of a hop: the user's while it lasts, else the URL's authority; a Failure
/// (Go's transport refuses it when sending) when the authority is not a header value, which
/// with the host checked up front only a redirect's non-header bytes can make.
fn host_value(url: &ProbeUrl, host_override: Option<&HeaderValue>) -> Result<HeaderValue, Answer> {
    match host_override {
        Some(h) => Ok(h.clone()),
        // `from_maybe_shared` takes the string's buffer instead of copying it.
        None => HeaderValue::from_maybe_shared(Bytes::from(url.authority()))
            .map_err(|_| Answer::Failure(format!("Get \"{url}\": {}", RequestError::Host))),
    }
}

/// What carries from one hop of a probe to the next.
struct Hop {
    /// The user's `Host` header, kept across relative redirects as Go keeps it.
    host_override: Option<HeaderValue>,
    /// Go's `Referer` for the next request.
    referer: Option<HeaderValue>,
    /// Requests sent so far.
    requests: usize,
}

/// After one hop: the probe's result, or the URL to follow.
enum Next {
    Done(Result<Answer, HttpError>),
    Follow(ProbeUrl),
}

impl Hop {
    /// Go's redirect policy for the answer `resp` to `url` (the first request's host being
    /// `host`; `echo` false keeps the body out of the output).
    fn next(&mut self, resp: RawResponse, url: &ProbeUrl, host: &str, echo: bool) -> Next {
        let location = resp.location.as_deref().filter(|l| !l.is_empty());
        let (true, Some(location)) = (is_followed_redirect(resp.status), location) else {
            return Next::Done(result(resp, echo));
        };
        let next = match url.resolve(location) {
            Ok(n) => n,
            // Go checks the host before it fails on the new URL: another host's unusable
            // Location is still just a non-local redirect.
            Err(_)
                if url::location_host(location).is_some_and(|h| !h.eq_ignore_ascii_case(host)) =>
            {
                return Next::Done(result(resp, echo));
            }
            Err(e) => return Next::Done(Ok(Answer::Failure(format!("Get \"{url}\": {e}")))),
        };
        // Go compares `URL.Hostname()` with the first request's; a name differing only in
        // case is the same host (the resolver lower-cases nothing, but DNS is case-blind).
        if !next.host.eq_ignore_ascii_case(host) {
            return Next::Done(result(resp, echo));
        }
        if self.requests >= MAX_REDIRECTS {
            return Next::Done(Ok(Answer::Failure(format!(
                "Get {location:?}: stopped after {MAX_REDIRECTS} redirects"
            ))));
        }
        let relative = !has_scheme(location);
        let keep_override = self
            .host_override
            .as_ref()
            .is_some_and(|h| h.as_bytes() != url.authority().as_bytes());
        if !(relative && keep_override) {
            self.host_override = None;
        }
        self.referer = referer_for(url, &next);
        Next::Follow(next)
    }
}

/// Go follows these for a GET; other 3xx codes are returned as they are.
fn is_followed_redirect(status: u16) -> bool {
    matches!(status, 301 | 302 | 303 | 307 | 308)
}

fn has_scheme(location: &str) -> bool {
    match location.find(':') {
        Some(i) => {
            let s = &location[..i];
            s.bytes().next().is_some_and(|b| b.is_ascii_alphabetic())
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
        }
        None => false,
    }
}

/// Go's `refererForURL`: the previous URL, except from https to http.
fn referer_for(last: &ProbeUrl, next: &ProbeUrl) -> Option<HeaderValue> {
    if last.scheme == HttpScheme::Https && next.scheme == HttpScheme::Http {
        return None;
    }
    HeaderValue::from_str(&last.to_string()).ok()
}

/// What a probe that names a `host` shows instead of the response body: the answer of a host
/// other than the pod's own is never echoed into Status, logs or events (`--probe-host-policy`
/// limits where such a probe goes; this limits what it can read back).
pub const BODY_NOT_SHOWN: &str = "(response body not shown: the probe names a host)";

/// kubelet's mapping of the final response; `echo` false keeps the body out of the output.
fn result(resp: RawResponse, echo: bool) -> Result<Answer, HttpError> {
    let body = resp.body?;
    let body = if !echo {
        String::new()
    } else {
        match String::from_utf8(body) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        }
    };
    Ok(match resp.status {
        200..=299 => Answer::Success(body),
        300..=399 if !echo => Answer::Warning(format!(
            "Probe terminated redirects, Response body: {BODY_NOT_SHOWN}"
        )),
        300..=399 => Answer::Warning(format!("Probe terminated redirects, Response body: {body}")),
        code => Answer::Failure(format!("HTTP probe failed with statuscode: {code}")),
    })
}

#[cfg(test)]
mod tests;
