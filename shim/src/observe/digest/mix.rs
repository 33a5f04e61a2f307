//! How the digest combines a field's hash into its message's: a keyed mix of three words.

/// Three words hashed as one, keyed by the process's seed: two folded 64×64→128-bit multiplies
/// (the mixing step of foldhash and wyhash). It runs for every field of every digested answer,
/// where XXH3 over the three words cost several times as much; hand-rolled because it is three
/// lines, and a hashing crate's `Hasher` would add a state per call. Keyed and full-width, it
/// keeps what the digest needs: a changed field changes the sum but for a 2^-64-ish chance.
pub(super) fn mix(seed: u64, a: u64, b: u64, c: u64) -> u64 {
    let h = folded_multiply(a ^ seed ^ MIX_KEYS[0], b ^ MIX_KEYS[1]);
    folded_multiply(h ^ c ^ MIX_KEYS[2], seed ^ MIX_KEYS[3])
}

/// The high and low halves of the 128-bit product, XORed.
fn folded_multiply(x: u64, y: u64) -> u64 {
    let full = u128::from(x) * u128::from(y);
    // Truncations on purpose: the two halves of the product.
    (full as u64) ^ ((full >> 64) as u64)
}

/// Fixed odd constants (digits of pi, as foldhash's) so that no word meets the seed alone.
const MIX_KEYS: [u64; 4] = [
    0x243f_6a88_85a3_08d3,
    0x1319_8a2e_0370_7344,
    0xa409_3822_299f_31d0,
    0x082e_fa98_ec4e_6c89,
];

/// Tells a map entry's digest from a nested message's in their parent's sum.
pub(super) const ENTRY: u64 = 1;
pub(super) const NESTED: u64 = 2;
