//! API and provider versions: `(major, minor)` ordered as `FI_VERSION`.

use std::fmt;
use std::str::FromStr;

/// A version `major.minor`; ordered like `FI_VERSION(major, minor)`
/// (`major << 16 | minor`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Version {
    /// Major number.
    pub major: u16,
    /// Minor number.
    pub minor: u16,
}

impl Version {
    /// The newest API version this library implements (libfabric 1.17's).
    pub const CURRENT: Version = Version::new(1, 17);
    /// Version 1.5: the first with the modern memory-registration rules.
    pub const V1_5: Version = Version::new(1, 5);

    /// A version from its parts.
    pub const fn new(major: u16, minor: u16) -> Self {
        Version { major, minor }
    }

    /// The `FI_VERSION(major, minor)` encoding.
    pub const fn to_u32(self) -> u32 {
        ((self.major as u32) << 16) | self.minor as u32
    }

    /// Decodes `FI_VERSION(major, minor)`.
    pub const fn from_u32(v: u32) -> Self {
        Version::new((v >> 16) as u16, (v & 0xffff) as u16)
    }

    /// Whether this is the zero version (a wildcard in hints).
    pub const fn is_zero(self) -> bool {
        self.major == 0 && self.minor == 0
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// A version string that is not `MAJOR.MINOR`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a version of the form MAJOR.MINOR (each 0..=65535)")]
pub struct BadVersion(pub String);

impl FromStr for Version {
    type Err = BadVersion;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BadVersion(s.to_string());
        let (a, b) = s.trim().split_once('.').ok_or_else(bad)?;
        let num = |x: &str| -> Result<u16, BadVersion> {
            if x.is_empty() || !x.bytes().all(|c| c.is_ascii_digit()) {
                return Err(bad());
            }
            x.parse().map_err(|_| bad())
        };
        Ok(Version::new(num(a)?, num(b)?))
    }
}

impl serde::Serialize for Version {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Version {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Repr {
            Num(u32),
            Text(String),
        }
        match <Repr as serde::Deserialize>::deserialize(d)? {
            Repr::Num(v) => Ok(Version::from_u32(v)),
            Repr::Text(s) => s.parse().map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordering_is_fi_version() {
        assert!(Version::new(1, 17) > Version::new(1, 5));
        assert!(Version::new(2, 0) > Version::new(1, 99));
        assert_eq!(Version::new(1, 17).to_u32(), (1 << 16) | 17);
        assert_eq!(
            Version::from_u32(Version::CURRENT.to_u32()),
            Version::CURRENT
        );
    }

    #[test]
    fn parse() {
        assert_eq!("1.17".parse(), Ok(Version::new(1, 17)));
        assert!("1".parse::<Version>().is_err());
        assert!("1.x".parse::<Version>().is_err());
        assert!("1.70000".parse::<Version>().is_err());
        assert!("+1.2".parse::<Version>().is_err());
    }
}
