//! The reader on its own, without the CRI layer above it: what a user of [`StreamEvents`] is
//! told, and the HPACK limits one direction's SETTINGS set for the other.

use bytes::Bytes;

use super::*;

const WANTED: Wanted = Wanted::new(&[
    WantedField {
        name: b":path",
        keep: 64,
    },
    WantedField {
        name: b"x-long",
        keep: 4,
    },
]);

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// Everything reported, as text.
#[derive(Default)]
struct Log(Vec<String>);

impl StreamEvents for Log {
    fn headers(
        &mut self,
        stream: u32,
        block: HeaderBlock,
        end_stream: bool,
    ) -> Result<(), FrameError> {
        let path = block
            .get(0)
            .map(|v| String::from_utf8_lossy(v.bytes()).into_owned());
        let long = block.get(1);
        self.0.push(format!(
            "headers {stream} {path:?} {long:?} size {} end {end_stream}",
            block.list_size()
        ));
        Ok(())
    }

    fn data(
        &mut self,
        stream: u32,
        chunk: &[u8],
        range: Range<usize>,
        end_stream: bool,
    ) -> Result<(), FrameError> {
        let bytes = String::from_utf8_lossy(&chunk[range]).into_owned();
        self.0
            .push(format!("data {stream} {bytes:?} end {end_stream}"));
        Ok(())
    }

    fn reset(&mut self, stream: u32, code: u32) {
        self.0.push(format!("reset {stream} {code}"));
    }

    fn goaway(&mut self, last_stream: u32, code: u32) {
        self.0.push(format!("goaway {last_stream} {code}"));
    }
}

#[test]
fn streams_are_reported_in_http2_terms_split_anywhere() {
    let mut wire = frames::PREFACE.to_vec();
    wire.extend(frame(0x4, 0, 0, &[])); // SETTINGS
    wire.extend(literal_headers(
        1,
        &[(":path", "/a/B"), ("x-long", "abcdef"), ("other", "z")],
        false,
    ));
    wire.extend(frame(0x0, 0x1, 1, b"body")); // DATA, END_STREAM
    wire.extend(frame(0x3, 0, 3, &8u32.to_be_bytes())); // RST_STREAM CANCEL
    wire.extend(goaway_frame(5, b"bye"));
    let want = [
        // Sizes: each field's name and value lengths + 32 (41 + 44 + 38).
        "headers 1 Some(\"/a/B\") Some(Cut([97, 98, 99, 100])) size 123 end false",
        "data 1 \"body\" end true",
        "reset 3 8",
        "goaway 5 0",
    ];
    for piece in [wire.len(), 1, 2, 5] {
        let mut reader = DirectionReader::new(Side::Client, WANTED);
        let mut limits = HeaderLimits::default();
        let mut log = Log::default();
        for p in wire.chunks(piece) {
            reader
                .feed(&Bytes::copy_from_slice(p), &mut limits, &mut log)
                .expect("reads");
        }
        assert!(reader.preface_done() && reader.at_boundary());
        // A DATA frame split in pieces is reported piece by piece: join them back.
        let mut joined: Vec<String> = Vec::new();
        let mut body = String::new();
        for e in log.0 {
            if let Some(rest) = e.strip_prefix("data 1 ") {
                let (bytes, end) = rest.rsplit_once(" end ").expect("data");
                body.push_str(bytes.trim_matches('"'));
                if end == "true" {
                    joined.push(format!("data 1 {body:?} end true"));
                }
            } else {
                joined.push(e);
            }
        }
        assert_eq!(joined, want, "pieces of {piece}");
    }
}

#[test]
fn a_table_size_is_allowed_only_once_the_decoding_side_announced_it() {
    // A client block that raises its table to 8192 (a dynamic table size update, empty block).
    let raise = frame(0x1, 0x4 | 0x1, 1, &[0x3f, 0xe1, 0x3f]);
    let mut client = frames::PREFACE.to_vec();
    client.extend(&raise);
    let client = Bytes::from(client);

    let mut limits = HeaderLimits::default();
    let refused =
        DirectionReader::new(Side::Client, WANTED).feed(&client, &mut limits, &mut Log::default());
    assert!(
        matches!(
            refused,
            Err(FrameError::Hpack(HpackError::TableSize {
                asked: 8192,
                allowed: 4096
            }))
        ),
        "{refused:?}"
    );

    // The server's SETTINGS_HEADER_TABLE_SIZE = 8192, read on the server's direction, allows it.
    let mut limits = HeaderLimits::default();
    let mut param = 1u16.to_be_bytes().to_vec();
    param.extend(8192u32.to_be_bytes());
    DirectionReader::new(Side::Server, WANTED)
        .feed(
            &Bytes::from(frame(0x4, 0, 0, &param)),
            &mut limits,
            &mut Log::default(),
        )
        .expect("server settings");
    DirectionReader::new(Side::Client, WANTED)
        .feed(&client, &mut limits, &mut Log::default())
        .expect("allowed once announced");
}
