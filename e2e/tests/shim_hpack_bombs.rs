//! HPACK bombs through the shim, on the real containerd: clients that send header blocks built to
//! make a decoder work or allocate out of proportion (a run of references to a 4 KB entry, a
//! run of table size updates, a huge Huffman literal of the longest codes, a chain of one-byte
//! CONTINUATION frames), as fast as they can, over and over. Meanwhile another connection's
//! `Version` must stay within 100 ms of its latency without the shim's reader in the way (the
//! unloaded latency, or containerd's own under the same bombs when the machine is loaded) and
//! the process's RSS within twice its idle RSS: the reader's work is linear in the bytes, and it
//! holds none of a block.

#[path = "support/shim.rs"]
mod support;

use std::time::Duration;

use podward_api::cri;
use podward_e2e::TestNode;
use support::{InProcShim, metric, one_connection};
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tokio::time::Instant;

const HEADERS: u8 = 0x1;
const SETTINGS: u8 = 0x4;
const CONTINUATION: u8 = 0x9;
const END_HEADERS: u8 = 0x4;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// An HPACK integer with an `n`-bit prefix.
fn int(first: u8, n: u32, mut v: usize) -> Vec<u8> {
    let max = (1usize << n) - 1;
    if v < max {
        return vec![first | v as u8];
    }
    let mut out = vec![first | max as u8];
    v -= max;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
    out
}

/// A header block of about `total` bytes sent as HEADERS + CONTINUATIONs of `piece` bytes.
fn block_frames(stream: u32, first: &[u8], fill: &[u8], total: usize, piece: usize) -> Vec<u8> {
    let mut out = frame(HEADERS, 0, stream, first);
    let mut sent = first.len();
    while sent < total {
        let n = piece.min(total - sent).min(fill.len());
        out.extend(frame(CONTINUATION, 0, stream, &fill[..n]));
        sent += n;
    }
    out.extend(frame(CONTINUATION, END_HEADERS, stream, &[0x83]));
    out
}

/// The bombs, each a whole connection's bytes after the preface.
fn bombs() -> Vec<(&'static str, Vec<u8>)> {
    const TOTAL: usize = 4 << 20;
    // A 4 KB entry, then 1-byte references to it (index 62).
    let mut insert = vec![0x40];
    insert.extend(int(0, 7, 5));
    insert.extend_from_slice(b"x-big");
    insert.extend(int(0, 7, 4000));
    insert.extend(std::iter::repeat_n(b'a', 4000));
    // Blocks just under 64 KiB (what a reader with a 64 KiB block buffer still decodes), one per
    // stream: 61,440 references each, 240 MB of fields if every reference were copied.
    let mut references = block_frames(1, &insert, &[0xbe; 15 << 10], 60 << 10, 15 << 10);
    let mut stream = 3;
    while references.len() < TOTAL {
        references.extend(block_frames(
            stream,
            &[0xbe],
            &[0xbe; 15 << 10],
            60 << 10,
            15 << 10,
        ));
        stream += 2;
    }
    // Table size updates, 3 bytes each (to 4096).
    let updates: Vec<u8> = [0x3f, 0xe1, 0x1f].repeat(5461);
    let sizes = block_frames(1, &[0x82], &updates, TOTAL, 16_383);
    // One literal of 4 MiB of Huffman-coded '\' (19 bits each, the longest printable code):
    // 0xfe 0x7f 0xf0 repeated is not aligned; any run of bytes that decodes is enough, so the
    // value is '\' encoded by hand: 1111111111111110000 (19 bits).
    let mut bits = Vec::new();
    let code: u32 = 0x7fff0;
    let (mut acc, mut n) = (0u64, 0u32);
    for _ in 0..(TOTAL * 8 / 19) {
        acc = (acc << 19) | u64::from(code);
        n += 19;
        while n >= 8 {
            bits.push((acc >> (n - 8)) as u8);
            n -= 8;
        }
        acc &= (1u64 << n) - 1;
    }
    if n > 0 {
        bits.push(((acc << (8 - n)) | ((1 << (8 - n)) - 1)) as u8);
    }
    let mut literal = vec![0x00];
    literal.extend(int(0, 7, 1));
    literal.push(b'x');
    literal.extend(int(0x80, 7, bits.len()));
    literal.extend(bits);
    let (first, rest) = literal.split_at(16 << 10);
    let mut huffman = frame(HEADERS, 0, 1, first);
    for c in rest.chunks(16 << 10) {
        huffman.extend(frame(CONTINUATION, 0, 1, c));
    }
    huffman.extend(frame(CONTINUATION, END_HEADERS, 1, &[0x83]));
    // A chain of one-byte CONTINUATION frames (each an indexed :method GET).
    let chain = block_frames(1, &[0x82], &[0x82], TOTAL / 10, 1);
    vec![
        ("references", references),
        ("size updates", sizes),
        ("Huffman literal", huffman),
        ("CONTINUATION chain", chain),
    ]
}

/// Sends `bytes` on new connections to `cri`, over and over, until `until` has passed and the
/// whole bomb has gone out at least once, or until `cap` (the caller's check then fails).
///
/// Each connection is relayed by a thread of its own, so the bombs share the CPUs by the time
/// they cost, not by the bytes they send: the references, dearest per byte to decode (for
/// containerd most of all), go out slowest, and on a loaded machine may need more than the
/// measured span to go out once.
async fn bomb(cri: std::path::PathBuf, bytes: Vec<u8>, until: Instant, cap: Instant) -> usize {
    let mut sent = 0;
    let done = |sent: usize| {
        let now = Instant::now();
        now >= cap || (now >= until && sent >= bytes.len())
    };
    while !done(sent) {
        let Ok(mut s) = UnixStream::connect(&cri).await else {
            continue;
        };
        let mut start = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        start.extend(frame(SETTINGS, 0, 0, &[]));
        if s.write_all(&start).await.is_err() {
            continue;
        }
        for c in bytes.chunks(64 << 10) {
            if done(sent) || s.write_all(c).await.is_err() {
                break;
            }
            sent += c.len();
        }
    }
    sent
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("VmRSS:")?
                    .trim()
                    .strip_suffix("kB")?
                    .trim()
                    .parse()
                    .ok()
            })
        })
        .unwrap_or(0)
}

// The shim on a thread of its own (as its own process would be); the bombs and the measured
// client on the test's threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hpack_bombs_delay_no_other_connection_and_hold_no_memory() {
    let node = TestNode::start().await.expect("node");
    let shim = InProcShim::start_on_own_thread(&node).await;
    let mut rt = one_connection(&shim.cri).await;
    let bombs = bombs();

    let mut unloaded = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        rt.version(cri::VersionRequest::default())
            .await
            .expect("Version");
        unloaded.push(t.elapsed());
    }
    unloaded.sort();
    let unloaded_p50 = unloaded[unloaded.len() / 2];
    let idle_rss = rss_kib();

    let until = Instant::now() + Duration::from_secs(4);
    let cap = until + Duration::from_secs(26);
    let senders: Vec<_> = bombs
        .into_iter()
        .map(|(name, bytes)| {
            let sender = tokio::spawn(bomb(shim.cri.clone(), bytes, until, cap));
            (name, sender)
        })
        .collect();
    // containerd decodes the bombs too (they reach it unchanged): its own latency under them,
    // measured directly in turn with the shim's, is the floor the shim adds to.
    let mut direct = one_connection(&node.containerd_socket()).await;
    let mut loaded = Vec::new();
    let mut floor = Vec::new();
    let mut peak_rss = idle_rss;
    while senders.iter().any(|(_, s)| !s.is_finished()) {
        let t = Instant::now();
        direct
            .version(cri::VersionRequest::default())
            .await
            .expect("Version direct");
        floor.push(t.elapsed());
        let t = Instant::now();
        rt.version(cri::VersionRequest::default())
            .await
            .expect("Version under bombs");
        loaded.push(t.elapsed());
        peak_rss = peak_rss.max(rss_kib());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for (name, s) in senders {
        let sent = s.await.expect("sender");
        eprintln!("{name}: {} MiB sent", sent >> 20);
        assert!(
            sent >= 4 << 20,
            "{name}: the bomb must have gone out at least once"
        );
    }
    loaded.sort();
    floor.sort();
    let worst = *loaded.last().expect("calls");
    eprintln!(
        "Version unloaded p50 {unloaded_p50:?}; under bombs p50 {:?} max {worst:?} ({} calls); \
         direct to containerd under bombs p50 {:?} max {:?}; RSS idle {idle_rss} KiB, peak \
         {peak_rss} KiB",
        loaded[loaded.len() / 2],
        loaded.len(),
        floor[floor.len() / 2],
        floor.last().expect("calls"),
    );
    // What the shim adds stays within 100 ms of what containerd itself takes under the same
    // bombs (on a quiet machine that floor is the unloaded latency; on a loaded one, not). Held
    // at the 99th percentile, not the single worst call: a bomb that stalled the relay would
    // delay every call made while it is decoded (hundreds here), while one call can meet a
    // scheduling stall of its own on a machine running other tests beside this one. With fewer
    // than a hundred calls the 99th percentile by rank is the worst call, so at least one call
    // is left out.
    let direct_worst = *floor.last().expect("calls");
    let direct_p50 = floor[floor.len() / 2];
    let left_out = (loaded.len() / 100).max(1);
    let p99 = loaded[loaded.len().saturating_sub(1 + left_out)];
    assert!(
        p99 <= direct_worst.max(unloaded_p50) + Duration::from_millis(100),
        "another connection's calls took {p99:?} at the 99th percentile, {worst:?} at worst \
         (direct {direct_worst:?}, unloaded {unloaded_p50:?})"
    );
    assert!(
        loaded[loaded.len() / 2] <= direct_p50 + Duration::from_millis(100),
        "median {:?} against containerd's own {direct_p50:?}",
        loaded[loaded.len() / 2]
    );
    assert!(
        peak_rss <= 2 * idle_rss,
        "RSS {peak_rss} KiB under bombs, idle {idle_rss} KiB"
    );
    // The bombs are valid HPACK: the reader followed every one of them.
    assert_eq!(
        metric(&shim.metrics_text(), "podward_shim_observe_errors_total"),
        0.0
    );
    shim.stop().await;
}
