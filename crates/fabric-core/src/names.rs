//! FI_ names for flag sets and enumerations: printing, strict parsing and
//! serde in the form users know from libfabric (`"FI_MSG"`, `"FI_EP_RDM"`).
//!
//! Flag sets serialize as arrays of names (`["FI_MSG","FI_TAGGED"]`); bits
//! without a name are kept as hexadecimal strings (`"0x800000"`) so that a
//! value always survives a round trip. Enumerations serialize as one name.
//! Parsing is case-insensitive and refuses unknown names.

use std::fmt;

/// Defines a `bitflags` set whose constant names, prefixed with `$prefix`,
/// are the FI_ names, with `Display` (`FI_A|FI_B`), `FromStr` (same form,
/// also `,`-separated) and serde as an array of names.
macro_rules! fi_flags {
    (
        $(#[$($outer:tt)*])*
        pub struct $name:ident: $ty:ty, prefix $prefix:literal {
            $(
                $(#[$($inner:tt)*])*
                const $flag:ident = $value:expr;
            )*
        }
    ) => {
        bitflags::bitflags! {
            $(#[$($outer)*])*
            #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
            pub struct $name: $ty {
                $(
                    $(#[$($inner)*])*
                    const $flag = $value;
                )*
            }
        }

        impl $name {
            /// The FI_ prefix of this set's names.
            pub const PREFIX: &'static str = $prefix;

            /// Every named flag with its full FI_ name.
            pub fn named() -> impl Iterator<Item = (String, Self)> {
                Self::all().iter_names().map(|(n, f)| (format!("{}{}", $prefix, n), f))
            }

            /// The FI_ names of the set bits, unnamed bits as one hex string.
            pub fn to_names(self) -> Vec<String> {
                let mut out: Vec<String> = self
                    .iter_names()
                    .map(|(n, _)| format!("{}{}", $prefix, n))
                    .collect();
                let rest = self.bits() & !Self::all().bits();
                if rest != 0 {
                    out.push(format!("{:#x}", rest));
                }
                out
            }

            /// Parses one FI_ name (case-insensitive, the prefix optional) or
            /// a hexadecimal / decimal number.
            pub fn from_fi_name(name: &str) -> Option<Self> {
                let name = name.trim();
                if let Some(v) = $crate::names::parse_number(name) {
                    return <$ty>::try_from(v).ok().map(Self::from_bits_retain);
                }
                let upper = name.to_ascii_uppercase();
                let short = upper.strip_prefix($prefix).unwrap_or(&upper);
                Self::from_name(short)
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                $crate::names::write_joined(f, &self.to_names(), "|")
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::names::UnknownName;

            /// Parses `FI_A|FI_B` (or `,` separated); the empty string is the
            /// empty set.
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                let mut out = Self::empty();
                for part in s.split(|c| c == '|' || c == ',').map(str::trim) {
                    if part.is_empty() {
                        continue;
                    }
                    out |= Self::from_fi_name(part).ok_or_else(|| $crate::names::UnknownName {
                        kind: stringify!($name),
                        name: part.to_string(),
                    })?;
                }
                Ok(out)
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_seq(self.to_names())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                $crate::names::deserialize_flags(d, stringify!($name), |n| Self::from_fi_name(n), |a, b| a | b, Self::empty(), |v| <$ty>::try_from(v).ok().map(Self::from_bits_retain))
            }
        }
    };
}

/// Defines a fieldless enumeration with its C value and FI_ name, with
/// `Display`, `FromStr`, `TryFrom<u32>` and serde as the name.
macro_rules! fi_enum {
    (
        $(#[$outer:meta])*
        pub enum $name:ident {
            $(
                $(#[$inner:meta])*
                $variant:ident = $value:literal => $fi:literal,
            )*
        }
    ) => {
        $(#[$outer])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
        #[repr(u32)]
        pub enum $name {
            $(
                $(#[$inner])*
                $variant = $value,
            )*
        }

        impl $name {
            /// Every value, in C order.
            pub const ALL: &'static [Self] = &[$(Self::$variant),*];

            /// The FI_ name.
            pub const fn fi_name(self) -> &'static str {
                match self { $(Self::$variant => $fi,)* }
            }

            /// The C value.
            pub const fn as_u32(self) -> u32 {
                self as u32
            }

            /// Looks a value up by FI_ name (case-insensitive).
            pub fn from_fi_name(name: &str) -> Option<Self> {
                let name = name.trim();
                Self::ALL.iter().copied().find(|v| v.fi_name().eq_ignore_ascii_case(name))
            }
        }

        impl TryFrom<u32> for $name {
            type Error = $crate::names::UnknownName;

            fn try_from(v: u32) -> Result<Self, Self::Error> {
                match v {
                    $($value => Ok(Self::$variant),)*
                    _ => Err($crate::names::UnknownName { kind: stringify!($name), name: v.to_string() }),
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.fi_name())
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::names::UnknownName;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::from_fi_name(s).ok_or_else(|| $crate::names::UnknownName {
                    kind: stringify!($name),
                    name: s.trim().to_string(),
                })
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.fi_name())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <::std::borrow::Cow<'de, str> as ::serde::Deserialize>::deserialize(d)?;
                s.parse().map_err(::serde::de::Error::custom)
            }
        }
    };
}

pub(crate) use {fi_enum, fi_flags};

/// A name that is not one of the known FI_ names of a flag set or enum.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} name `{name}`")]
pub struct UnknownName {
    /// The type that was being parsed (`Caps`, `EpType`, ...).
    pub kind: &'static str,
    /// The text that did not match.
    pub name: String,
}

/// Parses `0x..` hexadecimal or plain decimal numbers.
pub(crate) fn parse_number(s: &str) -> Option<u64> {
    if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(hex, 16).ok()
    } else if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        s.parse().ok()
    } else {
        None
    }
}

pub(crate) fn write_joined(f: &mut fmt::Formatter<'_>, names: &[String], sep: &str) -> fmt::Result {
    for (i, n) in names.iter().enumerate() {
        if i > 0 {
            f.write_str(sep)?;
        }
        f.write_str(n)?;
    }
    Ok(())
}

/// Deserializes a flag set from an array of names, a `|`-separated string,
/// or a number.
pub(crate) fn deserialize_flags<'de, D, T>(
    d: D,
    kind: &'static str,
    one: impl Fn(&str) -> Option<T>,
    or: impl Fn(T, T) -> T,
    empty: T,
    from_num: impl Fn(u64) -> Option<T>,
) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
{
    use serde::de::Error as _;

    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Num(u64),
        Text(String),
        List(Vec<String>),
    }
    let unknown = |n: &str| {
        D::Error::custom(UnknownName {
            kind,
            name: n.to_string(),
        })
    };
    let mut out = empty;
    match <Repr as serde::Deserialize>::deserialize(d)? {
        Repr::Num(v) => return from_num(v).ok_or_else(|| unknown(&v.to_string())),
        Repr::Text(s) => {
            for part in s.split(['|', ',']).map(str::trim).filter(|p| !p.is_empty()) {
                out = or(out, one(part).ok_or_else(|| unknown(part))?);
            }
        }
        Repr::List(v) => {
            for part in &v {
                out = or(out, one(part).ok_or_else(|| unknown(part))?);
            }
        }
    }
    Ok(out)
}
