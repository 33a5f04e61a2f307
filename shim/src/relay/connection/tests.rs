//! The connection's timing decisions: when its `poll` wakes with nothing to read, and when it
//! ends.

use super::*;

#[test]
fn a_wait_is_rounded_up_to_whole_milliseconds_and_none_waits_for_ever() {
    assert_eq!(timeout_until(None), PollTimeout::NONE);
    // 1.1 ms away: 2 ms rounded up (1 would wake before the deadline, and wait again).
    let in_a_bit = Instant::now() + Duration::from_micros(1_100);
    let ms = timeout_until(Some(in_a_bit))
        .as_millis()
        .expect("a timeout");
    assert_eq!(ms, 2, "rounded up");
    let past = Instant::now() - Duration::from_secs(1);
    assert_eq!(timeout_until(Some(past)), PollTimeout::ZERO);
}

#[test]
fn an_idle_connection_waits_for_ever_and_the_earliest_deadline_wakes_it() {
    let ending = Ending::default();
    assert_eq!(ending.wake(None, false), None, "nothing to wait for");
    let handshake = Instant::now() + Duration::from_secs(10);
    assert_eq!(ending.wake(Some(handshake), false), Some(handshake));
    let held = ending.wake(Some(handshake), true).expect("a tick");
    assert!(
        held <= Instant::now() + HOLD_TICK,
        "a held response is looked at on a tick"
    );

    let mut stopping = Ending::default();
    stopping.stop(Instant::now() + Duration::from_secs(5));
    let wake = stopping.wake(Some(handshake), false).expect("a tick");
    assert!(
        wake <= Instant::now() + STOP_TICK,
        "a stopping connection looks every tick"
    );
}

#[test]
fn the_client_leaving_drains_and_a_missing_preface_ends_at_once() {
    let mut left = Ending::default();
    assert!(
        !left.up_ended(UpEnd::ClientClosed),
        "containerd's answers are still read"
    );
    assert!(left.client_left && left.drain_until.is_some());
    assert!(!left.due(|| panic!("may_close is asked only while stopping")));

    let mut silent = Ending::default();
    assert!(silent.up_ended(UpEnd::HandshakeTimeout));
    assert!(silent.client_left);

    let mut upstream = Ending::default();
    assert!(!upstream.up_ended(UpEnd::UpstreamClosed));
    assert!(!upstream.client_left && upstream.drain_until.is_none());
}

#[test]
fn a_stopping_connection_ends_when_nothing_would_be_cut_or_at_the_grace() {
    let mut ending = Ending::default();
    assert!(!ending.due(|| true), "not stopping: may_close is not asked");
    ending.stop(Instant::now() + Duration::from_secs(60));
    assert!(
        !ending.due(|| false),
        "a call is open and the grace has not passed"
    );
    assert!(ending.due(|| true), "nothing open: closed now");
    let mut late = Ending::default();
    late.stop(Instant::now());
    assert!(
        late.due(|| false),
        "the grace passed: closed even with a call open"
    );
}

#[test]
fn a_stopping_connection_waits_for_its_longest_call_within_the_bound() {
    let now = Instant::now();
    let (grace, max) = (Duration::from_millis(1500), Duration::from_secs(120));
    // No call with a deadline: the plain grace.
    assert_eq!(stop_deadline(now, None, grace, max), now + grace);
    // A StopContainer waiting out a 30 s grace period: its deadline.
    let stop = now + Duration::from_secs(32);
    assert_eq!(stop_deadline(now, Some(stop), grace, max), stop);
    // A call due sooner than the grace: the grace still.
    let soon = now + Duration::from_millis(100);
    assert_eq!(stop_deadline(now, Some(soon), grace, max), now + grace);
    // RunPodSandbox under kubelet's 4 min: the bound.
    let long = now + Duration::from_secs(240);
    assert_eq!(stop_deadline(now, Some(long), grace, max), now + max);
    // A bound below the grace never shortens the grace.
    assert_eq!(
        stop_deadline(now, Some(long), grace, Duration::ZERO),
        now + grace
    );
}

#[test]
fn what_is_open_past_the_deadline_is_cut() {
    let mut e = Ending::default();
    assert!(!e.cut(), "not stopping");
    e.stop(Instant::now() + Duration::from_secs(60));
    assert!(!e.cut(), "within the deadline");
    let mut late = Ending::default();
    late.stop(Instant::now());
    assert!(late.cut());
}
