//! Waiting for something the service does in the background (an event indexed, a peer's
//! booking applied, a replica ready): what the tests and the benchmarks poll with.

use std::future::Future;
use std::time::Duration;

/// How often [`eventually`] checks.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Checks `check` every 50 ms until it holds, for at most `limit`; panics naming `what`
/// when it never does, so a test fails instead of hanging.
pub async fn eventually<F, Fut>(limit: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let tries = limit.as_millis().div_ceil(POLL_INTERVAL.as_millis()).max(1);
    for _ in 0..tries {
        if check().await {
            return;
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
    panic!("{what} did not happen within {limit:?}");
}
