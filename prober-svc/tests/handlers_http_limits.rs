//! HTTP probe limits as kubelet's Go client has them (Go 1.24+, kubelet 1.33): any number of
//! header fields and of interim (1xx) responses, as long as every head of the exchange together
//! stays within `MaxResponseHeaderBytes` (10 MiB); the body keeps kubelet's 10 KiB. Each limit
//! at the limit and one past it.

#[path = "support/handlers.rs"]
mod support;

use std::time::{Duration, Instant};

use podward_prober::handler::http::MAX_HEAD_BYTES;
use podward_prober::model::outcome::ProbeResult;
use podward_prober::spec::ProbeType;
use support::{RawServer, Reply, get, prober, result, run, spec, target};

/// A head of exactly `size` bytes: `status`, `Content-Length: 2`, filler fields of ~1,000 bytes
/// (so a 10 MiB head has some 10,000 of them), the blank line.
fn head_of(size: usize, status: &str) -> Vec<u8> {
    let mut head = format!("{status}\r\nContent-Length: 2\r\n").into_bytes();
    let mut left = size - head.len() - 2;
    while left > 0 {
        let line = if left >= 2000 { 1000 } else { left };
        head.extend_from_slice(b"X-Pad: ");
        head.extend(std::iter::repeat_n(b'a', line - 9));
        head.extend_from_slice(b"\r\n");
        left -= line;
    }
    head.extend_from_slice(b"\r\n");
    assert_eq!(head.len(), size);
    head
}

fn exceeded(port: u16) -> String {
    format!(
        "Get \"http://127.0.0.1:{port}/\": net/http: server response headers exceeded 10485760 bytes; aborted"
    )
}

#[tokio::test]
async fn many_header_fields_are_read_as_go_reads_them() {
    // hyper's default stops at 100 fields; Go has no count limit.
    let mut head = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n".to_vec();
    for i in 0..150 {
        head.extend_from_slice(format!("X-Field-{i}: v\r\n").as_bytes());
    }
    head.extend_from_slice(b"\r\nok");
    let srv = RawServer::start(move |_| Reply::Raw(head.clone())).await;
    let v = run(get(srv.port(), "/", &[])).await;
    assert_eq!(result(&v), (ProbeResult::Success, "ok", false));
}

#[tokio::test]
async fn a_head_of_exactly_10_mib_succeeds_one_byte_more_fails() {
    let mut at = head_of(MAX_HEAD_BYTES, "HTTP/1.1 200 OK");
    at.extend_from_slice(b"ok");
    let srv = RawServer::start(move |_| Reply::Raw(at.clone())).await;
    let v = run(get(srv.port(), "/", &[])).await;
    assert_eq!(result(&v), (ProbeResult::Success, "ok", false));

    let mut over = head_of(MAX_HEAD_BYTES + 1, "HTTP/1.1 200 OK");
    over.extend_from_slice(b"ok");
    let srv = RawServer::start(move |_| Reply::Raw(over.clone())).await;
    let v = run(get(srv.port(), "/", &[])).await;
    assert_eq!(
        result(&v),
        (ProbeResult::Failure, exceeded(srv.port()).as_str(), false)
    );
}

#[tokio::test]
async fn a_location_far_larger_than_hypers_buffer_is_read() {
    // A 3xx to another host is the answer itself; its 1 MB `Location` is read, not refused.
    let location = format!("http://elsewhere.invalid/{}", "p".repeat(1 << 20));
    let reply = format!("HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\n\r\n");
    let srv = RawServer::start(move |_| Reply::Raw(reply.clone().into_bytes())).await;
    let v = run(get(srv.port(), "/", &[])).await;
    assert_eq!(
        result(&v),
        (
            ProbeResult::Success,
            "Probe terminated redirects, Response body: ",
            true
        )
    );
}

#[tokio::test]
async fn interim_responses_count_against_the_head_limit_not_by_number() {
    // Six interim responses (more than older Go's five) then the answer: read as Go 1.24 does.
    let mut six = b"HTTP/1.1 100 Continue\r\n\r\n".repeat(6);
    six.extend_from_slice(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    let srv = RawServer::start(move |_| Reply::Raw(six.clone())).await;
    let v = run(get(srv.port(), "/", &[])).await;
    assert_eq!(result(&v), (ProbeResult::Success, "ok", false));

    // Interim heads and the final head at exactly the limit together: a Success.
    let last = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n";
    let interim = head_of(MAX_HEAD_BYTES - last.len(), "HTTP/1.1 103 Early Hints");
    let mut at = interim.clone();
    at.extend_from_slice(last);
    at.extend_from_slice(b"ok");
    let srv = RawServer::start(move |_| Reply::Raw(at.clone())).await;
    let v = run(get(srv.port(), "/", &[])).await;
    assert_eq!(result(&v), (ProbeResult::Success, "ok", false));

    // One byte more in an interim head: the limit.
    let mut over = head_of(MAX_HEAD_BYTES - last.len() + 1, "HTTP/1.1 103 Early Hints");
    over.extend_from_slice(last);
    over.extend_from_slice(b"ok");
    let srv = RawServer::start(move |_| Reply::Raw(over.clone())).await;
    let v = run(get(srv.port(), "/", &[])).await;
    assert_eq!(
        result(&v),
        (ProbeResult::Failure, exceeded(srv.port()).as_str(), false)
    );
}

#[tokio::test]
async fn an_endless_flood_of_interim_responses_fails_at_once() {
    // hyper alone parses them until the timeout; Go stops at 10 MiB of heads.
    let flood = b"HTTP/1.1 100 Continue\r\n\r\n".repeat(MAX_HEAD_BYTES / 25 + 1000);
    let srv = RawServer::start(move |_| Reply::Raw(flood.clone())).await;
    // A timeout far longer than reading 10 MiB takes, even in a debug build on a busy machine.
    let started = Instant::now();
    let v = prober()
        .probe(
            ProbeType::Liveness,
            &spec(get(srv.port(), "/", &[]), 10),
            &target(&[], &[]),
        )
        .await;
    let took = started.elapsed();
    assert_eq!(
        result(&v),
        (ProbeResult::Failure, exceeded(srv.port()).as_str(), false)
    );
    assert!(took < Duration::from_secs(5), "{took:?} (timeout 10 s)");
}

#[tokio::test]
async fn the_body_is_cut_at_10_kib_exactly() {
    for (len, kept) in [(10_240, 10_240), (10_241, 10_240)] {
        let body = vec![b'z'; len];
        let reply = support::response(200, &[], &body);
        let srv = RawServer::start(move |_| reply.clone()).await;
        let v = run(get(srv.port(), "/", &[])).await;
        let (r, out, _) = result(&v);
        assert_eq!((r, out.len()), (ProbeResult::Success, kept), "{len}");
    }
}
