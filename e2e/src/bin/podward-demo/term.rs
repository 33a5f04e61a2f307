//! The terminal side: colour only on a terminal (and never with `NO_COLOR`), text that came from
//! containers or the API made printable before it reaches the screen, the daemons' log levels,
//! and the harness's own logging (quiet unless `--verbose`).

use std::io::IsTerminal;

/// How text is decorated: ANSI colours on a terminal, plain text elsewhere.
#[derive(Debug, Clone)]
pub(crate) struct Style {
    colour: bool,
}

impl Style {
    /// Colour when stdout is a terminal and `NO_COLOR` is unset (<https://no-color.org>).
    pub(crate) fn detect() -> Style {
        Style {
            colour: std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
        }
    }

    fn paint(&self, code: &str, s: &str) -> String {
        if self.colour {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_owned()
        }
    }

    /// Bold.
    pub(crate) fn bold(&self, s: &str) -> String {
        self.paint("1", s)
    }

    /// Dimmed (the daemons' logs with `--verbose`).
    pub(crate) fn dim(&self, s: &str) -> String {
        self.paint("2", s)
    }

    /// Green (healthy, True, done).
    pub(crate) fn green(&self, s: &str) -> String {
        self.paint("32", s)
    }

    /// Red (failing, False, killed).
    pub(crate) fn red(&self, s: &str) -> String {
        self.paint("31", s)
    }

    /// Yellow (warnings, plans).
    pub(crate) fn yellow(&self, s: &str) -> String {
        self.paint("33", s)
    }

    /// Green for `true`, red for `false`.
    pub(crate) fn verdict(&self, ok: bool, s: &str) -> String {
        if ok { self.green(s) } else { self.red(s) }
    }
}

/// `s` with control characters (escape sequences included) shown as `?` and line breaks as
/// spaces, cut to `max` characters: probe outputs and event notes are whatever a container
/// answered, and must not move the cursor or recolour the terminal.
pub(crate) fn printable(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max));
    for (i, c) in s.trim_end().chars().enumerate() {
        if i == max {
            out.push('…');
            break;
        }
        out.push(match c {
            '\n' | '\r' | '\t' => ' ',
            c if c.is_control() => '?',
            c => c,
        });
    }
    out
}

/// A daemon log line's level, as far as the demo cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    /// `ERROR`.
    Error,
    /// `WARN`.
    Warn,
    /// Anything else (or no level).
    Other,
}

/// Whether `line` from daemon `name` is a warning the demo causes on purpose: the prober logs
/// each liveness or startup kill at WARN (the timeline shows each), and the housekeeper warns
/// at start that it acts (`--act` given to the demo). They are counted apart from real
/// warnings, which are always printed.
pub(crate) fn is_expected_warning(name: &str, line: &str) -> bool {
    match name {
        "podward-prober" => {
            line.contains("podward_prober::consequences::kill:")
                && line.contains("will be restarted")
        }
        "podward-housekeeper" => {
            line.contains("podward_housekeeper::run:") && line.contains("acting (--act)")
        }
        _ => false,
    }
}

/// The level of a `tracing` text line (`<time>  WARN <target>: ...`) or JSON line
/// (`"level":"WARN"`).
pub(crate) fn level_of(line: &str) -> Level {
    let has = |word: &str| {
        line.split_whitespace().take(3).any(|w| w == word)
            || line.contains(&format!("\"level\":\"{word}\""))
    };
    if has("ERROR") {
        Level::Error
    } else if has("WARN") {
        Level::Warn
    } else {
        Level::Other
    }
}

/// The harness's own logs (containerd's start, the driver's restarts) on stderr: warnings and
/// errors only, unless `verbose` (then `RUST_LOG`, else `info`).
pub(crate) fn init_logging(verbose: bool) {
    let filter = if verbose {
        tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"))
    } else {
        tracing_subscriber::EnvFilter::new("warn")
    };
    // The harness installs its own subscriber only if none is set: this one wins.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_never_reach_the_terminal() {
        assert_eq!(printable("ok\x1b[2J\nnext", 100), "ok?[2J next");
        assert_eq!(printable("abcdef", 3), "abc…");
    }

    #[test]
    fn only_kills_and_the_act_notice_are_expected_warnings() {
        let kill = "2026-11-26T16:09:37.8Z  WARN podward_prober::consequences::kill: Container flaky failed \
                    liveness probe, will be restarted pod=demo";
        assert!(is_expected_warning("podward-prober", kill));
        assert!(!is_expected_warning("podward-housekeeper", kill));
        assert!(!is_expected_warning(
            "podward-prober",
            "2026-11-26T16:09:37.8Z  WARN podward_prober::consequences::kill: preStop hook failed"
        ));
        assert!(is_expected_warning(
            "podward-housekeeper",
            "2026-11-26T16:19:36.5Z  WARN podward_housekeeper::run: acting (--act): passes kill"
        ));
        assert!(!is_expected_warning(
            "podward-housekeeper",
            "2026-11-26T16:19:36.5Z  WARN podward_housekeeper::reconcile: a required source failed"
        ));
    }

    #[test]
    fn levels_of_text_and_json_lines() {
        assert_eq!(
            level_of("2026-11-26T15:00:00.1Z  WARN podward_housekeeper: x"),
            Level::Warn
        );
        assert_eq!(level_of(r#"{"level":"ERROR","fields":{}}"#), Level::Error);
        assert_eq!(
            level_of("2026-11-26T15:00:00.1Z  INFO x: a WARN in the message"),
            Level::Other
        );
    }
}
