//! The probe request as kubelet's `newProbeRequest` and Go's `Request.Write` build it.
//!
//! Names are canonicalised (`FOO-bAR` → `Foo-Bar`, the connection writes title case) and
//! duplicates kept in order. `User-Agent` defaults to `kube-probe/<x.y>`; a user value wins and an
//! empty one means no header. `Accept` defaults to `*/*`; an empty user value removes it. A `Host`
//! header overrides the request's host. Go writes `Host`, then `User-Agent`, then the other
//! headers sorted by name, then `Connection: close` (keep-alives off); there is no
//! `Accept-Encoding` (compression off). `Content-Length`, `Transfer-Encoding` and `Trailer` from
//! the spec are dropped, as Go does for a GET.

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{Method, Request, Uri, Version};
use http_body_util::Empty;

use super::url::ProbeUrl;

/// A probe's headers, resolved once per probe and reused across its redirects.
#[derive(Debug, Clone)]
pub(crate) struct ProbeHeaders {
    /// `None`: no User-Agent line.
    user_agent: Option<HeaderValue>,
    /// The user's `Host` header, if non-empty.
    pub(crate) host_override: Option<HeaderValue>,
    /// Everything else, sorted by name, values in order.
    others: Vec<(HeaderName, HeaderValue)>,
}

/// Why the request could not be built, in the words of Go's transport (after `Get "<url>": `).
#[derive(Debug, thiserror::Error)]
pub(crate) enum RequestError {
    /// A header name that is not an HTTP token.
    #[error("net/http: invalid header field name {0:?}")]
    FieldName(String),
    /// A header value with bytes HTTP forbids (the name canonicalised, as Go prints it).
    #[error("net/http: invalid header field value for {0:?}")]
    FieldValue(String),
    /// A `Host` header (or authority) that is not a valid header value.
    #[error("http: invalid Host header")]
    Host,
    /// The request target is not a valid URI.
    #[error("invalid URL: {0}")]
    Url(http::uri::InvalidUri),
}

impl ProbeHeaders {
    /// The headers of a probe without `httpHeaders`: the default User-Agent and `Accept: */*`.
    pub(crate) fn default_for(default_ua: &HeaderValue) -> Self {
        Self {
            user_agent: Some(default_ua.clone()),
            host_override: None,
            others: vec![(header::ACCEPT, HeaderValue::from_static("*/*"))],
        }
    }

    /// kubelet's header rules over the spec's `httpHeaders`.
    pub(crate) fn new(
        spec: &[(String, String)],
        default_ua: &HeaderValue,
    ) -> Result<Self, RequestError> {
        if spec.is_empty() {
            return Ok(Self::default_for(default_ua));
        }
        let mut parsed: Vec<(HeaderName, &str)> = Vec::with_capacity(spec.len() + 1);
        for (name, value) in spec {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| RequestError::FieldName(name.clone()))?;
            parsed.push((name, value));
        }
        let first = |n: &HeaderName| parsed.iter().find(|(k, _)| k == n).map(|(_, v)| *v);
        let invalid = |n: &HeaderName| RequestError::FieldValue(canonical(n.as_str()));
        let user_agent = match first(&header::USER_AGENT) {
            None => Some(default_ua.clone()),
            Some("") => None,
            Some(v) => Some(HeaderValue::from_str(v).map_err(|_| invalid(&header::USER_AGENT))?),
        };
        let host_override = match first(&header::HOST) {
            None | Some("") => None,
            Some(v) => Some(HeaderValue::from_str(v).map_err(|_| RequestError::Host)?),
        };
        let drop_accept = first(&header::ACCEPT) == Some("");
        if first(&header::ACCEPT).is_none() {
            parsed.push((header::ACCEPT, "*/*"));
        }
        let mut others = Vec::with_capacity(parsed.len());
        for (name, value) in parsed {
            let excluded = [
                header::HOST,
                header::USER_AGENT,
                header::CONTENT_LENGTH,
                header::TRANSFER_ENCODING,
                header::TRAILER,
            ];
            if excluded.contains(&name) || (drop_accept && name == header::ACCEPT) {
                continue;
            }
            let value = HeaderValue::from_str(value).map_err(|_| invalid(&name))?;
            others.push((name, value));
        }
        // Lower-case order equals Go's order of canonical names; the sort is stable so
        // duplicate values keep theirs.
        others.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
        Ok(Self {
            user_agent,
            host_override,
            others,
        })
    }

    /// The request for `url`. `host` is the Host value (override or `url`'s authority);
    /// `referer` is set on followed redirects, as Go does.
    pub(crate) fn request(
        &self,
        url: &ProbeUrl,
        host: &HeaderValue,
        referer: Option<&HeaderValue>,
        h2: bool,
    ) -> Result<Request<Empty<Bytes>>, RequestError> {
        let mut req = Request::new(Empty::new());
        *req.method_mut() = Method::GET;
        if h2 {
            // HTTP/2 carries the host in :authority, and forbids Connection.
            *req.version_mut() = Version::HTTP_2;
            let uri = format!(
                "https://{}{}",
                host.to_str().unwrap_or_default(),
                url.target
            );
            *req.uri_mut() = uri.parse::<Uri>().map_err(RequestError::Url)?;
        } else {
            *req.uri_mut() = url.target.parse::<Uri>().map_err(RequestError::Url)?;
            req.headers_mut().insert(header::HOST, host.clone());
        }
        let headers_ref = req.headers_mut();
        if let Some(ua) = &self.user_agent {
            headers_ref.insert(header::USER_AGENT, ua.clone());
        }
        let mut referer_pending =
            referer.filter(|_| !self.others.iter().any(|(n, _)| n == header::REFERER));
        for (name, value) in &self.others {
            if let Some(r) = referer_pending.filter(|_| name.as_str() > header::REFERER.as_str()) {
                headers_ref.append(header::REFERER, r.clone());
                referer_pending = None;
            }
            headers_ref.append(name.clone(), value.clone());
        }
        if let Some(r) = referer_pending {
            headers_ref.append(header::REFERER, r.clone());
        }
        if !h2 {
            headers_ref.append(header::CONNECTION, HeaderValue::from_static("close"));
        }
        Ok(req)
    }
}

impl ProbeHeaders {
    /// The HTTP/1.1 request for `url` as bytes, exactly as hyper's client wrote the
    /// [`ProbeHeaders::request`] with title-cased names: the request line, then the fields in
    /// `HeaderMap` order (a name's values together, at its first insertion) — `Host`,
    /// `User-Agent`, the sorted others with `Referer` in its place, `Connection: close` (beside a
    /// user's own `Connection` values, where the map puts it).
    pub(crate) fn write_h1(
        &self,
        url: &ProbeUrl,
        host: &HeaderValue,
        referer: Option<&HeaderValue>,
        out: &mut Vec<u8>,
    ) -> Result<(), RequestError> {
        // A plain target is written as it is, as `Uri` prints it back; anything else goes
        // through `Uri` (its error, or its printing).
        out.extend_from_slice(b"GET ");
        if valid_target(&url.target) {
            out.extend_from_slice(url.target.as_bytes());
        } else {
            let uri = url.target.parse::<Uri>().map_err(RequestError::Url)?;
            out.extend_from_slice(uri.to_string().as_bytes());
        }
        out.extend_from_slice(b" HTTP/1.1\r\n");
        field(out, b"Host", host);
        if let Some(ua) = &self.user_agent {
            field(out, b"User-Agent", ua);
        }
        let mut referer_pending =
            referer.filter(|_| !self.others.iter().any(|(n, _)| n == header::REFERER));
        let user_connection = self.others.iter().any(|(n, _)| n == header::CONNECTION);
        let close = HeaderValue::from_static("close");
        let mut others = self.others.iter().peekable();
        while let Some((name, value)) = others.next() {
            if let Some(r) = referer_pending.filter(|_| name.as_str() > header::REFERER.as_str()) {
                field(out, b"Referer", r);
                referer_pending = None;
            }
            title_case(out, name.as_str().as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\r\n");
            if name == header::CONNECTION
                && others.peek().is_none_or(|(n, _)| n != header::CONNECTION)
            {
                field(out, b"Connection", &close);
            }
        }
        if let Some(r) = referer_pending {
            field(out, b"Referer", r);
        }
        if !user_connection {
            field(out, b"Connection", &close);
        }
        out.extend_from_slice(b"\r\n");
        Ok(())
    }
}

/// A request target `http::Uri` takes and prints back unchanged: an absolute path with an
/// optional query, of the bytes its parser accepts there (no `#`: the URL keeps no fragment).
fn valid_target(target: &str) -> bool {
    target.starts_with('/')
        && target.bytes().all(|b| {
            b.is_ascii_graphic()
                && !matches!(
                    b,
                    b'#' | b'"' | b'<' | b'>' | b'\\' | b'^' | b'`' | b'{' | b'|' | b'}'
                )
        })
}

fn field(out: &mut Vec<u8>, name: &[u8], value: &HeaderValue) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// hyper's `title_case`: upper-case the first letter and every letter after a `-`.
fn title_case(out: &mut Vec<u8>, name: &[u8]) {
    let mut prev = b'-';
    for &c in name {
        out.push(if prev == b'-' {
            c.to_ascii_uppercase()
        } else {
            c
        });
        prev = c;
    }
}

/// Go's `CanonicalMIMEHeaderKey` for a valid token.
pub(crate) fn canonical(name: &str) -> String {
    let mut upper = true;
    name.chars()
        .map(|c| {
            let out = if upper {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            };
            upper = c == '-';
            out
        })
        .collect()
}
