//! Little-endian readers and writers over byte slices that never panic:
//! a short slice is a `None` (reader) or a flag (writer), never an index
//! out of bounds.

/// Reads little-endian integers from the front of a slice.
pub(crate) struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Reader(bytes)
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Option<&'a [u8; N]> {
        let (a, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(a)
    }

    pub(crate) fn u8(&mut self) -> Option<u8> {
        self.array::<1>().map(|a| a[0])
    }

    pub(crate) fn u16(&mut self) -> Option<u16> {
        self.array().map(|a| u16::from_le_bytes(*a))
    }

    pub(crate) fn u64(&mut self) -> Option<u64> {
        self.array().map(|a| u64::from_le_bytes(*a))
    }
}

/// Writes little-endian integers to the front of a slice; remembers whether
/// everything fitted.
pub(crate) struct Writer<'a> {
    rest: &'a mut [u8],
    written: usize,
    ok: bool,
}

impl<'a> Writer<'a> {
    pub(crate) fn new(out: &'a mut [u8]) -> Self {
        Writer {
            rest: out,
            written: 0,
            ok: true,
        }
    }

    pub(crate) fn bytes(&mut self, b: &[u8]) {
        if self.rest.len() < b.len() {
            self.ok = false;
            return;
        }
        let rest = std::mem::take(&mut self.rest);
        let (dst, tail) = rest.split_at_mut(b.len());
        dst.copy_from_slice(b);
        self.rest = tail;
        self.written = self.written.saturating_add(b.len());
    }

    pub(crate) fn u8(&mut self, v: u8) {
        self.bytes(&[v]);
    }

    pub(crate) fn u16(&mut self, v: u16) {
        self.bytes(&v.to_le_bytes());
    }

    pub(crate) fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }

    pub(crate) fn zeros(&mut self, n: usize) {
        const Z: [u8; 16] = [0; 16];
        match Z.get(..n) {
            Some(z) => self.bytes(z),
            None => self.ok = false,
        }
    }

    /// Bytes written, or `None` when something did not fit.
    pub(crate) fn finish(self) -> Option<usize> {
        self.ok.then_some(self.written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reader_stops_at_the_end() {
        let mut r = Reader::new(&[1, 2, 3]);
        assert_eq!(r.u16(), Some(0x0201));
        assert_eq!(r.u16(), None);
        assert_eq!(r.u8(), Some(3));
        assert_eq!(r.u8(), None);
    }

    #[test]
    fn writer_reports_overflow() {
        let mut buf = [0u8; 3];
        let mut w = Writer::new(&mut buf);
        w.u16(0x0201);
        w.u16(7);
        assert_eq!(w.finish(), None);
        assert_eq!(buf, [1, 2, 0]);
        let mut w = Writer::new(&mut buf);
        w.u8(9);
        w.zeros(2);
        assert_eq!(w.finish(), Some(3));
        assert_eq!(buf, [9, 0, 0]);
    }
}
