//! Everything the xtask prints goes through here. A closed stdout (`cargo xtask verify | head
//! -1`, `… | true`) ends the command quietly with status 0, as `head` intends; any other
//! output error is one Chinese line and status 2.

use std::fmt::Display;
use std::io::{self, Write};

/// One line to stdout.
pub fn say(line: impl Display) {
    let mut stdout = io::stdout().lock();
    if let Err(error) = writeln!(stdout, "{line}").and_then(|()| stdout.flush()) {
        if error.kind() == io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        let _ = writeln!(io::stderr(), "错误：无法写出输出（{error}）");
        std::process::exit(2);
    }
}

/// One line to stderr: progress beside a JSON document, and errors. Nothing to do if stderr
/// itself is gone.
pub fn note(line: impl Display) {
    let _ = writeln!(io::stderr(), "{line}");
}
