//! Test logging: one `tracing` subscriber for the whole test binary, writing through the test
//! harness's capture.

/// Installs a test-output tracing subscriber once (`RUST_LOG` filters; default `info`), so the
/// harness's and the daemons' logs show up with a failing test. Safe to call from every test.
pub fn init_test_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // A second call fails because a subscriber is already set: that is the point of "once".
    // Colour only on a terminal: captured test output and the demo redirected to a file stay
    // plain text.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .try_init();
}
