//! The maker of digests: one random seed per process, and the XXH3 secret derived from it once.

use std::sync::Arc;

use twox_hash::xxhash3_64::{RawHasher, SecretBuffer};

use super::bytewise::{Digest, FieldHasher};
use super::shape::{self, Shape};
use crate::observe::raw::Body;
use crate::observe::watched::Watched;

/// Makes digests with one random seed (per process).
pub(crate) struct Digester {
    seed: u64,
    /// Cloned for every long payload: deriving the secret from the seed once.
    fresh: Arc<FieldHasher>,
}

impl Default for Digester {
    fn default() -> Self {
        let seed = rand::random();
        let secret = SecretBuffer::with_seed(seed, [0; 192])
            .unwrap_or_else(|_| unreachable!("192 bytes is XXH3's default secret size"));
        Self {
            seed,
            fresh: Arc::new(RawHasher::new(secret)),
        }
    }
}

impl Digester {
    /// A digest of `method`'s answer, to feed its body to as it is relayed.
    pub(crate) fn answer(&self, method: Watched) -> Digest {
        self.digest(shape::answer(method))
    }

    /// `d` made what [`Digester::answer`] makes for `method`, keeping its memory: a connection
    /// reuses one digest from call to call instead of allocating one for each.
    pub(crate) fn restart(&self, d: &mut Digest, method: Watched) {
        let long = d.long.take();
        *d = Digest {
            long,
            ..self.answer(method)
        };
    }

    /// The digest of `method`'s request, held.
    pub(crate) fn request(&self, method: Watched, body: &Body) -> Option<u64> {
        self.digest_of(body, shape::request(method))
    }

    /// A digest of a message of `shape`, to feed its body to as it is relayed.
    pub(crate) fn digest(&self, shape: &'static Shape) -> Digest {
        Digest::new(self.seed, shape, self.fresh.clone())
    }

    /// The digest of a body of `shape` already held.
    pub(crate) fn digest_of(&self, body: &Body, shape: &'static Shape) -> Option<u64> {
        let mut d = self.digest(shape);
        for p in body.parts() {
            d.feed(p);
        }
        d.finish()
    }
}
