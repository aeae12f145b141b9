//! A fast hasher for maps keyed by numbers this side chooses (AV handles,
//! connection and queue-pair numbers): a multiply-rotate per word, a few
//! cycles where std's SipHash takes tens of nanoseconds on lookups made
//! per operation. Keys a peer chooses (addresses, request ids) must keep
//! std's keyed hasher: this one is not resistant to chosen collisions.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// The hasher of [`IdMap`].
#[derive(Debug, Default, Clone, Copy)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        // The product's low bits depend only on the key's low bits, and
        // hash tables index buckets by the low bits: keys that differ
        // only above them (QP numbers 0x100, 0x200, ...) would share a
        // bucket. Rotating brings the well-mixed middle bits down (as
        // rustc-hash 2 does).
        self.0.rotate_left(26)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

/// A map keyed by numbers this side chooses.
pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_small_keys_spread() {
        let mut m: IdMap<u32, u32> = IdMap::default();
        for k in 0..10_000 {
            m.insert(k, k * 2);
        }
        assert!((0..10_000).all(|k| m.get(&k) == Some(&(k * 2))));
        let h = |k: u64| {
            let mut s = IdHasher::default();
            s.write_u64(k);
            s.finish()
        };
        // Neighbouring keys land far apart in the high bits buckets use.
        assert_ne!(h(1) >> 57, h(2) >> 57);
        // Keys that differ only in their high bits (QP numbers 256 apart)
        // spread over the low bits that index buckets.
        let low: std::collections::HashSet<u64> = (0..64u64).map(|k| h(k << 8) & 63).collect();
        assert!(low.len() >= 24, "{} of 64 buckets", low.len());
        let low: std::collections::HashSet<u64> = (0..64u64).map(|k| h(k << 20) & 63).collect();
        assert!(low.len() >= 24, "{} of 64 buckets", low.len());
    }
}
