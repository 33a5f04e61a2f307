//! A CRI conformance run modelled on critest's categories (runtime info and status, sandbox
//! lifecycle, container lifecycle, ExecSync with exit codes and timeouts, streaming Exec URL,
//! images, idempotent stop/remove, errors for unknown IDs). Every case runs directly against
//! containerd and through the shim; the normalised outcomes (IDs masked, times dropped; codes
//! and messages kept) must be identical.

#[path = "support/shim.rs"]
mod support;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::path::Path;
use std::time::Duration;

use podward_api::cri;
use podward_api::cri::image_service_client::ImageServiceClient;
use podward_api::cri::runtime_service_client::RuntimeServiceClient;
use podward_e2e::{BUSYBOX_IMAGE, PodSpec, TestNode};
use support::{InProcShim, mask_ids};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::transport::Channel;

const UNKNOWN: &str = "does-not-exist";

/// `ok:<shape>` or `err:<code>:<message>`, IDs masked.
fn outcome<T>(
    r: Result<tonic::Response<T>, tonic::Status>,
    shape: impl FnOnce(T) -> String,
) -> String {
    match r {
        Ok(v) => mask_ids(&format!("ok:{}", shape(v.into_inner()))),
        Err(s) => mask_ids(&format!("err:{:?}:{}", s.code(), s.message())),
    }
}

fn sorted<V: Debug>(m: &HashMap<String, V>) -> String {
    format!("{:?}", m.iter().collect::<BTreeMap<_, _>>())
}

fn sandbox_config(node: &TestNode) -> cri::PodSandboxConfig {
    PodSpec::new("conf")
        .namespace("conformance")
        .uid("uid-conf")
        .label("suite", "cri")
        .annotation("podward.io/probes", "{}")
        .sandbox_config(node)
        .expect("sandbox config")
}

/// GET on a streaming URL; the HTTP status line (the URL's token is masked by the caller).
async fn get_status_line(url: &str) -> String {
    let Some(rest) = url.strip_prefix("http://") else {
        return format!("not http: {url}");
    };
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let Ok(mut s) = tokio::net::TcpStream::connect(host).await else {
        return "connect failed".into();
    };
    let req = format!("GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.expect("write");
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf)).await;
    String::from_utf8_lossy(&buf)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// Masks the per-call token at the end of a streaming URL.
fn mask_url(url: &str) -> String {
    match url.rsplit_once('/') {
        Some((base, _token)) => format!("{base}/<token>"),
        None => url.to_owned(),
    }
}

async fn suite(node: &TestNode, endpoint: &Path) -> Vec<(&'static str, String)> {
    let ch = podward_api::socket::channel(endpoint.to_owned());
    let mut rt = RuntimeServiceClient::new(ch.clone())
        .max_decoding_message_size(podward_api::limits::CRI_MESSAGE_BYTES);
    let mut img = ImageServiceClient::new(ch);
    let mut out: Vec<(&'static str, String)> = Vec::new();

    // Runtime info.
    out.push((
        "version",
        outcome(
            rt.version(cri::VersionRequest {
                version: "v1".into(),
            })
            .await,
            |v| {
                format!(
                    "{} {} {} {}",
                    v.version, v.runtime_name, v.runtime_version, v.runtime_api_version
                )
            },
        ),
    ));
    out.push((
        "status",
        outcome(
            rt.status(cri::StatusRequest { verbose: false }).await,
            |s| {
                let mut c: Vec<String> = s
                    .status
                    .map(|s| {
                        s.conditions
                            .into_iter()
                            .map(|c| format!("{}={}", c.r#type, c.status))
                            .collect()
                    })
                    .unwrap_or_default();
                c.sort();
                c.join(",")
            },
        ),
    ));

    // Sandbox lifecycle.
    let config = sandbox_config(node);
    let run = rt
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        })
        .await;
    let sid = run
        .as_ref()
        .map(|r| r.get_ref().pod_sandbox_id.clone())
        .unwrap_or_default();
    out.push(("sandbox.run", outcome(run, |_| String::new())));
    out.push((
        "sandbox.status",
        outcome(
            rt.pod_sandbox_status(cri::PodSandboxStatusRequest {
                pod_sandbox_id: sid.clone(),
                verbose: false,
            })
            .await,
            |s| {
                let s = s.status.unwrap_or_default();
                format!(
                    "{:?} {:?} {:?} {} {}",
                    s.state(),
                    s.metadata,
                    s.linux,
                    sorted(&s.labels),
                    sorted(&s.annotations)
                )
            },
        ),
    ));
    let by_id = cri::PodSandboxFilter {
        id: sid.clone(),
        ..Default::default()
    };
    out.push((
        "sandbox.list.by_id",
        outcome(
            rt.list_pod_sandbox(cri::ListPodSandboxRequest {
                filter: Some(by_id),
            })
            .await,
            |l| format!("{}", l.items.len()),
        ),
    ));
    let mut sel = HashMap::new();
    sel.insert("suite".to_owned(), "cri".to_owned());
    let by_label = cri::PodSandboxFilter {
        label_selector: sel,
        ..Default::default()
    };
    out.push((
        "sandbox.list.by_label",
        outcome(
            rt.list_pod_sandbox(cri::ListPodSandboxRequest {
                filter: Some(by_label),
            })
            .await,
            |l| format!("{}", l.items.len()),
        ),
    ));

    // Container lifecycle.
    let created = rt
        .create_container(cri::CreateContainerRequest {
            pod_sandbox_id: sid.clone(),
            config: Some(support::container_config()),
            sandbox_config: Some(config.clone()),
        })
        .await;
    let cid = created
        .as_ref()
        .map(|r| r.get_ref().container_id.clone())
        .unwrap_or_default();
    out.push(("container.create", outcome(created, |_| String::new())));
    let status = |rt: &mut RuntimeServiceClient<Channel>, id: String| {
        let mut rt = rt.clone();
        async move {
            outcome(
                rt.container_status(cri::ContainerStatusRequest {
                    container_id: id,
                    verbose: false,
                })
                .await,
                |s| {
                    let s = s.status.unwrap_or_default();
                    format!(
                        "{:?} {:?} image={:?} exit={} reason={} started={} finished={} {}",
                        s.state(),
                        s.metadata,
                        s.image.map(|i| i.image),
                        s.exit_code,
                        s.reason,
                        s.started_at != 0,
                        s.finished_at != 0,
                        sorted(&s.labels)
                    )
                },
            )
        }
    };
    out.push((
        "container.status.created",
        status(&mut rt, cid.clone()).await,
    ));
    out.push((
        "container.start",
        outcome(
            rt.start_container(cri::StartContainerRequest {
                container_id: cid.clone(),
            })
            .await,
            |_| String::new(),
        ),
    ));
    out.push((
        "container.status.running",
        status(&mut rt, cid.clone()).await,
    ));
    let running = cri::ContainerFilter {
        pod_sandbox_id: sid.clone(),
        state: Some(cri::ContainerStateValue {
            state: cri::ContainerState::ContainerRunning as i32,
        }),
        ..Default::default()
    };
    out.push((
        "container.list.running",
        outcome(
            rt.list_containers(cri::ListContainersRequest {
                filter: Some(running),
            })
            .await,
            |l| format!("{}", l.containers.len()),
        ),
    ));

    // ExecSync: output, exit codes, timeouts.
    let exec = |cmd: &[&str], timeout: i64| cri::ExecSyncRequest {
        container_id: cid.clone(),
        cmd: cmd.iter().map(|s| (*s).to_owned()).collect(),
        timeout,
    };
    out.push((
        "exec_sync.exit_code",
        outcome(
            rt.exec_sync(exec(
                &["sh", "-c", "echo out; echo err >&2; echo $CONF; exit 7"],
                10,
            ))
            .await,
            |r| {
                format!(
                    "{:?} {:?} {}",
                    String::from_utf8_lossy(&r.stdout),
                    String::from_utf8_lossy(&r.stderr),
                    r.exit_code
                )
            },
        ),
    ));
    out.push((
        "exec_sync.timeout",
        outcome(rt.exec_sync(exec(&["sleep", "10"], 1)).await, |r| {
            format!(
                "exit={} {:?}",
                r.exit_code,
                String::from_utf8_lossy(&r.stderr)
            )
        }),
    ));
    // A 4 MiB answer, and the caller's own deadline passing first.
    out.push((
        "exec_sync.big_output",
        outcome(
            rt.exec_sync(exec(&["head", "-c", "4194304", "/dev/zero"], 10))
                .await,
            |r| format!("{} bytes exit={}", r.stdout.len(), r.exit_code),
        ),
    ));
    let mut late = tonic::Request::new(exec(&["sleep", "5"], 10));
    late.set_timeout(Duration::from_millis(500));
    out.push((
        "exec_sync.deadline",
        outcome(rt.exec_sync(late).await, |_| String::new()),
    ));
    out.push((
        "exec_sync.no_such_binary",
        outcome(rt.exec_sync(exec(&["/nope"], 5)).await, |r| {
            format!("exit={}", r.exit_code)
        }),
    ));

    // Streaming Exec: the URL (token masked) and what a plain GET on it does.
    let url = rt
        .exec(cri::ExecRequest {
            container_id: cid.clone(),
            cmd: vec!["sh".into()],
            stdout: true,
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner().url);
    match url {
        Ok(u) => {
            out.push(("exec.url", mask_url(&u)));
            out.push(("exec.url.get", get_status_line(&u).await));
        }
        Err(s) => {
            out.push(("exec.url", format!("err:{:?}:{}", s.code(), s.message())));
            out.push(("exec.url.get", String::new()));
        }
    }

    // Stop and remove, twice each (idempotence), then errors for the removed IDs.
    for case in ["container.stop", "container.stop.again"] {
        out.push((
            case,
            outcome(
                rt.stop_container(cri::StopContainerRequest {
                    container_id: cid.clone(),
                    timeout: 1,
                })
                .await,
                |_| String::new(),
            ),
        ));
    }
    out.push((
        "container.status.exited",
        status(&mut rt, cid.clone()).await,
    ));
    for case in ["container.remove", "container.remove.again"] {
        out.push((
            case,
            outcome(
                rt.remove_container(cri::RemoveContainerRequest {
                    container_id: cid.clone(),
                })
                .await,
                |_| String::new(),
            ),
        ));
    }
    out.push((
        "container.status.removed",
        status(&mut rt, cid.clone()).await,
    ));
    for case in ["sandbox.stop", "sandbox.stop.again"] {
        out.push((
            case,
            outcome(
                rt.stop_pod_sandbox(cri::StopPodSandboxRequest {
                    pod_sandbox_id: sid.clone(),
                })
                .await,
                |_| String::new(),
            ),
        ));
    }
    out.push((
        "sandbox.status.stopped",
        outcome(
            rt.pod_sandbox_status(cri::PodSandboxStatusRequest {
                pod_sandbox_id: sid.clone(),
                verbose: false,
            })
            .await,
            |s| format!("{:?}", s.status.unwrap_or_default().state()),
        ),
    ));
    for case in ["sandbox.remove", "sandbox.remove.again"] {
        out.push((
            case,
            outcome(
                rt.remove_pod_sandbox(cri::RemovePodSandboxRequest {
                    pod_sandbox_id: sid.clone(),
                })
                .await,
                |_| String::new(),
            ),
        ));
    }
    out.push((
        "sandbox.status.removed",
        outcome(
            rt.pod_sandbox_status(cri::PodSandboxStatusRequest {
                pod_sandbox_id: sid.clone(),
                verbose: false,
            })
            .await,
            |_| String::new(),
        ),
    ));

    // Unknown IDs.
    out.push((
        "unknown.container_status",
        status(&mut rt, UNKNOWN.into()).await,
    ));
    out.push((
        "unknown.sandbox_status",
        outcome(
            rt.pod_sandbox_status(cri::PodSandboxStatusRequest {
                pod_sandbox_id: UNKNOWN.into(),
                verbose: false,
            })
            .await,
            |_| String::new(),
        ),
    ));
    out.push((
        "unknown.start",
        outcome(
            rt.start_container(cri::StartContainerRequest {
                container_id: UNKNOWN.into(),
            })
            .await,
            |_| String::new(),
        ),
    ));
    out.push((
        "unknown.stop_container",
        outcome(
            rt.stop_container(cri::StopContainerRequest {
                container_id: UNKNOWN.into(),
                timeout: 0,
            })
            .await,
            |_| String::new(),
        ),
    ));
    out.push((
        "unknown.remove_container",
        outcome(
            rt.remove_container(cri::RemoveContainerRequest {
                container_id: UNKNOWN.into(),
            })
            .await,
            |_| String::new(),
        ),
    ));
    out.push((
        "unknown.exec_sync",
        outcome(
            rt.exec_sync(cri::ExecSyncRequest {
                container_id: UNKNOWN.into(),
                cmd: vec!["true".into()],
                timeout: 1,
            })
            .await,
            |r| format!("exit={}", r.exit_code),
        ),
    ));
    out.push((
        "unknown.stop_sandbox",
        outcome(
            rt.stop_pod_sandbox(cri::StopPodSandboxRequest {
                pod_sandbox_id: UNKNOWN.into(),
            })
            .await,
            |_| String::new(),
        ),
    ));
    out.push((
        "unknown.remove_sandbox",
        outcome(
            rt.remove_pod_sandbox(cri::RemovePodSandboxRequest {
                pod_sandbox_id: UNKNOWN.into(),
            })
            .await,
            |_| String::new(),
        ),
    ));

    // Images.
    let spec = |image: &str| {
        Some(cri::ImageSpec {
            image: image.to_owned(),
            ..Default::default()
        })
    };
    out.push((
        "image.list",
        outcome(
            img.list_images(cri::ListImagesRequest::default()).await,
            |l| {
                let mut tags: Vec<String> =
                    l.images.into_iter().flat_map(|i| i.repo_tags).collect();
                tags.sort();
                tags.join(",")
            },
        ),
    ));
    out.push((
        "image.status",
        outcome(
            img.image_status(cri::ImageStatusRequest {
                image: spec(BUSYBOX_IMAGE),
                verbose: false,
            })
            .await,
            |s| {
                s.image
                    .map(|i| format!("{:?} size>0={}", i.repo_tags, i.size > 0))
                    .unwrap_or_default()
            },
        ),
    ));
    out.push((
        "image.status.unknown",
        outcome(
            img.image_status(cri::ImageStatusRequest {
                image: spec("podward.test/nope:1"),
                verbose: false,
            })
            .await,
            |s| format!("{:?}", s.image),
        ),
    ));
    out.push((
        "image.fs_info",
        outcome(img.image_fs_info(cri::ImageFsInfoRequest {}).await, |r| {
            format!("{}", r.image_filesystems.len())
        }),
    ));
    out
}

/// PullImage and RemoveImage. Removing an image removes it by ID, every tag with it, so this
/// runs after both read-only suites, and pulls twice so both runs start from "not present".
async fn image_mutations(node: &TestNode, endpoint: &Path) -> Vec<(&'static str, String)> {
    let mut img = ImageServiceClient::new(podward_api::socket::channel(endpoint.to_owned()));
    let spec = |image: &str| {
        Some(cri::ImageSpec {
            image: image.to_owned(),
            ..Default::default()
        })
    };
    let mut out: Vec<(&'static str, String)> = Vec::new();
    let Some(reg) = node.registry() else {
        eprintln!(
            "shim conformance: no loopback registry on this machine; PullImage not exercised"
        );
        return out;
    };
    let pulled = format!("{reg}/busybox:latest");
    for case in ["image.pull.first", "image.remove.first"] {
        let r = if case == "image.pull.first" {
            outcome(
                img.pull_image(cri::PullImageRequest {
                    image: spec(&pulled),
                    ..Default::default()
                })
                .await,
                |r| r.image_ref,
            )
        } else {
            outcome(
                img.remove_image(cri::RemoveImageRequest {
                    image: spec(&pulled),
                })
                .await,
                |_| String::new(),
            )
        };
        out.push((case, r));
    }
    out.push((
        "image.pull",
        outcome(
            img.pull_image(cri::PullImageRequest {
                image: spec(&pulled),
                ..Default::default()
            })
            .await,
            |r| r.image_ref,
        ),
    ));
    out.push((
        "image.status.pulled",
        outcome(
            img.image_status(cri::ImageStatusRequest {
                image: spec(&pulled),
                verbose: false,
            })
            .await,
            |s| {
                s.image
                    .map(|i| format!("{:?}", i.repo_tags))
                    .unwrap_or_default()
                    .replace(reg, "<registry>")
            },
        ),
    ));
    for case in ["image.remove", "image.remove.again"] {
        out.push((
            case,
            outcome(
                img.remove_image(cri::RemoveImageRequest {
                    image: spec(&pulled),
                })
                .await,
                |_| String::new(),
            ),
        ));
    }
    out.push((
        "image.status.removed",
        outcome(
            img.image_status(cri::ImageStatusRequest {
                image: spec(&pulled),
                verbose: false,
            })
            .await,
            |s| format!("{:?}", s.image),
        ),
    ));
    out
}

#[tokio::test]
async fn cri_conformance_direct_and_through_the_shim_agree() {
    let node = TestNode::start().await.expect("node");
    let shim = InProcShim::start(&node).await;
    let mut direct = suite(&node, &node.containerd_socket()).await;
    let mut proxied = suite(&node, &shim.cri).await;
    direct.extend(image_mutations(&node, &node.containerd_socket()).await);
    proxied.extend(image_mutations(&node, &shim.cri).await);
    for ((case, d), (_, p)) in direct.iter().zip(&proxied) {
        eprintln!("conformance {case}:\n  direct: {d}\n  shim:   {p}");
    }
    let cases = |v: &[(&str, String)]| v.iter().map(|(c, _)| c.to_string()).collect::<Vec<_>>();
    assert_eq!(cases(&direct), cases(&proxied));
    for ((case, d), (_, p)) in direct.iter().zip(&proxied) {
        assert_eq!(d, p, "case {case}: direct vs through the shim");
    }
    // The runs really exercised the runtime (not two identical failures).
    let get = |c: &str| {
        direct
            .iter()
            .find(|(k, _)| *k == c)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    assert!(
        get("container.status.running").contains("ContainerRunning"),
        "{direct:#?}"
    );
    assert!(
        get("exec_sync.exit_code").contains("\"out\\nyes\\n\" \"err\\n\" 7"),
        "{direct:#?}"
    );
    assert!(
        get("unknown.container_status").starts_with("err:NotFound"),
        "{direct:#?}"
    );
    assert!(
        get("exec_sync.big_output").starts_with("ok:4194304 bytes"),
        "{direct:#?}"
    );
    shim.stop().await;
}
