//! The probes' resolver under a DNS blackhole: the pool's lookups never answer (a fake blocking
//! lookup at the resolver's seam), and the bounds, the other pods and `/etc/hosts` still hold.

#[path = "support/handlers.rs"]
mod support;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use podward_prober::handler::resolve::{Names, Resolver, ResolverOptions};
use podward_prober::model::outcome::Outcome;
use podward_prober::spec::{Handler, ProbeType};
use support::{get, prober, spec, target};
use tokio::time::Instant;

/// A lookup that hangs for names starting with `hang.` until released, and answers others
/// with 10.9.9.9; it counts how many run at once.
#[derive(Default)]
struct Blackhole {
    running: AtomicUsize,
    most: AtomicUsize,
    released: Mutex<bool>,
    release: Condvar,
}

impl Blackhole {
    fn lookup(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        if host.starts_with("hang.") {
            let mut released = self.released.lock();
            while !*released {
                self.release.wait(&mut released);
            }
        }
        self.running.fetch_sub(1, Ordering::SeqCst);
        Ok(vec![SocketAddr::new([10, 9, 9, 9].into(), port)])
    }

    fn release(&self) {
        *self.released.lock() = true;
        self.release.notify_all();
    }
}

fn resolver(root: &std::path::Path, hole: &Arc<Blackhole>) -> Resolver {
    let hole = hole.clone();
    Resolver::new(ResolverOptions {
        root: root.to_owned(),
        threads: 8,
        per_pod: 2,
        lookup: Arc::new(move |host: &str, port| hole.lookup(host, port)),
    })
}

/// Polls `cond` until it holds or five seconds pass.
async fn eventually(what: &str, cond: impl Fn() -> bool) {
    let until = Instant::now() + Duration::from_secs(5);
    while !cond() {
        assert!(Instant::now() < until, "never: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn root_with_hosts() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("etc")).expect("etc");
    std::fs::write(
        dir.path().join("etc/hosts"),
        "127.0.0.1 localhost\n10.1.2.3 canary.local\n",
    )
    .expect("hosts");
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dns_blackhole_holds_the_pool_only_and_never_other_pods_hosts_or_literals() {
    let root = root_with_hosts();
    let hole = Arc::new(Blackhole::default());
    let resolver = Arc::new(resolver(root.path(), &hole));
    // One pod: 200 lookups that never answer, each with a long deadline.
    let mut hostile = Vec::new();
    for i in 0..200 {
        let r = resolver.clone();
        hostile.push(tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            Names::new(&r, "hostile")
                .lookup(&format!("hang.{i}.example"), 80, Some(deadline))
                .await
        }));
    }
    eventually("the hostile pod's lookups run", || resolver.running() == 2).await;
    // Its own bound holds: two running, the rest wait their turn, no thread for them.
    assert_eq!(hole.running.load(Ordering::SeqCst), 2);
    let soon = || Some(Instant::now() + Duration::from_secs(5));
    // Another pod's lookup is served at once by the pool.
    let other = Names::new(&resolver, "canary")
        .lookup("svc.example", 8080, soon())
        .await
        .expect("another pod's lookup");
    assert_eq!(other, vec![SocketAddr::from(([10, 9, 9, 9], 8080))]);
    // /etc/hosts names and IP literals never touch the pool.
    let from_hosts = Names::new(&resolver, "hostile")
        .lookup("Canary.Local", 80, soon())
        .await
        .expect("hosts name");
    assert_eq!(from_hosts, vec![SocketAddr::from(([10, 1, 2, 3], 80))]);
    for literal in ["10.0.0.1", "[fd00::1]", "fd00::1"] {
        let got = Names::new(&resolver, "hostile")
            .lookup(literal, 80, soon())
            .await
            .expect("literal");
        assert_eq!(got.len(), 1, "{literal}");
    }
    // Many pods of hanging lookups: the pool, never more.
    let mut others = Vec::new();
    for pod in 0..20 {
        for i in 0..5 {
            let r = resolver.clone();
            others.push(tokio::spawn(async move {
                // Long enough that a loaded machine starts them all before any gives up (a
                // lookup whose probe gave up before its turn is dropped, never run).
                let deadline = Instant::now() + Duration::from_secs(3);
                Names::new(&r, &format!("pod-{pod}"))
                    .lookup(&format!("hang.{pod}.{i}"), 80, Some(deadline))
                    .await
            }));
        }
    }
    eventually("the pool is full", || resolver.running() == 8).await;
    for o in others {
        let err = o.await.expect("join").expect_err("hangs past its deadline");
        assert!(err.to_string().contains(": i/o timeout"), "{err}");
    }
    assert!(resolver.threads_started() <= 8);
    assert!(
        hole.most.load(Ordering::SeqCst) <= 8,
        "at most the pool at once"
    );
    // /etc/hosts still answers with the pool full.
    let started = Instant::now();
    Names::new(&resolver, "canary")
        .lookup("canary.local", 80, soon())
        .await
        .expect("hosts name with the pool full");
    assert!(started.elapsed() < Duration::from_secs(1));
    // DNS answers again: the pool drains the hostile pod's queue two at a time.
    hole.release();
    for h in hostile {
        h.await.expect("join").expect("answered once DNS answers");
    }
    assert!(hole.most.load(Ordering::SeqCst) <= 8);
    assert!(resolver.threads_started() <= 8);
}

#[tokio::test]
async fn a_hanging_lookup_fails_at_its_deadline_in_gos_words() {
    let root = root_with_hosts();
    let hole = Arc::new(Blackhole::default());
    let resolver = resolver(root.path(), &hole);
    let deadline = Instant::now() + Duration::from_millis(200);
    let err = Names::new(&resolver, "pod")
        .lookup("hang.db.svc", 5432, Some(deadline))
        .await
        .expect_err("never answers");
    assert!(Instant::now() >= deadline);
    assert_eq!(err.to_string(), "dial tcp: lookup hang.db.svc: i/o timeout");
    assert!(err.is_timeout());
    hole.release();
}

#[tokio::test]
async fn the_hosts_file_is_read_again_when_it_changes() {
    let root = root_with_hosts();
    let hole = Arc::new(Blackhole::default());
    let resolver = resolver(root.path(), &hole);
    let soon = || Some(Instant::now() + Duration::from_secs(5));
    std::fs::write(root.path().join("etc/hosts"), "10.4.4.44 hang.moved\n").expect("hosts");
    let got = Names::new(&resolver, "pod")
        .lookup("hang.moved", 80, soon())
        .await
        .expect("from the new file");
    assert_eq!(got, vec![SocketAddr::from(([10, 4, 4, 44], 80))]);
    assert_eq!(
        hole.most.load(Ordering::SeqCst),
        0,
        "the pool was never used"
    );
}

#[tokio::test]
async fn tcp_and_http_probes_resolve_through_the_probers_resolver() {
    let root = root_with_hosts();
    let hole = Arc::new(Blackhole::default());
    let lookups = hole.clone();
    // Names starting with `hang.` never answer; the others are 127.0.0.1.
    let resolver = Arc::new(Resolver::new(ResolverOptions {
        root: root.path().to_owned(),
        threads: 8,
        per_pod: 2,
        lookup: Arc::new(move |host: &str, port| {
            let answered = lookups.lookup(host, port)?;
            Ok(answered
                .iter()
                .map(|a| SocketAddr::from(([127, 0, 0, 1], a.port())))
                .collect())
        }),
    }));
    let prober = prober().with_resolver(resolver.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let tcp = |host: &str| Handler::TcpSocket {
        host: Some(host.to_owned()),
        port: podward_prober::spec::PortRef::Number(port.into()),
    };
    let probe = |handler| {
        let prober = &prober;
        async move {
            prober
                .probe_for_pod(
                    "pod",
                    ProbeType::Liveness,
                    &spec(handler, 1),
                    &target(&[], &[]),
                )
                .await
        }
    };
    assert_eq!(probe(tcp("up.test")).await, Outcome::Success(String::new()));
    assert_eq!(hole.most.load(Ordering::SeqCst), 1, "through the pool");
    assert_eq!(
        probe(tcp("hang.db")).await,
        Outcome::Failure("dial tcp: lookup hang.db: i/o timeout".into())
    );
    let mut http = get(port, "/", &[]);
    if let Handler::HttpGet(g) = &mut http {
        g.host = Some("hang.web".into());
    }
    match probe(http).await {
        Outcome::Failure(text) => assert!(
            text.contains("dial tcp: lookup hang.web: i/o timeout"),
            "{text}"
        ),
        other => panic!("{other:?}"),
    }
    hole.release();
}

#[tokio::test]
async fn pods_with_lookups_waiting_take_turns() {
    let root = root_with_hosts();
    let order = Arc::new(Mutex::new(Vec::<String>::new()));
    let hole = Arc::new(Blackhole::default());
    let (seen, gate) = (order.clone(), hole.clone());
    // One thread, one lookup per pod: the order the pool runs them in is the turn's.
    let resolver = Resolver::new(ResolverOptions {
        root: root.path().to_owned(),
        threads: 1,
        per_pod: 1,
        lookup: Arc::new(move |host: &str, port| {
            seen.lock().push(host.to_owned());
            gate.lookup(&format!("hang.{host}"), port)
        }),
    });
    let soon = || Some(Instant::now() + Duration::from_secs(5));
    let (a, b) = (Names::new(&resolver, "a"), Names::new(&resolver, "b"));
    let mut a1 = Box::pin(a.lookup("a1", 80, soon()));
    assert!(futures::poll!(&mut a1).is_pending());
    eventually("a1 runs", || resolver.running() == 1).await;
    // Pod a queues two more, then pod b one: b's runs before a's next.
    let mut a2 = Box::pin(a.lookup("a2", 80, soon()));
    let mut a3 = Box::pin(a.lookup("a3", 80, soon()));
    let mut b1 = Box::pin(b.lookup("b1", 80, soon()));
    for f in [&mut a2, &mut a3, &mut b1] {
        assert!(futures::poll!(f).is_pending());
    }
    hole.release();
    for f in [a1, a2, a3, b1] {
        f.await.expect("answered");
    }
    assert_eq!(*order.lock(), ["a1", "b1", "a2", "a3"]);
}

#[tokio::test]
async fn the_default_lookup_is_the_nodes_getaddrinfo() {
    // No hosts file under this root, so `localhost` goes through the pool to `getaddrinfo`,
    // which answers it from the node's own files.
    let root = tempfile::tempdir().expect("tempdir");
    let resolver = Resolver::new(ResolverOptions {
        root: root.path().to_owned(),
        ..ResolverOptions::default()
    });
    let got = Names::new(&resolver, "pod")
        .lookup(
            "localhost",
            8080,
            Some(Instant::now() + Duration::from_secs(5)),
        )
        .await
        .expect("localhost");
    assert!(
        got.iter().all(|a| a.ip().is_loopback() && a.port() == 8080),
        "{got:?}"
    );
    assert_eq!(resolver.threads_started(), 1);
}
