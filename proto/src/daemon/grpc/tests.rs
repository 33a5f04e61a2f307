use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::AsyncWriteExt;
use tokio_stream::StreamExt;

use super::*;

#[tokio::test]
async fn a_silent_connection_is_closed_at_the_deadline_and_a_speaking_one_is_admitted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("api.sock");
    let listener = UnixListener::bind(&path).expect("bind");
    let timeouts = Arc::new(AtomicUsize::new(0));
    let counted = timeouts.clone();
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut admitted = incoming(
        listener,
        "test",
        Duration::from_millis(200),
        Arc::new(move || {
            counted.fetch_add(1, Ordering::SeqCst);
        }),
        stop_rx,
    );
    // Silent: never admitted, closed by the server after the deadline.
    let mut silent = UnixStream::connect(&path).await.expect("connect");
    let mut buf = [0u8; 1];
    let closed = tokio::time::timeout(Duration::from_secs(5), silent.read(&mut buf))
        .await
        .expect("the server closes a silent connection");
    assert!(matches!(closed, Ok(0) | Err(_)), "{closed:?}");
    assert_eq!(timeouts.load(Ordering::SeqCst), 1);
    // Speaking: admitted, with its first bytes replayed.
    let mut speaking = UnixStream::connect(&path).await.expect("connect");
    speaking
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\nmore")
        .await
        .expect("write");
    let mut conn = tokio::time::timeout(Duration::from_secs(5), admitted.next())
        .await
        .expect("admitted in time")
        .expect("a connection")
        .expect("ok");
    let mut head = vec![0u8; PREFACE_LEN + 4];
    conn.read_exact(&mut head).await.expect("replayed");
    assert_eq!(&head[..], b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\nmore");
    // Stop ends the stream.
    let _ = stop_tx.send(true);
    let end = tokio::time::timeout(Duration::from_secs(5), admitted.next())
        .await
        .expect("ends on stop");
    assert!(end.is_none());
}
