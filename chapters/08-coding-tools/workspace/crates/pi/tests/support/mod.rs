//! What `pi`'s binary tests share: a scratch directory that cleans up after itself, the `pi`
//! command with a clean environment pointed at a local openai-mock, and waiting for it with a
//! limit. Each test file uses the parts it needs.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::process::{Child, Command};

/// How long any one `pi` run may take before the test fails instead of hanging.
pub const LIMIT: Duration = Duration::from_secs(30);
/// The key every test passes; a test that checks redaction looks for it.
pub const KEY: &str = "sk-pi-binary-test-5a1f";

/// A fresh directory under the system temp dir, removed when the test ends.
pub struct Scratch(pub PathBuf);

impl Scratch {
    /// `<temp>/pi-<suite>-<pid>-<name>-<n>`, empty, with symlinks resolved.
    pub fn new(suite: &str, name: &str) -> Scratch {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "pi-{suite}-{}-{name}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("能建临时目录");
        Scratch(dir.canonicalize().expect("临时目录有规范路径"))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `pi <args>` in `cwd` with only PATH, HOME and the endpoint settings in its environment;
/// stdin is empty, stdout and stderr are captured, and it is killed if the test drops it.
pub fn pi(base_url: &str, home: &Path, cwd: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_pi"));
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("OPENAI_COMPATIBLE_BASE_URL", base_url)
        .env("OPENAI_COMPATIBLE_API_KEY", KEY)
        .env("OPENAI_COMPATIBLE_MODEL", "mock-model")
        .current_dir(cwd)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Waits for `child` to end, within [`LIMIT`].
pub async fn finish(child: Child) -> Output {
    tokio::time::timeout(LIMIT, child.wait_with_output())
        .await
        .expect("pi 必须在 30 秒内结束")
        .expect("能收集 pi 的输出")
}

/// Starts `command` and waits for it, within [`LIMIT`].
pub async fn run(mut command: Command) -> Output {
    finish(command.spawn().expect("能启动 pi")).await
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub fn lines(bytes: &[u8]) -> Vec<String> {
    text(bytes).lines().map(str::to_string).collect()
}
