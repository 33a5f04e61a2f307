use super::*;

const D: Duration = Duration::from_secs(40);

/// [`Table::due`] after every expiring node was looked up and found present.
fn look(t: &mut Table, now: Instant) -> Vec<Due> {
    for (node, _) in t.expiring(now) {
        t.checked(&node, false);
    }
    t.due(now)
}

fn table(rates: Rates, nodes: usize, now: Instant) -> Table {
    let mut t = Table::new(rates);
    for i in 0..nodes {
        t.apply(&format!("n{i:02}"), "h", "t0", D, "", now);
    }
    t
}

#[tokio::test(start_paused = true)]
async fn a_lease_expires_on_the_sentinels_clock_and_comes_back_when_it_changes() {
    let t0 = Instant::now();
    let mut t = table(Rates::default(), 10, t0);
    assert!(look(&mut t, t0 + D).is_empty(), "not before the duration");
    for i in 1..10 {
        t.apply(&format!("n{i:02}"), "h", "t1", D, "", t0 + D);
    }
    let due = look(&mut t, t0 + D + Duration::from_secs(1));
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].node, "n00");
    assert_eq!(due[0].renew_time, "t0");
    // The same record again is no renewal; a new one is.
    assert!(!t.apply("n00", "h", "t0", D, "", t0 + D * 2));
    assert!(t.apply("n00", "h", "t2", D, "", t0 + D * 2));
    assert_eq!(t.counts().expired, 0);
}

#[tokio::test(start_paused = true)]
async fn a_normal_zone_hands_out_every_expired_node_at_once_and_a_failure_blocks_no_other() {
    let t0 = Instant::now();
    let mut t = table(Rates::default(), 30, t0);
    for i in 10..30 {
        t.apply(&format!("n{i:02}"), "h", "t1", D, "", t0 + D);
    }
    let at = t0 + D + Duration::from_secs(1);
    let due = look(&mut t, at);
    assert_eq!(due.len(), 10, "10 of 30: every one at once");
    // n00 fails; the others were marked. n00 waits its backoff, then goes again.
    t.retry("n00", at);
    for d in &due[1..] {
        t.marked(&d.node);
    }
    assert!(look(&mut t, at).is_empty());
    assert_eq!(t.counts().waiting, 1);
    let again = look(&mut t, at + Duration::from_secs(1));
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].node, "n00");
    // A second failure waits twice as long, and a node that expires meanwhile is not held
    // behind it.
    t.retry("n00", at + Duration::from_secs(1));
    let later = at + Duration::from_secs(1) + D;
    for i in 11..30 {
        t.apply(&format!("n{i:02}"), "h", "t2", D, "", later);
    }
    let due = look(&mut t, later + Duration::from_millis(1));
    let mut names: Vec<&str> = due.iter().map(|d| d.node.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["n00", "n10"]);
}

#[tokio::test(start_paused = true)]
async fn a_disrupted_zone_is_held_and_every_zone_disrupted_holds_everything() {
    let t0 = Instant::now();
    let at = t0 + D + Duration::from_secs(1);
    // 6 of 10 expired: partial disruption, held (whatever the zone's size).
    let mut t = table(Rates::default(), 10, t0);
    for i in 6..10 {
        t.apply(&format!("n{i:02}"), "h", "t1", D, "", t0 + D);
    }
    assert!(look(&mut t, at).is_empty());
    assert_eq!(t.zone_states()[""], (ZoneState::PartialDisruption, 10));
    assert_eq!(t.held_zones(), [String::new()]);
    assert_eq!(t.counts().held, 6);
    // A zone that drops whole is held; one expiry in a healthy zone beside it is marked.
    let mut t = Table::new(Rates::default());
    for i in 0..4 {
        t.apply(&format!("a{i}"), "h", "t0", D, "zone-a", t0);
    }
    for i in 0..3 {
        t.apply(&format!("b{i}"), "h", "t0", D, "zone-b", t0);
    }
    for i in 1..3 {
        t.apply(&format!("b{i}"), "h", "t1", D, "zone-b", t0 + D);
    }
    let due = look(&mut t, at);
    assert_eq!(due.len(), 1, "{due:?}");
    assert_eq!(due[0].node, "b0");
    assert_eq!(t.zone_states()["zone-a"], (ZoneState::FullDisruption, 4));
    // Every node expired (every zone fully disrupted): nothing.
    let mut t = table(Rates::default(), 10, t0);
    assert!(look(&mut t, at).is_empty());
    assert_eq!(t.counts().waiting, 10);
    // One comes back: the others get a fresh duration rather than being marked at once.
    t.apply("n00", "h", "t9", D, "", at + Duration::from_secs(1));
    assert!(look(&mut t, at + Duration::from_secs(1)).is_empty());
    assert_eq!(t.counts().expired, 0);
    let later = at + Duration::from_secs(1) + D + Duration::from_secs(1);
    t.apply("n00", "h", "t10", D, "", later);
    assert!(look(&mut t, later).is_empty(), "9 of 10: partial, held");
    assert_eq!(t.counts().expired, 9);
}

#[tokio::test(start_paused = true)]
async fn one_or_two_lost_probers_are_never_a_disruption() {
    let t0 = Instant::now();
    let mut t = table(Rates::default(), 2, t0);
    assert_eq!(look(&mut t, t0 + D + Duration::from_secs(1)).len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_lease_whose_node_is_gone_is_never_marked_nor_counted() {
    let t0 = Instant::now();
    let mut t = table(Rates::default(), 5, t0);
    for i in 3..5 {
        t.apply(&format!("n{i:02}"), "h", "t1", D, "", t0 + D);
    }
    let at = t0 + D + Duration::from_secs(1);
    let expiring = t.expiring(at);
    assert_eq!(expiring.len(), 3);
    assert!(t.due(at).is_empty(), "not before the Nodes were looked up");
    // n00 and n01 are gone: only n02 counts, 1 of 3: a normal zone, marked.
    for (node, _) in expiring {
        t.checked(&node, node != "n02");
    }
    let due = t.due(at);
    assert_eq!(due.len(), 1, "{due:?}");
    assert_eq!(due[0].node, "n02");
    assert_eq!(t.zone_states()[""], (ZoneState::Normal, 3));
    assert!(t.expiring(at).is_empty(), "looked up once per expiry");
    // Renewed again (a new Node under the name, a prober back): followed again.
    t.apply("n00", "h", "t2", D, "", at);
    assert_eq!(t.zone_states()[""], (ZoneState::Normal, 4));
}
