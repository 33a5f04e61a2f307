//! The README's "run podward for real" command must keep working: run the demo binary for long
//! enough that the flaky container's liveness probe fails once, and check what it printed.

use std::process::Command;

#[test]
fn demo_runs_probes_and_restarts_the_flaky_container() {
    // Builds the three daemons if needed (the demo spawns them).
    for name in ["podward-shim", "podward-prober", "podward-housekeeper"] {
        assert!(podward_e2e::bin_path(name).exists(), "{name} not built");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_podward-demo"))
        .args(["--seconds", "30", "--ephemeral-ports"])
        .output()
        .expect("run podward-demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // `web` became ready through its HTTP readiness probe.
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("web") && l.contains("ready=true")),
        "web never ready:\n{stdout}"
    );
    // `flaky` failed liveness after 15 s and was stopped by the prober, then restarted.
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("flaky") && l.contains("restarts=1") && l.contains("kills=1")),
        "flaky never restarted by a probe kill:\n{stdout}"
    );
    // The demo starts the housekeeper without --act: its default must be a dry run.
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("housekeeper:") && l.contains("(dry run)")),
        "no housekeeper status in dry run:\n{stdout}"
    );
    assert!(
        stdout.contains("== cleaning up"),
        "demo did not clean up:\n{stdout}"
    );
}
