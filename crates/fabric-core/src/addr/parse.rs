//! Parsing address strings into [`Address`] values.
//!
//! # Grammar
//!
//! Scheme names are matched without regard to case; everything else is case
//! sensitive except hexadecimal digits. `[` and `]` below are literal
//! brackets, `{...}` marks an optional part.
//!
//! ```text
//! address  = uri | af-form
//! uri      = scheme "://" rest          (scheme: one or more of A-Z a-z 0-9 _ + . -)
//!
//! fi_sockaddr_in://IPV4{:{PORT}}        IPV4: dotted quad, as std's Ipv4Addr reads it
//! fi_sockaddr_in://:PORT                the unspecified address 0.0.0.0
//!
//! fi_sockaddr_in6://[IPV6{%SCOPE}]{:{PORT}}{?flowinfo=FLOW}
//! fi_sockaddr_in6://:PORT{?flowinfo=FLOW}   the unspecified address ::
//!
//! fi_sockaddr_ib://[GID]:PKEY:PS:SCOPE{:{PORT}}{?flowinfo=FLOW}
//!
//! fi_addr_raw://FORMAT/HEX              FORMAT: an FI_ADDR_* name (FI_ADDR_EFA, ...)
//!
//! SCHEME://REST                         any other scheme, REST not empty:
//!                                       kept verbatim as Address::Str
//!
//! af-form  = FAMILY{;{NODE}{;{SERVICE}}}
//!     FAMILY   AF_INET or AF_INET6 (any case)
//!     NODE     numeric address, IPv6 without brackets but with an optional
//!              %SCOPE; empty or absent means the unspecified address
//!     SERVICE  decimal port; empty or absent means 0
//! ```
//!
//! * `PORT`, the IPv6 `%SCOPE` and `FLOW` are decimal: digits only, no
//!   sign. A port is at most 65535, a scope id and a flow label fit in 32
//!   bits. A port that is absent, or empty after its `:`, is 0.
//! * `PKEY` (16 bits), `PS` (the rdma_cm port space, 48 bits) and the
//!   InfiniBand `SCOPE` (64 bits) are `0x` hexadecimal or decimal without a
//!   leading zero. The InfiniBand `PORT` is decimal without a leading zero.
//!   The service id is `PS << 16 | PORT`, which is what [`Address`]'s
//!   `Display` writes back.
//! * `HEX` is an even, non-zero number of hexadecimal digits, at most
//!   [`MAX_RAW_LEN`] bytes. `FORMAT` may not be `FI_FORMAT_UNSPEC`,
//!   `FI_SOCKADDR`, `FI_SOCKADDR_IN`, `FI_SOCKADDR_IN6`, `FI_SOCKADDR_IB` or
//!   `FI_ADDR_STR`: those have forms of their own, or no byte layout.
//! * The whole string is at most [`MAX_STR_LEN`] bytes and contains no
//!   control characters (NUL included). Nothing may follow the address: no
//!   path, no other query, no whitespace.
//!
//! Everything [`Address`]'s `Display` writes parses back to the same value.
//! Every error is [`ErrorKind::Inval`](crate::error::ErrorKind::Inval) with
//! a message that quotes the input and says what is wrong with it. The
//! parser never panics and does no IO: there is no host name or interface
//! name lookup.
//!
//! # Differences from libfabric (`ofi_str_toaddr`)
//!
//! libfabric's parser is lax; this one is strict, so a typo is an error
//! instead of a different address.
//!
//! * **`://` is required.** libfabric picks the format from the text before
//!   the first `:`, so `fi_sockaddr_in:1.2.3.4` reaches its IPv4 parser.
//! * **Ports are checked.** libfabric reads ports with `%hu`: `70000` wraps to
//!   4464, `-1` becomes 65535, `0x10` reads as 0 and `80abc` as 80. Here all
//!   of those are errors.
//! * **No trailing text.** libfabric ignores what follows the address
//!   (`fi_sockaddr_in://10.0.0.1/path`, `...:7471?qos=3`); here it is an
//!   error. The only query is `?flowinfo=N`, on IPv6 and InfiniBand.
//! * **IPv6.** A missing `]` is an error (libfabric tolerates it). Numeric
//!   scope ids (`[fe80::1%2]`) are accepted, where libfabric rejects every
//!   scope id, so that addresses with a scope id print and parse back;
//!   interface names (`%eth0`) are still rejected. libfabric always leaves
//!   the flow label 0; here `?flowinfo=N` sets it.
//! * **InfiniBand numbers.** libfabric reads them with `strtol` base 0, so
//!   `010` is octal 8, and signs and leading blanks pass. Here a leading
//!   zero is an error (write `8` or `0x8`), as are signs and blanks. Values
//!   too wide for their field (a PKEY over 16 bits, a port space over 48
//!   bits) are errors instead of being truncated, and so is text after the
//!   port.
//! * **InfiniBand service id.** libfabric sets the service id only when both
//!   the port space and the port are non-zero. Here it is always
//!   `PS << 16 | PORT`, so `[::1]:0xffff:0x106:0x0` has service id
//!   `0x1060000`, and the string `Display` writes for any [`SockaddrIb`]
//!   reads back to the same service id.
//! * **Other schemes are not interpreted.** libfabric parses its own
//!   provider formats (`fi_addr_efa://`, `fi_addr_psmx2://`, ...), and for a
//!   prefix it does not know it tries the text as an interface name and then
//!   as a host name. Here every other well-formed `SCHEME://REST` is kept as
//!   an [`Address::Str`] for the provider that owns the scheme to read, and
//!   a string without `://` that is not the `AF_` form is an error.
//! * **`fi_addr_raw://`** is this library's own form, for binary formats it
//!   has no structure for; libfabric has no equivalent.
//! * **The `AF_INET;NODE;SERVICE` form** is the model fi_getinfo(3) describes
//!   for `FI_ADDR_STR`; no libfabric release parses it. It is accepted here
//!   with numeric nodes only. `AF_IB` is not supported in this form, and
//!   fields after `SERVICE` are an error.
//! * **Limits.** Strings longer than [`MAX_STR_LEN`] bytes, and strings with
//!   control characters, are rejected.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use super::{Address, SockaddrIb};
use crate::enums::AddrFormat;
use crate::error::Error;

/// The longest address string accepted, in bytes.
pub const MAX_STR_LEN: usize = 4096;

/// The most bytes a raw address (`fi_addr_raw://`, or the bytes of a format
/// without structure given to [`Address::from_bytes`]) may have. Real
/// provider addresses are a few dozen bytes.
pub const MAX_RAW_LEN: usize = 1024;

/// What every string form looks like, for errors about strings that fit none.
const FORMS: &str = "expected SCHEME://... (such as fi_sockaddr_in://ADDR:PORT, \
                     fi_sockaddr_in6://[ADDR]:PORT or fi_shm://NAME) or AF_INET;NODE;SERVICE";

const IB_FORM: &str = "fi_sockaddr_ib://[GID]:PKEY:PS:SCOPE[:PORT]";

/// Parses an address string (see the [module documentation](self) for the
/// grammar).
///
/// ```
/// use fabric_core::addr::parse::parse;
///
/// let a = parse("AF_INET;192.0.2.1;7471")?;
/// assert_eq!(a.to_string(), "fi_sockaddr_in://192.0.2.1:7471");
/// assert!(parse("fi_sockaddr_in://192.0.2.1:70000").is_err());
/// # Ok::<(), fabric_core::Error>(())
/// ```
pub fn parse(s: &str) -> Result<Address, Error> {
    check_text(s)?;
    match s.split_once("://") {
        Some((scheme, rest)) => parse_uri(s, scheme, rest),
        None => parse_af(s),
    }
}

/// The input as error messages quote it: control characters escaped, long
/// inputs shortened.
struct Shown<'a>(&'a str);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const KEEP: usize = 96;
        for c in self.0.chars().take(KEEP) {
            if c.is_control() {
                write!(f, "{}", c.escape_default())?;
            } else {
                write!(f, "{c}")?;
            }
        }
        if self.0.chars().nth(KEEP).is_some() {
            write!(f, "... ({} bytes)", self.0.len())?;
        }
        Ok(())
    }
}

/// An `Inval` error about `input`: "INPUT: WHAT".
fn bad(input: &str, what: impl fmt::Display) -> Error {
    Error::inval(format!("{}: {what}", Shown(input)))
}

/// Checks what holds for every form: not empty, not too long, no control
/// characters.
fn check_text(s: &str) -> Result<(), Error> {
    if s.is_empty() {
        return Err(Error::inval(format!("empty address string: {FORMS}")));
    }
    if s.len() > MAX_STR_LEN {
        return Err(bad(
            s,
            format_args!(
                "the string is {} bytes long; the limit is {MAX_STR_LEN}",
                s.len()
            ),
        ));
    }
    if let Some((at, c)) = s.char_indices().find(|(_, c)| c.is_control()) {
        return Err(if c == '\0' {
            bad(s, format_args!("embedded NUL at byte {at}"))
        } else {
            bad(
                s,
                format_args!("control character {} at byte {at}", c.escape_default()),
            )
        });
    }
    Ok(())
}

fn is_scheme_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '+' | '.' | '-')
}

fn parse_uri(input: &str, scheme: &str, rest: &str) -> Result<Address, Error> {
    if scheme.is_empty() {
        return Err(bad(input, "nothing before `://`: the scheme is missing"));
    }
    if let Some(c) = scheme.chars().find(|c| !is_scheme_char(*c)) {
        return Err(bad(
            input,
            format_args!(
                "scheme `{scheme}` contains {c:?}; a scheme is made of A-Z, a-z, 0-9, `_`, `+`, `.` and `-`"
            ),
        ));
    }
    match scheme.to_ascii_lowercase().as_str() {
        "fi_sockaddr_in" => parse_in(input, rest).map(Address::In),
        "fi_sockaddr_in6" => parse_in6(input, rest).map(Address::In6),
        "fi_sockaddr_ib" => parse_ib(input, rest).map(Address::Ib),
        "fi_addr_raw" => parse_raw(input, rest),
        _ if rest.is_empty() => Err(bad(input, "nothing follows `://`")),
        _ => Ok(Address::Str(input.to_string())),
    }
}

// ---------------------------------------------------------------------------
// Numbers

/// Splits `text` into its leading ASCII digits and the rest.
fn split_digits(text: &str, hex: bool) -> (&str, &str) {
    let end = text
        .find(|c: char| {
            if hex {
                !c.is_ascii_hexdigit()
            } else {
                !c.is_ascii_digit()
            }
        })
        .unwrap_or(text.len());
    text.split_at_checked(end).unwrap_or((text, ""))
}

/// The value of a digit string, `None` when it does not fit in a u64.
fn digits_value(digits: &str, radix: u32) -> Option<u64> {
    digits.chars().try_fold(0u64, |acc, c| {
        acc.checked_mul(u64::from(radix))?
            .checked_add(u64::from(c.to_digit(radix)?))
    })
}

/// Checks the syntax of a decimal number and returns its digits: digits
/// only (no sign, no `0x`), nothing after them. `what` names the field in
/// errors. With `no_leading_zero`, `07` is an error (libfabric would read it
/// as octal).
fn decimal_digits<'a>(
    input: &str,
    what: &str,
    text: &'a str,
    no_leading_zero: bool,
) -> Result<&'a str, Error> {
    if text.is_empty() {
        return Err(bad(input, format_args!("empty {what}")));
    }
    if text.starts_with(['+', '-']) {
        return Err(bad(
            input,
            format_args!("{what} `{text}` has a sign; write digits only"),
        ));
    }
    if text.starts_with("0x") || text.starts_with("0X") {
        return Err(bad(input, format_args!("{what} `{text}` must be decimal")));
    }
    let (digits, rest) = split_digits(text, false);
    if digits.is_empty() {
        return Err(bad(
            input,
            format_args!("{what} `{text}` is not a decimal number"),
        ));
    }
    if !rest.is_empty() {
        return Err(bad(
            input,
            format_args!("unexpected `{rest}` after {what} {digits}"),
        ));
    }
    if no_leading_zero && digits.len() > 1 && digits.starts_with('0') {
        return Err(bad(
            input,
            format_args!(
                "{what} `{digits}` has a leading zero, which libfabric reads as octal; \
                 write it without the zero, or in 0x hex"
            ),
        ));
    }
    Ok(digits)
}

/// Reads a decimal number in `0..=max` (see [`decimal_digits`]).
fn decimal(
    input: &str,
    what: &str,
    text: &str,
    max: u64,
    no_leading_zero: bool,
) -> Result<u64, Error> {
    let digits = decimal_digits(input, what, text, no_leading_zero)?;
    match digits_value(digits, 10) {
        Some(v) if v <= max => Ok(v),
        _ => Err(bad(
            input,
            format_args!("{what} {digits} is out of range 0..={max}"),
        )),
    }
}

/// Reads a port: decimal, 0..=65535.
fn port(input: &str, text: &str, no_leading_zero: bool) -> Result<u16, Error> {
    let v = decimal(input, "port", text, u64::from(u16::MAX), no_leading_zero)?;
    u16::try_from(v).map_err(|_| bad(input, format_args!("port {v} is out of range 0..=65535")))
}

/// Reads a port after its `:`, where an absent or empty port means 0.
fn optional_port(input: &str, text: Option<&str>, no_leading_zero: bool) -> Result<u16, Error> {
    match text {
        None | Some("") => Ok(0),
        Some(p) => port(input, p, no_leading_zero),
    }
}

/// Reads an InfiniBand field: `0x` hex or decimal without a leading zero,
/// at most `bits` wide.
fn ib_number(input: &str, what: &str, text: Option<&str>, bits: u32) -> Result<u64, Error> {
    let Some(text) = text else {
        return Err(bad(
            input,
            format_args!("missing {what}; expected {IB_FORM}"),
        ));
    };
    let max = u64::MAX >> (64 - bits);
    let too_wide = || {
        bad(
            input,
            format_args!("{what} {text} does not fit in {bits} bits"),
        )
    };
    let Some(hex) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) else {
        let digits = decimal_digits(input, what, text, true)?;
        return digits_value(digits, 10)
            .filter(|v| *v <= max)
            .ok_or_else(too_wide);
    };
    let (digits, rest) = split_digits(hex, true);
    if digits.is_empty() {
        return Err(bad(
            input,
            format_args!("{what} `{text}` has no hex digits after `0x`"),
        ));
    }
    if !rest.is_empty() {
        return Err(bad(
            input,
            format_args!("unexpected `{rest}` after {what} 0x{digits}"),
        ));
    }
    digits_value(digits, 16)
        .filter(|v| *v <= max)
        .ok_or_else(too_wide)
}

// ---------------------------------------------------------------------------
// IP addresses

fn ipv4(input: &str, host: &str) -> Result<Ipv4Addr, Error> {
    host.parse::<Ipv4Addr>().map_err(|_| {
        if let Some(at) = host.find(['/', '?', '#', ' ']) {
            let tail = host.get(at..).unwrap_or_default();
            bad(input, format_args!("unexpected `{tail}` after the address"))
        } else if host.starts_with('[') || host.parse::<Ipv6Addr>().is_ok() {
            bad(input, format_args!("`{host}` is not an IPv4 address; IPv6 addresses take fi_sockaddr_in6://[ADDR]:PORT"))
        } else if host.bytes().any(|b| b.is_ascii_alphabetic()) {
            bad(input, format_args!("`{host}` is not a numeric IPv4 address (host names are not resolved here)"))
        } else {
            bad(
                input,
                format_args!("`{host}` is not an IPv4 address (four decimal numbers 0..=255 separated by dots, no leading zeros)"),
            )
        }
    })
}

fn ipv6(input: &str, what: &str, text: &str) -> Result<Ipv6Addr, Error> {
    text.parse::<Ipv6Addr>().map_err(|_| {
        if text.is_empty() {
            bad(input, format_args!("empty {what} between `[` and `]`"))
        } else if text.parse::<Ipv4Addr>().is_ok() {
            bad(
                input,
                format_args!("`{text}` is an IPv4 address, not an {what}; write ::ffff:{text} for an IPv4-mapped address"),
            )
        } else {
            bad(input, format_args!("`{text}` is not an {what}"))
        }
    })
}

/// Reads `IPV6{%SCOPE}`.
fn ipv6_scoped(input: &str, text: &str) -> Result<(Ipv6Addr, u32), Error> {
    let (addr, scope) = match text.split_once('%') {
        Some((a, s)) => (a, Some(s)),
        None => (text, None),
    };
    let ip = ipv6(input, "IPv6 address", addr)?;
    let scope = match scope {
        None => 0,
        Some("") => return Err(bad(input, "empty scope id after `%`")),
        Some(s) if s.starts_with(|c: char| c.is_ascii_alphabetic()) => {
            return Err(bad(
                input,
                format_args!(
                    "scope `{s}` is not a numeric scope id (interface names are not resolved here)"
                ),
            ));
        }
        Some(s) => {
            let v = decimal(input, "scope id", s, u64::from(u32::MAX), false)?;
            u32::try_from(v)
                .map_err(|_| bad(input, format_args!("scope id {v} does not fit in 32 bits")))?
        }
    };
    Ok((ip, scope))
}

/// Splits off `?flowinfo=N`; returns the text before it and N (0 without a
/// query).
fn split_flowinfo<'a>(input: &str, rest: &'a str) -> Result<(&'a str, u32), Error> {
    let Some((main, query)) = rest.split_once('?') else {
        return Ok((rest, 0));
    };
    let Some(value) = query.strip_prefix("flowinfo=") else {
        return Err(bad(
            input,
            format_args!("unsupported query `?{query}`; the only query is ?flowinfo=N"),
        ));
    };
    let v = decimal(input, "flowinfo", value, u64::from(u32::MAX), false)?;
    let v = u32::try_from(v)
        .map_err(|_| bad(input, format_args!("flowinfo {v} does not fit in 32 bits")))?;
    Ok((main, v))
}

// ---------------------------------------------------------------------------
// The forms

fn parse_in(input: &str, rest: &str) -> Result<SocketAddrV4, Error> {
    if rest.starts_with('[') {
        return Err(bad(
            input,
            "brackets are for IPv6 addresses, which take fi_sockaddr_in6://[ADDR]:PORT",
        ));
    }
    let (host, port_text) = match rest.split_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (rest, None),
    };
    if host.is_empty() {
        return match port_text {
            None => Err(bad(
                input,
                "missing the IPv4 address; write fi_sockaddr_in://ADDR[:PORT] or fi_sockaddr_in://:PORT",
            )),
            Some("") => Err(bad(input, "neither an address nor a port after `://`")),
            Some(p) => Ok(SocketAddrV4::new(
                Ipv4Addr::UNSPECIFIED,
                port(input, p, false)?,
            )),
        };
    }
    let ip = ipv4(input, host)?;
    Ok(SocketAddrV4::new(
        ip,
        optional_port(input, port_text, false)?,
    ))
}

fn parse_in6(input: &str, rest: &str) -> Result<SocketAddrV6, Error> {
    let (main, flowinfo) = split_flowinfo(input, rest)?;
    if let Some(inner) = main.strip_prefix('[') {
        let Some((addr, after)) = inner.split_once(']') else {
            return Err(bad(input, "missing `]` after the IPv6 address"));
        };
        let (ip, scope) = ipv6_scoped(input, addr)?;
        let port = match after {
            "" => 0,
            _ => match after.strip_prefix(':') {
                Some(p) => optional_port(input, Some(p), false)?,
                None => return Err(bad(input, format_args!("unexpected `{after}` after `]`"))),
            },
        };
        Ok(SocketAddrV6::new(ip, port, flowinfo, scope))
    } else if let Some(p) = main.strip_prefix(':') {
        if p.is_empty() {
            return Err(bad(input, "neither an address nor a port after `://`"));
        }
        if p.contains(':') {
            return Err(bad(
                input,
                "IPv6 addresses must be in brackets: fi_sockaddr_in6://[ADDR]:PORT",
            ));
        }
        Ok(SocketAddrV6::new(
            Ipv6Addr::UNSPECIFIED,
            port(input, p, false)?,
            flowinfo,
            0,
        ))
    } else if main.is_empty() {
        Err(bad(
            input,
            "missing the IPv6 address; write fi_sockaddr_in6://[ADDR][:PORT] or fi_sockaddr_in6://:PORT",
        ))
    } else {
        Err(bad(
            input,
            "IPv6 addresses must be in brackets: fi_sockaddr_in6://[ADDR]:PORT",
        ))
    }
}

fn parse_ib(input: &str, rest: &str) -> Result<SockaddrIb, Error> {
    let (main, flowinfo) = split_flowinfo(input, rest)?;
    let Some(inner) = main.strip_prefix('[') else {
        return Err(bad(
            input,
            format_args!("the GID must be in brackets: {IB_FORM}"),
        ));
    };
    let Some((gid_text, after)) = inner.split_once(']') else {
        return Err(bad(input, "missing `]` after the GID"));
    };
    if gid_text.contains('%') {
        return Err(bad(
            input,
            "a GID takes no `%` scope; the scope id is the field after the port space",
        ));
    }
    let gid = ipv6(input, "IPv6 GID", gid_text)?;
    let Some(fields) = after.strip_prefix(':') else {
        return Err(if after.is_empty() {
            bad(
                input,
                format_args!("missing :PKEY:PS:SCOPE after the GID; expected {IB_FORM}"),
            )
        } else {
            bad(input, format_args!("unexpected `{after}` after `]`"))
        });
    };
    let mut fields = fields.splitn(5, ':');
    let pkey = ib_number(input, "PKEY", fields.next(), 16)?;
    let port_space = ib_number(input, "port space", fields.next(), 48)?;
    let scope_id = ib_number(input, "scope id", fields.next(), 64)?;
    let port = optional_port(input, fields.next(), true)?;
    if let Some(extra) = fields.next() {
        return Err(bad(
            input,
            format_args!("unexpected `:{extra}` after the port; expected {IB_FORM}"),
        ));
    }
    Ok(SockaddrIb {
        pkey: u16::try_from(pkey).map_err(|_| bad(input, "PKEY does not fit in 16 bits"))?,
        flowinfo,
        gid,
        sid: (port_space << 16) | u64::from(port),
        scope_id,
    })
}

fn parse_raw(input: &str, rest: &str) -> Result<Address, Error> {
    let Some((name, hex)) = rest.split_once('/') else {
        return Err(bad(
            input,
            "expected fi_addr_raw://FORMAT/HEX, such as fi_addr_raw://FI_ADDR_EFA/00ff",
        ));
    };
    if name.is_empty() {
        return Err(bad(input, "missing the format name before `/`"));
    }
    let format = AddrFormat::from_fi_name(name)
        .filter(|_| name.trim() == name)
        .ok_or_else(|| bad(input, format_args!("unknown address format `{name}`")))?;
    check_raw_format(format).map_err(|why| bad(input, why))?;
    if hex.is_empty() {
        return Err(bad(input, "no address bytes after `/`"));
    }
    if let Some(c) = hex.chars().find(|c| !c.is_ascii_hexdigit()) {
        return Err(bad(input, format_args!("{c:?} is not a hex digit")));
    }
    if hex.len() % 2 != 0 {
        return Err(bad(
            input,
            format_args!("odd number of hex digits ({})", hex.len()),
        ));
    }
    let bytes: Vec<u8> = hex
        .as_bytes()
        .chunks(2)
        .map(|pair| pair.iter().fold(0u8, |acc, &d| (acc << 4) | hex_value(d)))
        .collect();
    if bytes.len() > MAX_RAW_LEN {
        return Err(bad(
            input,
            format_args!(
                "{} address bytes; the limit for raw addresses is {MAX_RAW_LEN}",
                bytes.len()
            ),
        ));
    }
    Ok(Address::Raw { format, bytes })
}

/// The value of an ASCII hex digit (0 for anything else; callers check
/// first).
fn hex_value(d: u8) -> u8 {
    match d {
        b'0'..=b'9' => d - b'0',
        b'a'..=b'f' => d - b'a' + 10,
        b'A'..=b'F' => d - b'A' + 10,
        _ => 0,
    }
}

/// Whether `format` is one that [`Address::Raw`] may carry; the error says
/// why not.
pub(crate) fn check_raw_format(format: AddrFormat) -> Result<(), &'static str> {
    match format {
        AddrFormat::SockaddrIn => {
            Err("FI_SOCKADDR_IN addresses are written fi_sockaddr_in://ADDR:PORT, not as raw bytes")
        }
        AddrFormat::SockaddrIn6 => Err(
            "FI_SOCKADDR_IN6 addresses are written fi_sockaddr_in6://[ADDR]:PORT, not as raw bytes",
        ),
        AddrFormat::SockaddrIb => Err(
            "FI_SOCKADDR_IB addresses are written fi_sockaddr_ib://[GID]:PKEY:PS:SCOPE[:PORT], not as raw bytes",
        ),
        AddrFormat::Sockaddr => Err(
            "FI_SOCKADDR bytes are a sockaddr_in, sockaddr_in6 or sockaddr_ib; write that address's own form",
        ),
        AddrFormat::Str => Err("FI_ADDR_STR addresses are written as the string itself"),
        AddrFormat::Unspec => Err(
            "FI_FORMAT_UNSPEC has no byte layout; name the provider's format, such as FI_ADDR_EFA",
        ),
        _ => Ok(()),
    }
}

fn parse_af(input: &str) -> Result<Address, Error> {
    let mut fields = input.split(';');
    let family = fields.next().unwrap_or_default();
    let v6 = if family.eq_ignore_ascii_case("AF_INET") {
        false
    } else if family.eq_ignore_ascii_case("AF_INET6") {
        true
    } else if family.eq_ignore_ascii_case("AF_IB") {
        return Err(bad(
            input,
            format_args!(
                "AF_IB is not supported in the AF_FAMILY;NODE;SERVICE form; write {IB_FORM}"
            ),
        ));
    } else if family
        .get(..3)
        .is_some_and(|p| p.eq_ignore_ascii_case("AF_"))
    {
        return Err(bad(
            input,
            format_args!("unknown address family `{family}`; expected AF_INET or AF_INET6"),
        ));
    } else if let Ok(sa) = input.parse::<SocketAddr>() {
        return Err(bad(
            input,
            format_args!("no scheme; did you mean {}?", Address::from(sa)),
        ));
    } else if let Some((scheme, _)) = input
        .split_once(':')
        .filter(|(s, _)| !s.is_empty() && s.chars().all(is_scheme_char))
    {
        return Err(bad(
            input,
            format_args!("missing `//` after `{scheme}:`; {FORMS}"),
        ));
    } else {
        return Err(bad(input, FORMS));
    };
    let node = fields.next().unwrap_or_default();
    let service = fields.next();
    if let Some(extra) = fields.next() {
        return Err(bad(
            input,
            format_args!(
                "unexpected field `{extra}` after SERVICE; expected {family};NODE;SERVICE"
            ),
        ));
    }
    let port = optional_port(input, service, false)?;
    if v6 {
        if node.starts_with('[') {
            return Err(bad(
                input,
                "write the AF_INET6 node without brackets, such as AF_INET6;::1;7471",
            ));
        }
        let (ip, scope) = if node.is_empty() {
            (Ipv6Addr::UNSPECIFIED, 0)
        } else {
            ipv6_scoped(input, node)?
        };
        Ok(Address::In6(SocketAddrV6::new(ip, port, 0, scope)))
    } else {
        let ip = if node.is_empty() {
            Ipv4Addr::UNSPECIFIED
        } else {
            ipv4(input, node)?
        };
        Ok(Address::In(SocketAddrV4::new(ip, port)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn ok(s: &str) -> Address {
        match parse(s) {
            Ok(a) => a,
            Err(e) => panic!("{s:?} should parse: {e:?}"),
        }
    }

    fn err(s: &str) -> String {
        match parse(s) {
            Ok(a) => panic!("{s:?} should not parse, got {a:?}"),
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Inval, "{s:?}");
                e.detail().to_string()
            }
        }
    }

    fn v4(s: &str) -> Address {
        Address::In(s.parse().expect("test literal"))
    }

    #[test]
    fn ipv4_forms() {
        assert_eq!(ok("fi_sockaddr_in://10.0.0.1:7471"), v4("10.0.0.1:7471"));
        assert_eq!(ok("fi_sockaddr_in://10.0.0.1"), v4("10.0.0.1:0"));
        assert_eq!(ok("fi_sockaddr_in://10.0.0.1:"), v4("10.0.0.1:0"));
        assert_eq!(ok("fi_sockaddr_in://:7471"), v4("0.0.0.0:7471"));
        assert_eq!(ok("FI_SOCKADDR_IN://1.2.3.4:80"), v4("1.2.3.4:80"));
        assert_eq!(ok("fi_sockaddr_in://1.2.3.4:00080"), v4("1.2.3.4:80"));
        assert_eq!(
            ok("fi_sockaddr_in://255.255.255.255:65535"),
            v4("255.255.255.255:65535")
        );
    }

    #[test]
    fn ipv4_errors_say_what_is_wrong() {
        assert_eq!(
            err("fi_sockaddr_in://10.0.0.1:70000"),
            "fi_sockaddr_in://10.0.0.1:70000: port 70000 is out of range 0..=65535"
        );
        assert!(err("fi_sockaddr_in://10.0.0.1:-1").contains("has a sign"));
        assert!(err("fi_sockaddr_in://10.0.0.1:+1").contains("has a sign"));
        assert!(err("fi_sockaddr_in://10.0.0.1:80abc").contains("unexpected `abc` after port 80"));
        assert!(err("fi_sockaddr_in://10.0.0.1:0x10").contains("must be decimal"));
        assert!(err("fi_sockaddr_in://10.0.0.1:7471?qos=3").contains("unexpected `?qos=3`"));
        assert!(err("fi_sockaddr_in://10.0.0.1/path").contains("unexpected `/path`"));
        assert!(err("fi_sockaddr_in://localhost:80").contains("host names are not resolved"));
        assert!(err("fi_sockaddr_in://10.0.0:80").contains("not an IPv4 address"));
        assert!(err("fi_sockaddr_in://[::1]:80").contains("fi_sockaddr_in6"));
        assert!(err("fi_sockaddr_in://").contains("missing the IPv4 address"));
        assert!(err("fi_sockaddr_in://:").contains("neither an address nor a port"));
        assert!(err("fi_sockaddr_in:1.2.3.4").contains("missing `//` after `fi_sockaddr_in:`"));
        assert!(err("fi_sockaddr_in://99999999999999999999999:1").contains("not an IPv4 address"));
        assert!(err("fi_sockaddr_in://1.2.3.4:99999999999999999999999").contains("out of range"));
    }

    #[test]
    fn ipv6_forms() {
        let a = |s: &str| Address::In6(s.parse().expect("test literal"));
        assert_eq!(
            ok("fi_sockaddr_in6://[fe80::6:12]:7471"),
            a("[fe80::6:12]:7471")
        );
        assert_eq!(ok("fi_sockaddr_in6://[::1]"), a("[::1]:0"));
        assert_eq!(ok("fi_sockaddr_in6://[::1]:"), a("[::1]:0"));
        assert_eq!(ok("fi_sockaddr_in6://:7471"), a("[::]:7471"));
        assert_eq!(
            ok("fi_sockaddr_in6://[::ffff:1.2.3.4]:80"),
            a("[::ffff:1.2.3.4]:80")
        );
        assert_eq!(ok("fi_sockaddr_in6://[fe80::1%3]:80"), a("[fe80::1%3]:80"));
        let flow = SocketAddrV6::new(Ipv6Addr::LOCALHOST, 5, 77, 2);
        assert_eq!(
            ok("fi_sockaddr_in6://[::1%2]:5?flowinfo=77"),
            Address::In6(flow)
        );
        let any_flow = SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 9, 1, 0);
        assert_eq!(
            ok("fi_sockaddr_in6://:9?flowinfo=1"),
            Address::In6(any_flow)
        );
    }

    #[test]
    fn ipv6_errors() {
        assert!(err("fi_sockaddr_in6://::1").contains("must be in brackets"));
        assert!(err("fi_sockaddr_in6://[::1").contains("missing `]`"));
        assert!(
            err("fi_sockaddr_in6://[fe80::1%eth0]:80").contains("interface names are not resolved")
        );
        assert!(err("fi_sockaddr_in6://[1.2.3.4]:80").contains("is an IPv4 address"));
        assert!(err("fi_sockaddr_in6://[::1]x").contains("unexpected `x` after `]`"));
        assert!(err("fi_sockaddr_in6://[::1]:80?qos=3").contains("unsupported query"));
        assert!(err("fi_sockaddr_in6://[::1]:80?flowinfo=").contains("empty flowinfo"));
        assert!(err("fi_sockaddr_in6://[::1]:80?flowinfo=4294967296").contains("out of range"));
        assert!(err("fi_sockaddr_in6://[::1%]:80").contains("empty scope id"));
        assert!(err("fi_sockaddr_in6://[::1%4294967296]:80").contains("out of range"));
        assert!(err("fi_sockaddr_in6://[]:80").contains("empty IPv6 address"));
        assert!(err("fi_sockaddr_in6://").contains("missing the IPv6 address"));
        assert!(err("fi_sockaddr_in6://:").contains("neither an address nor a port"));
    }

    #[test]
    fn ib_forms() {
        let gid: Ipv6Addr = "fe80::1".parse().expect("test literal");
        let a = ok("fi_sockaddr_ib://[fe80::1]:0xffff:0x106:0x0:7471");
        let want = SockaddrIb {
            pkey: 0xffff,
            flowinfo: 0,
            gid,
            sid: (0x106 << 16) | 7471,
            scope_id: 0,
        };
        assert_eq!(a, Address::Ib(want));
        // No port: the service id is still the port space shifted.
        let a = ok("fi_sockaddr_ib://[fe80::1]:65535:262:0");
        assert_eq!(
            a,
            Address::Ib(SockaddrIb {
                sid: 0x106 << 16,
                ..want
            })
        );
        let a = ok("fi_sockaddr_ib://[fe80::1]:0x0:0x0:0x5?flowinfo=9");
        assert_eq!(
            a,
            Address::Ib(SockaddrIb {
                pkey: 0,
                flowinfo: 9,
                gid,
                sid: 0,
                scope_id: 5
            })
        );
        let a = ok("FI_SOCKADDR_IB://[::]:0X1:0xFFFFFFFFFFFF:0xffffffffffffffff:65535");
        let want = SockaddrIb {
            pkey: 1,
            flowinfo: 0,
            gid: Ipv6Addr::UNSPECIFIED,
            sid: u64::MAX,
            scope_id: u64::MAX,
        };
        assert_eq!(a, Address::Ib(want));
    }

    #[test]
    fn ib_errors() {
        assert!(err("fi_sockaddr_ib://[fe80::1]:0xffff:0x106").contains("missing scope id"));
        assert!(err("fi_sockaddr_ib://[fe80::1]").contains("missing :PKEY:PS:SCOPE"));
        assert!(err("fi_sockaddr_ib://fe80::1:1:2:3").contains("GID must be in brackets"));
        assert!(
            err("fi_sockaddr_ib://[fe80::1]:0x10000:0:0")
                .contains("PKEY 0x10000 does not fit in 16 bits")
        );
        assert!(
            err("fi_sockaddr_ib://[fe80::1]:65536:0:0")
                .contains("PKEY 65536 does not fit in 16 bits")
        );
        assert!(
            err("fi_sockaddr_ib://[fe80::1]:1:0x1000000000000:0")
                .contains("does not fit in 48 bits")
        );
        assert!(
            err("fi_sockaddr_ib://[fe80::1]:1:2:0x10000000000000000")
                .contains("does not fit in 64 bits")
        );
        assert!(
            err("fi_sockaddr_ib://[fe80::1]:1:2:99999999999999999999")
                .contains("does not fit in 64 bits")
        );
        assert!(err("fi_sockaddr_ib://[fe80::1]:010:0:0").contains("leading zero"));
        assert!(err("fi_sockaddr_ib://[fe80::1]:1:0:0:07471").contains("leading zero"));
        assert!(err("fi_sockaddr_ib://[fe80::1]:-1:0:0").contains("has a sign"));
        assert!(err("fi_sockaddr_ib://[fe80::1]:1x:0:0").contains("unexpected `x` after PKEY 1"));
        assert!(err("fi_sockaddr_ib://[fe80::1]:0x:0:0").contains("no hex digits"));
        assert!(err("fi_sockaddr_ib://[fe80::1]::0:0").contains("empty PKEY"));
        assert!(
            err("fi_sockaddr_ib://[fe80::1]:1:2:3:4:5").contains("unexpected `:5` after the port")
        );
        assert!(err("fi_sockaddr_ib://[fe80::1]:1:2:3:4x").contains("unexpected `x` after port 4"));
        assert!(err("fi_sockaddr_ib://[fe80::1%1]:1:2:3").contains("takes no `%` scope"));
        assert!(err("fi_sockaddr_ib://[fe80::1]:1:2:3:0x10").contains("must be decimal"));
    }

    #[test]
    fn raw_form() {
        let a = ok("fi_addr_raw://FI_ADDR_EFA/00ffAB10");
        assert_eq!(
            a,
            Address::Raw {
                format: AddrFormat::Efa,
                bytes: vec![0, 0xff, 0xab, 0x10]
            }
        );
        assert_eq!(a.to_string(), "fi_addr_raw://FI_ADDR_EFA/00ffab10");
        assert_eq!(
            ok("fi_addr_raw://fi_addr_cxi/01"),
            Address::Raw {
                format: AddrFormat::Cxi,
                bytes: vec![1]
            }
        );
        assert!(err("fi_addr_raw://FI_ADDR_EFA/0").contains("odd number"));
        assert!(err("fi_addr_raw://FI_ADDR_EFA/").contains("no address bytes"));
        assert!(err("fi_addr_raw://FI_ADDR_EFA/zz").contains("'z' is not a hex digit"));
        assert!(err("fi_addr_raw://FI_ADDR_EFA").contains("expected fi_addr_raw://FORMAT/HEX"));
        assert!(err("fi_addr_raw://FI_ADDR_NOPE/00").contains("unknown address format"));
        assert!(err("fi_addr_raw:// FI_ADDR_EFA/00").contains("unknown address format"));
        assert!(err("fi_addr_raw:///00").contains("missing the format name"));
        for f in [
            "FI_SOCKADDR_IN",
            "FI_SOCKADDR_IN6",
            "FI_SOCKADDR_IB",
            "FI_SOCKADDR",
            "FI_ADDR_STR",
            "FI_FORMAT_UNSPEC",
        ] {
            let e = err(&format!("fi_addr_raw://{f}/00"));
            assert!(e.contains(f), "{e}");
        }
        let long = format!("fi_addr_raw://FI_ADDR_OPX/{}", "ab".repeat(MAX_RAW_LEN + 1));
        assert!(err(&long).contains("limit for raw addresses"));
        let longest = format!("fi_addr_raw://FI_ADDR_OPX/{}", "ab".repeat(MAX_RAW_LEN));
        assert_eq!(ok(&longest).c_len(), MAX_RAW_LEN);
    }

    #[test]
    fn other_schemes_are_strings() {
        for s in [
            "fi_shm://rank0",
            "fi_ns://host:1",
            "fi_addr_efa://[fe80::1]:1:2",
            "x+y.z-w://a b",
            "fi_sockaddr://1.2.3.4:5",
        ] {
            assert_eq!(ok(s), Address::Str(s.to_string()));
        }
        assert!(err("fi_shm://").contains("nothing follows"));
        assert!(err("://x").contains("scheme is missing"));
        assert!(err("fi shm://x").contains("scheme `fi shm` contains ' '"));
        assert!(err("fi_shm").contains("expected SCHEME://"));
        assert!(err("10.0.0.1:80").contains("did you mean fi_sockaddr_in://10.0.0.1:80?"));
    }

    #[test]
    fn af_forms() {
        assert_eq!(ok("AF_INET;10.31.6.12;7471"), v4("10.31.6.12:7471"));
        assert_eq!(ok("AF_INET;;7471"), v4("0.0.0.0:7471"));
        assert_eq!(ok("af_inet;10.0.0.1"), v4("10.0.0.1:0"));
        assert_eq!(ok("AF_INET;10.0.0.1;"), v4("10.0.0.1:0"));
        assert_eq!(ok("AF_INET"), v4("0.0.0.0:0"));
        assert_eq!(
            ok("AF_INET6;::1;7471"),
            Address::In6("[::1]:7471".parse().expect("literal"))
        );
        assert_eq!(
            ok("AF_INET6;;1"),
            Address::In6("[::]:1".parse().expect("literal"))
        );
        assert_eq!(
            ok("AF_INET6;fe80::1%4;1"),
            Address::In6("[fe80::1%4]:1".parse().expect("literal"))
        );
        assert!(err("AF_IB;fe80::1;1").contains("AF_IB is not supported"));
        assert!(err("AF_UNIX;/tmp/x").contains("unknown address family"));
        assert!(err("AF_INET;localhost;80").contains("host names are not resolved"));
        assert!(err("AF_INET;1.2.3.4;http").contains("not a decimal number"));
        assert!(err("AF_INET;1.2.3.4;1;x").contains("unexpected field `x`"));
        assert!(err("AF_INET6;[::1];1").contains("without brackets"));
        assert!(err("AF_INET;::1;1").contains("not an IPv4 address"));
    }

    #[test]
    fn text_limits() {
        assert!(err("").contains("empty address string"));
        assert!(err("fi_shm://a\0b").contains("embedded NUL at byte 10"));
        assert!(err("fi_shm://a\nb").contains("control character \\n at byte 10"));
        let long = format!("fi_shm://{}", "a".repeat(MAX_STR_LEN));
        let e = err(&long);
        assert!(e.contains("the limit is 4096"), "{e}");
        assert!(e.len() < 300, "long inputs are shortened in messages: {e}");
        let longest = format!("fi_shm://{}", "a".repeat(MAX_STR_LEN - 9));
        assert_eq!(ok(&longest), Address::Str(longest.clone()));
    }

    #[test]
    fn display_parses_back() {
        let addrs = [
            "fi_sockaddr_in://0.0.0.0:0",
            "fi_sockaddr_in://192.0.2.1:7471",
            "fi_sockaddr_in6://[::]:0",
            "fi_sockaddr_in6://[2001:db8::1]:7471",
            "fi_sockaddr_in6://[fe80::1%7]:1?flowinfo=12345",
            "fi_sockaddr_ib://[fe80::1]:0xffff:0x106:0x0:7471",
            "fi_sockaddr_ib://[::]:0x0:0x0:0x0",
            "fi_sockaddr_ib://[::1]:0x1:0x106:0x2:0?flowinfo=3",
            "fi_shm://rank0",
            "fi_addr_raw://FI_ADDR_PSMX2/0011aabb",
        ];
        for s in addrs {
            let a = ok(s);
            assert_eq!(a.to_string(), s, "canonical form");
            assert_eq!(parse(&a.to_string()), Ok(a));
        }
    }
}
