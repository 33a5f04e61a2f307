use podward_api::cri;
use proptest::prelude::*;
use prost::Message;

use super::bytewise::MAX_DEPTH;
use super::role::Role;
use super::shape::Shape;
use super::*;
use crate::observe::raw::Body;
use crate::observe::watched::Watched;

/// A test shape: field 1 is a map (its entries summed, in any order), the rest in order.
const ITEMS: Shape = Shape::new(&[], &[1], &[]);

/// A gRPC-framed message with the given length-delimited field-1 items.
fn framed(items: &[&[u8]]) -> Vec<u8> {
    let mut msg = Vec::new();
    for i in items {
        field(&mut msg, 1, i);
    }
    frame(&msg)
}

/// Appends a length-delimited field.
fn field(msg: &mut Vec<u8>, number: u64, payload: &[u8]) {
    prost::encoding::encode_varint(number << 3 | 2, msg);
    prost::encoding::encode_varint(payload.len() as u64, msg);
    msg.extend_from_slice(payload);
}

fn frame(msg: &[u8]) -> Vec<u8> {
    let mut out = vec![0];
    out.extend_from_slice(&u32::try_from(msg.len()).expect("small").to_be_bytes());
    out.extend_from_slice(msg);
    out
}

fn digest_as(u: &Digester, shape: &'static Shape, parts: &[&[u8]]) -> Option<u64> {
    let mut d = u.digest(shape);
    for p in parts {
        d.feed(p);
    }
    d.finish()
}

fn digest(u: &Digester, parts: &[&[u8]]) -> Option<u64> {
    digest_as(u, &ITEMS, parts)
}

/// `body` cut at `cuts` (taken modulo its length, in any order).
pub(super) fn cut<'a>(body: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
    cuts.sort_unstable();
    let mut parts = Vec::new();
    let mut from = 0;
    for c in cuts {
        parts.push(&body[from..c]);
        from = c;
    }
    parts.push(&body[from..]);
    parts
}

/// A map entry as protobuf writes one: key = 1, value = 2.
fn entry(k: &str, v: &str) -> Vec<u8> {
    let mut e = Vec::new();
    field(&mut e, 1, k.as_bytes());
    field(&mut e, 2, v.as_bytes());
    e
}

/// `msg` (encoded without the map) followed by the map's entries as field `number`, in the
/// order given: what an encoder that does not sort maps writes, in one of its orders.
fn with_map(mut msg: Vec<u8>, number: u64, entries: &[(&str, &str)]) -> Vec<u8> {
    for (k, v) in entries {
        field(&mut msg, number, &entry(k, v));
    }
    msg
}

/// A container as kubelet's show in a List: several labels and annotations, an image with an
/// annotation; `order` picks the order its maps are written in, `value` one label's value.
fn container(id: &str, order: usize, value: &str) -> Vec<u8> {
    let mut labels = vec![
        ("io.kubernetes.container.name", "app"),
        ("io.kubernetes.pod.name", "web-0"),
        ("io.kubernetes.pod.namespace", "default"),
        ("io.kubernetes.pod.uid", value),
    ];
    let long = "x".repeat(700);
    let mut annotations = vec![
        ("io.kubernetes.container.hash", "a1b2c3"),
        ("io.kubernetes.container.restartCount", "0"),
        (
            "io.kubernetes.container.terminationMessagePath",
            "/dev/termination-log",
        ),
        ("podward.io/probes", long.as_str()),
    ];
    let (nl, na) = (labels.len(), annotations.len());
    labels.rotate_left(order % nl);
    annotations.rotate_left((order / 4) % na);
    let image = with_map(
        cri::ImageSpec {
            image: "busybox".into(),
            ..Default::default()
        }
        .encode_to_vec(),
        2,
        if order.is_multiple_of(2) {
            &[("a", "1"), ("b", "2")]
        } else {
            &[("b", "2"), ("a", "1")]
        },
    );
    let mut c = cri::Container {
        id: id.into(),
        pod_sandbox_id: "sandbox".into(),
        metadata: Some(cri::ContainerMetadata {
            name: "app".into(),
            attempt: 1,
        }),
        image_ref: "sha256:abc".into(),
        state: cri::ContainerState::ContainerRunning.into(),
        created_at: 1_700_000_000_000_000_000,
        ..Default::default()
    }
    .encode_to_vec();
    field(&mut c, 4, &image);
    let c = with_map(c, 8, &labels);
    with_map(c, 9, &annotations)
}

/// A ListContainers answer with `n` containers, its items and their maps in an order picked by
/// `order`.
fn list(n: usize, order: usize) -> Vec<u8> {
    let mut items: Vec<Vec<u8>> = (0..n)
        .map(|i| container(&format!("c{i}"), order + i, &format!("uid-{i}")))
        .collect();
    items.rotate_left(order % n.max(1));
    let mut msg = Vec::new();
    for i in &items {
        field(&mut msg, 1, i);
    }
    frame(&msg)
}

#[test]
fn every_shape_fits_the_digest_depth() {
    for root in shape::ROOTS {
        assert!(root.depth() <= MAX_DEPTH, "{root:?}");
    }
}

#[test]
fn every_shape_s_bit_sets_say_what_its_lists_say() {
    fn check(shape: &'static Shape) {
        for number in 0..80u64 {
            for wire in 0..8 {
                let key = number << 3 | wire;
                let (fast, lists) = (Role::of(shape, key), Role::of_lists(shape, key));
                let same = match (fast, lists) {
                    (Role::Nested(a), Role::Nested(b)) => std::ptr::eq(a, b),
                    (Role::Ordered, Role::Ordered)
                    | (Role::Entry, Role::Entry)
                    | (Role::Skipped, Role::Skipped) => true,
                    _ => false,
                };
                assert!(
                    same,
                    "field {number} wire {wire}: {fast:?} against {lists:?}"
                );
            }
        }
        for (_, inner) in shape.nested {
            check(inner);
        }
    }
    for root in shape::ROOTS {
        check(root);
    }
    check(&ITEMS);
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
fn a_list_is_the_same_however_it_is_split_and_whatever_order_its_maps_come_in() {
    let u = Digester::default();
    let shape = shape::answer(Watched::ListContainers);
    let body = list(3, 0);
    let whole = digest_as(&u, shape, &[&body]).expect("a well-formed answer");
    for split in 0..=body.len() {
        let (a, b) = body.split_at(split);
        assert_eq!(
            digest_as(&u, shape, &[a, b]),
            Some(whole),
            "split at {split}"
        );
    }
    for order in 1..16 {
        let other = list(3, order);
        assert_ne!(other, body, "order {order} writes other bytes");
        // The same answer to a decoder...
        let a = cri::ListContainersResponse::decode(&body[5..]).expect("decodes");
        let b = cri::ListContainersResponse::decode(&other[5..]).expect("decodes");
        let sorted = |r: cri::ListContainersResponse| {
            let mut c = r.containers;
            c.sort_by(|x, y| x.id.cmp(&y.id));
            c
        };
        assert_eq!(sorted(a), sorted(b), "order {order}");
        // ...and to the digest.
        assert_eq!(
            digest_as(&u, shape, &[&other]),
            Some(whole),
            "order {order}"
        );
    }
}

#[test]
fn a_new_or_changed_object_is_news_but_its_fixed_labels_and_annotations_are_not_read() {
    let u = Digester::default();
    let shape = shape::answer(Watched::ListContainers);
    let d = |items: &[Vec<u8>]| {
        let mut msg = Vec::new();
        for i in items {
            field(&mut msg, 1, i);
        }
        digest_as(&u, shape, &[&frame(&msg)]).expect("well-formed")
    };
    let base = d(&[container("a", 0, "uid-1"), container("b", 1, "uid-2")]);
    assert_eq!(
        d(&[container("b", 5, "uid-2"), container("a", 2, "uid-1")]),
        base
    );
    assert_ne!(d(&[container("a", 0, "uid-1")]), base, "a container gone");
    assert_ne!(
        d(&[container("a", 0, "uid-1"), container("c", 1, "uid-2")]),
        base,
        "another container in its place"
    );
    let exited = |id: &str| {
        let mut c = container(id, 1, "uid-2");
        let running = [0x30, cri::ContainerState::ContainerRunning as u8];
        let at = c
            .windows(2)
            .position(|w| w == running)
            .expect("the state field");
        c[at + 1] = cri::ContainerState::ContainerExited as u8;
        c
    };
    assert_ne!(
        d(&[container("a", 0, "uid-1"), exited("b")]),
        base,
        "a container's new state"
    );
    let mut image = container("b", 1, "uid-2");
    let at = image
        .windows(7)
        .position(|w| w == b"busybox")
        .expect("the image name");
    image[at] = b'B';
    assert_ne!(
        d(&[container("a", 0, "uid-1"), image]),
        base,
        "another image"
    );
    // No CRI call changes an object's labels or annotations (the image's included), so they
    // are left out: the same IDs with other values read as a repeat.
    assert_eq!(
        d(&[container("a", 0, "uid-1"), container("b", 1, "uid-3")]),
        base,
        "a label's value"
    );
    let mut annotated = container("b", 1, "uid-2");
    let at = annotated
        .windows(3)
        .position(|w| w == [0x0a, 0x01, b'a'])
        .expect("the image annotation's key");
    annotated[at + 2] = b'c';
    assert_eq!(
        d(&[container("a", 0, "uid-1"), annotated]),
        base,
        "an image annotation"
    );
}

#[test]
fn a_sandbox_status_is_the_same_with_its_maps_in_any_order_and_a_new_timestamp() {
    let u = Digester::default();
    let shape = shape::answer(Watched::PodSandboxStatus);
    let answer = |order: usize, timestamp: i64, ip: &str| {
        let status = cri::PodSandboxStatus {
            id: "sandbox".into(),
            metadata: Some(cri::PodSandboxMetadata {
                name: "web-0".into(),
                uid: "uid-1".into(),
                namespace: "default".into(),
                attempt: 0,
            }),
            network: Some(cri::PodSandboxNetworkStatus {
                ip: ip.into(),
                additional_ips: vec![],
            }),
            ..Default::default()
        }
        .encode_to_vec();
        let mut labels = vec![
            ("app", "web"),
            ("io.kubernetes.pod.name", "web-0"),
            ("tier", "front"),
        ];
        labels.rotate_left(order % 3);
        let status = with_map(status, 7, &labels);
        let mut msg = Vec::new();
        field(&mut msg, 1, &status);
        prost::encoding::int64::encode(4, &timestamp, &mut msg);
        frame(&msg)
    };
    let base = digest_as(&u, shape, &[&answer(0, 1, "10.0.0.1")]).expect("well-formed");
    assert_eq!(
        digest_as(&u, shape, &[&answer(1, 1, "10.0.0.1")]),
        Some(base)
    );
    assert_eq!(
        digest_as(&u, shape, &[&answer(2, 99, "10.0.0.1")]),
        Some(base),
        "only the timestamp moved"
    );
    assert_ne!(
        digest_as(&u, shape, &[&answer(0, 1, "10.0.0.2")]),
        Some(base),
        "a new IP"
    );
}

#[test]
fn a_list_request_filter_is_the_same_whatever_order_its_selector_comes_in() {
    let u = Digester::default();
    let request = |selector: &[(&str, &str)]| {
        let filter = with_map(
            cri::ContainerFilter {
                pod_sandbox_id: "sandbox".into(),
                ..Default::default()
            }
            .encode_to_vec(),
            4,
            selector,
        );
        let mut msg = Vec::new();
        field(&mut msg, 1, &filter);
        let body = frame(&msg);
        let mut b = Body::default();
        b.push(bytes::Bytes::from(body));
        u.request(Watched::ListContainers, &b)
    };
    let base = request(&[("a", "1"), ("b", "2")]).expect("well-formed");
    assert_eq!(request(&[("b", "2"), ("a", "1")]), Some(base));
    assert_ne!(request(&[("b", "2"), ("a", "2")]), Some(base));
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
    let mut d = u.digest(&ITEMS);
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
    let list = shape::answer(Watched::ListContainers);
    for msg in &hostile {
        assert_eq!(digest(&u, &[&frame(msg)]), None, "{msg:?}");
        assert_eq!(
            digest_as(&u, list, &[&frame(msg)]),
            None,
            "as a List: {msg:?}"
        );
    }
    // Well-formed as opaque items, not as containers.
    let nested = [
        vec![0x0a, 2, 0x0a, 5],       // a field of an item past the item's end
        vec![0x0a, 1, 0x0f],          // wire type 7 inside an item
        vec![0x0a, 2, 0x42, 9],       // a label entry past its item's end
        vec![0x0a, 3, 0x22, 1, 0x12], // an image annotation past the image's end
    ];
    for msg in &nested {
        assert!(digest(&u, &[&frame(msg)]).is_some(), "as items: {msg:?}");
        assert_eq!(
            digest_as(&u, list, &[&frame(msg)]),
            None,
            "as a List: {msg:?}"
        );
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
        let want = digest(&u, &[&body]);
        prop_assert!(want.is_some());
        prop_assert_eq!(digest(&u, &cut(&other, &cuts)), want);
    }

    #[test]
    fn a_real_list_in_any_order_and_any_split_gives_the_same_digest(
        n in 0usize..5,
        order in 0usize..64,
        cuts in proptest::collection::vec(any::<usize>(), 0..12),
    ) {
        let u = Digester::default();
        let shape = shape::answer(Watched::ListContainers);
        let want = digest_as(&u, shape, &[&list(n, 0)]);
        prop_assert!(want.is_some());
        let other = list(n, order);
        prop_assert_eq!(digest_as(&u, shape, &cut(&other, &cuts)), want);
    }

    #[test]
    fn any_bytes_as_any_answer_never_panic(
        body in proptest::collection::vec(any::<u8>(), 0..400),
        cuts in proptest::collection::vec(any::<usize>(), 0..6),
    ) {
        let u = Digester::default();
        for root in shape::ROOTS {
            let whole = digest_as(&u, root, &[&frame(&body)]);
            let framed = frame(&body);
            prop_assert_eq!(digest_as(&u, root, &cut(&framed, &cuts)), whole);
        }
    }
}

/// How long the digest of a 100-container List takes (`cargo test --release -p podward-shim
/// --lib digest_time -- --ignored --nocapture`): for profiling, asserts nothing about speed.
#[test]
#[ignore = "a timing, run by hand in release"]
fn digest_time_of_a_100_container_list() {
    let u = Digester::default();
    let body = list(100, 0);
    let shape = shape::answer(Watched::ListContainers);
    let mut best = std::time::Duration::MAX;
    for _ in 0..20 {
        let t = std::time::Instant::now();
        for _ in 0..200 {
            assert!(digest_as(&u, shape, &[&body]).is_some());
        }
        best = best.min(t.elapsed() / 200);
    }
    println!("{} bytes: {best:?} per digest", body.len());
}
