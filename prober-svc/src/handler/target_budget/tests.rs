//! The budget's rule: who gets room, who waits, and that everything comes back.

use std::future::poll_fn;
use std::task::{Context, Poll};

use futures::task::noop_waker;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

fn take(a: &mut Account, n: usize) -> bool {
    let waker = noop_waker();
    let mut cx = Context::from_waker(&waker);
    a.poll_take(n, &mut cx).is_ready()
}

/// Takes chunks for `a` until one is refused; returns how many it got.
fn fill(a: &mut Account) -> usize {
    let mut n = 0;
    while take(a, CHUNK) {
        n += 1;
    }
    n
}

#[test]
fn the_pod_holding_the_most_waits_and_a_small_one_gets_room() {
    let b = TargetBudget::new(64 * CHUNK, None);
    let hostile: Arc<str> = Arc::from("hostile");
    let mut probes: Vec<Account> = (0..8).map(|_| b.account(hostile.clone())).collect();
    for p in &mut probes {
        fill(p);
    }
    let held = b.pod_held("hostile");
    assert!(held <= b.limit(), "{held}");
    assert!(
        held >= 48 * CHUNK,
        "alone, a pod may use the shared part: {held}"
    );
    // A pod whose probes hold little still finds room, however much the other holds.
    for i in 0..4 {
        let mut canary = b.account(Arc::from(format!("canary-{i}")));
        assert!(take(&mut canary, CHUNK), "canary {i}");
    }
    // The hostile pod, whose probes wait, gets nothing more, not even from the reserve.
    let mut more = b.account(hostile.clone());
    assert!(!take(&mut more, CHUNK));
    assert!(b.used() <= b.limit());
}

#[test]
fn two_heavy_pods_share_the_budget_and_everything_comes_back() {
    let b = TargetBudget::new(64 * CHUNK, None);
    let mut one = b.account(Arc::from("one"));
    let mut two = b.account(Arc::from("two"));
    // Taken in turns: neither gets past its equal part of the shared three quarters.
    loop {
        let a = take(&mut one, CHUNK);
        let c = take(&mut two, CHUNK);
        if !a && !c {
            break;
        }
    }
    assert_eq!(one.held(), 24 * CHUNK);
    assert_eq!(two.held(), 24 * CHUNK);
    drop(one);
    drop(two);
    assert_eq!(b.used(), 0);
    assert_eq!(b.pod_held("one"), 0);
    assert!(
        b.state.lock().pods.is_empty(),
        "nothing kept of gone probes"
    );
}

#[test]
fn the_budget_follows_the_memory_limit() {
    assert_eq!(TargetBudget::size_for(None), DEFAULT_BUDGET);
    assert_eq!(TargetBudget::size_for(Some(512 << 20)), 128 << 20);
    assert_eq!(TargetBudget::size_for(Some(1 << 20)), MIN_BUDGET);
}

#[tokio::test]
async fn a_metered_read_waits_for_room_and_gets_it_when_given_back() {
    let b = TargetBudget::new(8 * CHUNK, None);
    let mut hog = b.account(Arc::from("hog"));
    fill(&mut hog);
    let (mut client, mut server) = tokio::io::duplex(1 << 20);
    server.write_all(&[7u8; 3 * CHUNK]).await.expect("write");
    drop(server);
    let mut reader = Metered::new(&mut client, Some(b.account(Arc::from("hog"))));
    let mut buf = [0u8; 1024];
    // The hog's other probe holds all it may: this one waits.
    let first = poll_fn(|cx| {
        Poll::Ready(matches!(
            Pin::new(&mut reader).poll_read(cx, &mut ReadBuf::new(&mut buf)),
            Poll::Pending
        ))
    })
    .await;
    assert!(first, "no room: the read waits");
    drop(hog);
    let mut got = Vec::new();
    reader.read_to_end(&mut got).await.expect("read");
    assert_eq!(got.len(), 3 * CHUNK);
    drop(reader);
    assert_eq!(b.used(), 0);
}
