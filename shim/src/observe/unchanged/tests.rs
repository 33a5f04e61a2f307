use super::*;

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
