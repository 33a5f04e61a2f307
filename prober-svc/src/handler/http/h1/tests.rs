//! `h1` against hyper's client, on the same bytes: the request it writes, and what it reads of
//! every response shape the probe tests cover (and the edges around them), delivered whole and
//! one byte at a time. hyper reads through `head::HeadReader`, as the probe's exchange did before
//! `h1` replaced it.

use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderValue, LOCATION};
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::super::exchange::hyper_text;
use super::super::head::{HeadReader, MAX_HEAD_BYTES};
use super::super::request::ProbeHeaders;
use super::super::url::ProbeUrl;
use super::*;
use crate::spec::HttpScheme;

/// What a GET came back with, in the probe's terms: the status and `Location`, and the body or
/// the body's error text; or the error text before any head.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Response {
        status: u16,
        location: Option<String>,
        body: Result<Vec<u8>, String>,
    },
    Failed(String),
}

/// Reads the request off `server` up to its blank line, then writes `response` in pieces of
/// `piece` bytes and closes; returns the request.
async fn serve(mut server: DuplexStream, response: Vec<u8>, piece: usize) -> Vec<u8> {
    let mut request = Vec::new();
    let mut b = [0u8; 1024];
    while !request.ends_with(b"\r\n\r\n") {
        match server.read(&mut b).await {
            Ok(0) | Err(_) => break,
            Ok(n) => request.extend_from_slice(&b[..n]),
        }
    }
    for p in response.chunks(piece.max(1)) {
        if server.write_all(p).await.is_err() {
            break;
        }
        tokio::task::yield_now().await;
    }
    request
}

fn probe_request() -> (ProbeUrl, ProbeHeaders, HeaderValue) {
    let url = ProbeUrl::for_probe(HttpScheme::Http, "127.0.0.1", 8080, "/healthz");
    let headers = ProbeHeaders::default_for(&HeaderValue::from_static("kube-probe/1.33"));
    let host = HeaderValue::from_static("127.0.0.1:8080");
    (url, headers, host)
}

/// hyper's client, as the exchange used it.
async fn with_hyper(response: Vec<u8>, piece: usize) -> Outcome {
    let (client, server) = tokio::io::duplex(1 << 16);
    let server = tokio::spawn(serve(server, response, piece));
    let (url, headers, host) = probe_request();
    let req = headers.request(&url, &host, None, false).expect("request");
    let (mut sender, conn) = match hyper::client::conn::http1::Builder::new()
        .title_case_headers(true)
        .max_buf_size(MAX_HEAD_BYTES + 8192)
        .handshake(TokioIo::new(HeadReader::new(client)))
        .await
    {
        Ok(p) => p,
        Err(e) => return Outcome::Failed(hyper_text(&e)),
    };
    let conn = tokio::spawn(conn);
    let outcome = match sender.send_request(req).await {
        Err(e) => Outcome::Failed(hyper_text(&e)),
        Ok(resp) => {
            let status = resp.status().as_u16();
            let location = resp
                .headers()
                .get(LOCATION)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
            let mut body = resp.into_body();
            let mut buf: Vec<u8> = Vec::new();
            let body = loop {
                if buf.len() >= MAX_OUTPUT_BYTES {
                    break Ok(buf);
                }
                match body.frame().await {
                    None => break Ok(buf),
                    Some(Err(e)) => break Err(hyper_text(&e)),
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            let data: Bytes = data;
                            let room = MAX_OUTPUT_BYTES - buf.len();
                            buf.extend_from_slice(&data[..data.len().min(room)]);
                        }
                    }
                }
            };
            Outcome::Response {
                status,
                location,
                body,
            }
        }
    };
    conn.abort();
    server.abort();
    outcome
}

/// `h1`, as the exchange uses it now.
async fn with_h1(response: Vec<u8>, piece: usize) -> Outcome {
    let (mut client, server) = tokio::io::duplex(1 << 16);
    let server = tokio::spawn(serve(server, response, piece));
    let (url, headers, host) = probe_request();
    let mut request = super::Spare::take();
    headers
        .write_h1(&url, &host, None, &mut request)
        .expect("request");
    let mut head = None;
    let outcome = match exchange(&mut client, request, &mut head).await {
        Err(e) => Outcome::Failed(e.to_string()),
        Ok((h, body)) => {
            let stored = head.expect("the head is stored as soon as it is read");
            assert_eq!((stored.status, &stored.location), (h.status, &h.location));
            Outcome::Response {
                status: h.status,
                location: h.location,
                body: body.map_err(|e| e.to_string()),
            }
        }
    };
    server.abort();
    outcome
}

async fn both(response: &[u8], piece: usize) -> (Outcome, Outcome) {
    let limit = Duration::from_secs(10);
    let old = tokio::time::timeout(limit, with_hyper(response.to_vec(), piece))
        .await
        .expect("hyper answered");
    let new = tokio::time::timeout(limit, with_h1(response.to_vec(), piece))
        .await
        .expect("h1 answered");
    (old, new)
}

/// Response shapes: framing (length, chunked, until close), the statuses without a body,
/// interim responses, malformed heads and bodies, early ends, the 10 KiB cut.
fn cases() -> Vec<Vec<u8>> {
    let mut c: Vec<Vec<u8>> = [
        &b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"[..],
        b"HTTP/1.1 200 OK\r\n\r\nuntil the end",
        b"HTTP/1.0 200 OK\r\n\r\nold server",
        b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nabcdef",
        b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nA \t; x\r\n0123456789\r\n0\r\nX-Trailer: 1\r\nY: 2\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nBad Trailer\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\nab\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nshort",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;a\nb\r\nab\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nnot chunked",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n1\r\nx\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: CHUNKED\r\n\r\n1\r\nx\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
        b"HTTP/1.1 200 OK\r\nContent-Length: 3, 3\r\nContent-Length: 3\r\n\r\nabcd",
        b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\nabcd",
        b"HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\nabcd",
        b"HTTP/1.1 200 OK\r\nContent-Length: +3\r\n\r\nabcd",
        b"HTTP/1.1 200 OK\r\nContent-Length: 18446744073709551615\r\n\r\nabcd",
        b"HTTP/1.1 200 OK\r\nContent-Length: 18446744073709551616\r\n\r\nabcd",
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort",
        b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\nhello",
        b"HTTP/1.1 304 Not Modified\r\n\r\nbody",
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\nafter",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx",
        b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 302 Found\r\nLocation: /b\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\n",
        b"\r\n\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx",
        b"HTTP/1.1 302 Found\r\nLocation: /next\r\nlocation: /other\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 301 Moved\r\nLocation: /caf\xc3\xa9\xff\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX-Foo: \x01bad\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\x01\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon at all\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n: empty name\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n  folded\r\n\r\nok",
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/1.1 099 Low\r\n\r\n",
        b"HTTP/1.1 abc OK\r\n\r\n",
        b"XTTP/1.1 200 OK\r\n\r\n",
        b"HTTP/2 200 OK\r\n\r\n",
        b"HTTP/1.2 200 OK\r\n\r\n",
        b"HTTP/1.1 200\r\n\r\nno reason",
        b"HTTP/1.1 200 \r\n\r\nempty reason",
        b"HTTP/1.1 999 Custom\r\nContent-Length: 1\r\n\r\nz",
        b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok",
        b"\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        b"",
        b"garbage",
        b"garbage\r\n",
        b"HTTP/1.1 200 OK\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Le",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
    ]
    .iter()
    .map(|b| b.to_vec())
    .collect();
    // The 10 KiB cut, for every framing.
    for len in [
        MAX_OUTPUT_BYTES - 1,
        MAX_OUTPUT_BYTES,
        MAX_OUTPUT_BYTES + 1,
        30_000,
    ] {
        let body = vec![b'a'; len];
        let mut r = format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n\r\n").into_bytes();
        r.extend_from_slice(&body);
        c.push(r);
        let mut r = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
        r.extend_from_slice(&body);
        c.push(r);
        let mut r = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        for piece in body.chunks(3000) {
            r.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
            r.extend_from_slice(piece);
            r.extend_from_slice(b"\r\n");
        }
        r.extend_from_slice(b"0\r\n\r\n");
        c.push(r);
    }
    // A body cut short past the 10 KiB: still a success, as hyper stopped reading too.
    let mut r = b"HTTP/1.1 200 OK\r\nContent-Length: 20000\r\n\r\n".to_vec();
    r.extend_from_slice(&[b'b'; 12_000]);
    c.push(r);
    c
}

#[tokio::test]
async fn every_response_reads_as_hypers_whole_and_byte_by_byte() {
    for response in cases() {
        for piece in [usize::MAX, 7, 1] {
            if piece == 1 && response.len() > 2000 {
                continue;
            }
            let (old, new) = both(&response, piece).await;
            assert_eq!(
                new,
                old,
                "response {:?} in pieces of {piece}",
                String::from_utf8_lossy(&response)
            );
        }
    }
}

/// Captures the bytes hyper's client writes for `req`.
async fn hyper_bytes(req: http::Request<http_body_util::Empty<Bytes>>) -> Vec<u8> {
    let (client, server) = tokio::io::duplex(1 << 16);
    let server = tokio::spawn(serve(
        server,
        b"HTTP/1.1 204 No Content\r\n\r\n".to_vec(),
        usize::MAX,
    ));
    let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
        .title_case_headers(true)
        .handshake(TokioIo::new(client))
        .await
        .expect("handshake");
    let conn = tokio::spawn(conn);
    let _ = sender.send_request(req).await;
    conn.abort();
    server.await.expect("server")
}

#[tokio::test]
async fn requests_are_the_bytes_hyper_wrote() {
    let ua = HeaderValue::from_static("kube-probe/1.33");
    let specs: Vec<Vec<(&str, &str)>> = vec![
        vec![],
        vec![
            ("x-cUSTOM-header", "one"),
            ("Accept", "application/json"),
            ("X-Custom-Header", "two"),
            ("a-first", "1"),
        ],
        vec![("User-Agent", ""), ("Accept", "")],
        vec![("User-Agent", "mine/1"), ("Host", "example.com")],
        vec![
            ("connection", "keep-alive"),
            ("zeta", "z"),
            ("Connection", "upgrade"),
        ],
        vec![("Referer", "http://mine/"), ("x", "y")],
        vec![("aaa", "1"), ("zzz", "2")],
        vec![
            ("Content-Length", "5"),
            ("Transfer-Encoding", "chunked"),
            ("Trailer", "x"),
        ],
    ];
    let targets = [
        "/healthz",
        "/?foo",
        "/a/b?x=1&y=%20",
        "/weird{}|^`\"<>\\path",
    ];
    let referers = [
        None,
        Some(HeaderValue::from_static("http://127.0.0.1:8080/start")),
    ];
    for spec in &specs {
        let owned: Vec<(String, String)> = spec
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let headers = ProbeHeaders::new(&owned, &ua).expect("headers");
        for target in targets {
            let mut url = ProbeUrl::for_probe(HttpScheme::Http, "127.0.0.1", 8080, "/");
            url.target = target.to_owned();
            for referer in &referers {
                let host = headers
                    .host_override
                    .clone()
                    .unwrap_or(HeaderValue::from_static("127.0.0.1:8080"));
                let mut mine = Vec::new();
                let theirs = match headers.request(&url, &host, referer.as_ref(), false) {
                    Ok(req) => {
                        headers
                            .write_h1(&url, &host, referer.as_ref(), &mut mine)
                            .expect("hyper took it, so must h1");
                        hyper_bytes(req).await
                    }
                    Err(_) => {
                        assert!(
                            headers
                                .write_h1(&url, &host, referer.as_ref(), &mut mine)
                                .is_err(),
                            "{target}"
                        );
                        continue;
                    }
                };
                assert_eq!(
                    String::from_utf8_lossy(&mine),
                    String::from_utf8_lossy(&theirs),
                    "{spec:?} {target} {referer:?}"
                );
            }
        }
    }
}

/// A ~10 MB status line followed by many large fields, delivered in socket-sized pieces: the
/// head parser examines each byte a bounded number of times, however many reads it takes.
#[tokio::test]
async fn a_long_status_line_then_many_fields_is_parsed_in_one_pass() {
    let mut response = b"HTTP/1.1 200 ".to_vec();
    response.resize(response.len() + 10_000_000, b'a');
    response.extend_from_slice(b"\r\n");
    for i in 0..64 {
        let mut field = format!("Location: /{i}/").into_bytes();
        field.resize(5_000, b'l');
        field.extend_from_slice(b"\r\n");
        response.extend_from_slice(&field);
    }
    response.extend_from_slice(b"Content-Length: 2\r\n\r\nok");
    assert!(response.len() < MAX_HEAD_BYTES);
    EXAMINED.with(|c| c.set(0));
    let outcome = with_h1(response.clone(), READ_CHUNK).await;
    let examined = EXAMINED.with(std::cell::Cell::get);
    match outcome {
        Outcome::Response {
            status, location, ..
        } => {
            assert_eq!(status, 200);
            assert!(location.is_some_and(|l| l.starts_with("/0/")));
        }
        other => panic!("{other:?}"),
    }
    assert!(
        examined <= 3 * response.len(),
        "the parser examined {examined} bytes for a head of {}",
        response.len()
    );
}

/// A head that never completes is checked line by line: a malformed line fails at once.
#[tokio::test]
async fn a_malformed_line_fails_before_the_head_ends() {
    let (mut client, mut server) = tokio::io::duplex(1 << 16);
    let (url, headers, host) = probe_request();
    let mut request = super::Spare::take();
    headers
        .write_h1(&url, &host, None, &mut request)
        .expect("request");
    let srv = tokio::spawn(async move {
        let mut b = [0u8; 1024];
        let _ = server.read(&mut b).await;
        server
            .write_all(b"HTTP/1.1 200 OK\r\nBad Name: x\r\n")
            .await
            .expect("write");
        // Never ends the head, never closes.
        std::future::pending::<()>().await;
    });
    let mut head = None;
    let r = tokio::time::timeout(
        Duration::from_secs(5),
        exchange(&mut client, request, &mut head),
    )
    .await
    .expect("failed without waiting for the rest of the head");
    assert!(
        matches!(r, Err(H1Error::Malformed(_))),
        "{:?}",
        r.map(|_| ())
    );
    srv.abort();
}
