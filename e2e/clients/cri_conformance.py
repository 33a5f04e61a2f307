#!/usr/bin/env python3
"""CRI conformance cases from gRPC's C core (Python grpcio), for podward's e2e tests.

Runs the same cases as e2e/tests/shim_conformance.rs (a subset: what a C-core client can show
differently) against one CRI socket and prints one line per case, `name<TAB>outcome`, IDs
masked. The test runs it against containerd directly and through the shim and compares.

Usage: cri_conformance.py STUBS_DIR SOCKET SANDBOX_CONFIG_HEX CONTAINER_CONFIG_HEX [absent]
  STUBS_DIR: where grpc_tools.protoc wrote v1_pb2*.py (from the k8s-cri crate's v1.proto)
  *_CONFIG_HEX: serialized runtime.v1 PodSandboxConfig / ContainerConfig (hex)
  absent: only the cases for a socket whose runtime is down
"""
import re
import sys

STUBS, SOCKET = sys.argv[1], sys.argv[2]
sys.path.insert(0, STUBS)

import grpc  # noqa: E402
import v1_pb2 as api  # noqa: E402
import v1_pb2_grpc as rpc  # noqa: E402

ID = re.compile(r"[0-9a-f]{32,}")


def mask(s):
    return ID.sub("<id>", s)


def outcome(fn, shape=lambda r: ""):
    try:
        return mask("ok:" + shape(fn()))
    except grpc.RpcError as e:
        return mask("err:%s:%s" % (e.code().name, e.details()))


def main():
    # The target as kubelet's C-core peers write it: C-core sends :authority = the
    # percent-encoded path, which a strict HTTP/2 server rejects.
    channel = grpc.insecure_channel(
        "unix://" + SOCKET,
        options=[("grpc.max_receive_message_length", 16 << 20)],
    )
    rt = rpc.RuntimeServiceStub(channel)
    img = rpc.ImageServiceStub(channel)
    out = []

    def case(name, fn, shape=lambda r: ""):
        out.append((name, outcome(fn, shape)))

    case("version", lambda: rt.Version(api.VersionRequest(version="v1"), timeout=10),
         lambda v: "%s %s %s" % (v.runtime_name, v.runtime_version, v.runtime_api_version))
    if len(sys.argv) > 5 and sys.argv[5] == "absent":
        case("list_containers", lambda: rt.ListContainers(api.ListContainersRequest(), timeout=10))
        print_out(out)
        return

    case("status", lambda: rt.Status(api.StatusRequest(), timeout=10),
         lambda s: ",".join(sorted("%s=%s" % (c.type, c.status) for c in s.status.conditions)))
    sb_config = api.PodSandboxConfig.FromString(bytes.fromhex(sys.argv[3]))
    ct_config = api.ContainerConfig.FromString(bytes.fromhex(sys.argv[4]))
    sid = ""
    try:
        sid = rt.RunPodSandbox(api.RunPodSandboxRequest(config=sb_config), timeout=60).pod_sandbox_id
        out.append(("sandbox.run", "ok:"))
    except grpc.RpcError as e:
        out.append(("sandbox.run", mask("err:%s:%s" % (e.code().name, e.details()))))
    case("sandbox.status",
         lambda: rt.PodSandboxStatus(api.PodSandboxStatusRequest(pod_sandbox_id=sid), timeout=10),
         lambda s: "%s %s/%s" % (s.status.state, s.status.metadata.namespace, s.status.metadata.name))
    case("sandbox.list.by_id",
         lambda: rt.ListPodSandbox(api.ListPodSandboxRequest(filter=api.PodSandboxFilter(id=sid)), timeout=10),
         lambda l: str(len(l.items)))
    cid = ""
    try:
        cid = rt.CreateContainer(api.CreateContainerRequest(
            pod_sandbox_id=sid, config=ct_config, sandbox_config=sb_config), timeout=60).container_id
        out.append(("container.create", "ok:"))
    except grpc.RpcError as e:
        out.append(("container.create", mask("err:%s:%s" % (e.code().name, e.details()))))
    case("container.start",
         lambda: rt.StartContainer(api.StartContainerRequest(container_id=cid), timeout=60))
    status = lambda: rt.ContainerStatus(api.ContainerStatusRequest(container_id=cid), timeout=10)
    case("container.status.running", status,
         lambda s: "%s %s exit=%d" % (s.status.state, s.status.metadata.name, s.status.exit_code))
    case("exec_sync.exit_code",
         lambda: rt.ExecSync(api.ExecSyncRequest(
             container_id=cid, cmd=["sh", "-c", "echo out; echo err >&2; exit 7"], timeout=10), timeout=20),
         lambda r: "%r %r %d" % (r.stdout, r.stderr, r.exit_code))
    case("exec_sync.big_output",
         lambda: rt.ExecSync(api.ExecSyncRequest(
             container_id=cid, cmd=["head", "-c", "4194304", "/dev/zero"], timeout=10), timeout=20),
         lambda r: "%d bytes exit=%d" % (len(r.stdout), r.exit_code))
    # The caller's deadline passes first: what the client library reports, through both paths.
    case("exec_sync.deadline",
         lambda: rt.ExecSync(api.ExecSyncRequest(container_id=cid, cmd=["sleep", "5"], timeout=10),
                             timeout=0.5))
    # Cancellation: the future is cancelled before the answer.
    fut = rt.ExecSync.future(api.ExecSyncRequest(container_id=cid, cmd=["sleep", "5"], timeout=10), timeout=20)
    fut.cancel()
    out.append(("exec_sync.cancelled", "cancelled=%s" % fut.cancelled()))
    case("exec.url",
         lambda: rt.Exec(api.ExecRequest(container_id=cid, cmd=["sh"], stdout=True), timeout=10),
         lambda r: r.url.rsplit("/", 1)[0] + "/<token>")
    for name in ("container.stop", "container.stop.again"):
        case(name, lambda: rt.StopContainer(api.StopContainerRequest(container_id=cid, timeout=1), timeout=30))
    for name in ("container.remove", "container.remove.again"):
        case(name, lambda: rt.RemoveContainer(api.RemoveContainerRequest(container_id=cid), timeout=30))
    case("container.status.removed", status)
    for name in ("sandbox.stop", "sandbox.stop.again"):
        case(name, lambda: rt.StopPodSandbox(api.StopPodSandboxRequest(pod_sandbox_id=sid), timeout=30))
    for name in ("sandbox.remove", "sandbox.remove.again"):
        case(name, lambda: rt.RemovePodSandbox(api.RemovePodSandboxRequest(pod_sandbox_id=sid), timeout=30))
    case("unknown.container_status",
         lambda: rt.ContainerStatus(api.ContainerStatusRequest(container_id="does-not-exist"), timeout=10))
    raw = lambda path: channel.unary_unary(path, request_serializer=None, response_deserializer=None)
    case("unknown.method", lambda: raw("/runtime.v1.RuntimeService/DoesNotExist")(b"", timeout=10),
         lambda r: "%d bytes" % len(r))
    case("containerd.version",
         lambda: raw("/containerd.services.version.v1.Version/Version")(b"", timeout=10),
         lambda r: "answered")
    case("image.list", lambda: img.ListImages(api.ListImagesRequest(), timeout=10),
         lambda l: ",".join(sorted(t for i in l.images for t in i.repo_tags)))
    case("image.fs_info", lambda: img.ImageFsInfo(api.ImageFsInfoRequest(), timeout=10),
         lambda r: str(len(r.image_filesystems)))
    print_out(out)


def print_out(out):
    for name, o in out:
        print("%s\t%s" % (name, o.replace("\n", "\\n")))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
