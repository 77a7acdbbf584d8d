//! A map kept as a sorted vector: what a session's few rules need. A `BTreeMap` allocates a
//! node of 11 entries for the first one (a session's two PDRs took a 2.5 KB node); this
//! allocates what it holds. Lookups are binary searches, fine for a handful of entries.

use std::borrow::Borrow;

/// A map over a sorted vector of (key, value) pairs, iterated in key order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VecMap<K, V>(Vec<(K, V)>);

impl<K, V> Default for VecMap<K, V> {
    fn default() -> Self {
        VecMap(Vec::new())
    }
}

impl<K: Ord, V> VecMap<K, V> {
    /// An empty map (no allocation).
    pub fn new() -> Self {
        VecMap(Vec::new())
    }

    fn find<Q: Ord + ?Sized>(&self, k: &Q) -> Result<usize, usize>
    where
        K: Borrow<Q>,
    {
        self.0.binary_search_by(|(x, _)| x.borrow().cmp(k))
    }

    /// The value of `k`.
    pub fn get<Q: Ord + ?Sized>(&self, k: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        self.find(k).ok().map(|i| &self.0[i].1)
    }

    /// The value of `k`, mutable.
    pub fn get_mut<Q: Ord + ?Sized>(&mut self, k: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
    {
        self.find(k).ok().map(move |i| &mut self.0[i].1)
    }

    /// Whether `k` is present.
    pub fn contains_key<Q: Ord + ?Sized>(&self, k: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.find(k).is_ok()
    }

    /// Sets `k` to `v`; the old value.
    pub fn insert(&mut self, k: K, v: V) -> Option<V> {
        match self.find(&k) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, v)),
            Err(i) => {
                self.0.insert(i, (k, v));
                None
            }
        }
    }

    /// Removes `k`; its value.
    pub fn remove<Q: Ord + ?Sized>(&mut self, k: &Q) -> Option<V>
    where
        K: Borrow<Q>,
    {
        self.find(k).ok().map(|i| self.0.remove(i).1)
    }

    /// The pairs in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.0.iter().map(|(k, v)| (k, v))
    }

    /// The pairs in key order, values mutable.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&K, &mut V)> {
        self.0.iter_mut().map(|(k, v)| (&*k, v))
    }

    /// The values in key order, mutable.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.0.iter_mut().map(|(_, v)| v)
    }

    /// The keys in order.
    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.0.iter().map(|(k, _)| k)
    }

    /// The values in key order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.0.iter().map(|(_, v)| v)
    }

    /// Entries it holds without growing.
    pub fn capacity(&self) -> usize {
        self.0.capacity()
    }

    /// Gives back the room beyond its entries.
    pub fn shrink_to_fit(&mut self) {
        self.0.shrink_to_fit()
    }

    /// Entries.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// No entries.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<K: Ord, V> FromIterator<(K, V)> for VecMap<K, V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(it: I) -> Self {
        let mut v: Vec<(K, V)> = it.into_iter().collect();
        // Stable: of equal keys the last wins, as a BTreeMap's collect keeps the last.
        v.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out: Vec<(K, V)> = Vec::with_capacity(v.len());
        for (k, x) in v {
            match out.last_mut() {
                Some(last) if last.0 == k => last.1 = x,
                _ => out.push((k, x)),
            }
        }
        out.shrink_to_fit();
        VecMap(out)
    }
}

impl<'a, K, V> IntoIterator for &'a VecMap<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = std::iter::Map<std::slice::Iter<'a, (K, V)>, fn(&'a (K, V)) -> (&'a K, &'a V)>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(k, v)| (k, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    proptest! {
        /// Every operation agrees with a BTreeMap.
        #[test]
        fn matches_a_btreemap(ops in proptest::collection::vec((0u8..3, 0u8..16, any::<u16>()), 0..200)) {
            let mut a = VecMap::new();
            let mut b = BTreeMap::new();
            for (op, k, v) in ops {
                match op {
                    0 => prop_assert_eq!(a.insert(k, v), b.insert(k, v)),
                    1 => prop_assert_eq!(a.remove(&k), b.remove(&k)),
                    _ => {
                        if let Some(x) = a.get_mut(&k) { *x = x.wrapping_add(1); }
                        if let Some(x) = b.get_mut(&k) { *x = x.wrapping_add(1); }
                    }
                }
                prop_assert_eq!(a.len(), b.len());
                prop_assert_eq!(a.get(&k), b.get(&k));
                prop_assert_eq!(a.contains_key(&k), b.contains_key(&k));
                prop_assert!(a.iter().eq(b.iter()));
            }
            let c: VecMap<u8, u16> = b.iter().map(|(k, v)| (*k, *v)).chain([(3, 7), (3, 9)]).collect();
            let mut d = b.clone();
            d.insert(3, 9);
            prop_assert!(c.iter().eq(d.iter()));
        }
    }
}
