//! Test support shared by every crate's tests (cargo feature `test-util`, dev-dependencies only).

use std::time::Duration;

/// Polls `cond` until it holds, failing the test with `what` once `timeout` has passed.
///
/// The pause between polls starts at 5 ms and doubles up to 100 ms: quick conditions are seen
/// at once, slow ones (a container restart, a daemon start) are not polled hundreds of times.
/// Time is tokio's, so a test with paused time advances instead of waiting.
pub async fn eventually(what: &str, timeout: Duration, mut cond: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut pause = Duration::from_millis(5);
    while !cond().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn returns_once_the_condition_holds() {
        let mut polls = 0;
        eventually("three polls", Duration::from_secs(5), async || {
            polls += 1;
            polls == 3
        })
        .await;
        assert_eq!(polls, 3);
    }

    #[tokio::test(start_paused = true)]
    #[should_panic(expected = "timed out after 1s waiting for never")]
    async fn fails_the_test_after_the_timeout() {
        eventually("never", Duration::from_secs(1), async || false).await;
    }
}
