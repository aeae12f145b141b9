//! The options of `cargo xtask bench` and their help text.

use std::path::PathBuf;

/// What `cargo xtask bench --help` prints.
pub(super) const HELP: &str = "\
usage: cargo xtask bench [OPTIONS]

Runs our `fabric pingpong` / `fabric bw` and libfabric's `fi_pingpong`
alternately (every configuration at a size before the next size), server
on core 1 and client on core 0, next to the floors, and writes BENCHMARKS.md
and bench/{latency,bandwidth}.svg beside it.

Before and after every run a short probe (a busy-polling shared-memory
ping-pong of 1 byte between two pinned threads) records the host's speed
mode; sorted, the probes split into modes wherever one is more than 1.5x
the one before it. Every per-round
ratio is tagged with the mode(s) its two runs were taken in, and a size
whose ours / theirs latency ratio is above 1.0 in ANY round is flagged.

options:
  --rounds N         rounds of the alternation (default 3)
  --quick            fewer iterations and sizes 1, 4k, 64k
  --sizes LIST       comma-separated message sizes, with optional k / m
                     suffixes (1024, 1048576): --sizes 1,4k,64k,1m
                     (streaming runs use the sizes from 64k up, if any)
  --providers LIST   comma-separated providers to measure (tcp,shm,...);
                     default: every provider compiled into `fabric`
  --out FILE         the markdown file to write (default BENCHMARKS.md)
  --strict           exit with status 1 when a size is flagged (ours
                     slower than theirs in some round)
  -h, --help         this text

The release binaries are built in $CARGO_TARGET_DIR (default target/).";

/// The parsed command line.
#[derive(Debug)]
pub(super) struct Opts {
    pub(super) rounds: usize,
    pub(super) quick: bool,
    pub(super) out: PathBuf,
    /// `--sizes`: the sizes to run instead of the defaults.
    pub(super) sizes: Option<Vec<usize>>,
    /// `--providers`: the providers to run instead of every compiled one.
    pub(super) providers: Option<Vec<String>>,
    pub(super) strict: bool,
    pub(super) help: bool,
}

pub(super) fn parse_opts(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        rounds: 3,
        quick: false,
        out: PathBuf::from("BENCHMARKS.md"),
        sizes: None,
        providers: None,
        strict: false,
        help: false,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        // `--opt=value` as well as `--opt value`.
        let (name, inline) = match a.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_string())),
            _ => (a.as_str(), None),
        };
        let mut value = |what: &str| -> Result<String, String> {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| format!("{name} needs {what}"))
        };
        match name {
            "--rounds" => {
                let v = value("a number")?;
                o.rounds = v
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| format!("--rounds needs a number above 0, not `{v}`"))?;
            }
            "--quick" => o.quick = true,
            "--strict" => o.strict = true,
            "-h" | "--help" => o.help = true,
            "--out" => o.out = PathBuf::from(value("a file")?),
            "--sizes" => o.sizes = Some(parse_sizes(&value("a list of sizes")?)?),
            "--providers" => {
                let v = value("a list of providers")?;
                let list: Vec<String> = v
                    .split(',')
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                    .map(str::to_string)
                    .collect();
                if list.is_empty() {
                    return Err(format!("--providers: no provider in `{v}`"));
                }
                o.providers = Some(list);
            }
            other => return Err(format!("unknown option `{other}`")),
        }
    }
    Ok(o)
}

/// `1,4k,64k,1m` into sizes in bytes, ascending, without repeats.
pub(super) fn parse_sizes(list: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for word in list.split(',').map(str::trim) {
        if word.is_empty() {
            continue;
        }
        out.push(parse_size(word)?);
    }
    if out.is_empty() {
        return Err(format!("--sizes: no size in `{list}`"));
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// One size: digits with an optional `k` (KiB) or `m` (MiB) suffix, either
/// case.
fn parse_size(word: &str) -> Result<usize, String> {
    let lower = word.to_ascii_lowercase();
    let (digits, unit) = match lower.as_bytes().last() {
        Some(b'k') => (&lower[..lower.len() - 1], 1usize << 10),
        Some(b'm') => (&lower[..lower.len() - 1], 1 << 20),
        _ => (lower.as_str(), 1),
    };
    let n: usize = digits.parse().map_err(|_| {
        format!("--sizes: `{word}` is not a size (digits with an optional k or m suffix)")
    })?;
    let bytes = n
        .checked_mul(unit)
        .ok_or_else(|| format!("--sizes: `{word}` is too large"))?;
    if bytes == 0 {
        return Err(format!("--sizes: `{word}`: sizes start at 1 byte"));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn sizes_with_suffixes() {
        assert_eq!(
            parse_sizes("1,4k,64K, 1m,4k"),
            Ok(vec![1, 4096, 65536, 1 << 20])
        );
        assert_eq!(parse_sizes("2M"), Ok(vec![2 << 20]));
    }

    #[test]
    fn bad_sizes_say_which() {
        for bad in ["", "k", "1x", "-1", "0", "1.5k", "99999999999999999999m"] {
            let e = parse_sizes(bad).expect_err(bad);
            assert!(e.starts_with("--sizes"), "{bad}: {e}");
        }
    }

    #[test]
    fn options() {
        let o = parse_opts(&args(&[
            "--quick",
            "--rounds",
            "1",
            "--sizes=1,64k",
            "--providers",
            "shm",
            "--strict",
        ]))
        .expect("valid options");
        assert!(o.quick && o.strict && !o.help);
        assert_eq!(o.rounds, 1);
        assert_eq!(o.sizes, Some(vec![1, 65536]));
        assert_eq!(o.providers, Some(vec!["shm".to_string()]));
        assert!(parse_opts(&args(&["--rounds", "0"])).is_err());
        assert!(parse_opts(&args(&["--sizes"])).is_err());
        assert!(parse_opts(&args(&["--bogus"])).is_err());
        assert!(parse_opts(&args(&["-h"])).is_ok_and(|o| o.help));
    }
}
