//! Direct exec (`--exec-mode direct`) against CRI `ExecSync` on the real containerd + runc: the
//! same command through both runners, side by side, for containers with different security
//! contexts — identical output, byte for byte — and the same results for timeouts, exits, huge
//! output, background children and a container that exits mid-probe, with nothing left running.

use std::time::Duration;

use podward_e2e::{ContainerSpec, Driver, Pod, PodSpec, SecurityContext, TestNode, bin_path};
use podward_prober::handler::exec::cri::CriExec;
use podward_prober::handler::exec::direct::{DirectExec, ExecMode};
use podward_prober::handler::exec::runner::{ExecError, ExecOutput, ExecRunner};

/// What the issue lists, each a line or block; `2>&1` so errors compare too.
const SCRIPT: &str = r#"
id
grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp|Seccomp_filters):' /proc/self/status
cat /proc/self/cgroup
for n in cgroup ipc mnt net pid pid_for_children time time_for_children user uts; do echo "$n $(readlink /proc/self/ns/$n)"; done
cat /proc/self/attr/current 2>&1; echo "attr=$?"
ulimit -a
pwd
env
umask
cat /proc/self/oom_score_adj
ls -l /proc/self/fd | awk 'NR > 1 {print $9, $10, $11}' | sed 's/pipe:\[[0-9]*\]/pipe/'
unshare -U true 2>&1; echo "unshare=$?"
touch /rw-check 2>&1; echo "rw=$?"; rm -f /rw-check
echo hello > /dev/stdout; echo "stdout=$?"
"#;

struct Runners {
    cri: CriExec,
    direct: DirectExec,
}

impl Runners {
    fn new(node: &TestNode) -> Runners {
        let ch = podward_api::socket::channel(&node.containerd_socket());
        Runners {
            cri: CriExec::new(ch.clone()),
            direct: DirectExec::new(ExecMode::Direct, ch, bin_path("podward-prober")),
        }
    }
}

async fn run(
    r: &dyn ExecRunner,
    id: &str,
    cmd: &[&str],
    timeout: Duration,
) -> Result<ExecOutput, ExecError> {
    let cmd = cmd.iter().map(|s| (*s).to_owned()).collect();
    r.exec_sync(id, cmd, timeout).await
}

fn text(o: &ExecOutput) -> String {
    format!(
        "exit {}\n--- stdout\n{}--- stderr\n{}",
        o.exit_code,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

async fn pod(driver: &Driver, node: &TestNode, name: &str, sec: SecurityContext) -> Pod {
    let spec =
        PodSpec::new(name).container(ContainerSpec::new("app", &["sleep", "3600"]).security(sec));
    driver.run_pod(node, spec).await.expect("run pod")
}

/// The security contexts of the issue, by name.
fn contexts() -> Vec<(&'static str, SecurityContext)> {
    let d = SecurityContext::default;
    vec![
        ("default", d()),
        (
            "user",
            SecurityContext {
                run_as_user: Some(1000),
                run_as_group: Some(3000),
                supplemental_groups: vec![4000, 5000],
                ..d()
            },
        ),
        (
            "caps",
            SecurityContext {
                drop_capabilities: vec!["ALL".into()],
                add_capabilities: vec!["NET_BIND_SERVICE".into()],
                ..d()
            },
        ),
        (
            "privileged",
            SecurityContext {
                privileged: true,
                ..d()
            },
        ),
        (
            "readonly",
            SecurityContext {
                readonly_rootfs: true,
                ..d()
            },
        ),
        (
            "seccomp",
            SecurityContext {
                seccomp_runtime_default: true,
                ..d()
            },
        ),
        (
            "nnp",
            SecurityContext {
                no_new_privs: true,
                ..d()
            },
        ),
        (
            "memory",
            SecurityContext {
                memory_limit: Some(64 << 20),
                ..d()
            },
        ),
        (
            "everything",
            SecurityContext {
                run_as_user: Some(1000),
                run_as_group: Some(3000),
                supplemental_groups: vec![4000],
                drop_capabilities: vec!["ALL".into()],
                add_capabilities: vec!["NET_BIND_SERVICE".into()],
                readonly_rootfs: true,
                seccomp_runtime_default: true,
                no_new_privs: true,
                memory_limit: Some(64 << 20),
                ..d()
            },
        ),
    ]
}

#[tokio::test]
async fn identical_output_for_every_security_context() {
    let node = TestNode::start().await.expect("node");
    let driver = Driver::connect(&node.containerd_socket())
        .await
        .expect("driver");
    let runners = Runners::new(&node);
    let mut failures = Vec::new();
    for (name, sec) in contexts() {
        let seccomp = sec.seccomp_runtime_default;
        let p = pod(&driver, &node, name, sec).await;
        let id = p.container_id("app").expect("container id");
        let cmd = ["sh", "-c", SCRIPT];
        let t = Duration::from_secs(10);
        let cri = text(&run(&runners.cri, &id, &cmd, t).await.expect("cri exec"));
        let direct = text(
            &run(&runners.direct, &id, &cmd, t)
                .await
                .expect("direct exec"),
        );
        if cri != direct {
            let diff: Vec<String> = cri
                .lines()
                .zip(direct.lines())
                .filter(|(a, b)| a != b)
                .map(|(a, b)| format!("  CRI:    {a}\n  direct: {b}"))
                .collect();
            failures.push(format!(
                "== {name}: {} lines differ ({} vs {} lines)\n{}\n== {name}: CRI\n{cri}",
                diff.len(),
                cri.lines().count(),
                direct.lines().count(),
                diff.join("\n")
            ));
        }
        if seccomp {
            assert!(
                direct.contains("unshare=1"),
                "{name}: RuntimeDefault must deny unshare(CLONE_NEWUSER):\n{direct}"
            );
        }
        p.delete().await.expect("delete pod");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
