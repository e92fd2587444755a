//! [`IdMap`]: the map the engine keys by its own numbers.

use std::collections::HashMap;

/// A map keyed by the engine's own numbers (jobs, chains, process keys,
/// extension indexes, request ids): they come from counters, never from
/// outside (an answer's id is only looked up), so std's SipHash (built
/// against keys an attacker picks) buys nothing and costs about 100
/// instructions a lookup, several per call.
pub(super) type IdMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<IdHasher>>;

/// The hash of [`IdMap`], FxHash's step: a rotate, an xor and a
/// multiplication per word.
#[derive(Default)]
pub(super) struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}
