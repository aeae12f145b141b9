//! `cargo xtask ci [--leg NAME]... [--list] [--list-json]`: the CI matrix
//! of `ci/matrix.toml`, every enabled leg in order, or the legs named.
//!
//! A leg is a name, its command lines, what it needs installed first (see
//! [`Need`]), environment variables and a note printed before it runs.
//! Each command prints its duration; the first failure stops the run with
//! a non-zero exit status. `--list-json` prints the enabled legs' names as
//! a JSON array (the hosted workflow's job matrix).
//!
//! The file is a subset of TOML: `[[leg]]` tables whose keys take a
//! string, a boolean or an array of strings (which may span lines), and
//! `#` comments.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use crate::setup::{self, Met, Need};

/// One leg of the matrix.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Leg {
    pub(crate) name: String,
    pub(crate) run: Vec<String>,
    pub(crate) needs: Vec<Need>,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) note: Option<String>,
    pub(crate) enabled: bool,
}

/// The repository's root (xtask's parent folder).
pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

pub(crate) fn main(args: &[String]) -> ExitCode {
    let path = root().join("ci/matrix.toml");
    let legs = match std::fs::read_to_string(&path)
        .map_err(|e| e.to_string())
        .and_then(|t| parse(&t))
    {
        Ok(l) => l,
        Err(e) => {
            eprintln!("xtask ci: {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    };
    let mut chosen: Vec<&Leg> = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--list" => {
                for l in &legs {
                    let off = if l.enabled { "" } else { " (disabled)" };
                    println!("{}{off}: {}", l.name, l.run.join("; "));
                }
                return ExitCode::SUCCESS;
            }
            "--list-json" => {
                let names: Vec<&str> = legs
                    .iter()
                    .filter(|l| l.enabled)
                    .map(|l| l.name.as_str())
                    .collect();
                println!("{}", serde_json::json!(names));
                return ExitCode::SUCCESS;
            }
            "--leg" => {
                let Some(name) = it.next() else {
                    eprintln!("xtask ci: --leg needs a name");
                    return ExitCode::from(2);
                };
                let Some(l) = legs.iter().find(|l| &l.name == name) else {
                    let names: Vec<&str> = legs.iter().map(|l| l.name.as_str()).collect();
                    eprintln!(
                        "xtask ci: no leg `{name}` in ci/matrix.toml (legs: {})",
                        names.join(", ")
                    );
                    return ExitCode::from(2);
                };
                if !l.enabled {
                    eprintln!(
                        "xtask ci: leg `{name}` is disabled: {}",
                        l.note.as_deref().unwrap_or("see ci/matrix.toml")
                    );
                    return ExitCode::FAILURE;
                }
                chosen.push(l);
            }
            other => {
                eprintln!(
                    "xtask ci: unknown argument `{other}` (usage: cargo xtask ci [--leg NAME]... [--list] [--list-json])"
                );
                return ExitCode::from(2);
            }
        }
    }
    if chosen.is_empty() {
        for l in legs.iter().filter(|l| !l.enabled) {
            println!(
                "--- {}: disabled ({})",
                l.name,
                l.note.as_deref().unwrap_or("see ci/matrix.toml")
            );
        }
        chosen = legs.iter().filter(|l| l.enabled).collect();
    }
    run_legs(&chosen)
}

fn run_legs(legs: &[&Leg]) -> ExitCode {
    let total = Instant::now();
    let mut met: Vec<Need> = Vec::new();
    let mut times: Vec<(String, String)> = Vec::new();
    let fail = |e: String, times: &[(String, String)]| {
        eprintln!("xtask ci: {e}");
        summary(times);
        eprintln!(
            "xtask ci: FAILED after {:.1} s",
            total.elapsed().as_secs_f64()
        );
        ExitCode::FAILURE
    };
    'legs: for leg in legs {
        let start = Instant::now();
        println!("=== leg {}", leg.name);
        for need in &leg.needs {
            if met.contains(need) {
                continue;
            }
            match setup::ensure(*need) {
                Ok(Met::Yes) => met.push(*need),
                Ok(Met::Partly) => {}
                Ok(Met::No(why)) => {
                    println!("--- leg {}: skipped ({why})", leg.name);
                    times.push((leg.name.clone(), "skipped".into()));
                    continue 'legs;
                }
                Err(e) => {
                    return fail(format!("leg {}: setup: {e}", leg.name), &times);
                }
            }
        }
        if let Some(note) = &leg.note {
            println!("--- {}: {note}", leg.name);
        }
        for line in &leg.run {
            if let Err(e) = run_line(leg, line) {
                return fail(e, &times);
            }
        }
        let secs = start.elapsed().as_secs_f64();
        times.push((leg.name.clone(), format!("{secs:.1} s")));
    }
    summary(&times);
    println!(
        "xtask ci: all legs passed in {:.1} s",
        total.elapsed().as_secs_f64()
    );
    ExitCode::SUCCESS
}

fn summary(times: &[(String, String)]) {
    for (name, t) in times {
        println!("    {name:<12} {t}");
    }
}

/// Runs one command line of a leg from the repository root; `cargo xtask
/// ...` runs this binary itself.
fn run_line(leg: &Leg, line: &str) -> Result<(), String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let (program, args) = match words.as_slice() {
        ["cargo", "xtask", rest @ ..] => {
            let me = std::env::current_exe()
                .map_err(|e| format!("{}: cannot find the xtask binary: {e}", leg.name))?;
            (me.display().to_string(), rest.to_vec())
        }
        [program, rest @ ..] => (program.to_string(), rest.to_vec()),
        [] => return Ok(()),
    };
    let start = Instant::now();
    println!("==> {}: {line}", leg.name);
    let status = Command::new(&program)
        .args(&args)
        .envs(leg.env.iter().map(|(k, v)| (k, v)))
        .current_dir(root())
        .status()
        .map_err(|e| format!("{}: cannot run {program}: {e}", leg.name))?;
    let secs = start.elapsed().as_secs_f64();
    if status.success() {
        println!("<== {}: ok in {secs:.1} s", leg.name);
        Ok(())
    } else {
        Err(format!(
            "leg {}: `{line}` failed ({status}) after {secs:.1} s",
            leg.name
        ))
    }
}

// ---------------------------------------------------------------------------
// The matrix file

#[derive(Debug, PartialEq)]
enum Value {
    Str(String),
    Bool(bool),
    List(Vec<String>),
}

/// Parses `ci/matrix.toml`.
pub(crate) fn parse(text: &str) -> Result<Vec<Leg>, String> {
    let mut legs: Vec<Leg> = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((i, raw)) = lines.next() {
        let at = |e: String| format!("line {}: {e}", i + 1);
        let line = strip_comment(raw).trim().to_string();
        if line.is_empty() {
            continue;
        }
        if line == "[[leg]]" {
            legs.push(Leg {
                name: String::new(),
                run: Vec::new(),
                needs: Vec::new(),
                env: Vec::new(),
                note: None,
                enabled: true,
            });
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            return Err(at(format!("expected `[[leg]]` or `key = value`: {raw}")));
        };
        let mut value = value.trim().to_string();
        // An array may continue on the next lines, up to its `]`.
        while value.starts_with('[') && !value.ends_with(']') {
            let Some((_, more)) = lines.next() else {
                return Err(at("unterminated array".into()));
            };
            value.push(' ');
            value.push_str(strip_comment(more).trim());
        }
        let value = parse_value(&value).map_err(at)?;
        let Some(leg) = legs.last_mut() else {
            return Err(at("a key before the first [[leg]]".into()));
        };
        set(leg, key.trim(), value).map_err(at)?;
    }
    for (n, leg) in legs.iter().enumerate() {
        if leg.name.is_empty() || leg.run.is_empty() {
            return Err(format!("leg {} has no name or no run", n + 1));
        }
        if legs.iter().filter(|l| l.name == leg.name).count() > 1 {
            return Err(format!("leg `{}` is defined twice", leg.name));
        }
    }
    Ok(legs)
}

fn set(leg: &mut Leg, key: &str, value: Value) -> Result<(), String> {
    match (key, value) {
        ("name", Value::Str(s)) => leg.name = s,
        ("note", Value::Str(s)) => leg.note = Some(s),
        ("enabled", Value::Bool(b)) => leg.enabled = b,
        ("run", Value::Str(s)) => leg.run = vec![s],
        ("run", Value::List(l)) => leg.run = l,
        ("needs", Value::List(l)) => {
            leg.needs = l
                .iter()
                .map(|n| {
                    Need::from_name(n).ok_or_else(|| {
                        let known: Vec<&str> = Need::ALL.iter().map(|(k, _)| *k).collect();
                        format!("unknown need `{n}` (known: {})", known.join(", "))
                    })
                })
                .collect::<Result<_, _>>()?;
        }
        ("env", Value::List(l)) => {
            leg.env = l
                .iter()
                .map(|kv| {
                    kv.split_once('=')
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .ok_or_else(|| format!("env entry `{kv}` is not NAME=VALUE"))
                })
                .collect::<Result<_, _>>()?;
        }
        (key, value) => return Err(format!("unexpected `{key} = {value:?}`")),
    }
    Ok(())
}

/// The line without its `#` comment (a `#` inside a string is kept).
fn strip_comment(line: &str) -> &str {
    let mut in_str = false;
    let mut escaped = false;
    for (i, c) in line.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_str => escaped = true,
            '"' => in_str = !in_str,
            '#' if !in_str => return &line[..i],
            _ => {}
        }
    }
    line
}

fn parse_value(text: &str) -> Result<Value, String> {
    match text {
        "true" => return Ok(Value::Bool(true)),
        "false" => return Ok(Value::Bool(false)),
        _ => {}
    }
    if let Some(inner) = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
        let mut items = Vec::new();
        let mut rest = inner.trim();
        while !rest.is_empty() {
            let (s, after) = string(rest)?;
            items.push(s);
            rest = after.trim_start();
            rest = rest.strip_prefix(',').unwrap_or(rest).trim_start();
            if !rest.is_empty() && !rest.starts_with('"') {
                return Err(format!("expected `,` between strings: {text}"));
            }
        }
        return Ok(Value::List(items));
    }
    match string(text)? {
        (s, "") => Ok(Value::Str(s)),
        (_, after) => Err(format!("unexpected `{after}` after a string")),
    }
}

/// A basic TOML string at the start of `text` (`\"` and `\\` escapes) and
/// what follows it.
fn string(text: &str) -> Result<(String, &str), String> {
    let Some(body) = text.strip_prefix('"') else {
        return Err(format!("expected a string, true or false: {text}"));
    };
    let mut out = String::new();
    let mut chars = body.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Ok((out, &body[i + 1..])),
            '\\' => match chars.next() {
                Some((_, e @ ('"' | '\\'))) => out.push(e),
                Some((_, 'n')) => out.push('\n'),
                other => return Err(format!("unsupported escape {other:?} in {text}")),
            },
            c => out.push(c),
        }
    }
    Err(format!("unterminated string: {text}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_legs() {
        let text = r#"
# a comment
[[leg]]
name = "one"   # trailing comment
run = "cargo fmt --check"

[[leg]]
name = "two"
needs = ["apt", "nightly"]
env = ["A=b # not a comment"]
run = [
    "cargo test",   # first
    "cargo doc",
]
note = "a \"quoted\" note"
enabled = false
"#;
        let legs = parse(text).unwrap();
        assert_eq!(legs.len(), 2);
        assert_eq!(legs[0].name, "one");
        assert_eq!(legs[0].run, ["cargo fmt --check"]);
        assert!(legs[0].enabled);
        assert_eq!(legs[1].needs, [Need::Apt, Need::Nightly]);
        assert_eq!(legs[1].env, [("A".into(), "b # not a comment".into())]);
        assert_eq!(legs[1].run, ["cargo test", "cargo doc"]);
        assert_eq!(legs[1].note.as_deref(), Some("a \"quoted\" note"));
        assert!(!legs[1].enabled);
    }

    #[test]
    fn refuses_what_it_does_not_know() {
        for bad in [
            "name = \"x\"",
            "[[leg]]\nname = \"x\"\nrun = \"y\"\nneeds = [\"gpu\"]",
            "[[leg]]\nname = \"x\"\nrun = \"y\"\ncolour = \"red\"",
            "[[leg]]\nname = \"x\"\nrun = [\"y\"",
            "[[leg]]\nname = \"x\"",
            "[[leg]]\nname = \"x\"\nrun = \"y\"\n[[leg]]\nname = \"x\"\nrun = \"z\"",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_matrix_has_the_legs_ci_relies_on() {
        let text = std::fs::read_to_string(root().join("ci/matrix.toml")).unwrap();
        let legs = parse(&text).unwrap();
        for name in [
            "fmt",
            "features",
            "clippy",
            "test",
            "doc",
            "deny",
            "fuzz",
            "soak-short",
            "rxe",
            "rxe-hosts",
        ] {
            assert!(
                legs.iter().any(|l| l.name == name && l.enabled),
                "leg {name}"
            );
        }
    }
}
