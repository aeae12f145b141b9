//! A writer of the cpio "newc" format, the one the kernel unpacks as an
//! initramfs (`Documentation/driver-api/early-userspace/buffer-format.rst`).
//!
//! Written here instead of calling `cpio(1)`, which is not installed on a
//! fresh Debian machine, and instead of a crate, for about sixty lines: each
//! entry is a 110-byte ASCII header, the NUL-terminated name and the data,
//! each padded to four bytes; a `TRAILER!!!` entry ends the archive.

use std::io::{self, Write};

const S_IFDIR: u32 = 0o040_000;
const S_IFREG: u32 = 0o100_000;

/// Writes entries in the order given; parents must come before children.
pub(super) struct Writer<W: Write> {
    out: W,
    written: u64,
    next_ino: u32,
}

impl<W: Write> Writer<W> {
    pub(super) fn new(out: W) -> Self {
        Writer {
            out,
            written: 0,
            next_ino: 1,
        }
    }

    /// A directory; `mode` holds the permission bits.
    pub(super) fn dir(&mut self, name: &str, mode: u32) -> io::Result<()> {
        self.entry(name, S_IFDIR | (mode & 0o7777), 2, &[])
    }

    /// A regular file with its contents.
    pub(super) fn file(&mut self, name: &str, mode: u32, data: &[u8]) -> io::Result<()> {
        self.entry(name, S_IFREG | (mode & 0o7777), 1, data)
    }

    /// Writes the trailer and hands back the output.
    pub(super) fn finish(mut self) -> io::Result<W> {
        self.next_ino = 0;
        self.entry("TRAILER!!!", 0, 1, &[])?;
        self.out.flush()?;
        Ok(self.out)
    }

    fn entry(&mut self, name: &str, mode: u32, nlink: u32, data: &[u8]) -> io::Result<()> {
        let size = u32::try_from(data.len()).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{name}: larger than the 4 GiB newc allows"),
            )
        })?;
        let name_len = u32::try_from(name.len() + 1)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "name too long"))?;
        let ino = self.next_ino;
        self.next_ino = self.next_ino.wrapping_add(1);
        // magic, ino, mode, uid, gid, nlink, mtime, filesize, devmajor,
        // devminor, rdevmajor, rdevminor, namesize, check.
        let fields = [ino, mode, 0, 0, nlink, 0, size, 0, 0, 0, 0, name_len, 0];
        let mut header = String::with_capacity(110);
        header.push_str("070701");
        for f in fields {
            header.push_str(&format!("{f:08X}"));
        }
        self.put(header.as_bytes())?;
        self.put(name.as_bytes())?;
        self.put(&[0])?;
        self.pad()?;
        self.put(data)?;
        self.pad()
    }

    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    fn pad(&mut self) -> io::Result<()> {
        let fill = (4 - self.written % 4) % 4;
        self.put(&[0; 3][..fill as usize])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_name_and_data_are_padded_to_four_bytes() -> io::Result<()> {
        let mut w = Writer::new(Vec::new());
        w.file("init", 0o755, b"#!/bin/sh\n")?;
        let out = w.finish()?;
        let text = String::from_utf8_lossy(&out);
        assert!(text.starts_with("070701"));
        // mode 0o100755 = 0x81ED; filesize 10; namesize 5 ("init" + NUL).
        assert_eq!(&text[6 + 8..6 + 16], "000081ED");
        assert_eq!(&text[6 + 6 * 8..6 + 7 * 8], "0000000A");
        assert_eq!(&text[6 + 11 * 8..6 + 12 * 8], "00000005");
        // 110 + 5 = 115 -> 116; data 10 -> 12: the trailer starts at 128.
        assert_eq!(&out[116..126], b"#!/bin/sh\n");
        assert_eq!(&out[128..134], b"070701");
        assert_eq!(out.len() % 4, 0);
        assert!(text.contains("TRAILER!!!\0"));
        Ok(())
    }
}
