//! Exit codes of every course command, in one place.

use std::process::ExitCode;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// Everything asked for is green.
    Green,
    /// Some group is red, or the code does not compile.
    Red,
    /// The command was used wrongly or the workspace is unusable; one line says why.
    Usage,
    /// The injected tests were edited, so no verdict can be trusted.
    Tampered,
}

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Green => 0,
            Exit::Red => 1,
            Exit::Usage => 2,
            Exit::Tampered => 3,
        }
    }

    pub fn from_green(green: bool) -> Self {
        if green {
            Exit::Green
        } else {
            Exit::Red
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        ExitCode::from(exit.code())
    }
}
