//! One direction on socket pairs: every byte arrives, in order, whether writes go through at
//! once or must wait for a slow reader; nothing more is read while bytes wait; a destination
//! that is gone ends the direction.

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::h2read::Side;
use crate::metrics::Metrics;
use crate::observe::{Observer, Recorder};

fn pump(size: usize) -> (Pump, Conversation) {
    let metrics = Metrics::new(&prometheus::Registry::new()).expect("metrics");
    let (observer, _rx) = Observer::channel(metrics.clone());
    let recorder = Arc::new(Recorder::new(metrics.clone(), observer, || 0));
    let reader = SideReader::new(Side::Client, Faults::new());
    let pump = Pump::new(
        reader,
        metrics.relayed_bytes.with_label_values(&["to_containerd"]),
        size,
    );
    (pump, Conversation::new(recorder))
}

fn pair() -> (UnixStream, UnixStream) {
    let (a, b) = UnixStream::pair().expect("socket pair");
    a.set_nonblocking(true).expect("non-blocking");
    b.set_nonblocking(true).expect("non-blocking");
    (a, b)
}

/// Reads `from` (blocking) to its end, pausing after each read: a slow reader, whose room
/// comes back a little at a time.
fn slow_reader(from: UnixStream) -> std::thread::JoinHandle<Vec<u8>> {
    from.set_nonblocking(false).expect("blocking");
    std::thread::spawn(move || {
        let mut from = from;
        let mut got = Vec::new();
        let mut buf = vec![0; 64 << 10];
        loop {
            let n = from.read(&mut buf).expect("read");
            if n == 0 {
                return got;
            }
            got.extend_from_slice(&buf[..n]);
            std::thread::sleep(Duration::from_micros(200));
        }
    })
}

#[test]
fn bytes_through_a_slow_reader_arrive_whole_and_in_order_and_reading_waits_for_them() {
    let (src_in, src) = pair();
    let (dst, dst_out) = pair();
    // Far more than a Unix socket buffers: the direction must wait for room many times.
    let sent: Vec<u8> = (0..8u32 << 20).map(|i| (i % 251) as u8).collect();
    let writer = {
        let sent = sent.clone();
        src_in.set_nonblocking(false).expect("blocking");
        std::thread::spawn(move || {
            let mut src_in = src_in;
            src_in.write_all(&sent).expect("write");
        })
    };
    let reader = slow_reader(dst_out);
    let (mut p, mut c) = pump(256 << 10);
    let (mut relayed, mut waited) = (0, false);
    let deadline = Instant::now() + Duration::from_secs(60);
    while relayed < sent.len() {
        assert!(Instant::now() < deadline, "relayed only {relayed} bytes");
        if p.wants_write() {
            waited = true;
            p.flush(&mut c, &dst).expect("flush");
        } else {
            match p.read(&src) {
                Got::Bytes { n, drained } => {
                    relayed += n;
                    p.pass_on(&mut c, &dst, n, drained).expect("pass on");
                }
                Got::Empty => std::thread::yield_now(),
                Got::Ended => panic!("the source ended early"),
            }
        }
        assert!(p.wants_read() != p.wants_write(), "reads while bytes wait");
    }
    while p.wants_write() {
        p.flush(&mut c, &dst).expect("flush");
    }
    assert!(waited, "no write had to wait: the test proves nothing");
    writer.join().expect("writer");
    drop(dst);
    let got = reader.join().expect("reader");
    assert_eq!(got.len(), sent.len());
    assert!(got == sent, "the bytes arrived changed or out of order");
}

#[test]
fn a_destination_that_is_gone_fails_the_write_and_drops_what_waited() {
    let (mut src_in, src) = pair();
    let (dst, dst_out) = pair();
    // Fill the destination so the next chunk waits, then let its reader go.
    let block = vec![7u8; 64 << 10];
    while matches!((&dst).write(&block), Ok(n) if n > 0) {}
    src_in.write_all(b"waits").expect("write");
    let (mut p, mut c) = pump(4096);
    let Got::Bytes { n, drained } = p.read(&src) else {
        panic!("nothing to read")
    };
    p.pass_on(&mut c, &dst, n, drained)
        .expect("a full socket is no error");
    assert!(p.wants_write(), "the chunk waits for room");
    drop(dst_out);
    assert!(
        p.flush(&mut c, &dst).is_err(),
        "a write to a closed peer failed"
    );
    assert!(!p.wants_write() && p.wants_read(), "nothing waits any more");
}

#[test]
fn an_inserted_frame_goes_out_between_chunks_and_is_not_read_as_relayed_bytes() {
    let (mut src_in, src) = pair();
    let (dst, mut dst_out) = pair();
    dst_out.set_nonblocking(false).expect("blocking");
    let (mut p, mut c) = pump(4096);
    p.insert(&mut c, &dst, b"own frame").expect("insert");
    assert!(p.wants_read(), "the frame went out whole");
    src_in.write_all(b"relayed").expect("write");
    let Got::Bytes { n, drained } = p.read(&src) else {
        panic!("nothing to read")
    };
    p.pass_on(&mut c, &dst, n, drained).expect("pass on");
    let mut got = vec![0; 16];
    dst_out.read_exact(&mut got).expect("read");
    assert_eq!(&got, b"own framerelayed");
}

#[test]
fn a_source_that_closes_ends_the_direction() {
    let (src_in, src) = pair();
    let (mut p, _conversation) = pump(4096);
    assert_eq!(p.read(&src), Got::Empty);
    drop(src_in);
    assert_eq!(p.read(&src), Got::Ended);
}
