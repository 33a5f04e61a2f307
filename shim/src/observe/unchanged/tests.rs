use super::*;

/// One instant for the tests that are not about time.
fn t0() -> Instant {
    static T0: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *T0.get_or_init(Instant::now)
}

/// Whether the next answer to `request` is digested without being kept, just past the read
/// interval (the reading the older tests are about).
fn speculate(u: &Unchanged, m: Watched, request: u64) -> bool {
    u.reading(m, request, t0() + READ_INTERVAL) != Reading::Keep
}

#[test]
fn repeats_are_recognised_per_request_and_changes_are_news() {
    let mut u = Unchanged::default();
    let m = Watched::ListContainers;
    assert_eq!(u.settle(m, 1, Some(10), 100, true, t0()), Verdict::News);
    assert_eq!(u.settle(m, 1, Some(10), 100, true, t0()), Verdict::Repeat);
    assert_eq!(
        u.settle(m, 2, Some(10), 100, true, t0()),
        Verdict::News,
        "another request"
    );
    assert_eq!(
        u.settle(Watched::ListPodSandbox, 1, Some(10), 100, true, t0()),
        Verdict::News,
        "another method"
    );
    assert_eq!(u.settle(m, 1, Some(11), 100, true, t0()), Verdict::News);
    assert_eq!(u.settle(m, 1, Some(11), 100, true, t0()), Verdict::Repeat);
    assert_eq!(u.settle(m, 1, None, 100, true, t0()), Verdict::News);
    assert_eq!(
        u.settle(m, 1, Some(11), 100, true, t0()),
        Verdict::News,
        "after an answer without a digest, nothing is a repeat"
    );
    u.forget(m, 1);
    assert_eq!(
        u.settle(m, 1, Some(11), 100, true, t0()),
        Verdict::News,
        "a forgotten answer never reached the decoder"
    );
}

#[test]
fn only_a_large_repeated_answer_lets_the_next_one_go_unkept() {
    let mut u = Unchanged::default();
    let m = Watched::ListContainers;
    let big = SPECULATE_ABOVE;
    assert!(!speculate(&u, m, 1), "nothing known");
    assert_eq!(u.settle(m, 1, Some(10), big, true, t0()), Verdict::News);
    assert!(!speculate(&u, m, 1), "news, not yet a repeat");
    assert_eq!(
        u.settle(m, 1, Some(10), big - 1, true, t0()),
        Verdict::Repeat
    );
    assert!(!speculate(&u, m, 1), "a repeat, but small");
    assert_eq!(u.settle(m, 1, Some(10), big, true, t0()), Verdict::Repeat);
    assert!(speculate(&u, m, 1));
    assert!(!speculate(&u, m, 2), "per request");
    assert_eq!(u.settle(m, 1, Some(10), big, false, t0()), Verdict::Repeat);
    assert!(speculate(&u, m, 1), "still repeating");
    assert_eq!(u.settle(m, 1, Some(12), big, false, t0()), Verdict::Missed);
    assert!(!speculate(&u, m, 1), "after a miss the next answer is kept");
    assert_eq!(
        u.settle(m, 1, Some(12), big, true, t0()),
        Verdict::News,
        "the missed content was never decoded: not a repeat"
    );
    assert_eq!(u.settle(m, 1, None, big, false, t0()), Verdict::Missed);
}

#[test]
fn a_repeating_large_answer_is_read_at_most_once_per_interval() {
    let mut u = Unchanged::default();
    let m = Watched::ListContainers;
    let big = SPECULATE_ABOVE;
    let t = t0();
    let ms = Duration::from_millis;
    assert_eq!(u.settle(m, 1, Some(10), big, true, t), Verdict::News);
    assert_eq!(u.reading(m, 1, t + ms(1)), Reading::Keep, "news: kept");
    assert_eq!(
        u.settle(m, 1, Some(10), big, true, t + ms(2)),
        Verdict::Repeat
    );
    let read = t + ms(2);
    assert_eq!(u.reading(m, 1, read + ms(1)), Reading::Unread);
    assert_eq!(
        u.reading(m, 1, read + READ_INTERVAL - ms(1)),
        Reading::Unread,
        "within the interval of the last read"
    );
    assert_eq!(
        u.reading(m, 1, read + READ_INTERVAL),
        Reading::Digest,
        "the interval is over: read again"
    );
    assert_eq!(u.reading(m, 2, read + ms(1)), Reading::Keep, "per request");
    assert_eq!(
        u.settle(m, 1, Some(10), big, false, read + READ_INTERVAL),
        Verdict::Repeat
    );
    let read = read + READ_INTERVAL;
    assert_eq!(
        u.reading(m, 1, read + ms(1)),
        Reading::Unread,
        "the interval counts from the last read"
    );
    assert_eq!(
        u.settle(m, 1, Some(12), big, false, read + READ_INTERVAL),
        Verdict::Missed,
        "a change found by the next read"
    );
    assert_eq!(
        u.reading(m, 1, read + READ_INTERVAL + ms(1)),
        Reading::Keep,
        "after a change, the next answer is kept and read whatever the time"
    );
}

#[test]
fn a_small_repeating_answer_is_always_read_and_kept() {
    let mut u = Unchanged::default();
    let m = Watched::ContainerStatus;
    let small = SPECULATE_ABOVE - 1;
    let t = t0();
    assert_eq!(u.settle(m, 1, Some(10), small, true, t), Verdict::News);
    assert_eq!(u.settle(m, 1, Some(10), small, true, t), Verdict::Repeat);
    assert_eq!(u.reading(m, 1, t), Reading::Keep);
}

#[test]
fn a_repeat_after_the_index_lost_an_entry_is_news() {
    let mut u = Unchanged::default();
    let m = Watched::PodSandboxStatus;
    u.follow(0);
    assert_eq!(u.settle(m, 1, Some(10), 100, true, t0()), Verdict::News);
    u.follow(0);
    assert_eq!(u.settle(m, 1, Some(10), 100, true, t0()), Verdict::Repeat);
    // The sandbox was removed by a List and listed again without its IP: the same Status
    // answer must reach the index again.
    u.follow(2);
    assert_eq!(u.settle(m, 1, Some(10), 100, true, t0()), Verdict::News);
    u.follow(2);
    assert_eq!(u.settle(m, 1, Some(10), 100, true, t0()), Verdict::Repeat);
    let big = SPECULATE_ABOVE;
    let l = Watched::ListContainers;
    u.settle(l, 1, Some(7), big, true, t0());
    u.settle(l, 1, Some(7), big, true, t0());
    assert!(speculate(&u, l, 1));
    u.follow(3);
    assert!(!speculate(&u, l, 1), "the next large answer is kept again");
}
