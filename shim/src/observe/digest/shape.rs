//! What a digest must know of CRI's messages: where maps are, and the messages that lead to them.
//!
//! Go writes a map's entries in any order (protobuf-go does not sort them unless told to be
//! deterministic, and containerd 2 does not tell it), so two answers with the same labels can
//! differ in their bytes. A digest that hashed the bytes in order would call every answer news
//! on a real node, where every pod and container carries several labels and annotations. The
//! digest therefore descends into the messages listed here and sums the entries of their maps
//! (and the list items, which containerd also takes from a map). Everything not listed is
//! hashed in order, as written: fields a newer CRI adds are still digested, and a map this table
//! misses costs only the recognition of a repeat, never a missed change.
//!
//! Labels and annotations are set when a sandbox or container is created and no CRI call
//! changes them afterwards (`UpdateContainerResources` touches resources only); an object's ID
//! is never reused. So an answer whose every other field repeats the previous one also repeats
//! its labels and annotations, and the digest leaves them out: they are most of an object's
//! bytes and of the fields it would otherwise hash and sum on every relist. They still reach
//! the index: the answer in which an object first appears differs from the one before it (a
//! new ID) and is decoded whole.
//!
//! The maps that can change (a Status answer's verbose `info`, a container's `unified`
//! resources) and a request's filters are still summed.
//!
//! Field numbers are CRI `runtime.v1`'s (`k8s-cri`'s `v1.proto`).

use crate::observe::watched::Watched;

/// The parts of a message that a digest treats other than as ordered bytes.
#[derive(Debug)]
pub(crate) struct Shape {
    /// Fields holding messages to descend into: their digests are summed, in any order.
    pub(crate) nested: &'static [(u64, &'static Shape)],
    /// Map fields: each entry is digested alone and the entries are summed, in any order.
    pub(crate) maps: &'static [u64],
    /// Fields left out: those that say when the answer was made, not what it says, and those
    /// that no CRI call changes for the object's life (see the module docs).
    pub(crate) ignored: &'static [u64],
    /// The three lists above as bit sets of field numbers under 64 (every CRI field's): the
    /// digest asks for every field of every answer what becomes of it.
    pub(crate) bits: Bits,
}

/// Field numbers under 64 as bit sets (bit `n` for field `n`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bits {
    pub(crate) nested: u64,
    pub(crate) maps: u64,
    pub(crate) ignored: u64,
}

/// Field `number`'s bit (none past 63).
const fn bit(number: u64) -> u64 {
    if number < 64 { 1 << number } else { 0 }
}

/// The bit set of the numbers in `numbers`.
const fn bits(numbers: &[u64]) -> u64 {
    let mut set = 0;
    let mut i = 0;
    while i < numbers.len() {
        set |= bit(numbers[i]);
        i += 1;
    }
    set
}

impl Shape {
    /// A shape with these nested messages, maps and fields left out.
    pub(crate) const fn new(
        nested: &'static [(u64, &'static Shape)],
        maps: &'static [u64],
        ignored: &'static [u64],
    ) -> Self {
        let mut nested_set = 0;
        let mut i = 0;
        while i < nested.len() {
            nested_set |= bit(nested[i].0);
            i += 1;
        }
        Self {
            nested,
            maps,
            ignored,
            bits: Bits {
                nested: nested_set,
                maps: bits(maps),
                ignored: bits(ignored),
            },
        }
    }

    const fn leaf_maps(maps: &'static [u64]) -> Self {
        Self::new(&[], maps, &[])
    }

    const fn leaf_fixed(ignored: &'static [u64]) -> Self {
        Self::new(&[], &[], ignored)
    }

    /// The shape of field `number`'s message, if the digest descends into it.
    pub(crate) fn nested(&self, number: u64) -> Option<&'static Shape> {
        self.nested
            .iter()
            .find(|(n, _)| *n == number)
            .map(|(_, s)| *s)
    }

    /// Messages below this one, this one included, on the deepest path.
    #[cfg(test)]
    pub(crate) fn depth(&self) -> usize {
        1 + self
            .nested
            .iter()
            .map(|(_, s)| s.depth())
            .max()
            .unwrap_or(0)
    }
}

/// A message with no map anywhere below it (a Version, a request with no filter): all in order.
const PLAIN: Shape = Shape::leaf_maps(&[]);

/// `ImageSpec`: `annotations` = 2 (fixed).
const IMAGE_SPEC: Shape = Shape::leaf_fixed(&[2]);

/// `PodSandbox`: `labels` = 5, `annotations` = 6 (fixed).
const POD_SANDBOX: Shape = Shape::leaf_fixed(&[5, 6]);

/// `PodSandboxStatus`: `labels` = 7, `annotations` = 8 (fixed).
const POD_SANDBOX_STATUS: Shape = Shape::leaf_fixed(&[7, 8]);

/// `Container`: `image` = 4, `labels` = 8, `annotations` = 9 (fixed).
const CONTAINER: Shape = Shape::new(&[(4, &IMAGE_SPEC)], &[], &[8, 9]);

/// `LinuxContainerResources`: `unified` = 9.
const LINUX_RESOURCES: Shape = Shape::leaf_maps(&[9]);

/// `ContainerResources`: `linux` = 1.
const RESOURCES: Shape = Shape::new(&[(1, &LINUX_RESOURCES)], &[], &[]);

/// `Mount`: `image` = 9.
const MOUNT: Shape = Shape::new(&[(9, &IMAGE_SPEC)], &[], &[]);

/// `ContainerStatus`: `image` = 8, `labels` = 12, `annotations` = 13 (fixed), `mounts` = 14,
/// `resources` = 16.
const CONTAINER_STATUS: Shape = Shape::new(
    &[(8, &IMAGE_SPEC), (14, &MOUNT), (16, &RESOURCES)],
    &[],
    &[12, 13],
);

/// `ListPodSandboxResponse`: `items` = 1.
const LIST_POD_SANDBOX: Shape = Shape::new(&[(1, &POD_SANDBOX)], &[], &[]);

/// `ListContainersResponse`: `containers` = 1.
const LIST_CONTAINERS: Shape = Shape::new(&[(1, &CONTAINER)], &[], &[]);

/// `PodSandboxStatusResponse`: `status` = 1, `info` = 2, `containers_statuses` = 3, and
/// `timestamp` = 4 (when containerd made the answer: a repeat has a new one every time).
const POD_SANDBOX_STATUS_RESPONSE: Shape = Shape::new(
    &[(1, &POD_SANDBOX_STATUS), (3, &CONTAINER_STATUS)],
    &[2],
    &[4],
);

/// `ContainerStatusResponse`: `status` = 1, `info` = 2.
const CONTAINER_STATUS_RESPONSE: Shape = Shape::new(&[(1, &CONTAINER_STATUS)], &[2], &[]);

/// `PodSandboxFilter`: `label_selector` = 3.
const POD_SANDBOX_FILTER: Shape = Shape::leaf_maps(&[3]);

/// `ContainerFilter`: `label_selector` = 4.
const CONTAINER_FILTER: Shape = Shape::leaf_maps(&[4]);

/// `ListPodSandboxRequest`: `filter` = 1.
const LIST_POD_SANDBOX_REQUEST: Shape = Shape::new(&[(1, &POD_SANDBOX_FILTER)], &[], &[]);

/// `ListContainersRequest`: `filter` = 1.
const LIST_CONTAINERS_REQUEST: Shape = Shape::new(&[(1, &CONTAINER_FILTER)], &[], &[]);

/// The shape of `method`'s request.
pub(crate) fn request(method: Watched) -> &'static Shape {
    match method {
        Watched::ListPodSandbox => &LIST_POD_SANDBOX_REQUEST,
        Watched::ListContainers => &LIST_CONTAINERS_REQUEST,
        _ => &PLAIN,
    }
}

/// The shape of `method`'s answer.
pub(crate) fn answer(method: Watched) -> &'static Shape {
    match method {
        Watched::ListPodSandbox => &LIST_POD_SANDBOX,
        Watched::ListContainers => &LIST_CONTAINERS,
        Watched::PodSandboxStatus => &POD_SANDBOX_STATUS_RESPONSE,
        Watched::ContainerStatus => &CONTAINER_STATUS_RESPONSE,
        _ => &PLAIN,
    }
}

/// Every shape a digest starts from (for the depth bound's test).
#[cfg(test)]
pub(crate) const ROOTS: [&Shape; 6] = [
    &LIST_POD_SANDBOX,
    &LIST_CONTAINERS,
    &POD_SANDBOX_STATUS_RESPONSE,
    &CONTAINER_STATUS_RESPONSE,
    &LIST_POD_SANDBOX_REQUEST,
    &LIST_CONTAINERS_REQUEST,
];
