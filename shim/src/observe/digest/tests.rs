use proptest::prelude::*;

use super::*;

/// A gRPC-framed message with the given length-delimited field-1 items.
fn framed(items: &[&[u8]]) -> Vec<u8> {
    let mut msg = Vec::new();
    for i in items {
        msg.push(0x0a);
        prost::encoding::encode_varint(i.len() as u64, &mut msg);
        msg.extend_from_slice(i);
    }
    frame(&msg)
}

fn frame(msg: &[u8]) -> Vec<u8> {
    let mut out = vec![0];
    out.extend_from_slice(&u32::try_from(msg.len()).expect("small").to_be_bytes());
    out.extend_from_slice(msg);
    out
}

fn digest(u: &Digester, parts: &[&[u8]]) -> Option<u64> {
    let mut d = u.digest();
    for p in parts {
        d.feed(p);
    }
    d.finish()
}

#[test]
fn the_digest_is_the_same_however_the_body_is_split() {
    let u = Digester::default();
    let big = vec![7u8; 3000];
    // Items long enough to span several XXH3 stripes and buffers, a varint and fixed fields.
    let mut body = framed(&[b"one", &big, b"", b"three"]);
    let mut extra = vec![
        0x10, 0x96, 0x01, 0x19, 1, 2, 3, 4, 5, 6, 7, 8, 0x25, 1, 2, 3, 4,
    ];
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) + extra.len() as u32;
    body[1..5].copy_from_slice(&len.to_be_bytes());
    body.append(&mut extra);
    let whole = digest(&u, &[&body]).expect("a well-formed message");
    for split in 0..=body.len() {
        let (a, b) = body.split_at(split);
        assert_eq!(digest(&u, &[a, b]), Some(whole), "split at {split}");
    }
    let bytes: Vec<&[u8]> = body.chunks(1).collect();
    assert_eq!(digest(&u, &bytes), Some(whole), "one byte at a time");
}

#[test]
fn reordered_items_have_the_same_digest_but_changed_or_missing_items_do_not() {
    let u = Digester::default();
    let d = |items: &[&[u8]]| digest(&u, &[&framed(items)]).expect("well-formed");
    let base = d(&[b"one", b"two", b"three"]);
    assert_eq!(d(&[b"three", b"one", b"two"]), base);
    assert_ne!(d(&[b"three", b"one"]), base);
    assert_ne!(d(&[b"three", b"one", b"one"]), base);
    assert_ne!(d(&[b"three", b"one", b"twO"]), base);
    assert_ne!(d(&[b"three", b"one", b"two", b""]), base);
    // The same bytes as another field number are another field.
    let mut other = framed(&[b"one", b"two", b"three"]);
    other[5] = 0x12;
    assert_ne!(digest(&u, &[&other]), Some(base));
}

#[test]
fn a_body_that_is_not_exactly_one_message_has_no_digest() {
    let u = Digester::default();
    let ok = framed(&[b"abc"]);
    assert!(digest(&u, &[&ok]).is_some());
    assert_eq!(digest(&u, &[]), None, "no body");
    assert_eq!(digest(&u, &[&ok[..3]]), None, "a cut prefix");
    assert_eq!(digest(&u, &[&ok[..ok.len() - 1]]), None, "a cut message");
    assert_eq!(digest(&u, &[&ok, &[0]]), None, "bytes after the message");
    let mut compressed = ok.clone();
    compressed[0] = 1;
    let mut d = u.digest();
    d.feed(&compressed);
    assert!(d.compressed());
    assert_eq!(d.finish(), None, "a compressed message");
    assert_eq!(
        digest(&u, &[&[0, 0, 0, 0, 0]]),
        digest(&u, &[&[0, 0, 0, 0, 0]])
    );
    assert!(
        digest(&u, &[&[0, 0, 0, 0, 0]]).is_some(),
        "an empty message"
    );
}

#[test]
fn hostile_field_headers_give_no_digest_and_no_panic() {
    let mut max_len = vec![0x0a];
    prost::encoding::encode_varint(u64::MAX, &mut max_len);
    let hostile = [
        max_len,                            // a length of 2^64 - 1
        vec![0x0a, 9, 1],                   // a length past the message's end
        vec![0x0f, 1, 2, 3],                // wire type 7
        vec![0xff; 12],                     // a key varint that never ends
        vec![0x09, 1, 2, 3],                // a fixed64 with 3 bytes
        vec![0x0d, 1],                      // a fixed32 with 1 byte
        vec![0x08, 0xff, 0xff, 0xff, 0xff], // a truncated varint value
        vec![0x08],                         // a key and no value
    ];
    let u = Digester::default();
    for msg in &hostile {
        assert_eq!(digest(&u, &[&frame(msg)]), None, "{msg:?}");
    }
}

proptest! {
    #[test]
    fn any_order_and_any_split_of_the_same_items_give_the_same_digest(
        items in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..600), 0..12),
        order in any::<u64>(),
        cuts in proptest::collection::vec(any::<usize>(), 0..8),
    ) {
        let u = Digester::default();
        let refs: Vec<&[u8]> = items.iter().map(Vec::as_slice).collect();
        let body = framed(&refs);
        let mut shuffled = refs.clone();
        if !shuffled.is_empty() {
            let n = shuffled.len();
            shuffled.rotate_left(usize::try_from(order).unwrap_or(0) % n);
            shuffled.swap(0, usize::try_from(order >> 32).unwrap_or(0) % n);
        }
        let other = framed(&shuffled);
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (other.len() + 1)).collect();
        cuts.sort_unstable();
        let mut parts = Vec::new();
        let mut from = 0;
        for c in cuts {
            parts.push(&other[from..c]);
            from = c;
        }
        parts.push(&other[from..]);
        let want = digest(&u, &[&body]);
        prop_assert!(want.is_some());
        prop_assert_eq!(digest(&u, &parts), want);
    }
}
