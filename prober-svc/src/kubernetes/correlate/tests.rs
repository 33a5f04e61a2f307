use super::*;

fn note(container: &str, reason: &'static str, message: &str, at_ns: i64) -> Note {
    Note {
        involved: Involved {
            kind: "Pod",
            uid: "u".into(),
            namespace: "ns".into(),
            name: "web".into(),
            field_path: format!("spec.containers{{{container}}}"),
        },
        warning: true,
        reason,
        message: message.into(),
        at_ns,
    }
}

fn write(v: Verdict) -> Correlated {
    match v {
        Verdict::Write(c) => c,
        Verdict::Filtered => panic!("filtered"),
    }
}

#[tokio::test(start_paused = true)]
async fn identical_notes_are_one_series_and_different_notes_different_events() {
    let mut c = Correlator::default();
    let a1 = write(c.correlate(note("app", "Unhealthy", "Liveness probe failed: a", 1)));
    let b = write(c.correlate(note("app", "Unhealthy", "Readiness probe failed: b", 2)));
    let a2 = write(c.correlate(note("app", "Unhealthy", "Liveness probe failed: a", 3)));
    let other = write(c.correlate(note("side", "Unhealthy", "Liveness probe failed: a", 4)));
    assert_eq!((a1.count, b.count, a2.count, other.count), (1, 1, 2, 1));
    assert_eq!(a1.name, a2.name);
    assert_ne!(a1.name, b.name);
    assert_ne!(a1.name, other.name, "another container is another series");
    assert_eq!((a2.first_ns, a2.last_ns), (1, 3));
    assert_eq!(b.message, "Readiness probe failed: b");
}

#[tokio::test(start_paused = true)]
async fn the_tenth_distinct_similar_note_is_combined_and_carries_the_latest_message() {
    let mut c = Correlator::default();
    let mut seen = Vec::new();
    for i in 0..12 {
        seen.push(write(c.correlate(note(
            "app",
            "Unhealthy",
            &format!("m{i}"),
            i,
        ))));
    }
    for (i, e) in seen.iter().take(9).enumerate() {
        assert_eq!((e.count, e.message.as_str()), (1, format!("m{i}").as_str()));
    }
    let combined: Vec<_> = seen[9..]
        .iter()
        .map(|e| (e.name.clone(), e.count, e.message.clone()))
        .collect();
    assert_eq!(combined[0].1, 1);
    assert!(combined.iter().all(|(n, _, _)| *n == combined[0].0));
    assert_eq!(
        combined[2],
        (
            combined[0].0.clone(),
            3,
            "(combined from similar events): m11".to_owned()
        )
    );
    // Another reason is not similar.
    let k = write(c.correlate(note("app", "Killing", "k", 20)));
    assert_eq!((k.count, k.message.as_str()), (1, "k"));
}

#[tokio::test(start_paused = true)]
async fn similar_notes_ten_minutes_apart_are_not_combined() {
    let mut c = Correlator::default();
    for i in 0..9 {
        write(c.correlate(note("app", "Unhealthy", &format!("m{i}"), i)));
    }
    tokio::time::advance(SIMILAR_WINDOW + Duration::from_secs(1)).await;
    let e = write(c.correlate(note("app", "Unhealthy", "m9", 9)));
    assert_eq!(e.message, "m9");
}

#[tokio::test(start_paused = true)]
async fn the_spam_filter_is_per_pod_and_a_held_back_repeat_still_counts() {
    let mut c = Correlator::default();
    let passed = (0..100)
        .filter(|i| {
            let ct = if i % 2 == 0 { "app" } else { "side" };
            matches!(
                c.correlate(note(ct, "Unhealthy", "same", *i)),
                Verdict::Write(_)
            )
        })
        .count();
    assert_eq!(
        passed, 25,
        "one budget for every container and reason of the pod"
    );
    assert_eq!(
        c.correlate(note("app", "Killing", "k", 100)),
        Verdict::Filtered
    );
    let mut other = note("app", "Unhealthy", "same", 101);
    other.involved.uid = "v".into();
    other.involved.name = "db".into();
    assert!(
        matches!(c.correlate(other), Verdict::Write(_)),
        "another pod"
    );
    tokio::time::advance(SPAM_REFILL + Duration::from_secs(1)).await;
    let e = write(c.correlate(note("app", "Unhealthy", "same", 102)));
    assert_eq!(
        e.count, 51,
        "the 51st occurrence on app, held-back ones included"
    );
}

#[test]
fn the_caches_forget_the_least_recently_used_key() {
    let mut l: Lru<u32, u32> = Lru::new(3);
    l.insert(1, 1);
    l.insert(2, 2);
    l.insert(3, 3);
    assert!(l.get(&1).is_some());
    l.insert(4, 4);
    assert!(l.get(&2).is_none(), "2 was the least recently used");
    assert!(l.get(&1).is_some() && l.get(&3).is_some() && l.get(&4).is_some());
    assert_eq!(l.map.len(), 3);
}
