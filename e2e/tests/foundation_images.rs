//! Foundation: test images are built once per machine and reused; the loopback registry
//! serves busybox to CRI PullImage.

use std::time::Duration;

use podward_api::cri::{ImageSpec, ImageStatusRequest, PullImageRequest};
use podward_e2e::{ContainerSpec, Driver, ImageSet, PodSpec, TestNode};

#[tokio::test]
async fn second_node_reuses_the_built_image_tarballs() {
    let a = TestNode::start().await.expect("node a");
    let mtime = |p: &std::path::Path| {
        std::fs::metadata(p)
            .and_then(|m| m.modified())
            .expect("mtime")
    };
    let (bb, pause) = (mtime(&a.images().busybox), mtime(&a.images().pause));
    let b = TestNode::start().await.expect("node b");
    assert_eq!(a.images().busybox, b.images().busybox);
    assert_eq!(a.images().pause, b.images().pause);
    assert!(!b.images().built, "second node rebuilt the images");
    assert_eq!(mtime(&b.images().busybox), bb, "busybox tarball rewritten");
    assert_eq!(mtime(&b.images().pause), pause, "pause tarball rewritten");
}

#[test]
fn a_fresh_cache_builds_once_then_reuses() {
    let cache = tempfile::tempdir().expect("tempdir");
    let first = ImageSet::ensure_in(cache.path()).expect("build");
    assert!(first.built);
    let second = ImageSet::ensure_in(cache.path()).expect("reuse");
    assert!(!second.built);
    assert_eq!(first.busybox, second.busybox);
    // The tarball is a real OCI layout: index.json and oci-layout at its root.
    let mut names = Vec::new();
    let mut ar = tar::Archive::new(std::fs::File::open(&first.busybox).expect("open"));
    for e in ar.entries().expect("entries") {
        names.push(
            e.expect("entry")
                .path()
                .expect("path")
                .to_string_lossy()
                .into_owned(),
        );
    }
    assert!(
        names.contains(&"index.json".to_owned()) && names.contains(&"oci-layout".to_owned()),
        "{names:?}"
    );
}

#[tokio::test]
async fn busybox_pulls_from_the_loopback_registry() {
    let node = TestNode::start().await.expect("node");
    let Some(registry) = node.registry() else {
        eprintln!(
            "!!! SKIPPED busybox_pulls_from_the_loopback_registry: docker-registry/skopeo not \
             installed (apt-get install docker-registry skopeo) !!!"
        );
        return;
    };
    let image = format!("{registry}/busybox:latest");
    let mut images = node.image_client().await;
    let spec = ImageSpec {
        image: image.clone(),
        ..Default::default()
    };
    let pulled = images
        .pull_image(PullImageRequest {
            image: Some(spec.clone()),
            ..Default::default()
        })
        .await
        .expect("pull")
        .into_inner()
        .image_ref;
    assert!(pulled.starts_with("sha256:"), "image ref {pulled}");
    let status = images
        .image_status(ImageStatusRequest {
            image: Some(spec),
            verbose: false,
        })
        .await
        .expect("status")
        .into_inner();
    assert!(status.image.is_some_and(|i| i.repo_tags.contains(&image)));
    // And the pulled image runs.
    let driver = Driver::connect(&node.containerd_socket())
        .await
        .expect("driver");
    let pod = driver
        .run_pod(
            &node,
            PodSpec::new("pulled")
                .grace_period(1)
                .container(ContainerSpec::new("c", &["sleep", "60"]).image(&image)),
        )
        .await
        .expect("run pulled image");
    let out = pod
        .exec_sync("c", &["echo", "pulled"], Duration::from_secs(10))
        .await
        .expect("exec");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "pulled\n");
}
