//! The probe URL: kubelet's `formatURL` for the first request, and Go's `URL.Parse(location)`
//! resolution for redirects — only the parts an HTTP GET needs (no `url` crate: probes need
//! scheme, host, port and an origin-form target, and must not allocate more than that).

use std::fmt;

use crate::handler::dialer::join_host_port;
use crate::spec::HttpScheme;

/// Why a `Location` cannot be followed, in Go's words (after `Get "<url>": `).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LocationError {
    /// A scheme other than http or https (lower-cased, as Go prints it).
    #[error("unsupported protocol scheme {0:?}")]
    Scheme(String),
    /// The reference does not parse.
    #[error("failed to parse Location header {location:?}: {why}")]
    Parse {
        /// The header as received.
        location: String,
        /// What is wrong with it.
        why: &'static str,
    },
}

/// One request target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProbeUrl {
    pub(crate) scheme: HttpScheme,
    /// Host name or IP literal, without IPv6 brackets.
    pub(crate) host: String,
    /// The port as written (kubelet always writes one; a redirect may omit it).
    pub(crate) explicit_port: Option<u16>,
    /// Origin-form request target ("/path?query"), already percent-encoded where needed.
    pub(crate) target: String,
}

impl ProbeUrl {
    /// kubelet's `formatURL(scheme, host, port, path)`: the path is parsed as a URL reference,
    /// then its scheme and host are replaced; a fragment is never sent.
    pub(crate) fn for_probe(scheme: HttpScheme, host: &str, port: u16, path: &str) -> Self {
        let (_, _, rest) = split_reference(path);
        Self {
            scheme,
            host: host.to_owned(),
            explicit_port: Some(port),
            target: origin_form(rest),
        }
    }

    /// Port to dial.
    pub(crate) fn port(&self) -> u16 {
        self.explicit_port.unwrap_or(match self.scheme {
            HttpScheme::Http => 80,
            HttpScheme::Https => 443,
        })
    }

    /// Go's `URL.Host`: `host[:port]` as written, IPv6 in brackets.
    pub(crate) fn authority(&self) -> String {
        match self.explicit_port {
            Some(p) => join_host_port(&self.host, p),
            None if self.host.contains(':') => format!("[{}]", self.host),
            None => self.host.clone(),
        }
    }

    /// Resolves a `Location` header against this URL (RFC 3986 §5.2, as Go's `URL.Parse`).
    pub(crate) fn resolve(&self, location: &str) -> Result<ProbeUrl, LocationError> {
        let (scheme, authority, rest) = split_reference(location);
        let bad = |why: &'static str| LocationError::Parse {
            location: location.to_owned(),
            why,
        };
        let scheme = match scheme {
            None => self.scheme,
            Some(s) if s.eq_ignore_ascii_case("http") => HttpScheme::Http,
            Some(s) if s.eq_ignore_ascii_case("https") => HttpScheme::Https,
            Some(s) => {
                return Err(LocationError::Scheme(s.to_ascii_lowercase()));
            }
        };
        if let Some(authority) = authority {
            let (host, explicit_port) = split_authority(authority).map_err(&bad)?;
            return Ok(ProbeUrl {
                scheme,
                host,
                explicit_port,
                target: origin_form(&remove_dot_segments(rest)),
            });
        }
        if scheme != self.scheme {
            // "https:/x" with no authority: Go keeps an empty host, which cannot be dialled.
            return Err(bad("missing host"));
        }
        let (base_path, base_query) = split_query(&self.target);
        let target = if rest.is_empty() {
            match base_query {
                Some(q) => format!("{base_path}?{q}"),
                None => base_path.to_owned(),
            }
        } else if rest.starts_with('?') {
            format!("{base_path}{rest}")
        } else if rest.starts_with('/') {
            remove_dot_segments(rest)
        } else {
            let dir = &base_path[..base_path.rfind('/').map_or(0, |i| i + 1)];
            let merged = if dir.is_empty() {
                format!("/{rest}")
            } else {
                format!("{dir}{rest}")
            };
            remove_dot_segments(&merged)
        };
        Ok(ProbeUrl {
            scheme,
            host: self.host.clone(),
            explicit_port: self.explicit_port,
            target: origin_form(&target),
        })
    }
}

impl fmt::Display for ProbeUrl {
    /// Go's `URL.String()`, used in error texts (`Get "http://10.0.0.1:80/healthz": ...`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = match self.scheme {
            HttpScheme::Http => "http",
            HttpScheme::Https => "https",
        };
        write!(f, "{scheme}://{}{}", self.authority(), self.target)
    }
}

/// The probe's URL cannot be built (kubelet: `http.NewRequest` fails on `formatURL`'s result,
/// and the probe *errors* — it is discarded, never a Failure, never a kill).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("parse {url:?}: invalid URL escape {escape:?}")]
pub(crate) struct UrlError {
    /// Go's `URL.String()` of what `formatURL` built (the host escaped).
    pub(crate) url: String,
    /// The first escape Go's parser refuses in a host, e.g. `%20`.
    pub(crate) escape: String,
}

/// Whether Go's `url.URL.String()` escapes `b` in a host (`shouldEscape(b, encodeHost)`).
fn go_escapes_in_host(b: u8) -> bool {
    !(b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'-' | b'_'
                | b'.'
                | b'~'
                | b'!'
                | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'['
                | b']'
                | b'<'
                | b'>'
                | b'"'
        ))
}

impl ProbeUrl {
    /// kubelet's `formatURL` + `http.NewRequest` for a probe whose `host` field is `host`: Go
    /// writes the URL with the host escaped (`URL.String()`), then parses it back, and its
    /// parser refuses a `%XX` escape of an ASCII byte in a host (only `%25` and non-ASCII bytes
    /// may be escaped there, RFC 3986 §3.2.2). So a host with a space, a control byte, `/`, `?`,
    /// `#`, `@`, `\\`, `^`, `{`, `|`, `}` or a backquote cannot make a request: `"bad host\r\nX: y"`
    /// is `parse "http://[bad%20host%0D%0AX:%20y]:8080/": invalid URL escape "%20"`.
    pub(crate) fn checked_for_probe(
        scheme: HttpScheme,
        host: &str,
        port: u16,
        path: &str,
    ) -> Result<Self, UrlError> {
        let url = Self::for_probe(scheme, host, port, path);
        let Some(bad) = host
            .bytes()
            .find(|&b| b < 0x80 && b != b'%' && go_escapes_in_host(b))
        else {
            return Ok(url);
        };
        let mut escaped = String::with_capacity(host.len() * 3);
        for b in host.bytes() {
            if go_escapes_in_host(b) {
                escaped.push_str(&format!("%{b:02X}"));
            } else {
                escaped.push(char::from(b));
            }
        }
        let shown = ProbeUrl {
            host: escaped,
            ..url
        };
        Err(UrlError {
            url: shown.to_string(),
            escape: format!("%{bad:02X}"),
        })
    }
}

/// The host name a `Location` names, if it names one (to tell a non-local redirect even when the
/// rest of the reference cannot be followed, e.g. an `ftp://` scheme).
pub(crate) fn location_host(location: &str) -> Option<String> {
    let (_, authority, _) = split_reference(location);
    authority
        .and_then(|a| split_authority(a).ok())
        .map(|(host, _)| host)
}

/// Splits a URL reference into (scheme, authority, path+query); the fragment is dropped.
fn split_reference(s: &str) -> (Option<&str>, Option<&str>, &str) {
    let s = s.split('#').next().unwrap_or("");
    let mut rest = s;
    let mut scheme = None;
    if let Some(colon) = s.find(':') {
        let candidate = &s[..colon];
        let valid = candidate
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic())
            && candidate
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
        if valid {
            scheme = Some(candidate);
            rest = &s[colon + 1..];
        }
    }
    match rest.strip_prefix("//") {
        Some(after) => {
            let end = after.find(['/', '?']).unwrap_or(after.len());
            (scheme, Some(&after[..end]), &after[end..])
        }
        None => (scheme, None, rest),
    }
}

/// `[userinfo@]host[:port]`, IPv6 in brackets.
fn split_authority(authority: &str) -> Result<(String, Option<u16>), &'static str> {
    let hostport = authority.rsplit('@').next().unwrap_or(authority);
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let close = v6.find(']').ok_or("missing ']' in host")?;
        let after = &v6[close + 1..];
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p),
            None if after.is_empty() => None,
            None => return Err("invalid port after host"),
        };
        (&v6[..close], port)
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    let port = match port {
        None | Some("") => None,
        Some(p) if p.bytes().all(|b| b.is_ascii_digit()) => {
            Some(p.parse::<u16>().map_err(|_| "invalid port")?)
        }
        Some(_) => return Err("invalid port after host"),
    };
    if host.is_empty() {
        return Err("missing host");
    }
    Ok((host.to_owned(), port))
}

fn split_query(target: &str) -> (&str, Option<&str>) {
    match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    }
}

/// RFC 3986 §5.2.4 on the path part; the query is kept as is.
fn remove_dot_segments(target: &str) -> String {
    let (path, query) = split_query(target);
    if !path.split('/').any(|seg| seg == "." || seg == "..") {
        return target.to_owned();
    }
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = path.split('/').collect();
    let last = segments.len().saturating_sub(1);
    for (i, seg) in segments.iter().enumerate() {
        match *seg {
            "." => {
                if i == last {
                    out.push("");
                }
            }
            ".." => {
                if out.len() > 1 {
                    out.pop();
                }
                if i == last {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    let mut p = out.join("/");
    if !p.starts_with('/') {
        p.insert(0, '/');
    }
    match query {
        Some(q) => format!("{p}?{q}"),
        None => p,
    }
}

/// A valid origin-form target: a leading "/", and every byte that may not appear in a request
/// line percent-encoded (Go's `EscapedPath`; a stray `%` becomes `%25`).
fn origin_form(rest: &str) -> String {
    let mut out = String::with_capacity(rest.len() + 1);
    if !rest.starts_with('/') {
        out.push('/');
    }
    let bytes = rest.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        let ok = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'.' | b'_' | b'~' | b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+'
            )
            || matches!(b, b',' | b';' | b'=' | b':' | b'@' | b'/' | b'?');
        let valid_escape = b == b'%'
            && bytes.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
            && bytes.get(i + 2).is_some_and(u8::is_ascii_hexdigit);
        if ok || valid_escape {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
