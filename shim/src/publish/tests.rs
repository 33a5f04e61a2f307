//! Publisher tests: ordering, overflow => resync snapshot (never a gap), no blocking.

use std::time::Duration;

use futures::StreamExt;
use podward_api::cri;
use podward_api::shim::v1::{Delivery, WatchEvent, watch_event};

use super::Publisher;
use crate::index::Observation;
use crate::metrics::Metrics;

fn clock() -> i64 {
    1_000
}

fn run_obs(i: usize) -> Observation {
    Observation::SandboxRun {
        config: cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: format!("p{i}"),
                ..Default::default()
            }),
            ..Default::default()
        },
        runtime_handler: String::new(),
        sandbox_id: format!("s{i}"),
        delivery: Delivery::Delivered,
        at_ns: 1,
    }
}

async fn next(s: &mut super::Subscription) -> WatchEvent {
    tokio::time::timeout(Duration::from_secs(5), s.next())
        .await
        .expect("event in time")
        .expect("stream open")
}

#[tokio::test]
async fn subscriber_gets_snapshot_then_consecutive_events() {
    let p = Publisher::new(16, Metrics::unregistered(), clock);
    p.apply(run_obs(0));
    let mut sub = p.subscribe();
    let first = next(&mut sub).await;
    let Some(watch_event::Event::Snapshot(snap)) = first.event else {
        panic!("first event must be a snapshot")
    };
    assert_eq!((snap.seq, snap.sandboxes.len(), snap.resync), (1, 1, false));
    for i in 1..4 {
        p.apply(run_obs(i));
    }
    for want in 2..5 {
        assert_eq!(next(&mut sub).await.seq, want);
    }
}

#[tokio::test]
async fn overflowing_subscriber_gets_a_resync_snapshot_and_never_a_gap() {
    let metrics = Metrics::unregistered();
    let p = Publisher::new(4, metrics.clone(), clock);
    let mut slow = p.subscribe();
    let mut fast = p.subscribe();
    let _ = next(&mut slow).await;
    let _ = next(&mut fast).await;
    // 10 events into a queue of 4 without the slow one reading: apply never blocks.
    let mut fast_seqs = Vec::new();
    for i in 0..10 {
        p.apply(run_obs(i));
        fast_seqs.push(next(&mut fast).await.seq);
    }
    assert_eq!(fast_seqs, (1..=10).collect::<Vec<u64>>());
    let mut got = Vec::new();
    loop {
        let ev = next(&mut slow).await;
        if let Some(watch_event::Event::Snapshot(s)) = &ev.event {
            assert!(s.resync, "a mid-stream snapshot is a resync");
            assert_eq!(s.seq, 10);
            assert_eq!(s.sandboxes.len(), 10);
            break;
        }
        got.push(ev.seq);
    }
    assert_eq!(
        got,
        vec![1, 2, 3, 4],
        "queued events first, then the snapshot"
    );
    assert_eq!(metrics.resyncs.get(), 1);
    p.apply(run_obs(10));
    assert_eq!(
        next(&mut slow).await.seq,
        11,
        "events continue right after the snapshot"
    );
    assert_eq!(metrics.subscribers.get(), 2);
    drop(slow);
    assert_eq!(metrics.subscribers.get(), 1);
}

#[tokio::test]
async fn undelivered_events_are_counted() {
    let metrics = Metrics::unregistered();
    let p = Publisher::new(4, metrics.clone(), clock);
    let mut o = run_obs(1);
    if let Observation::SandboxRun { delivery, .. } = &mut o {
        *delivery = Delivery::Undelivered;
    }
    p.apply(o);
    assert_eq!(metrics.undelivered.get(), 1);
    assert_eq!(metrics.index_sandboxes.get(), 1);
}
