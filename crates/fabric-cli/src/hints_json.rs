//! Hints read from JSON: an [`Info`] in its serde form, possibly partial.
//!
//! Absent fields are zero ("any"), with the exceptions fi_info makes for
//! the fields where zero would be a real constraint: an absent `mode` or
//! `domain_attr.mode` means every mode, and an absent `domain_attr.mr_mode`
//! means every mode but the legacy FI_MR_BASIC and FI_MR_SCALABLE (see
//! [`default_hints`]).

use std::fmt;
use std::io::Read;
use std::path::Path;

use fabric::{Info, Mode, MrMode};
use serde_json::Value;

/// The hints fi_info starts from: all zero (any), except every mode in
/// `mode` and `domain_attr.mode`, and every memory-registration mode except
/// the legacy pair in `domain_attr.mr_mode`.
pub(crate) fn default_hints() -> Info {
    let mut info = Info {
        mode: Mode::all(),
        ..Info::default()
    };
    info.domain_attr.mode = Mode::all();
    info.domain_attr.mr_mode = default_mr_mode();
    info
}

/// The `domain_attr.mr_mode` of hints that do not give one.
fn default_mr_mode() -> MrMode {
    MrMode::all().difference(MrMode::LEGACY)
}

/// Why hints could not be read.
#[derive(Debug)]
pub(crate) enum HintsError {
    /// The file (or stdin) could not be read.
    Io(std::io::Error),
    /// The text is not JSON, or not an `Info`.
    Json(serde_json::Error),
    /// The JSON is valid but not an object.
    NotObject,
}

impl fmt::Display for HintsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HintsError::Io(e) => write!(f, "cannot read it: {e}"),
            HintsError::Json(e) => write!(f, "{e}"),
            HintsError::NotObject => {
                f.write_str("the hints must be a JSON object (an Info: {\"caps\": [...], ...})")
            }
        }
    }
}

impl std::error::Error for HintsError {}

/// Parses hints from JSON text, applying the defaults of [`default_hints`]
/// to the fields the text leaves out.
pub(crate) fn parse(text: &str) -> Result<Info, HintsError> {
    // Syntax first, so a broken file gets a plain syntax error.
    let value: Value = serde_json::from_str(text).map_err(HintsError::Json)?;
    let Value::Object(obj) = &value else {
        return Err(HintsError::NotObject);
    };
    // From the text rather than the value: errors keep their line and column.
    let mut info: Info = serde_json::from_str(text).map_err(HintsError::Json)?;
    if !obj.contains_key("mode") {
        info.mode = Mode::all();
    }
    let domain = obj.get("domain_attr").and_then(Value::as_object);
    if !domain.is_some_and(|d| d.contains_key("mode")) {
        info.domain_attr.mode = Mode::all();
    }
    if !domain.is_some_and(|d| d.contains_key("mr_mode")) {
        info.domain_attr.mr_mode = default_mr_mode();
    }
    Ok(info)
}

/// Reads hints from the file at `path`, or from stdin when `path` is `-`.
pub(crate) fn read(path: &Path) -> Result<Info, HintsError> {
    let text = if path.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(HintsError::Io)?;
        s
    } else {
        std::fs::read_to_string(path).map_err(HintsError::Io)?
    };
    parse(&text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabric::{AddrFormat, Caps, EpType};

    #[test]
    fn empty_object_is_the_fi_info_defaults() {
        let info = parse("{}").expect("valid hints");
        assert_eq!(info, default_hints());
        assert_eq!(info.mode, Mode::all());
        assert_eq!(info.domain_attr.mode, Mode::all());
        assert!(
            !info
                .domain_attr
                .mr_mode
                .intersects(MrMode::BASIC | MrMode::SCALABLE)
        );
        assert!(
            info.domain_attr
                .mr_mode
                .contains(MrMode::LOCAL | MrMode::PROV_KEY)
        );
    }

    #[test]
    fn given_fields_are_kept_and_others_are_zero() {
        let text = r#"{
            "caps": ["FI_MSG", "FI_TAGGED"],
            "addr_format": "FI_SOCKADDR_IN",
            "ep_attr": {"type": "FI_EP_RDM"},
            "fabric_attr": {"prov_name": "tcp"},
            "tx_attr": {"size": 64}
        }"#;
        let info = parse(text).expect("valid hints");
        assert_eq!(info.caps, Caps::MSG | Caps::TAGGED);
        assert_eq!(info.addr_format, AddrFormat::SockaddrIn);
        assert_eq!(info.ep_attr.ep_type, EpType::Rdm);
        assert_eq!(info.fabric_attr.prov_name.as_deref(), Some("tcp"));
        assert_eq!(info.tx_attr.size, 64);
        assert_eq!(info.rx_attr.size, 0);
        assert_eq!(info.mode, Mode::all());
    }

    #[test]
    fn present_modes_are_taken_as_given_even_empty() {
        let text =
            r#"{"mode": [], "domain_attr": {"mode": ["FI_CONTEXT"], "mr_mode": ["FI_MR_BASIC"]}}"#;
        let info = parse(text).expect("valid hints");
        assert_eq!(info.mode, Mode::empty());
        assert_eq!(info.domain_attr.mode, Mode::CONTEXT);
        assert_eq!(info.domain_attr.mr_mode, MrMode::BASIC);
    }

    #[test]
    fn domain_attr_without_modes_gets_the_defaults() {
        let info = parse(r#"{"domain_attr": {"name": "eth0"}}"#).expect("valid hints");
        assert_eq!(info.domain_attr.name.as_deref(), Some("eth0"));
        assert_eq!(info.domain_attr.mode, Mode::all());
        assert_eq!(info.domain_attr.mr_mode, default_mr_mode());
    }

    #[test]
    fn bad_input_is_refused_with_a_reason() {
        let syntax = parse("{\"caps\": ").expect_err("truncated");
        assert!(matches!(syntax, HintsError::Json(_)), "{syntax}");
        assert!(syntax.to_string().contains("line 1"), "{syntax}");

        let name = parse(r#"{"caps": ["FI_BOGUS"]}"#).expect_err("unknown name");
        assert!(name.to_string().contains("FI_BOGUS"), "{name}");

        let field = parse(r#"{"capz": []}"#).expect_err("unknown field");
        assert!(field.to_string().contains("capz"), "{field}");

        assert!(matches!(parse("[]"), Err(HintsError::NotObject)));
        assert!(matches!(parse("3"), Err(HintsError::NotObject)));
    }

    #[test]
    fn missing_file_is_an_io_error() {
        let e = read(Path::new("/nonexistent/fabric-hints.json")).expect_err("no such file");
        assert!(matches!(e, HintsError::Io(_)), "{e}");
    }
}
