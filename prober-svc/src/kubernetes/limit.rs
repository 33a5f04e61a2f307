//! Client-side rate limiting of API requests, as kubelet's `--kube-api-qps`/`--kube-api-burst`
//! (client-go's token bucket: `burst` requests at once, then `qps` per second; a request waits for
//! its token, it is never refused) plus the server's own throttling: a `429` answer with
//! `Retry-After` holds every later request of the process for that long.
//!
//! Hand-written (≈100 lines) rather than tower's `RateLimit`: that one is a fixed window whose
//! state lives in each service clone and whose clock cannot be paused in tests; the bucket here
//! is shared by the whole client, runs on tokio's clock, and knows about `Retry-After`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use parking_lot::Mutex;
use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

/// A token bucket shared by every request of one client.
#[derive(Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    state: Mutex<BucketState>,
}

#[derive(Debug)]
struct BucketState {
    tokens: f64,
    at: Instant,
    /// The server asked us to wait until then (429 with `Retry-After`).
    paused_until: Option<Instant>,
}

impl TokenBucket {
    /// `burst` tokens, refilled at `qps` per second (both at least tiny positive values).
    pub fn new(qps: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            qps: if qps.is_finite() && qps > 0.0 {
                qps
            } else {
                f64::MIN_POSITIVE
            },
            burst,
            state: Mutex::new(BucketState {
                tokens: burst,
                at: Instant::now(),
                paused_until: None,
            }),
        }
    }

    /// Takes a token and says how long to wait before using it (zero: at once). Tokens are
    /// handed out in call order, so waiters go first come, first served.
    pub fn reserve(&self) -> Duration {
        let mut st = self.state.lock();
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(st.at).as_secs_f64();
        st.tokens = (st.tokens + elapsed * self.qps).min(self.burst);
        st.at = now;
        st.tokens -= 1.0;
        let wait = if st.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-st.tokens / self.qps)
        };
        let paused = st
            .paused_until
            .map(|t| t.saturating_duration_since(now))
            .unwrap_or_default();
        wait.max(paused)
    }

    /// Holds every request until `delay` from now (the server said `Retry-After`).
    pub fn pause(&self, delay: Duration) {
        let until = Instant::now() + delay;
        let mut st = self.state.lock();
        if st.paused_until.is_none_or(|t| t < until) {
            st.paused_until = Some(until);
        }
    }
}

/// The [`Layer`] putting a [`TokenBucket`] in front of a client's requests.
#[derive(Clone, Debug)]
pub struct RateLimitLayer {
    bucket: Arc<TokenBucket>,
}

impl RateLimitLayer {
    /// Requests through this layer share `bucket`.
    pub fn new(bucket: Arc<TokenBucket>) -> Self {
        Self { bucket }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimited {
            inner,
            bucket: self.bucket.clone(),
            wait: None,
            ready: false,
        }
    }
}

/// A service whose requests each wait for a token (in `poll_ready`, as client-go's limiter
/// waits before each request).
pub struct RateLimited<S> {
    inner: S,
    bucket: Arc<TokenBucket>,
    wait: Option<Pin<Box<Sleep>>>,
    ready: bool,
}

impl<S, B, RB> Service<Request<B>> for RateLimited<S>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<RB>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if !self.ready {
            if self.wait.is_none() {
                let wait = self.bucket.reserve();
                if wait.is_zero() {
                    self.ready = true;
                } else {
                    self.wait = Some(Box::pin(tokio::time::sleep(wait)));
                }
            }
            if let Some(sleep) = &mut self.wait {
                ready!(sleep.as_mut().poll(cx));
                self.wait = None;
                self.ready = true;
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        self.ready = false;
        let bucket = self.bucket.clone();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let res = fut.await?;
            if res.status() == StatusCode::TOO_MANY_REQUESTS
                && let Some(delay) = retry_after(&res)
            {
                tracing::info!(
                    seconds = delay.as_secs(),
                    "the API server throttles the prober (429); holding requests"
                );
                bucket.pause(delay);
            }
            Ok(res)
        })
    }
}

/// The `Retry-After` header in whole seconds (the form the API server sends), at most 10 min.
fn retry_after<B>(res: &Response<B>) -> Option<Duration> {
    let secs: u64 = res
        .headers()
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(secs.min(600)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn burst_at_once_then_qps_and_first_come_first_served() {
        let b = TokenBucket::new(10.0, 3);
        let waits: Vec<Duration> = (0..6).map(|_| b.reserve()).collect();
        assert_eq!(&waits[..3], &[Duration::ZERO; 3]);
        let ms: Vec<u128> = waits[3..].iter().map(|d| d.as_millis()).collect();
        assert_eq!(ms, vec![100, 200, 300]);
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(b.reserve(), Duration::ZERO, "refilled, capped at burst");
        assert_eq!(b.reserve(), Duration::ZERO);
        assert_eq!(b.reserve(), Duration::ZERO);
        assert!(!b.reserve().is_zero(), "no more than burst after a pause");
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_after_holds_every_request() {
        let b = TokenBucket::new(100.0, 100);
        b.pause(Duration::from_secs(2));
        assert_eq!(b.reserve(), Duration::from_secs(2));
        tokio::time::advance(Duration::from_millis(1500)).await;
        assert_eq!(b.reserve(), Duration::from_millis(500));
        b.pause(Duration::from_millis(100));
        assert_eq!(
            b.reserve(),
            Duration::from_millis(500),
            "a shorter pause never shortens a longer one"
        );
    }
}
