//! The streaming decoder against RFC 7541's examples, the hpack-test-case corpus (five
//! encoders' stories), an independent implementation on random header lists, and HPACK bombs.

use proptest::prelude::*;

use super::*;
use crate::h2read::{FieldValue, WantedField};

/// The fields a gRPC reader wants, with the caps the shim uses.
const WANTED: Wanted = Wanted::new(&[
    WantedField {
        name: b":path",
        keep: 1024,
    },
    WantedField {
        name: b"grpc-status",
        keep: 16,
    },
    WantedField {
        name: b"grpc-message",
        keep: 1024,
    },
]);

/// What a block said of the wanted fields, as the tests compare it.
#[derive(Debug, PartialEq)]
struct Seen {
    path: Option<String>,
    grpc_status: Option<i32>,
    grpc_message: Option<String>,
    list_size: u64,
}

fn seen(b: HeaderBlock) -> Seen {
    let text = |i: usize| {
        b.get(i)
            .map(|v| String::from_utf8_lossy(v.bytes()).into_owned())
    };
    Seen {
        path: text(0),
        grpc_status: b
            .get(1)
            .and_then(FieldValue::whole)
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(|v| v.trim().parse().ok()),
        grpc_message: text(2),
        list_size: b.list_size(),
    }
}

fn decoder() -> BlockDecoder {
    BlockDecoder::new(WANTED)
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// Decodes one whole block.
fn block(d: &mut BlockDecoder, wire: &[u8], allowed: u64) -> Result<Seen, HpackError> {
    d.feed(wire, allowed)?;
    d.finish().map(seen)
}

/// The size of a header list as RFC 9113 counts it.
fn list_size<'a>(fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) -> u64 {
    fields
        .into_iter()
        .map(|(n, v)| n.len() as u64 + v.len() as u64 + 32)
        .sum()
}

#[test]
fn rfc7541_requests_keep_the_table_in_step() {
    // C.3 (literals) and C.4 (Huffman): the second and third blocks refer to the first's
    // entries; :path is "/" then "/" then "/index.html".
    for blocks in [
        [
            "828684410f7777772e6578616d706c652e636f6d",
            "828684be58086e6f2d6361636865",
            "828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565",
        ],
        [
            "828684418cf1e3c2e5f23a6ba0ab90f4ff",
            "828684be5886a8eb10649cbf",
            "828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf",
        ],
    ] {
        let mut d = decoder();
        let paths: Vec<Option<String>> = blocks
            .iter()
            .map(|b| block(&mut d, &hex(b), 4096).expect("decodes").path)
            .collect();
        assert_eq!(
            paths,
            [
                Some("/".into()),
                Some("/".into()),
                Some("/index.html".into())
            ]
        );
        assert_eq!(d.table.size(), 164);
    }
}

#[test]
fn rfc7541_responses_evict_as_the_encoder_does() {
    // C.5 (literals) and C.6 (Huffman) with a 256-byte table: sizes 222, 222, 215.
    for blocks in [
        [
            "4803333032580770726976617465611d4d6f6e2c203231204f637420323031332032303a31333a323120474d546e1768747470733a2f2f7777772e6578616d706c652e636f6d",
            "4803333037c1c0bf",
            "88c1611d4d6f6e2c203231204f637420323031332032303a31333a323220474d54c05a04677a69707738666f6f3d4153444a4b48514b425a584f5157454f50495541585157454f49553b206d61782d6167653d333630303b2076657273696f6e3d31",
        ],
        [
            "488264025885aec3771a4b6196d07abe941054d444a8200595040b8166e082a62d1bff6e919d29ad171863c78f0b97c8e9ae82ae43d3",
            "4883640effc1c0bf",
            "88c16196d07abe941054d444a8200595040b8166e084a62d1bffc05a839bd9ab77ad94e7821dd7f2e6c7b335dfdfcd5b3960d5af27087f3672c1ab270fb5291f9587316065c003ed4ee5b1063d5007",
        ],
    ] {
        let mut d = decoder();
        // A size update to 256 (the examples' SETTINGS_HEADER_TABLE_SIZE).
        block(&mut d, &[0x3f, 0xe1, 0x01], 4096).expect("size update");
        assert_eq!(d.table_max_size(), 256);
        let sizes: Vec<u64> = blocks
            .iter()
            .map(|b| {
                block(&mut d, &hex(b), 4096).expect("decodes");
                d.table.size()
            })
            .collect();
        assert_eq!(sizes, [222, 222, 215]);
    }
}

/// One story of hpack-test-case: each case a header block, its table size setting, and the
/// header list it decodes to.
#[derive(serde::Deserialize)]
struct Story {
    cases: Vec<Case>,
}

#[derive(serde::Deserialize)]
struct Case {
    header_table_size: Option<u64>,
    wire: String,
    headers: Vec<std::collections::BTreeMap<String, String>>,
}

#[test]
fn five_encoders_stories_decode_split_anywhere() {
    let stories = [
        include_str!("stories/go-hpack.json"),
        include_str!("stories/nghttp2-change-table-size.json"),
        include_str!("stories/haskell-http2-linear-huffman.json"),
        include_str!("stories/swift-nio-hpack-huffman.json"),
        include_str!("stories/python-hpack.json"),
    ];
    let mut blocks = 0;
    for (i, json) in stories.iter().enumerate() {
        let story: Story = serde_json::from_str(json).expect("story");
        // Whole blocks, and every block fed in pieces of 1..=7 bytes.
        for piece in [usize::MAX, 1, 3, 7] {
            let mut d = decoder();
            let mut allowed = INITIAL_TABLE_SIZE;
            for (n, case) in story.cases.iter().enumerate() {
                if let Some(t) = case.header_table_size {
                    allowed = t;
                }
                let wire = hex(&case.wire);
                for p in wire.chunks(piece.min(wire.len().max(1))) {
                    d.feed(p, allowed).expect("fragment");
                }
                let got = seen(d.finish().expect("block"));
                let pairs: Vec<(&[u8], &[u8])> = case
                    .headers
                    .iter()
                    .flat_map(|h| h.iter().map(|(k, v)| (k.as_bytes(), v.as_bytes())))
                    .collect();
                let path = pairs
                    .iter()
                    .rev()
                    .find(|(k, _)| *k == b":path")
                    .map(|(_, v)| String::from_utf8_lossy(v).into_owned());
                assert_eq!(got.path, path, "story {i} case {n}");
                assert_eq!(
                    got.list_size,
                    list_size(pairs.iter().copied()),
                    "story {i} case {n}: every field decoded to its length"
                );
                blocks += 1;
            }
        }
    }
    assert!(blocks > 400, "{blocks}");
}

/// A header name the property test draws from: the reader's own, common ones, random ones.
fn name() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b":path".to_vec()),
        Just(b"grpc-status".to_vec()),
        Just(b"grpc-message".to_vec()),
        Just(b"grpc-timeout".to_vec()),
        Just(b"content-type".to_vec()),
        Just(b":status".to_vec()),
        proptest::collection::vec(b'a'..=b'z', 1..20),
    ]
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => proptest::collection::vec(any::<u8>(), 0..40),
        1 => (0usize..3000, any::<u8>()).prop_map(|(n, b)| vec![b; n]),
        1 => Just(b"/runtime.v1.RuntimeService/RunPodSandbox".to_vec()),
        1 => Just(b"5".to_vec()),
    ]
}

/// A field (name, value, httlib-hpack's encoding flags).
type Field = (Vec<u8>, Vec<u8>, u8);

/// A header block: an optional table size update first, then fields.
type Block = (Option<u32>, Vec<Field>);

/// A field and how httlib-hpack is to encode it.
fn field() -> impl Strategy<Value = Field> {
    // Flags: Huffman name 0x1, value 0x2; with indexing 0x4; never indexed 0x8; best 0x10.
    (name(), value(), 0u8..32)
}

/// A sequence of blocks, some starting with a table size update.
fn session() -> impl Strategy<Value = Vec<Block>> {
    proptest::collection::vec(
        (
            proptest::option::weighted(0.15, 0u32..=4096),
            proptest::collection::vec(field(), 0..12),
        ),
        1..12,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn agrees_with_another_implementation_on_random_sessions(
        session in session(),
        piece in 1usize..64,
    ) {
        let mut enc = httlib_hpack::Encoder::with_dynamic_size(4096);
        let mut theirs = httlib_hpack::Decoder::with_dynamic_size(4096);
        let mut ours = decoder();
        for (update, fields) in session {
            let mut wire = Vec::new();
            if let Some(size) = update {
                enc.update_max_dynamic_size(size, &mut wire).expect("size update");
            }
            for (n, v, flags) in fields {
                enc.encode((n, v, flags), &mut wire).expect("encode");
            }
            let mut buf = wire.clone();
            let mut decoded = Vec::new();
            theirs.decode(&mut buf, &mut decoded).expect("they decode");
            for p in wire.chunks(piece) {
                ours.feed(p, 4096).expect("we decode");
            }
            let got = seen(ours.finish().expect("block"));
            let last = |name: &[u8]| {
                decoded
                    .iter()
                    .rev()
                    .find(|(n, _, _)| n == name)
                    .map(|(_, v, _)| v.clone())
            };
            let cut = |v: Vec<u8>, keep: usize| String::from_utf8_lossy(&v[..v.len().min(keep)]).into_owned();
            prop_assert_eq!(got.path, last(b":path").map(|v| cut(v, 1024)));
            prop_assert_eq!(got.grpc_message, last(b"grpc-message").map(|v| cut(v, 1024)));
            let status = last(b"grpc-status")
                .filter(|v| v.len() <= 16)
                .and_then(|v| String::from_utf8(v).ok())
                .and_then(|v| v.trim().parse().ok());
            prop_assert_eq!(got.grpc_status, status);
            prop_assert_eq!(
                got.list_size,
                list_size(decoded.iter().map(|(n, v, _)| (&n[..], &v[..])))
            );
        }
    }
}

/// An HPACK integer with an `n`-bit prefix and `first` as the prefix byte's other bits.
fn int(first: u8, n: u32, mut v: u64) -> Vec<u8> {
    let max = (1u64 << n) - 1;
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

/// A literal with incremental indexing and a new name.
fn incremental(name: &[u8], value: &[u8]) -> Vec<u8> {
    let mut out = vec![0x40];
    out.extend(int(0, 7, name.len() as u64));
    out.extend_from_slice(name);
    out.extend(int(0, 7, value.len() as u64));
    out.extend_from_slice(value);
    out
}

#[test]
fn a_block_of_references_to_a_big_entry_copies_nothing() {
    // The amplification bomb: a 4 KB entry, then a megabyte of 1-byte references to it. Each
    // reference shares the entry's value; the decoder holds only the table.
    let mut d = decoder();
    let big = vec![b'p'; 4000];
    block(&mut d, &incremental(b":path", &big), 4096).expect("insert");
    let refs = vec![0xbe; 1 << 20]; // index 62: the newest entry
    for p in refs.chunks(16 << 10) {
        d.feed(p, 4096).expect("references");
    }
    let f = seen(d.finish().expect("block"));
    assert_eq!(
        f.path.as_deref().map(str::len),
        Some(1024),
        "kept to its cap"
    );
    assert_eq!(f.list_size, (1u64 << 20) * (5 + 4000 + 32));
    assert!(d.literal.kept.capacity() <= 1024);
}

#[test]
fn huge_literals_and_long_strings_are_read_in_constant_memory() {
    // A 1 MB grpc-message (as containerd quotes a long exec command), raw and Huffman, split
    // in pieces: the reader keeps its first KiB and the table stays in step after it.
    let msg = vec![b'x'; 1 << 20];
    let mut huff = Vec::new();
    httlib_huffman::encode(&msg, &mut huff).expect("huffman");
    for (encoded, flag) in [(&msg, 0u8), (&huff, 0x80)] {
        let mut wire = vec![0x40];
        wire.extend(int(0, 7, 12));
        wire.extend_from_slice(b"grpc-message");
        wire.extend(int(flag, 7, encoded.len() as u64));
        wire.extend_from_slice(encoded);
        wire.extend(incremental(b"grpc-status", b"5"));
        let mut d = decoder();
        for p in wire.chunks(65_535) {
            d.feed(p, 4096).expect("fragment");
        }
        let f = seen(d.finish().expect("block"));
        assert_eq!(f.grpc_message.as_deref().map(str::len), Some(1024));
        assert_eq!(f.grpc_status, Some(5));
        assert!(d.literal.kept.capacity() <= 1024);
        // The 1 MB entry did not fit the table (it emptied it); the next one did.
        assert_eq!(d.table.len(), 1);
        let next = block(&mut d, &[0xbe], 4096).expect("reference to grpc-status");
        assert_eq!(next.grpc_status, Some(5));
    }
}

#[test]
fn table_size_updates_follow_the_peers_settings() {
    let mut d = decoder();
    // Above the peer's allowance: refused, as the peer refuses it.
    assert_eq!(
        block(&mut d, &int(0x20, 5, 4097), 4096),
        Err(HpackError::TableSize {
            asked: 4097,
            allowed: 4096
        })
    );
    // Allowed once the peer raised SETTINGS_HEADER_TABLE_SIZE; many updates in a row are
    // each applied (the table follows the last).
    let mut d = decoder();
    let mut wire = Vec::new();
    for size in [65536, 0, 100, 65536] {
        wire.extend(int(0x20, 5, size));
    }
    wire.extend(incremental(b"x", &[b'v'; 60_000]));
    block(&mut d, &wire, 65536).expect("updates");
    assert_eq!(d.table.len(), 1);
    block(&mut d, &int(0x20, 5, 0), 65536).expect("to zero");
    assert_eq!(d.table.len(), 0);
}

#[test]
fn what_every_peer_refuses_is_an_error() {
    // After an error the connection is no longer observed: each case gets a fresh decoder.
    let refused = |wire: &[u8]| block(&mut decoder(), wire, 4096);
    assert_eq!(refused(&[0x80]), Err(HpackError::Index(0)));
    assert_eq!(refused(&[0xbe]), Err(HpackError::Index(62)));
    assert_eq!(
        refused(&[
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01
        ]),
        Err(HpackError::Integer)
    );
    // A Huffman string of 4 bytes of ones: EOS.
    assert_eq!(
        refused(&[0x00, 0x01, b'a', 0x84, 0xff, 0xff, 0xff, 0xff]),
        Err(HpackError::Huffman(huffman::HuffmanError::Eos))
    );
    // A block that ends inside a literal; the decoder is usable for the next block.
    let mut d = decoder();
    assert_eq!(
        block(&mut d, &[0x00, 0x05, b':', b'p'], 4096),
        Err(HpackError::Truncated)
    );
    assert_eq!(
        block(&mut d, &[0x84], 4096).expect("next").path.as_deref(),
        Some("/")
    );
}
