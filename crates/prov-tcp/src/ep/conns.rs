//! The table of an endpoint's connections, keyed by connection numbers.
//!
//! Every frame looks its connection up several times, so the table is a
//! slab: a number is a slot index (low [`INDEX_BITS`] bits) and the slot's
//! generation (high bits), and a lookup is one bounds check and one
//! compare. A slot's generation moves on when its connection is removed,
//! and freed slots are reused oldest first, so a stale number (a late epoll
//! event, a paused-connection list) finds nothing instead of a newer
//! connection. Number 0 is never given out: it is the listener's token.

use std::collections::VecDeque;

/// Bits of a connection number that index the slab (about a million
/// connections per endpoint).
const INDEX_BITS: u32 = 20;
const INDEX_MASK: u32 = (1 << INDEX_BITS) - 1;

/// One slot: its current generation and, when in use, its value.
#[derive(Debug)]
struct Slot<T> {
    generation: u32,
    value: Option<T>,
}

/// A slab of values keyed by connection numbers.
#[derive(Debug)]
pub(crate) struct Conns<T> {
    /// Slot 0 is never used (number 0 is reserved).
    slots: Vec<Slot<T>>,
    free: VecDeque<u32>,
    len: usize,
}

impl<T> Default for Conns<T> {
    fn default() -> Self {
        Conns {
            slots: vec![Slot {
                generation: 0,
                value: None,
            }],
            free: VecDeque::new(),
            len: 0,
        }
    }
}

fn index(id: u32) -> usize {
    (id & INDEX_MASK) as usize
}

fn number(index: u32, generation: u32) -> u32 {
    (generation << INDEX_BITS) | index
}

impl<T> Conns<T> {
    /// Stores `value` under a fresh number; `None` when every number is in
    /// use.
    pub(crate) fn insert(&mut self, value: T) -> Option<u32> {
        let i = match self.free.pop_front() {
            Some(i) => i,
            None => {
                let i = u32::try_from(self.slots.len())
                    .ok()
                    .filter(|i| *i <= INDEX_MASK)?;
                self.slots.push(Slot {
                    generation: 0,
                    value: None,
                });
                i
            }
        };
        let slot = self.slots.get_mut(i as usize)?;
        slot.value = Some(value);
        self.len += 1;
        Some(number(i, slot.generation))
    }

    /// The connection numbered `id`.
    #[inline]
    pub(crate) fn get(&self, id: &u32) -> Option<&T> {
        let slot = self.slots.get(index(*id))?;
        if number(index(*id) as u32, slot.generation) != *id {
            return None;
        }
        slot.value.as_ref()
    }

    /// The connection numbered `id`, to change.
    #[inline]
    pub(crate) fn get_mut(&mut self, id: &u32) -> Option<&mut T> {
        let slot = self.slots.get_mut(index(*id))?;
        if number(index(*id) as u32, slot.generation) != *id {
            return None;
        }
        slot.value.as_mut()
    }

    /// Whether a connection is numbered `id`.
    pub(crate) fn contains_key(&self, id: &u32) -> bool {
        self.get(id).is_some()
    }

    /// Takes the connection numbered `id` out; its number is not given out
    /// again until its slot's generation wraps.
    pub(crate) fn remove(&mut self, id: &u32) -> Option<T> {
        let i = index(*id);
        let slot = self.slots.get_mut(i)?;
        if number(i as u32, slot.generation) != *id {
            return None;
        }
        let value = slot.value.take()?;
        slot.generation = (slot.generation + 1) & (u32::MAX >> INDEX_BITS);
        self.free.push_back(i as u32);
        self.len -= 1;
        Some(value)
    }

    /// How many connections there are.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The connections with their numbers.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.slots.iter().enumerate().filter_map(|(i, s)| {
            let value = s.value.as_ref()?;
            Some((number(i as u32, s.generation), value))
        })
    }

    /// The connections with their numbers, to change.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (u32, &mut T)> {
        self.slots.iter_mut().enumerate().filter_map(|(i, s)| {
            let generation = s.generation;
            let value = s.value.as_mut()?;
            Some((number(i as u32, generation), value))
        })
    }

    /// The connections.
    pub(crate) fn values(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().filter_map(|s| s.value.as_ref())
    }

    /// The connection numbers.
    pub(crate) fn keys(&self) -> impl Iterator<Item = u32> + '_ {
        self.iter().map(|(id, _)| id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_never_zero_and_stale_numbers_find_nothing() {
        let mut c = Conns::default();
        let a = c.insert("a").unwrap();
        let b = c.insert("b").unwrap();
        assert_ne!(a, 0);
        assert_ne!(a, b);
        assert_eq!(c.get(&a), Some(&"a"));
        assert_eq!(c.remove(&a), Some("a"));
        assert_eq!(c.remove(&a), None);
        assert_eq!(c.get(&a), None);
        // The freed slot comes back under another number.
        let a2 = c.insert("a2").unwrap();
        assert_ne!(a2, a);
        assert_eq!(c.get(&a), None);
        assert_eq!(c.get(&a2), Some(&"a2"));
        assert!(!c.contains_key(&0));
        assert_eq!(c.len(), 2);
        let mut keys: Vec<u32> = c.keys().collect();
        keys.sort_unstable();
        let mut want = vec![a2, b];
        want.sort_unstable();
        assert_eq!(keys, want);
    }

    #[test]
    fn a_slot_reused_until_its_generation_wraps_never_gives_zero() {
        let mut c = Conns::default();
        for _ in 0..(1 << (32 - INDEX_BITS)) + 5 {
            let id = c.insert(()).unwrap();
            assert_ne!(id, 0);
            assert_eq!(index(id), 1);
            assert!(c.remove(&id).is_some());
        }
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn a_number_from_another_slot_or_out_of_range_finds_nothing() {
        let mut c: Conns<u8> = Conns::default();
        let a = c.insert(1).unwrap();
        assert_eq!(c.get(&(a + 1)), None);
        assert_eq!(c.get_mut(&u32::MAX), None);
        assert_eq!(c.remove(&(a | (7 << INDEX_BITS))), None);
        assert_eq!(c.get(&a), Some(&1));
    }
}
