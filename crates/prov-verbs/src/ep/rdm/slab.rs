//! A slab: indices reused after removal.

/// A vector of indices with reuse (no allocation once warm).
#[derive(Debug)]
pub(super) struct Slab<T> {
    pub(super) items: Vec<Option<T>>,
    pub(super) free: Vec<usize>,
}

impl<T> Slab<T> {
    pub(super) fn new() -> Self {
        Slab {
            items: Vec::new(),
            free: Vec::new(),
        }
    }
    pub(super) fn insert(&mut self, v: T) -> usize {
        match self.free.pop() {
            Some(i) => {
                self.items[i] = Some(v);
                i
            }
            None => {
                self.items.push(Some(v));
                self.items.len() - 1
            }
        }
    }
    pub(super) fn remove(&mut self, i: usize) -> Option<T> {
        let v = self.items.get_mut(i)?.take();
        if v.is_some() {
            self.free.push(i);
        }
        v
    }
    pub(super) fn get(&self, i: usize) -> Option<&T> {
        self.items.get(i)?.as_ref()
    }
    /// Nothing in it.
    pub(super) fn is_empty(&self) -> bool {
        self.items.len() == self.free.len()
    }
}
