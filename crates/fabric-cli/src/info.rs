//! `fabric info`: libfabric's fi_info on the fabric registry.
//!
//! The work is split so that everything but the `getinfo` call itself is a
//! pure function: [`build_query`] turns the options (and the `--hints`
//! file) into the request, [`render`] and [`render_env`] turn results into
//! text, [`error_line`] formats a failure.

use std::io::Write;
use std::path::PathBuf;
use std::str::FromStr;

use clap::{ArgMatches, Args, FromArgMatches};
use fabric::objects::EnvVar;
use fabric::{
    AddrFormat, Caps, EpType, GetinfoFlags, Info, Mode, Registry, Request, UnknownName, Version,
};

use crate::Status;
use crate::hints_json;

/// The variable the `fabric` command itself reads.
pub(crate) const RUST_LOG: EnvVar = EnvVar {
    name: "RUST_LOG",
    kind: "String",
    help: "Log filter of the fabric command, in tracing's EnvFilter syntax (`debug`, `fabric=trace,warn`); logs go to stderr. Default: warn.",
};

const AFTER_HELP: &str = "\
Hints are passed to getinfo only when one of -c -m -t -a -p -d -f or --hints \
is given; otherwise getinfo runs without hints and reports what providers offer. \
Hints start with every mode allowed (mode and domain_attr.mode) and every \
domain_attr.mr_mode bit but FI_MR_BASIC and FI_MR_SCALABLE, as in fi_info; \
a --hints file sets any field (absent fields are zero, i.e. any, with the same \
mode defaults), and the other options override the fields of the file.

-l lists the providers (getinfo with flags exactly FI_PROV_ATTR_ONLY); with -s \
or --flags as well, the flags are no longer exactly that, so a normal getinfo \
runs and each result is printed as a list entry, as fi_info does. -e / -g list \
the variables without running getinfo.

Exit status: 0 with results; 1 when getinfo fails (nothing matches, invalid hints, \
no provider), with one line on stderr naming the FI_E* error; 2 for usage errors \
(unknown option or FI_ name, unreadable or malformed --hints file).";

/// Options of `fabric info`, named as fi_info's.
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct InfoOpts {
    /// Destination node name or address.
    #[arg(short = 'n', long = "node", value_name = "NAME")]
    pub(crate) node: Option<String>,

    /// Port number or service name.
    #[arg(short = 'P', long = "port", value_name = "PNUM")]
    pub(crate) port: Option<String>,

    /// Source name or address: the node, with FI_SOURCE. With -n as well,
    /// the later of the two is the node, and FI_SOURCE stays.
    #[arg(
        short = 's',
        long = "src_addr",
        alias = "src-addr",
        value_name = "ADDR"
    )]
    pub(crate) src_addr: Option<String>,

    /// Required capabilities: FI_MSG|FI_RMA...
    #[arg(short = 'c', long = "caps", value_name = "CAPS", value_parser = fi_name::<Caps>)]
    pub(crate) caps: Option<Caps>,

    /// Supported modes: FI_CONTEXT|FI_MSG_PREFIX... (default: all modes).
    #[arg(short = 'm', long = "mode", value_name = "MODE", value_parser = fi_name::<Mode>)]
    pub(crate) mode: Option<Mode>,

    /// Endpoint type: FI_EP_MSG, FI_EP_DGRAM, FI_EP_RDM...
    #[arg(
        short = 't',
        long = "ep_type",
        alias = "ep-type",
        value_name = "EPTYPE",
        value_parser = fi_name::<EpType>
    )]
    pub(crate) ep_type: Option<EpType>,

    /// Accepted address format: FI_FORMAT_UNSPEC, FI_SOCKADDR...
    #[arg(
        short = 'a',
        long = "addr_format",
        alias = "addr-format",
        value_name = "FMT",
        value_parser = fi_name::<AddrFormat>
    )]
    pub(crate) addr_format: Option<AddrFormat>,

    /// Provider name (fabric_attr.prov_name).
    #[arg(short = 'p', long = "provider", value_name = "PROV")]
    pub(crate) provider: Option<String>,

    /// Domain name (domain_attr.name).
    #[arg(short = 'd', long = "domain", value_name = "DOMAIN")]
    pub(crate) domain: Option<String>,

    /// Fabric name (fabric_attr.name).
    #[arg(short = 'f', long = "fabric", value_name = "FABRIC")]
    pub(crate) fabric: Option<String>,

    /// Getinfo flags: FI_SOURCE|FI_NUMERICHOST|FI_PROV_ATTR_ONLY.
    #[arg(long = "flags", value_name = "FLAGS", value_parser = fi_name::<GetinfoFlags>)]
    pub(crate) flags: Option<GetinfoFlags>,

    /// Hints as a JSON Info (`-` for stdin); other options override its fields.
    #[arg(long = "hints", value_name = "FILE")]
    pub(crate) hints: Option<PathBuf>,

    /// List the providers (getinfo with FI_PROV_ATTR_ONLY).
    #[arg(short = 'l', long = "list")]
    pub(crate) list: bool,

    /// Print every field of each result.
    #[arg(short = 'v', long = "verbose")]
    pub(crate) verbose: bool,

    /// Verbose output of only the results whose text contains SUBSTR
    /// (case-insensitive).
    #[arg(short = 'i', long = "info", value_name = "SUBSTR")]
    pub(crate) info_filter: Option<String>,

    /// Print the environment variables the library and this tool read.
    #[arg(short = 'e', long = "env")]
    pub(crate) env: bool,

    /// Print the environment variables whose name contains SUBSTR
    /// (case-insensitive).
    #[arg(short = 'g', long = "getenv", value_name = "SUBSTR")]
    pub(crate) getenv: Option<String>,

    /// Print the results as a JSON array of Info objects.
    #[arg(long = "json", conflicts_with_all = ["verbose", "info_filter", "env", "getenv"])]
    pub(crate) json: bool,

    /// Print the version of this tool and of the fabric API, and exit.
    #[arg(long = "version")]
    pub(crate) version: bool,
}

/// The arguments of `fabric info`: the options, plus which of `-s` and
/// `-n` came last on the command line (clap's derive does not keep the
/// order of different options, so this is filled in from the matches).
#[derive(Debug, Clone, Default)]
pub(crate) struct InfoArgs {
    /// The options.
    pub(crate) opts: InfoOpts,
    /// Whether `-s` was given after `-n` (or without it).
    pub(crate) src_addr_last: bool,
}

impl InfoArgs {
    fn order_from(&mut self, m: &ArgMatches) {
        self.src_addr_last = match (m.index_of("src_addr"), m.index_of("node")) {
            (Some(s), Some(n)) => s > n,
            (Some(_), None) => true,
            _ => false,
        };
    }
}

impl FromArgMatches for InfoArgs {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let mut args = InfoArgs {
            opts: InfoOpts::from_arg_matches(m)?,
            src_addr_last: false,
        };
        args.order_from(m);
        Ok(args)
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        self.opts.update_from_arg_matches(m)?;
        self.order_from(m);
        Ok(())
    }
}

impl Args for InfoArgs {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        // As getopt: a repeated option replaces the earlier value.
        InfoOpts::augment_args(cmd)
            .args_override_self(true)
            .after_help(AFTER_HELP)
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        InfoOpts::augment_args_for_update(cmd)
            .args_override_self(true)
            .after_help(AFTER_HELP)
    }
}

/// A clap value parser for FI_ names (`FI_MSG|FI_RMA`, `FI_EP_RDM`): an
/// unknown name is a usage error naming it.
fn fi_name<T: FromStr<Err = UnknownName>>(s: &str) -> Result<T, UnknownName> {
    s.parse()
}

/// One `getinfo` call, owning its strings and hints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Query {
    /// Node.
    pub(crate) node: Option<String>,
    /// Service.
    pub(crate) service: Option<String>,
    /// Getinfo flags.
    pub(crate) flags: GetinfoFlags,
    /// Hints, or `None` for libfabric's NULL hints.
    pub(crate) hints: Option<Info>,
}

impl Query {
    /// The request for [`Version::CURRENT`].
    pub(crate) fn request(&self) -> Request<'_> {
        Request {
            version: Version::CURRENT,
            node: self.node.as_deref(),
            service: self.service.as_deref(),
            flags: self.flags,
            hints: self.hints.as_ref(),
        }
    }
}

/// Builds the `getinfo` call of `args`, with `file` the hints read from
/// `--hints` (already parsed, absent modes defaulted).
///
/// Hints are passed when `file` is given or one of -c -m -t -a -p -d -f
/// is; they start from `file` or else [`hints_json::default_hints`], and
/// each option given replaces its field.
pub(crate) fn build_query(args: &InfoArgs, file: Option<Info>) -> Query {
    let o = &args.opts;
    let mut flags = o.flags.unwrap_or_default();
    if o.src_addr.is_some() {
        flags |= GetinfoFlags::SOURCE;
    }
    if o.list {
        flags |= GetinfoFlags::PROV_ATTR_ONLY;
    }
    let node = match (&o.src_addr, &o.node) {
        (Some(s), Some(_)) if args.src_addr_last => Some(s.clone()),
        (_, Some(n)) => Some(n.clone()),
        (s, None) => s.clone(),
    };
    let uses_hints = file.is_some()
        || o.caps.is_some()
        || o.mode.is_some()
        || o.ep_type.is_some()
        || o.addr_format.is_some()
        || o.provider.is_some()
        || o.domain.is_some()
        || o.fabric.is_some();
    let hints = uses_hints.then(|| {
        let mut h = file.unwrap_or_else(hints_json::default_hints);
        if let Some(c) = o.caps {
            h.caps = c;
        }
        if let Some(m) = o.mode {
            h.mode = m;
        }
        if let Some(t) = o.ep_type {
            h.ep_attr.ep_type = t;
        }
        if let Some(a) = o.addr_format {
            h.addr_format = a;
        }
        if let Some(p) = &o.provider {
            h.fabric_attr.prov_name = Some(p.clone());
        }
        if let Some(d) = &o.domain {
            h.domain_attr.name = Some(d.clone());
        }
        if let Some(f) = &o.fabric {
            h.fabric_attr.name = Some(f.clone());
        }
        h
    });
    Query {
        node,
        service: o.port.clone(),
        flags,
        hints,
    }
}

/// How results are printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Style {
    /// The short block of each result (provider, fabric, domain, version,
    /// type, protocol).
    Short,
    /// `---` and every field, for the results whose text contains `filter`
    /// (case-insensitive), all of them without a filter.
    Verbose {
        /// The substring to look for.
        filter: Option<String>,
    },
    /// `provider:` and its version, per result.
    List,
    /// A JSON array of the results.
    Json,
}

impl Style {
    /// The style the options ask for: --json, then -v / -i, then -l.
    pub(crate) fn of(o: &InfoOpts) -> Style {
        if o.json {
            Style::Json
        } else if o.verbose || o.info_filter.is_some() {
            Style::Verbose {
                filter: o.info_filter.clone(),
            }
        } else if o.list {
            Style::List
        } else {
            Style::Short
        }
    }
}

/// Renders `infos` in `style`; the text ends with a newline unless empty.
pub(crate) fn render(infos: &[Info], style: &Style) -> Result<String, serde_json::Error> {
    let mut out = String::new();
    match style {
        Style::Short => {
            for info in infos {
                out.push_str(&format!("{info}\n"));
            }
        }
        Style::Verbose { filter } => {
            let needle = filter.as_ref().map(|f| f.to_lowercase());
            for info in infos {
                let text = info.verbose().to_string();
                if needle
                    .as_ref()
                    .is_none_or(|n| text.to_lowercase().contains(n.as_str()))
                {
                    out.push_str(&format!("---\n{text}\n"));
                }
            }
        }
        Style::List => {
            for info in infos {
                out.push_str(&format!(
                    "{}:\n    version: {}\n",
                    info.prov_name().unwrap_or("(null)"),
                    info.fabric_attr.prov_version
                ));
            }
        }
        Style::Json => {
            out = serde_json::to_string_pretty(infos)?;
            out.push('\n');
        }
    }
    Ok(out)
}

/// Renders environment variables as fi_info -e does: `# NAME: Type`,
/// `# help`, `NAME=value` when `value_of` has one (quoted when it holds
/// whitespace), then a blank line. With `filter`, only the variables whose
/// name contains it (case-insensitive).
pub(crate) fn render_env(
    vars: &[EnvVar],
    filter: Option<&str>,
    value_of: impl Fn(&str) -> Option<String>,
) -> String {
    let needle = filter.map(str::to_lowercase);
    let mut out = String::new();
    for v in vars {
        if needle
            .as_ref()
            .is_some_and(|n| !v.name.to_lowercase().contains(n.as_str()))
        {
            continue;
        }
        out.push_str(&format!("# {}: {}\n# {}\n", v.name, v.kind, v.help));
        if let Some(value) = value_of(v.name) {
            if value.chars().any(char::is_whitespace) {
                out.push_str(&format!("{}=\"{value}\"\n", v.name));
            } else {
                out.push_str(&format!("{}={value}\n", v.name));
            }
        }
        out.push('\n');
    }
    out
}

/// Every variable `fabric` reads: the registry's and its providers', then
/// `RUST_LOG`.
pub(crate) fn env_vars(registry: &Registry) -> Vec<EnvVar> {
    let mut v = registry.env_vars();
    v.push(RUST_LOG);
    v
}

/// The one-line stderr message of a failed getinfo:
/// `fabric: getinfo: FI_ENODATA (-61): <detail>`.
pub(crate) fn error_line(e: &fabric::Error) -> String {
    let detail = e.detail().split_whitespace().collect::<Vec<_>>().join(" ");
    format!(
        "fabric: getinfo: {} ({}): {detail}",
        e.kind().c_name(),
        e.code()
    )
}

/// Writes `text` to stdout; a closed pipe ends quietly with a failure.
pub(crate) fn write_stdout(text: &str) -> Status {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Status::Success,
        Err(e) => {
            if e.kind() != std::io::ErrorKind::BrokenPipe {
                eprint_line(&format!("fabric: cannot write the output: {e}"));
            }
            Status::Failure
        }
    }
}

/// Writes one line to stderr, ignoring a failure to do so.
fn eprint_line(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// Runs `fabric info`.
pub(crate) fn run(args: &InfoArgs) -> Status {
    let o = &args.opts;
    if o.version {
        return write_stdout(&crate::version_text());
    }
    if o.env || o.getenv.is_some() {
        let vars = env_vars(Registry::global());
        let text = render_env(&vars, o.getenv.as_deref(), |name| {
            std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
        });
        return write_stdout(&text);
    }
    let file = match &o.hints {
        Some(path) => match hints_json::read(path) {
            Ok(info) => Some(info),
            Err(e) => {
                let stdin = if path.as_os_str() == "-" {
                    " (stdin)"
                } else {
                    ""
                };
                eprint_line(&format!(
                    "error: invalid value '{}'{stdin} for '--hints <FILE>': {e}",
                    path.display()
                ));
                return Status::Usage;
            }
        },
        None => None,
    };
    let query = build_query(args, file);
    let style = Style::of(o);
    let request = query.request();
    tracing::debug!(?request, ?style, "getinfo");
    match Registry::global().getinfo(&request) {
        Ok(infos) => match render(&infos, &style) {
            Ok(text) => write_stdout(&text),
            Err(e) => {
                eprint_line(&format!("fabric: cannot render the results as JSON: {e}"));
                Status::Failure
            }
        },
        Err(e) => {
            if style == Style::Json {
                // An empty array, so that a consumer always gets JSON.
                let _ = write_stdout("[]\n");
            }
            eprint_line(&error_line(&e));
            Status::Failure
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use fabric::{ErrorKind, MrMode, Protocol};

    /// `fabric info` alone, to parse command lines in tests.
    #[derive(Debug, Parser)]
    struct Cmd {
        #[command(flatten)]
        args: InfoArgs,
    }

    fn parse(argv: &[&str]) -> InfoArgs {
        match Cmd::try_parse_from(std::iter::once("info").chain(argv.iter().copied())) {
            Ok(c) => c.args,
            Err(e) => panic!("{argv:?} should parse: {e}"),
        }
    }

    fn parse_err(argv: &[&str]) -> clap::Error {
        let argv = std::iter::once("info").chain(argv.iter().copied());
        Cmd::try_parse_from(argv).expect_err("should be refused")
    }

    fn query(argv: &[&str]) -> Query {
        build_query(&parse(argv), None)
    }

    #[test]
    fn no_hint_option_means_no_hints() {
        let q = query(&[]);
        assert_eq!(
            q,
            Query {
                node: None,
                service: None,
                flags: GetinfoFlags::empty(),
                hints: None
            }
        );
        let q = query(&[
            "-n",
            "host",
            "-P",
            "7471",
            "--flags",
            "FI_NUMERICHOST",
            "-v",
        ]);
        assert_eq!(q.hints, None);
        assert_eq!(q.node.as_deref(), Some("host"));
        assert_eq!(q.service.as_deref(), Some("7471"));
        assert_eq!(q.flags, GetinfoFlags::NUMERICHOST);
    }

    #[test]
    fn hint_options_get_fi_info_defaults() {
        let q = query(&["-c", "FI_MSG|FI_RMA", "-t", "FI_EP_RDM"]);
        let h = q.hints.expect("hints");
        assert_eq!(h.caps, Caps::MSG | Caps::RMA);
        assert_eq!(h.ep_attr.ep_type, EpType::Rdm);
        assert_eq!(h.mode, Mode::all());
        assert_eq!(h.domain_attr.mode, Mode::all());
        assert_eq!(h.domain_attr.mr_mode, MrMode::all() - MrMode::LEGACY);
        assert_eq!(h.addr_format, AddrFormat::Unspec);
    }

    #[test]
    fn each_hint_option_alone_passes_hints() {
        for argv in [
            &["-c", "FI_MSG"][..],
            &["-m", "FI_CONTEXT"],
            &["-t", "FI_EP_MSG"],
            &["-a", "FI_SOCKADDR_IN"],
            &["-p", "tcp"],
            &["-d", "eth0"],
            &["-f", "192.0.2.0/24"],
        ] {
            assert!(query(argv).hints.is_some(), "{argv:?}");
        }
    }

    #[test]
    fn mode_option_replaces_the_default() {
        let h = query(&["-m", "FI_CONTEXT|FI_MSG_PREFIX"])
            .hints
            .expect("hints");
        assert_eq!(h.mode, Mode::CONTEXT | Mode::MSG_PREFIX);
        let h = query(&["-m", ""]).hints.expect("hints");
        assert_eq!(h.mode, Mode::empty());
    }

    #[test]
    fn names_and_provider_options_set_their_fields() {
        let h = query(&[
            "-p",
            "tcp",
            "-d",
            "eth0",
            "-f",
            "192.0.2.0/24",
            "-a",
            "fi_sockaddr_in6",
        ])
        .hints
        .expect("hints");
        assert_eq!(h.fabric_attr.prov_name.as_deref(), Some("tcp"));
        assert_eq!(h.domain_attr.name.as_deref(), Some("eth0"));
        assert_eq!(h.fabric_attr.name.as_deref(), Some("192.0.2.0/24"));
        assert_eq!(h.addr_format, AddrFormat::SockaddrIn6);
    }

    #[test]
    fn src_addr_sets_node_and_source() {
        let q = query(&["-s", "192.0.2.1"]);
        assert_eq!(q.node.as_deref(), Some("192.0.2.1"));
        assert_eq!(q.flags, GetinfoFlags::SOURCE);
        assert_eq!(q.hints, None);
    }

    #[test]
    fn last_of_src_addr_and_node_wins_and_source_stays() {
        let q = query(&["-s", "src", "-n", "dst"]);
        assert_eq!(q.node.as_deref(), Some("dst"));
        assert!(q.flags.contains(GetinfoFlags::SOURCE));
        let q = query(&["-n", "dst", "-s", "src"]);
        assert_eq!(q.node.as_deref(), Some("src"));
        assert!(q.flags.contains(GetinfoFlags::SOURCE));
        let q = query(&["--node=dst", "--src_addr=src", "-n", "dst2"]);
        assert_eq!(q.node.as_deref(), Some("dst2"));
    }

    #[test]
    fn repeated_options_take_the_last_value() {
        let q = query(&["-n", "a", "-n", "b", "-c", "FI_MSG", "-c", "FI_RMA"]);
        assert_eq!(q.node.as_deref(), Some("b"));
        assert_eq!(q.hints.expect("hints").caps, Caps::RMA);
    }

    #[test]
    fn list_asks_for_provider_attributes_only() {
        let q = query(&["-l"]);
        assert_eq!(q.flags, GetinfoFlags::PROV_ATTR_ONLY);
        assert!(q.request().prov_attr_only());
        // With -s the flags are no longer exactly PROV_ATTR_ONLY (fi_info).
        let q = query(&["-l", "-s", "127.0.0.1"]);
        assert_eq!(q.flags, GetinfoFlags::PROV_ATTR_ONLY | GetinfoFlags::SOURCE);
        assert!(!q.request().prov_attr_only());
    }

    #[test]
    fn flags_option_takes_any_combination() {
        let q = query(&[
            "--flags",
            "FI_SOURCE|FI_NUMERICHOST|FI_PROV_ATTR_ONLY",
            "-P",
            "1",
        ]);
        assert_eq!(q.flags, GetinfoFlags::all());
        let q = query(&["--flags", "fi_numerichost", "-s", "::1"]);
        assert_eq!(q.flags, GetinfoFlags::NUMERICHOST | GetinfoFlags::SOURCE);
    }

    #[test]
    fn options_override_the_hints_file() {
        let file = hints_json::parse(
            r#"{"caps": ["FI_TAGGED"], "mode": ["FI_CONTEXT"], "ep_attr": {"type": "FI_EP_MSG"},
                "fabric_attr": {"prov_name": "shm"}, "tx_attr": {"size": 16}}"#,
        )
        .expect("valid hints");
        let q = build_query(&parse(&["-c", "FI_MSG", "-p", "tcp"]), Some(file.clone()));
        let h = q.hints.expect("hints");
        assert_eq!(h.caps, Caps::MSG);
        assert_eq!(h.fabric_attr.prov_name.as_deref(), Some("tcp"));
        // Fields no option names stay as the file has them.
        assert_eq!(h.mode, Mode::CONTEXT);
        assert_eq!(h.ep_attr.ep_type, EpType::Msg);
        assert_eq!(h.tx_attr.size, 16);

        // A file alone is enough for hints to be passed, unchanged.
        let q = build_query(&parse(&["-n", "host"]), Some(file.clone()));
        assert_eq!(q.hints, Some(file));
    }

    #[test]
    fn hints_file_without_mode_gets_all_modes_and_m_replaces_it() {
        let file = hints_json::parse(r#"{"caps": ["FI_MSG"]}"#).expect("valid hints");
        let q = build_query(&parse(&[]), Some(file.clone()));
        assert_eq!(q.hints.as_ref().map(|h| h.mode), Some(Mode::all()));
        let q = build_query(&parse(&["-m", "FI_CONTEXT2"]), Some(file));
        assert_eq!(q.hints.as_ref().map(|h| h.mode), Some(Mode::CONTEXT2));
    }

    #[test]
    fn unknown_fi_names_are_usage_errors() {
        for (argv, name) in [
            (&["-c", "FI_BOGUS"][..], "FI_BOGUS"),
            (&["-c", "FI_MSG|FI_NOPE"], "FI_NOPE"),
            (&["-m", "FI_BAD_MODE"], "FI_BAD_MODE"),
            (&["-t", "FI_EP_BOGUS"], "FI_EP_BOGUS"),
            (&["-a", "FI_ADDR_NOPE"], "FI_ADDR_NOPE"),
            (&["--flags", "FI_NOPE"], "FI_NOPE"),
        ] {
            let e = parse_err(argv);
            assert_eq!(
                e.kind(),
                clap::error::ErrorKind::ValueValidation,
                "{argv:?}"
            );
            assert_eq!(e.exit_code(), 2);
            assert!(e.to_string().contains(name), "{argv:?}: {e}");
        }
        let e = parse_err(&["-c", "FI_BOGUS"]).to_string();
        assert!(
            e.contains("invalid value 'FI_BOGUS' for '--caps <CAPS>'"),
            "{e}"
        );
        assert!(e.contains("unknown Caps name `FI_BOGUS`"), "{e}");
    }

    #[test]
    fn json_conflicts_with_other_text_outputs() {
        for other in ["-v", "-e", "-i=tcp", "-g=FI"] {
            let e = parse_err(&["--json", other]);
            assert_eq!(
                e.kind(),
                clap::error::ErrorKind::ArgumentConflict,
                "{other}"
            );
        }
        assert_eq!(Style::of(&parse(&["--json", "-l"]).opts), Style::Json);
    }

    #[test]
    fn style_precedence_is_verbose_then_list() {
        assert_eq!(Style::of(&parse(&[]).opts), Style::Short);
        assert_eq!(Style::of(&parse(&["-l"]).opts), Style::List);
        assert_eq!(
            Style::of(&parse(&["-l", "-v"]).opts),
            Style::Verbose { filter: None }
        );
        assert_eq!(
            Style::of(&parse(&["-i", "RDM"]).opts),
            Style::Verbose {
                filter: Some("RDM".into())
            }
        );
    }

    fn sample() -> Vec<Info> {
        let mut a = Info {
            caps: Caps::MSG | Caps::TAGGED,
            ..Info::default()
        };
        a.ep_attr.ep_type = EpType::Rdm;
        a.ep_attr.protocol = Protocol::SockTcp;
        a.fabric_attr.prov_name = Some("tcp".into());
        a.fabric_attr.name = Some("192.0.2.0/24".into());
        a.domain_attr.name = Some("eth0".into());
        a.fabric_attr.prov_version = Version::new(117, 0);
        a.fabric_attr.api_version = Version::CURRENT;
        let mut b = a.clone();
        b.ep_attr.ep_type = EpType::Msg;
        b.fabric_attr.prov_name = Some("shm".into());
        b.fabric_attr.prov_version = Version::new(200, 1);
        vec![a, b]
    }

    #[test]
    fn short_output_is_one_block_per_info() {
        let text = render(&sample(), &Style::Short).expect("text");
        let expected = "\
provider: tcp
    fabric: 192.0.2.0/24
    domain: eth0
    version: 117.0
    type: FI_EP_RDM
    protocol: FI_PROTO_SOCK_TCP
provider: shm
    fabric: 192.0.2.0/24
    domain: eth0
    version: 200.1
    type: FI_EP_MSG
    protocol: FI_PROTO_SOCK_TCP
";
        assert_eq!(text, expected);
        assert_eq!(render(&[], &Style::Short).expect("text"), "");
    }

    #[test]
    fn list_output_is_name_and_version() {
        let text = render(&sample(), &Style::List).expect("text");
        assert_eq!(text, "tcp:\n    version: 117.0\nshm:\n    version: 200.1\n");
    }

    #[test]
    fn verbose_output_separates_entries_and_filters() {
        let infos = sample();
        let text = render(&infos, &Style::Verbose { filter: None }).expect("text");
        assert_eq!(text.matches("---\nfi_info:\n").count(), 2);
        assert!(text.contains("        type: FI_EP_RDM\n"));
        assert!(text.ends_with("api_version: 1.17\n"));
        assert_eq!(
            text,
            format!("---\n{}\n---\n{}\n", infos[0].verbose(), infos[1].verbose())
        );

        let only_msg = render(
            &infos,
            &Style::Verbose {
                filter: Some("fi_ep_msg".into()),
            },
        )
        .expect("text");
        assert_eq!(only_msg, format!("---\n{}\n", infos[1].verbose()));
        let none = render(
            &infos,
            &Style::Verbose {
                filter: Some("verbs".into()),
            },
        )
        .expect("text");
        assert_eq!(none, "");
    }

    #[test]
    fn json_output_uses_c_field_names_and_fi_names() {
        let infos = sample();
        let text = render(&infos, &Style::Json).expect("json");
        let v: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
        let first = &v[0];
        assert_eq!(first["caps"], serde_json::json!(["FI_MSG", "FI_TAGGED"]));
        assert_eq!(first["ep_attr"]["type"], "FI_EP_RDM");
        assert_eq!(first["fabric_attr"]["prov_name"], "tcp");
        let back: Vec<Info> = serde_json::from_str(&text).expect("Vec<Info>");
        assert_eq!(back, infos);
        assert_eq!(render(&[], &Style::Json).expect("json"), "[]\n");
    }

    const VARS: &[EnvVar] = &[
        EnvVar {
            name: "FI_PROVIDER",
            kind: "String",
            help: "Only these providers.",
        },
        EnvVar {
            name: "FI_TCP_IFACE",
            kind: "String",
            help: "tcp: interface.",
        },
        RUST_LOG,
    ];

    #[test]
    fn env_output_shows_type_help_and_value() {
        let text = render_env(VARS, None, |n| match n {
            "FI_PROVIDER" => Some("tcp".into()),
            "FI_TCP_IFACE" => Some("eth 0".into()),
            _ => None,
        });
        let expected = format!(
            "# FI_PROVIDER: String\n# Only these providers.\nFI_PROVIDER=tcp\n\n\
             # FI_TCP_IFACE: String\n# tcp: interface.\nFI_TCP_IFACE=\"eth 0\"\n\n\
             # RUST_LOG: String\n# {}\n\n",
            RUST_LOG.help
        );
        assert_eq!(text, expected);
    }

    #[test]
    fn getenv_filters_by_name() {
        let text = render_env(VARS, Some("tcp"), |_| None);
        assert_eq!(text, "# FI_TCP_IFACE: String\n# tcp: interface.\n\n");
        assert_eq!(render_env(VARS, Some("nothing"), |_| None), "");
    }

    #[test]
    fn env_vars_include_the_registry_and_rust_log() {
        let vars = env_vars(Registry::global());
        assert!(vars.iter().any(|v| v.name == "FI_PROVIDER"));
        assert_eq!(vars.last().map(|v| v.name), Some("RUST_LOG"));
    }

    #[test]
    fn error_line_names_kind_code_and_detail() {
        let e = fabric::Error::no_data("no provider matches these hints:\n  tcp declined");
        assert_eq!(
            error_line(&e),
            "fabric: getinfo: FI_ENODATA (-61): no provider matches these hints: tcp declined"
        );
        let e = fabric::Error::new(ErrorKind::NoSys, "none");
        assert_eq!(error_line(&e), "fabric: getinfo: FI_ENOSYS (-38): none");
    }
}
