//! A slab of operations addressed by generation-checked ids, so that a
//! peer naming a finished (or never issued) operation reaches nothing.

use crate::wire::{id_of, split_id};

/// Values by id; ids are (index, generation) and every removal bumps the
/// slot's generation.
#[derive(Debug)]
pub(crate) struct Slab<T> {
    slots: Vec<(u32, Option<T>)>,
    free: Vec<u32>,
    live: usize,
}

impl<T> Slab<T> {
    /// An empty slab with room for `cap` values before it allocates.
    pub(crate) fn with_capacity(cap: usize) -> Slab<T> {
        Slab {
            slots: Vec::with_capacity(cap),
            free: Vec::with_capacity(cap),
            live: 0,
        }
    }

    /// Stores `v`; returns its id.
    pub(crate) fn insert(&mut self, v: T) -> u64 {
        self.live += 1;
        if let Some(i) = self.free.pop() {
            if let Some(s) = self.slots.get_mut(i as usize) {
                s.1 = Some(v);
                return id_of(i, s.0);
            }
        }
        let i = self.slots.len() as u32;
        self.slots.push((1, Some(v)));
        id_of(i, 1)
    }

    /// The value of `id`, if it is live.
    pub(crate) fn get(&self, id: u64) -> Option<&T> {
        let (i, g) = split_id(id);
        match self.slots.get(i as usize) {
            Some((gen_, Some(v))) if *gen_ == g => Some(v),
            _ => None,
        }
    }

    /// The value of `id`, if it is live.
    pub(crate) fn get_mut(&mut self, id: u64) -> Option<&mut T> {
        let (i, g) = split_id(id);
        match self.slots.get_mut(i as usize) {
            Some((gen_, Some(v))) if *gen_ == g => Some(v),
            _ => None,
        }
    }

    /// Takes the value of `id` out.
    pub(crate) fn remove(&mut self, id: u64) -> Option<T> {
        let (i, g) = split_id(id);
        let s = self.slots.get_mut(i as usize)?;
        if s.0 != g || s.1.is_none() {
            return None;
        }
        let v = s.1.take();
        s.0 = s.0.wrapping_add(1).max(1);
        self.free.push(i);
        self.live -= 1;
        v
    }

    /// Number of live values.
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    /// The live values, in slot order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().filter_map(|(_, v)| v.as_ref())
    }

    /// Ids of the live values for which `pred` holds.
    pub(crate) fn ids_where(&self, mut pred: impl FnMut(&T) -> bool) -> Vec<u64> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, (g, v))| match v {
                Some(v) if pred(v) => Some(id_of(i as u32, *g)),
                _ => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_ids_reach_nothing() {
        let mut s = Slab::with_capacity(2);
        let a = s.insert("a");
        let b = s.insert("b");
        assert_eq!(s.get(a), Some(&"a"));
        assert_eq!(s.remove(a), Some("a"));
        assert_eq!(s.remove(a), None);
        let c = s.insert("c");
        assert_ne!(a, c, "the slot is reused with a new generation");
        assert_eq!(s.get(a), None);
        assert_eq!(s.get(c), Some(&"c"));
        assert_eq!(s.len(), 2);
        assert_eq!(s.ids_where(|v| *v == "b"), vec![b]);
        assert_eq!(s.get(u64::MAX), None);
    }
}
