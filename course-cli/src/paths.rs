//! Three kinds of relative path, kept apart by type so one is never used for another:
//! a path in the course repository, a path in a generated workspace, and a file of the
//! learner crate as the manifest names it.

use std::borrow::Borrow;
use std::fmt;

use serde::{Deserialize, Serialize};

use course_runner::LEARNER_PACKAGE;

macro_rules! relative_path {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            pub fn new(path: impl Into<String>) -> Self {
                $name(path.into())
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

relative_path!(
    /// `chapters/06-tool-contract/src/tool.rs`: relative to the course repository root.
    RepoPath
);
relative_path!(
    /// `pi-course/src/tool.rs`: relative to a generated workspace's root.
    WorkspacePath
);
relative_path!(
    /// `src/tool.rs`: relative to the learner crate, as the manifest lists files.
    CrateFile
);

impl RepoPath {
    /// `dir/rest`.
    pub fn join(dir: &str, rest: &str) -> Self {
        RepoPath(format!("{dir}/{rest}"))
    }

    /// The part below `dir/`, if the path is there.
    pub fn strip_dir(&self, dir: &str) -> Option<&str> {
        self.0.strip_prefix(dir)?.strip_prefix('/')
    }
}

impl CrateFile {
    /// Where the file lives in a workspace: `pi-course/src/tool.rs`.
    pub fn in_workspace(&self) -> WorkspacePath {
        WorkspacePath(format!("{LEARNER_PACKAGE}/{}", self.0))
    }

    /// Only Rust sources carry Lab regions.
    pub fn is_rust(&self) -> bool {
        self.0.ends_with(".rs")
    }
}
