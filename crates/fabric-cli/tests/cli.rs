//! Runs the `fabric` binary: options, exit status and output shapes.
//!
//! Tests that reach `getinfo` check the no-provider answer (FI_ENOSYS, exit
//! 1) when no provider is compiled in, and a successful answer otherwise.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// The binary, with the variables that change its behaviour removed.
fn fabric(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fabric"));
    cmd.args(args)
        .env_remove("FI_PROVIDER")
        .env_remove("RUST_LOG");
    cmd
}

fn run(args: &[&str]) -> Output {
    fabric(args).output().expect("the fabric binary runs")
}

fn run_with_stdin(args: &[&str], input: &str) -> Output {
    let mut child = fabric(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the fabric binary runs");
    let mut stdin = child.stdin.take().expect("stdin is piped");
    stdin.write_all(input.as_bytes()).expect("write stdin");
    drop(stdin);
    child.wait_with_output().expect("the fabric binary ends")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn code(o: &Output) -> Option<i32> {
    o.status.code()
}

/// Whether the binary was built without any provider.
fn no_provider() -> bool {
    fabric::Registry::global().providers().next().is_none()
}

/// A getinfo that must fail with FI_ENOSYS when no provider is compiled in:
/// exit 1 and exactly one stderr line naming the error.
fn assert_nosys(o: &Output) {
    assert_eq!(code(o), Some(1), "stderr: {}", stderr(o));
    let err = stderr(o);
    assert_eq!(err.lines().count(), 1, "one line: {err:?}");
    assert!(
        err.starts_with("fabric: getinfo: FI_ENOSYS (-38): "),
        "{err:?}"
    );
}

/// A scratch file under Cargo's temporary directory for integration tests.
fn temp_file(name: &str, text: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::write(&path, text).expect("write a temporary file");
    path
}

#[test]
fn version_prints_tool_and_api_versions() {
    let expected = format!("fabric: {}\napi: 1.17\n", env!("CARGO_PKG_VERSION"));
    for args in [&["--version"][..], &["info", "--version"]] {
        let o = run(args);
        assert_eq!(code(&o), Some(0), "{args:?}");
        assert_eq!(stdout(&o), expected, "{args:?}");
    }
}

#[test]
fn unknown_caps_name_is_a_usage_error() {
    let o = run(&["info", "-c", "FI_BOGUS"]);
    assert_eq!(code(&o), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains(
            "error: invalid value 'FI_BOGUS' for '--caps <CAPS>': unknown Caps name `FI_BOGUS`"
        ),
        "{err}"
    );
    assert!(stdout(&o).is_empty());
}

#[test]
fn unknown_ep_type_is_a_usage_error() {
    let o = run(&["info", "-t", "FI_EP_BOGUS"]);
    assert_eq!(code(&o), Some(2));
    assert!(stderr(&o).contains("FI_EP_BOGUS"), "{}", stderr(&o));
}

#[test]
fn unknown_mode_and_addr_format_are_usage_errors() {
    for args in [
        &["info", "-m", "FI_NOMODE"][..],
        &["info", "-a", "FI_ADDR_NOPE"],
    ] {
        let o = run(args);
        assert_eq!(code(&o), Some(2), "{args:?}");
        assert!(stderr(&o).contains(args[2]), "{}", stderr(&o));
    }
}

#[test]
fn unknown_getinfo_flag_is_a_usage_error() {
    let o = run(&["info", "--flags", "FI_SOURCE|FI_NOPE"]);
    assert_eq!(code(&o), Some(2));
    let err = stderr(&o);
    assert!(err.contains("--flags") && err.contains("FI_NOPE"), "{err}");
}

#[test]
fn unknown_option_and_missing_subcommand_are_usage_errors() {
    assert_eq!(code(&run(&["info", "--bogus"])), Some(2));
    assert_eq!(code(&run(&["info", "--json", "-v"])), Some(2));
    assert_eq!(code(&run(&[])), Some(2));
    assert_eq!(code(&run(&["nosuchcommand"])), Some(2));
}

#[test]
fn help_succeeds() {
    let o = run(&["info", "--help"]);
    assert_eq!(code(&o), Some(0));
    let out = stdout(&o);
    for opt in [
        "--src_addr",
        "--ep_type",
        "--addr_format",
        "--hints",
        "--flags",
        "--json",
    ] {
        assert!(out.contains(opt), "{opt} in {out}");
    }
}

#[test]
fn json_output_is_always_an_array() {
    let o = run(&["info", "--json"]);
    let infos: Vec<fabric::Info> = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("stdout is a JSON array of Info ({e}): {}", stdout(&o)));
    let value: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert!(value.is_array());
    if no_provider() {
        assert!(infos.is_empty());
        assert_nosys(&o);
    } else {
        assert_eq!(code(&o), Some(0), "{}", stderr(&o));
        assert!(!infos.is_empty());
        assert!(value[0]["fabric_attr"]["prov_name"].is_string());
    }
}

#[test]
fn plain_info_without_provider_fails_with_nosys() {
    let o = run(&["info"]);
    if no_provider() {
        assert_nosys(&o);
        assert!(stdout(&o).is_empty());
    } else {
        assert_eq!(code(&o), Some(0), "{}", stderr(&o));
        assert!(stdout(&o).starts_with("provider: "));
    }
}

#[test]
fn list_without_provider_fails_with_nosys() {
    let o = run(&["info", "-l"]);
    if no_provider() {
        assert_nosys(&o);
    } else {
        assert_eq!(code(&o), Some(0), "{}", stderr(&o));
        assert!(stdout(&o).contains(":\n    version: "), "{}", stdout(&o));
    }
}

#[test]
fn malformed_hints_file_is_a_usage_error_naming_path_and_cause() {
    let path = temp_file("fabric-cli-malformed-hints.json", "{\"caps\": [\"FI_MSG\",");
    let shown = path.display().to_string();
    let o = run(&["info", "--hints", &shown]);
    assert_eq!(code(&o), Some(2));
    let err = stderr(&o);
    assert!(err.contains(&shown), "{err}");
    assert!(err.contains("line 1"), "serde's error: {err}");
    assert!(stdout(&o).is_empty());
}

#[test]
fn hints_with_unknown_names_or_fields_are_usage_errors() {
    let bad_name = temp_file(
        "fabric-cli-bad-name-hints.json",
        r#"{"caps": ["FI_BOGUS"]}"#,
    );
    let o = run(&["info", "--hints", &bad_name.display().to_string()]);
    assert_eq!(code(&o), Some(2));
    assert!(stderr(&o).contains("FI_BOGUS"), "{}", stderr(&o));

    let bad_field = temp_file(
        "fabric-cli-bad-field-hints.json",
        r#"{"ep_attr": {"typ": "FI_EP_RDM"}}"#,
    );
    let o = run(&["info", "--hints", &bad_field.display().to_string()]);
    assert_eq!(code(&o), Some(2));
    assert!(stderr(&o).contains("typ"), "{}", stderr(&o));
}

#[test]
fn unreadable_hints_file_is_a_usage_error() {
    let o = run(&["info", "--hints", "/nonexistent/fabric-hints.json"]);
    assert_eq!(code(&o), Some(2));
    assert!(
        stderr(&o).contains("/nonexistent/fabric-hints.json"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn valid_partial_hints_from_stdin_reach_getinfo() {
    let hints = r#"{"caps": ["FI_MSG"], "ep_attr": {"type": "FI_EP_RDM"}}"#;
    let o = run_with_stdin(&["info", "--hints", "-", "-p", "tcp"], hints);
    assert_ne!(code(&o), Some(2), "{}", stderr(&o));
    if no_provider() {
        assert_nosys(&o);
    }
}

#[test]
fn malformed_hints_from_stdin_is_a_usage_error() {
    let o = run_with_stdin(&["info", "--hints", "-"], "not json");
    assert_eq!(code(&o), Some(2));
    assert!(stderr(&o).contains("'-' (stdin)"), "{}", stderr(&o));
}

#[test]
fn env_lists_variables_with_type_and_help() {
    let o = run(&["info", "-e"]);
    assert_eq!(code(&o), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("# FI_PROVIDER: String\n# "), "{out}");
    assert!(out.contains("# RUST_LOG: String\n# "), "{out}");
    let rust_log = out.split("# RUST_LOG: String\n").nth(1).unwrap_or_default();
    assert!(rust_log.to_lowercase().contains("log"), "{out}");
    assert!(out.ends_with("\n\n"), "{out:?}");
    assert!(
        !out.contains("FI_PROVIDER="),
        "unset variables have no value line"
    );
}

#[test]
fn env_shows_values_that_are_set() {
    let o = fabric(&["info", "-e"])
        .env("FI_PROVIDER", "tcp")
        .env("RUST_LOG", "error")
        .output()
        .expect("the fabric binary runs");
    assert_eq!(code(&o), Some(0));
    let out = stdout(&o);
    assert!(out.contains("\nFI_PROVIDER=tcp\n\n"), "{out}");
    assert!(out.contains("\nRUST_LOG=error\n\n"), "{out}");
}

#[test]
fn getenv_filters_variables_by_name() {
    let o = run(&["info", "-g", "rust"]);
    assert_eq!(code(&o), Some(0));
    let out = stdout(&o);
    assert!(out.starts_with("# RUST_LOG: String\n"), "{out}");
    assert!(!out.contains("FI_PROVIDER"), "{out}");
}
