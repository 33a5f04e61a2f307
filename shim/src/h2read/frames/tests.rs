//! The frame reader on hand-made frames: long CONTINUATION chains, padding and priority,
//! SETTINGS split anywhere, junk, and where a frame may be added.

use std::ops::Range;

use bytes::Bytes;

use super::wire::*;
use super::write::frame;
use super::*;

#[derive(Default)]
struct Count {
    blocks: usize,
    fragment_bytes: usize,
    settings: Vec<(u16, u32)>,
}

impl FrameSink for Count {
    fn block_start(&mut self, _: u32, _: bool, _: bool) {}
    fn block_fragment(&mut self, f: &[u8]) -> Result<(), FrameError> {
        self.fragment_bytes += f.len();
        Ok(())
    }
    fn block_end(&mut self) -> Result<(), FrameError> {
        self.blocks += 1;
        Ok(())
    }
    fn data(&mut self, _: u32, _: &[u8], _: Range<usize>, _: bool) -> Result<(), FrameError> {
        Ok(())
    }
    fn rst_stream(&mut self, _: u32, _: u32) {}
    fn goaway(&mut self, _: u32, _: u32) {}
    fn setting(&mut self, id: u16, value: u32) {
        self.settings.push((id, value));
    }
}

#[test]
fn a_long_continuation_chain_is_followed_without_holding_it() {
    let mut r = FrameReader::client();
    let mut sink = Count::default();
    r.feed(&Bytes::from_static(PREFACE), &mut sink)
        .expect("preface");
    r.feed(&Bytes::from(frame(HEADERS, 0, 1, &[0x82])), &mut sink)
        .expect("headers");
    let cont = Bytes::from(frame(CONTINUATION, 0, 1, &[0x82; 16 << 10]));
    for _ in 0..1024 {
        r.feed(&cont, &mut sink).expect("continuation");
        assert!(!r.at_boundary());
    }
    r.feed(
        &Bytes::from(frame(CONTINUATION, END_HEADERS, 1, &[0x82])),
        &mut sink,
    )
    .expect("last");
    assert_eq!(sink.blocks, 1);
    assert_eq!(sink.fragment_bytes, 2 + (16 << 10) * 1024);
    assert!(r.at_boundary());
}

#[test]
fn padding_and_priority_are_not_part_of_the_fragment() {
    let mut sink = Count::default();
    let mut r = FrameReader::server();
    // Pad length 3, priority (5 bytes), fragment of 2, 3 bytes of padding.
    let payload = [3, 0, 0, 0, 0, 16, 0x88, 0x82, 0, 0, 0];
    let f = Bytes::from(frame(HEADERS, END_HEADERS | PADDED | PRIORITY, 1, &payload));
    for at in 0..f.len() {
        let mut r2 = FrameReader::server();
        let mut s2 = Count::default();
        r2.feed(&f.slice(..at), &mut s2).expect("first part");
        r2.feed(&f.slice(at..), &mut s2).expect("second part");
        assert_eq!((s2.blocks, s2.fragment_bytes), (1, 2), "split at {at}");
    }
    r.feed(&f, &mut sink).expect("frame");
    let bad = Bytes::from(frame(HEADERS, END_HEADERS | PADDED, 3, &[9, 0x88]));
    assert_eq!(
        FrameReader::server().feed(&bad, &mut sink),
        Err(FrameError::Malformed("HEADERS"))
    );
}

#[test]
fn settings_parameters_are_reported_split_anywhere() {
    let mut payload = Vec::new();
    payload.extend_from_slice(&[0, 1, 0, 1, 0, 0]); // HEADER_TABLE_SIZE 65536
    payload.extend_from_slice(&[0, 6, 0, 0, 0x40, 0]); // MAX_HEADER_LIST_SIZE 16384
    let f = Bytes::from(frame(SETTINGS, 0, 0, &payload));
    for at in 0..=f.len() {
        let mut r = FrameReader::server();
        let mut sink = Count::default();
        r.feed(&f.slice(..at), &mut sink).expect("first part");
        r.feed(&f.slice(at..), &mut sink).expect("second part");
        assert_eq!(sink.settings, [(1, 65536), (6, 16384)], "split at {at}");
    }
    let odd = Bytes::from(frame(SETTINGS, 0, 0, &[0, 1, 0]));
    assert_eq!(
        FrameReader::server().feed(&odd, &mut Count::default()),
        Err(FrameError::Malformed("SETTINGS"))
    );
}

#[test]
fn junk_and_out_of_place_continuations_are_errors() {
    let mut sink = Count::default();
    let mut r = FrameReader::client();
    let junk = Bytes::from_static(b"GET / HTTP/1.1\r\n\r\n");
    assert_eq!(r.feed(&junk, &mut sink), Err(FrameError::Preface));
    let mut r = FrameReader::server();
    let cont = Bytes::from(frame(CONTINUATION, END_HEADERS, 1, &[0x82]));
    assert_eq!(r.feed(&cont, &mut sink), Err(FrameError::Continuation));
    let mut r = FrameReader::server();
    let mut two = frame(HEADERS, 0, 1, &[0x82]);
    two.extend(frame(DATA, 0, 1, b"x"));
    assert_eq!(
        r.feed(&Bytes::from(two), &mut sink),
        Err(FrameError::Continuation)
    );
}

#[test]
fn a_goaway_is_only_added_between_frames() {
    let mut sink = Count::default();
    let mut r = FrameReader::server();
    assert!(!r.at_boundary(), "nothing from the server yet");
    let settings = Bytes::from(settings_frame(false));
    r.feed(&settings.slice(..5), &mut sink).expect("half");
    assert!(!r.at_boundary());
    r.feed(&settings.slice(5..), &mut sink).expect("rest");
    assert!(r.at_boundary());
    r.feed(&Bytes::from(frame(HEADERS, 0, 1, &[0x88])), &mut sink)
        .expect("headers");
    assert!(!r.at_boundary(), "inside a header block");
}

#[test]
fn only_whole_upkeep_frames_are_upkeep() {
    let update = frame(WINDOW_UPDATE, 0, 0, &[0, 1, 0, 0]);
    let mut ping_and_update = frame(PING, 0, 0, &[0; 8]);
    ping_and_update.extend(&update);
    assert!(only_upkeep(&update));
    assert!(only_upkeep(&ping_and_update));
    assert!(only_upkeep(&settings_frame(true)));
    let mut with_data = update.clone();
    with_data.extend(frame(DATA, END_STREAM, 1, b"x"));
    assert!(
        !only_upkeep(&with_data),
        "a request's body after the update"
    );
    assert!(!only_upkeep(&frame(HEADERS, END_HEADERS, 1, &[0x82])));
    assert!(!only_upkeep(&update[..12]), "a frame cut short");
    assert!(!only_upkeep(&[]));
}
