//! Name registries for commands and tools (docs/PROTOCOL.md#names-and-precedence).
//!
//! A name is owned by its highest-precedence registrant, whatever order
//! the registrations arrive in. Lower-precedence claims are kept so a
//! name passes to the next registrant when its owner exits. Command
//! names are case-insensitive (docs/PROTOCOL.md#names-and-precedence): such a
//! registry keys its names folded and keeps each claim's own spelling.

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
    /// The name as the claimant spelled it.
    pub name: String,
    /// What the extension registered.
    pub info: T,
}

/// Names to claims, each list sorted by rank.
#[derive(Debug, Default)]
pub(crate) struct Registry<T> {
    names: BTreeMap<String, Vec<Claim<T>>>,
    /// Names that differ only in case are one name.
    fold: bool,
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
    /// A registry whose names are case-insensitive (commands).
    pub(crate) fn case_insensitive() -> Self {
        Registry {
            names: BTreeMap::new(),
            fold: true,
        }
    }

    /// The key `name` is filed under.
    fn key<'n>(&self, name: &'n str) -> std::borrow::Cow<'n, str> {
        // Only a name that may change allocates: most are lowercase ASCII.
        match self.fold && name.bytes().any(|b| b.is_ascii_uppercase() || b >= 0x80) {
            true => name.to_lowercase().into(),
            false => name.into(),
        }
    }

    /// Records that extension `rank` registered `name` (again: updates its
    /// info). Returns who is shadowed by whom, when the claimant either
    /// lost to the owner or displaced it.
    pub(crate) fn claim(&mut self, name: &str, rank: usize, info: T) -> Option<(usize, usize)> {
        let key = self.key(name).into_owned();
        let claims = self.names.entry(key).or_default();
        let previous_owner = claims.first().map(|c| c.rank);
        match claims.binary_search_by_key(&rank, |c| c.rank) {
            Ok(i) => claims[i].info = info,
            Err(i) => {
                let name = name.to_string();
                claims.insert(i, Claim { rank, name, info })
            }
        }
        match previous_owner? {
            owner if owner < rank => Some((rank, owner)),
            owner if owner > rank => Some((owner, rank)),
            _ => None,
        }
    }

    fn claim_at(&self, name: &str, rank: usize) -> Option<&Claim<T>> {
        let claims = self.names.get(self.key(name).as_ref())?;
        let i = claims.binary_search_by_key(&rank, |c| c.rank).ok()?;
        Some(&claims[i])
    }

    /// What extension `rank` registered as `name`, if it did.
    pub(crate) fn claim_of(&self, name: &str, rank: usize) -> Option<&T> {
        self.claim_at(name, rank).map(|c| &c.info)
    }

    /// How extension `rank` spelled `name` when it registered it.
    pub(crate) fn spelling_of(&self, name: &str, rank: usize) -> Option<&str> {
        self.claim_at(name, rank).map(|c| c.name.as_str())
    }

    /// The same, to change it (activating a deferred tool).
    #[cfg(feature = "tool-extras")]
    pub(crate) fn claim_mut(&mut self, name: &str, rank: usize) -> Option<&mut T> {
        let claims = self.names.get_mut(name)?;
        let i = claims.binary_search_by_key(&rank, |c| c.rank).ok()?;
        Some(&mut claims[i].info)
    }

    /// The winning claim on `name`.
    pub(crate) fn owner(&self, name: &str) -> Option<&Claim<T>> {
        self.names
            .get(self.key(name).as_ref())
            .and_then(|c| c.first())
    }

    /// Drops extension `rank`'s claim on `name` (it unregistered it);
    /// returns what it had registered.
    pub(crate) fn release(&mut self, name: &str, rank: usize) -> Option<T> {
        let key = self.key(name).into_owned();
        let claims = self.names.get_mut(&key)?;
        let i = claims.binary_search_by_key(&rank, |c| c.rank).ok()?;
        let claim = claims.remove(i);
        if claims.is_empty() {
            self.names.remove(&key);
        }
        Some(claim.info)
    }

    /// Drops every claim of extension `rank` (it exited).
    pub(crate) fn remove_rank(&mut self, rank: usize) {
        self.names.retain(|_, claims| {
            claims.retain(|c| c.rank != rank);
            !claims.is_empty()
        });
    }

    /// Forgets everything (reload).
    pub(crate) fn clear(&mut self) {
        self.names.clear();
    }

    /// Every name, as its owner spelled it, with its winning claim, sorted.
    pub(crate) fn owners(&self) -> impl Iterator<Item = (&str, &Claim<T>)> {
        (self.names.values()).filter_map(|c| c.first().map(|c| (c.name.as_str(), c)))
    }

    /// Names extension `rank` claimed (as it spelled them) but another
    /// owns, with the owner's rank.
    pub(crate) fn lost_by(&self, rank: usize) -> Vec<(String, usize)> {
        (self.names.values())
            .filter_map(|claims| {
                let lost = claims.iter().skip(1).find(|c| c.rank == rank)?;
                claims.first().map(|c| (lost.name.clone(), c.rank))
            })
            .collect()
    }

    /// Names extension `rank` owns.
    pub(crate) fn owned_by(&self, rank: usize) -> Vec<String> {
        self.owners()
            .filter(|(_, c)| c.rank == rank)
            .map(|(n, _)| n.to_string())
            .collect()
    }
}

/// Whether `a` and `b` are the same command name (docs/PROTOCOL.md#names-and-precedence).
pub fn same_command(a: &str, b: &str) -> bool {
    a == b || a.to_lowercase() == b.to_lowercase()
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

    #[test]
    fn folded_names_keep_their_spelling() {
        let mut r = Registry::case_insensitive();
        assert_eq!(r.claim("Greet", 1, "b"), None);
        assert_eq!(r.claim("greet", 0, "a"), Some((1, 0)));
        let owner = r.owner("GREET").unwrap();
        assert_eq!((owner.name.as_str(), owner.info), ("greet", "a"));
        assert_eq!(r.spelling_of("gReEt", 1), Some("Greet"));
        assert_eq!(r.owned_by(0), ["greet"]);
        let mut exact = Registry::default();
        exact.claim("Read", 0, ());
        assert!(exact.owner("read").is_none());
    }
}
