//! Name registries for commands and tools (SPEC 3.7).
//!
//! A name is owned by its highest-precedence registrant, whatever order
//! the registrations arrive in. Lower-precedence claims are kept so a
//! name passes to the next registrant when its owner exits.

use serde_json::Value;
use std::collections::BTreeMap;

/// Most commands, tools and event subscriptions one extension may
/// register, each; the excess is ignored and logged.
pub const MAX_NAMES: usize = 10_000;

/// Most bytes one extension's commands, its tools and its event names
/// may hold in memory, each (names, descriptions, schemas, as counted by
/// [`footprint`]): 10,000 names of up to 16 MiB each would be no bound.
pub const MAX_NAME_BYTES: usize = 16 << 20;

/// One extension's claim on a name.
#[derive(Debug, Clone)]
pub(crate) struct Claim<T> {
    /// The claimant's precedence (lower wins); also its index in the host.
    pub rank: usize,
    /// What the extension registered.
    pub info: T,
}

/// Names to claims, each list sorted by rank.
#[derive(Debug, Default)]
pub(crate) struct Registry<T> {
    names: BTreeMap<String, Vec<Claim<T>>>,
}

/// About the bytes a registration holds in memory: a schema takes more
/// than its text (an array of zeros, 16 times more).
pub fn footprint(name: &str, description: &str, schema: &Option<Value>) -> usize {
    fn value(v: &Value) -> usize {
        let inner = match v {
            Value::String(s) => s.len(),
            Value::Array(a) => a.iter().map(value).sum(),
            Value::Object(o) => (o.iter())
                .map(|(k, v)| std::mem::size_of::<String>() + k.len() + value(v))
                .sum(),
            _ => 0,
        };
        std::mem::size_of::<Value>() + inner
    }
    name.len() + description.len() + schema.as_ref().map_or(0, value)
}

/// Whether `name` is usable as a command or tool name.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty() && !name.chars().any(char::is_whitespace)
}

impl<T> Registry<T> {
    /// Records that extension `rank` registered `name` (again: updates its
    /// info). Returns who is shadowed by whom, when the claimant either
    /// lost to the owner or displaced it.
    pub fn claim(&mut self, name: &str, rank: usize, info: T) -> Option<(usize, usize)> {
        let claims = self.names.entry(name.to_string()).or_default();
        let previous_owner = claims.first().map(|c| c.rank);
        match claims.binary_search_by_key(&rank, |c| c.rank) {
            Ok(i) => claims[i].info = info,
            Err(i) => claims.insert(i, Claim { rank, info }),
        }
        match previous_owner? {
            owner if owner < rank => Some((rank, owner)),
            owner if owner > rank => Some((owner, rank)),
            _ => None,
        }
    }

    /// What extension `rank` registered as `name`, if it did.
    pub fn claim_of(&self, name: &str, rank: usize) -> Option<&T> {
        let claims = self.names.get(name)?;
        let i = claims.binary_search_by_key(&rank, |c| c.rank).ok()?;
        Some(&claims[i].info)
    }

    /// The same, to change it.
    pub fn claim_mut(&mut self, name: &str, rank: usize) -> Option<&mut T> {
        let claims = self.names.get_mut(name)?;
        let i = claims.binary_search_by_key(&rank, |c| c.rank).ok()?;
        Some(&mut claims[i].info)
    }

    /// The winning claim on `name`.
    pub fn owner(&self, name: &str) -> Option<&Claim<T>> {
        self.names.get(name).and_then(|c| c.first())
    }

    /// Drops extension `rank`'s claim on `name` (it unregistered it);
    /// returns what it had registered.
    pub fn release(&mut self, name: &str, rank: usize) -> Option<T> {
        let claims = self.names.get_mut(name)?;
        let i = claims.binary_search_by_key(&rank, |c| c.rank).ok()?;
        let claim = claims.remove(i);
        if claims.is_empty() {
            self.names.remove(name);
        }
        Some(claim.info)
    }

    /// Drops every claim of extension `rank` (it exited).
    pub fn remove_rank(&mut self, rank: usize) {
        self.names.retain(|_, claims| {
            claims.retain(|c| c.rank != rank);
            !claims.is_empty()
        });
    }

    /// Forgets everything (reload).
    pub fn clear(&mut self) {
        self.names.clear();
    }

    /// Every name with its winning claim, sorted by name.
    pub fn owners(&self) -> impl Iterator<Item = (&str, &Claim<T>)> {
        self.names
            .iter()
            .filter_map(|(n, c)| c.first().map(|c| (n.as_str(), c)))
    }

    /// Names extension `rank` claimed but another owns, with the owner's rank.
    pub fn lost_by(&self, rank: usize) -> Vec<(String, usize)> {
        (self.names.iter())
            .filter(|(_, claims)| claims.iter().skip(1).any(|c| c.rank == rank))
            .filter_map(|(n, claims)| claims.first().map(|c| (n.clone(), c.rank)))
            .collect()
    }

    /// Names extension `rank` owns.
    pub fn owned_by(&self, rank: usize) -> Vec<String> {
        self.owners()
            .filter(|(_, c)| c.rank == rank)
            .map(|(n, _)| n.to_string())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precedence_not_arrival_order() {
        let mut r = Registry::default();
        assert_eq!(r.claim("x", 2, "late"), None);
        assert_eq!(r.claim("x", 0, "first"), Some((2, 0)));
        assert_eq!(r.claim("x", 1, "mid"), Some((1, 0)));
        assert_eq!(r.lost_by(2), [("x".to_string(), 0)]);
        assert_eq!(r.lost_by(0), []);
        r.release("x", 0);
        assert_eq!(r.owner("x").map(|c| c.info), Some("mid"));
    }
}
