//! Debian's headless Chromium as a tool, driven by its own command line: `--dump-dom` prints
//! the DOM after the page's scripts ran, `--screenshot` saves a PNG. No driver protocol and no
//! extra dependency. Knows nothing about the book; `book/in_browser.rs` says what to check.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use crate::checkout::Failure;

/// Virtual time each page gets to run its scripts before the DOM is read or the picture taken.
const VIRTUAL_TIME_MS: u32 = 5000;
/// Wall-clock limit of one Chromium run.
const TIMEOUT: Duration = Duration::from_secs(120);

/// Debian's Chromium on `PATH`.
pub fn find_chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("chromium"))
        .find(|candidate| candidate.is_file())
}

pub fn missing_hint() -> String {
    "未找到 chromium：在 Debian 上运行 `apt-get install -y chromium fonts-noto-cjk` 安装".into()
}

/// What stays unencoded in a URL component: RFC 3986's unreserved characters.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');
/// In a path, `/` separates segments and stays too.
const PATH: &AsciiSet = &COMPONENT.remove(b'/');

/// `file://` URL of an absolute path, percent-encoded.
pub fn file_url(path: &Path) -> String {
    format!(
        "file://{}",
        utf8_percent_encode(&path.to_string_lossy(), PATH)
    )
}

/// A query parameter's value, percent-encoded.
pub fn query_value(text: &str) -> String {
    utf8_percent_encode(text, COMPONENT).to_string()
}

/// A window size in CSS pixels.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub width: u32,
    pub height: u32,
}

/// One headless Chromium, started once per page with a profile of its own.
pub struct Chromium {
    binary: PathBuf,
    profile: PathBuf,
    /// Where DOM dumps and Chromium's own logs go, for reading after a failure.
    logs: PathBuf,
    window: Window,
}

impl Chromium {
    /// A browser whose profile and logs live under `work` (emptied first).
    pub fn new(binary: &Path, work: &Path, window: Window) -> Result<Chromium, Failure> {
        let _ = std::fs::remove_dir_all(work);
        let logs = work.join("logs");
        std::fs::create_dir_all(&logs)
            .map_err(|error| Failure(format!("创建 {} 失败：{error}", logs.display())))?;
        Ok(Chromium {
            binary: binary.to_path_buf(),
            profile: work.join(format!("profile-{}", std::process::id())),
            logs,
            window,
        })
    }

    pub fn logs(&self) -> &Path {
        &self.logs
    }

    pub fn version(&self) -> String {
        Command::new(&self.binary)
            .arg("--version")
            .stderr(Stdio::null())
            .output()
            .ok()
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
            .filter(|version| !version.is_empty())
            .unwrap_or_else(|| "Chromium（版本未知）".into())
    }

    /// Runs Chromium headless on `url` in a `window` with `extra` switches; stdout goes to
    /// `name.out`.
    fn run(
        &self,
        url: &str,
        window: Window,
        extra: &[String],
        name: &str,
    ) -> Result<PathBuf, Failure> {
        let out_path = self.logs.join(format!("{name}.out"));
        let err_path = self.logs.join(format!("{name}.log"));
        let create = |path: &Path| {
            std::fs::File::create(path)
                .map_err(|error| Failure(format!("创建 {} 失败：{error}", path.display())))
        };
        let mut command = Command::new(&self.binary);
        command
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--mute-audio",
            ])
            .arg(format!("--user-data-dir={}", self.profile.display()))
            .arg(format!("--virtual-time-budget={VIRTUAL_TIME_MS}"))
            .arg(format!("--window-size={},{}", window.width, window.height))
            .args(extra)
            .arg(url)
            .stdin(Stdio::null())
            .stdout(create(&out_path)?)
            .stderr(create(&err_path)?);
        #[cfg(unix)]
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let mut child = command
            .spawn()
            .map_err(|error| Failure(format!("无法启动 {}：{error}", self.binary.display())))?;
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child
                .try_wait()
                .map_err(|error| Failure(format!("等待 Chromium 失败：{error}")))?
            {
                break status;
            }
            if started.elapsed() > TIMEOUT {
                // The browser and its helper processes share the group we gave it.
                #[cfg(unix)]
                let _ = Command::new("kill")
                    .arg("-KILL")
                    .arg(format!("-{}", child.id()))
                    .status();
                let _ = child.kill();
                let _ = child.wait();
                return Err(Failure(format!(
                    "Chromium 打开 {url} 超过 {} 秒未结束，日志：{}",
                    TIMEOUT.as_secs(),
                    err_path.display()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        if !status.success() {
            let log = std::fs::read_to_string(&err_path).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            return Err(Failure(format!(
                "Chromium 打开 {url} 失败（{status}）：\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            )));
        }
        Ok(out_path)
    }

    /// The DOM of `url` after its scripts ran, as HTML text; also kept as `name.out`.
    pub fn dom(&self, url: &str, name: &str) -> Result<String, Failure> {
        let path = self.run(url, self.window, &["--dump-dom".to_string()], name)?;
        std::fs::read_to_string(&path)
            .map_err(|error| Failure(format!("读取 {} 失败：{error}", path.display())))
    }

    /// A picture of the top `height` pixels of `url`, as wide as the window, saved as `png`.
    pub fn screenshot(&self, url: &str, height: u32, png: &Path) -> Result<(), Failure> {
        let _ = std::fs::remove_file(png);
        let name = png.file_stem().map_or("screenshot".into(), |stem| {
            stem.to_string_lossy().into_owned()
        });
        let window = Window {
            width: self.window.width,
            height,
        };
        self.run(
            url,
            window,
            &[format!("--screenshot={}", png.display())],
            &format!("screenshot-{name}"),
        )?;
        let bytes = std::fs::read(png).unwrap_or_default();
        if !bytes.starts_with(b"\x89PNG\r\n\x1a\n") || bytes.len() < 10_000 {
            return Err(Failure(format!("截图 {} 不是有效的 PNG", png.display())));
        }
        Ok(())
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_percent_encoded() {
        assert_eq!(
            file_url(Path::new("/work/main/target/book/html/a b.html")),
            "file:///work/main/target/book/html/a%20b.html"
        );
        assert_eq!(query_value("不变量"), "%E4%B8%8D%E5%8F%98%E9%87%8F");
        assert_eq!(query_value("a/b c"), "a%2Fb%20c");
    }
}
