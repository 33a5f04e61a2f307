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

fn digest(u: &Unchanged, parts: &[&[u8]]) -> Option<u64> {
    let mut d = u.digest();
    for p in parts {
        d.feed(p);
    }
    d.finish()
}

#[test]
fn the_digest_is_the_same_however_the_body_is_split() {
    let u = Unchanged::default();
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
    let u = Unchanged::default();
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
    let u = Unchanged::default();
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
    let u = Unchanged::default();
    for msg in &hostile {
        assert_eq!(digest(&u, &[&frame(msg)]), None, "{msg:?}");
    }
}

#[test]
fn repeats_are_recognised_per_request_and_changes_are_news() {
    let mut u = Unchanged::default();
    let m = Watched::ListContainers;
    assert_eq!(u.settle(m, 1, Some(10), 100, true), Verdict::News);
    assert_eq!(u.settle(m, 1, Some(10), 100, true), Verdict::Repeat);
    assert_eq!(
        u.settle(m, 2, Some(10), 100, true),
        Verdict::News,
        "another request"
    );
    assert_eq!(
        u.settle(Watched::ListPodSandbox, 1, Some(10), 100, true),
        Verdict::News,
        "another method"
    );
    assert_eq!(u.settle(m, 1, Some(11), 100, true), Verdict::News);
    assert_eq!(u.settle(m, 1, Some(11), 100, true), Verdict::Repeat);
    assert_eq!(u.settle(m, 1, None, 100, true), Verdict::News);
    assert_eq!(
        u.settle(m, 1, Some(11), 100, true),
        Verdict::News,
        "after an answer without a digest, nothing is a repeat"
    );
    u.forget(m, 1);
    assert_eq!(
        u.settle(m, 1, Some(11), 100, true),
        Verdict::News,
        "a forgotten answer never reached the decoder"
    );
}

#[test]
fn only_a_large_repeated_answer_lets_the_next_one_go_unkept() {
    let mut u = Unchanged::default();
    let m = Watched::ListContainers;
    let big = SPECULATE_ABOVE;
    assert!(!u.speculate(m, 1), "nothing known");
    assert_eq!(u.settle(m, 1, Some(10), big, true), Verdict::News);
    assert!(!u.speculate(m, 1), "news, not yet a repeat");
    assert_eq!(u.settle(m, 1, Some(10), big - 1, true), Verdict::Repeat);
    assert!(!u.speculate(m, 1), "a repeat, but small");
    assert_eq!(u.settle(m, 1, Some(10), big, true), Verdict::Repeat);
    assert!(u.speculate(m, 1));
    assert!(!u.speculate(m, 2), "per request");
    assert_eq!(u.settle(m, 1, Some(10), big, false), Verdict::Repeat);
    assert!(u.speculate(m, 1), "still repeating");
    assert_eq!(u.settle(m, 1, Some(12), big, false), Verdict::Missed);
    assert!(!u.speculate(m, 1), "after a miss the next answer is kept");
    assert_eq!(
        u.settle(m, 1, Some(12), big, true),
        Verdict::News,
        "the missed content was never decoded: not a repeat"
    );
    assert_eq!(u.settle(m, 1, None, big, false), Verdict::Missed);
}

proptest! {
    #[test]
    fn any_order_and_any_split_of_the_same_items_give_the_same_digest(
        items in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..600), 0..12),
        order in any::<u64>(),
        cuts in proptest::collection::vec(any::<usize>(), 0..8),
    ) {
        let u = Unchanged::default();
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
