//! `cargo xtask` inside a practice workspace: `test [NN] [--group G]` and `restore-tests`.
//!
//! The workspace is found at run time, from the current directory upward, never from a path
//! baked in at build time: a copied or moved workspace always judges itself.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::cargo::{CargoRunner, RunError};
use crate::exit::Exit;
use crate::id::ChapterId;
use crate::process::{die_with_parent, Cancel};
use crate::spec::{content_hash, ChapterTests, Stamp, LEARNER_PACKAGE, STAMP_FILE, STAMP_FORMAT};

/// Pristine copies of the injected tests, so `restore-tests` needs no network and no course repo.
pub const PRISTINE_DIR: &str = "xtask/pristine-tests";

const USAGE: &str =
    "用法：cargo xtask test [章节] [--group 组名]｜cargo xtask watch [章节]｜cargo xtask restore-tests";

const HELP: &str = "\
在练习工作区里运行本章的验收测试，逐组显示 k/n。

用法：
  cargo xtask test [章节] [--group 组名]   运行测试组（默认本工作区的章节、全部组）
  cargo xtask watch [章节]                 保存文件后自动重跑当前 Lab 的测试组，通过后进入下一个
  cargo xtask restore-tests                把注入的测试恢复成原样（不动你的代码）
  cargo xtask --help                       显示本说明

判定只看 libtest 的判定日志和测试进程的退出方式，不看你的代码打印了什么；测试 30 秒内没有结束算超时
（个别测试组在课程清单里有自己的时限；环境变量 COURSE_TEST_TIMEOUT 可以把所有时限统一改成别的秒数）。

退出码：0 全部通过；1 有测试组是红的或代码编译失败；2 用法错误；3 注入的测试被改动过。";

/// What the learner asked for.
#[derive(Debug, PartialEq, Eq)]
enum Request {
    Help,
    Test {
        chapter: Option<ChapterId>,
        group: Option<String>,
    },
    RestoreTests,
    Watch(Vec<String>),
}

/// A refusal: one Chinese line, exit 2.
#[derive(Debug, PartialEq, Eq)]
pub struct Refusal(pub String);

fn refuse<T>(message: impl Into<String>) -> Result<T, Refusal> {
    Err(Refusal(message.into()))
}

fn parse_args(args: &[String]) -> Result<Request, Refusal> {
    let Some((command, rest)) = args.split_first() else {
        return refuse(format!("缺少命令。{USAGE}"));
    };
    if rest.iter().any(|arg| arg == "--help" || arg == "-h") {
        return Ok(Request::Help);
    }
    match command.as_str() {
        "--help" | "-h" | "help" => Ok(Request::Help),
        "restore-tests" if rest.is_empty() => Ok(Request::RestoreTests),
        "restore-tests" => refuse(format!("restore-tests 不接受参数。{USAGE}")),
        "watch" => match rest {
            [] => Ok(Request::Watch(Vec::new())),
            [chapter] => match chapter.parse::<ChapterId>() {
                Ok(id) => Ok(Request::Watch(vec![id.to_string()])),
                Err(error) => refuse(error.to_string()),
            },
            _ => refuse(format!("watch 只接受一个章节参数。{USAGE}")),
        },
        "test" => {
            let mut chapter = None;
            let mut group = None;
            let mut rest = rest.iter();
            while let Some(arg) = rest.next() {
                match arg.as_str() {
                    "--group" => match rest.next() {
                        Some(name) if !name.starts_with('-') => group = Some(name.clone()),
                        _ => return refuse(format!("--group 后面要写组名。{USAGE}")),
                    },
                    value if value.starts_with("--group=") => {
                        group = Some(value["--group=".len()..].to_string())
                    }
                    value if value.starts_with('-') && value.parse::<ChapterId>().is_err() => {
                        return refuse(format!("无法识别的选项 {}。{USAGE}", shown(value)))
                    }
                    value if chapter.is_none() => {
                        chapter = Some(value.parse().map_err(|e| Refusal(format!("{e}")))?)
                    }
                    value => return refuse(format!("多余的参数 {}。{USAGE}", shown(value))),
                }
            }
            Ok(Request::Test { chapter, group })
        }
        other => refuse(format!("练习工作区没有 {} 命令。{USAGE}", shown(other))),
    }
}

/// An argument echoed back: one line, not a screenful.
fn shown(arg: &str) -> String {
    crate::id::one_line(arg, 24)
}

/// The practice workspace containing `start`: the nearest ancestor holding the stamp.
pub fn find_workspace(start: &Path) -> Option<PathBuf> {
    start
        .ancestors()
        .find(|dir| dir.join(STAMP_FILE).is_file() && dir.join("Cargo.toml").is_file())
        .map(Path::to_path_buf)
}

fn load_stamp(root: &Path) -> Result<Stamp, Refusal> {
    let path = root.join(STAMP_FILE);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| Refusal(format!("读取 {} 失败（{e}）", path.display())))?;
    let stamp = Stamp::from_json_bytes(text.as_bytes()).map_err(|error| {
        Refusal(format!(
            "{} 已损坏或来自旧版本的 practice（{error}）；请用 practice 重新生成一个工作区，再把你的代码复制过去",
            path.display()
        ))
    })?;
    if stamp.format != STAMP_FORMAT {
        return refuse(format!(
            "{} 的格式版本是 {}，本工具需要 {STAMP_FORMAT}；请用新版 practice 重新生成工作区",
            path.display(),
            stamp.format
        ));
    }
    Ok(stamp)
}

/// The workspace around the current directory and its stamp.
pub fn locate() -> Result<(PathBuf, Stamp), Refusal> {
    let cwd = std::env::current_dir().map_err(|_| {
        Refusal("当前目录已不存在（可能被删除或替换了）；请重新 cd 进入练习工作区".to_string())
    })?;
    let root = find_workspace(&cwd).ok_or_else(|| {
        Refusal(format!(
            "{} 不在 practice 生成的练习工作区里（向上没有找到 {STAMP_FILE}）；请 cd 到练习目录再运行",
            cwd.display()
        ))
    })?;
    let stamp = load_stamp(&root)?;
    Ok((root, stamp))
}

/// The front end's entry point: `fn main() -> ExitCode { course_runner::practice::main() }`.
pub fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let exit = match parse_args(&args).and_then(run) {
        Ok(exit) => exit,
        Err(Refusal(message)) => {
            let _ = writeln!(io::stderr(), "错误：{message}");
            Exit::Usage
        }
    };
    exit.into()
}

fn run(request: Request) -> Result<Exit, Refusal> {
    match request {
        Request::Help => {
            say(HELP);
            Ok(Exit::Green)
        }
        Request::Watch(args) => {
            let (root, _) = locate()?;
            watch(&root, &args)
        }
        Request::RestoreTests => {
            let (root, stamp) = locate()?;
            restore_tests(&root, &stamp)
        }
        Request::Test { chapter, group } => {
            let (root, stamp) = locate()?;
            let id = chapter.unwrap_or(stamp.chapter);
            let tests = stamp.chapter_tests(id).ok_or_else(|| {
                Refusal(format!(
                    "本工作区没有第 {id} 章的测试；可选：{}",
                    stamp.chapter_ids().join(" ")
                ))
            })?;
            if let Some(name) = &group {
                if tests.group(name).is_none() {
                    return refuse(format!(
                        "第 {id} 章没有名为 `{}` 的测试组；可选：{}",
                        shown(name),
                        tests.group_names().join("、")
                    ));
                }
            }
            Ok(judge_chapter(&root, &stamp, tests, group.as_deref(), None).unwrap_or(Exit::Red))
        }
    }
}

/// Prints, ignoring a closed pipe (`… | head`) instead of panicking.
fn say(text: &str) {
    let _ = writeln!(io::stdout(), "{text}");
}

/// The run was abandoned before a verdict (watch mode: the learner saved again).
#[derive(Debug, PartialEq, Eq)]
pub struct Cancelled;

/// The one judging path of `cargo xtask test` and `watch`: the integrity check, then the
/// chapter's groups (or one), each printed as `k/n`. `全部通过。` only for a whole green chapter.
pub fn judge_chapter(
    root: &Path,
    stamp: &Stamp,
    tests: &ChapterTests,
    group: Option<&str>,
    cancel: Option<Cancel>,
) -> Result<Exit, Cancelled> {
    let edited = stamp.edited_injected_files(root);
    if !edited.is_empty() {
        for file in &edited {
            let _ = writeln!(
                io::stderr(),
                "注入的测试 {file} 与原样不同，本次结果不可信，不给出判定。"
            );
        }
        let _ = writeln!(
            io::stderr(),
            "运行 cargo xtask restore-tests 恢复原测试（只改测试文件，不动你的代码），再重新运行。"
        );
        return Ok(Exit::Tampered);
    }
    let mut runner = CargoRunner::new(root.to_path_buf());
    runner.show_build = true;
    runner.cancel = cancel;
    let reports = match runner.run_chapter(tests, group) {
        Ok(reports) => {
            // The build succeeded: its registry dependencies can spare the next workspace a
            // cold build.
            crate::deps_cache::fill_after_build(&runner);
            reports
        }
        Err(RunError::Cancelled) => return Err(Cancelled),
        Err(error) => {
            let _ = writeln!(io::stderr(), "错误：{error}");
            return Ok(Exit::Red);
        }
    };
    say(&format!("第 {} 章：{}", tests.id, tests.title));
    for report in &reports {
        say(&format!("  {}", report.summary_line()));
    }
    let green = reports.iter().all(|report| report.is_green());
    match reports.iter().find(|report| !report.is_green()) {
        None if group.is_some() => say(&format!(
            "这一组通过了（只运行了这一组；整章请运行 cargo xtask test {}）。",
            tests.id
        )),
        None => say("全部通过。"),
        Some(red) => say(&format!(
            "完整输出：cargo test -p {LEARNER_PACKAGE} --test {} -- {}",
            tests.target,
            red.spec.prefix()
        )),
    }
    Ok(Exit::from_green(green))
}

/// Hands over to the `course-watch` package, built only now: the file watcher never slows
/// down `cargo xtask test`.
fn watch(root: &Path, args: &[String]) -> Result<Exit, Refusal> {
    let mut command = CargoRunner::new(root.to_path_buf()).command("run");
    command
        .args(["--quiet", "-p", "course-watch", "--"])
        .args(args);
    // Killing `cargo xtask` (an editor, an agent harness) must end watch and its tests too.
    die_with_parent(&mut command);
    let status = command
        .status()
        .map_err(|e| Refusal(format!("无法启动 cargo（{e}）")))?;
    Ok(match status.code() {
        Some(0) => Exit::Green,
        Some(2) => Exit::Usage,
        Some(3) => Exit::Tampered,
        _ => Exit::Red,
    })
}

fn restore_tests(root: &Path, stamp: &Stamp) -> Result<Exit, Refusal> {
    let edited = stamp.edited_injected_files(root);
    if edited.is_empty() {
        say("注入的测试都是原样，无需恢复。");
        return Ok(Exit::Green);
    }
    for file in &edited {
        let name = Path::new(file)
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        let pristine = root.join(PRISTINE_DIR).join(&name);
        let bytes = std::fs::read(&pristine)
            .ok()
            .filter(|bytes| Some(&content_hash(bytes)) == stamp.injected.get(file.as_str()));
        let Some(bytes) = bytes else {
            return refuse(format!(
                "{} 也被改动或删除了，无法恢复 {file}；请用 practice 重新生成工作区，再把你的代码复制过去",
                pristine.display()
            ));
        };
        let target = root.join(file);
        // The tests folder itself may be gone; restoring recreates it.
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| Refusal(format!("重建 {} 失败（{e}）", parent.display())))?;
        }
        std::fs::write(&target, bytes).map_err(|e| Refusal(format!("写回 {file} 失败（{e}）")))?;
        say(&format!("已恢复 {file}"));
    }
    Ok(Exit::Green)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|arg| arg.to_string()).collect()
    }

    #[test]
    fn parses_test_requests() {
        assert_eq!(
            parse_args(&args(&["test", "6", "--group", "registry"])),
            Ok(Request::Test {
                chapter: "06".parse().ok(),
                group: Some("registry".into())
            })
        );
        assert_eq!(
            parse_args(&args(&["test"])),
            Ok(Request::Test {
                chapter: None,
                group: None
            })
        );
        assert_eq!(parse_args(&args(&["test", "--help"])), Ok(Request::Help));
        assert_eq!(
            parse_args(&args(&["restore-tests"])),
            Ok(Request::RestoreTests)
        );
    }

    #[test]
    fn refuses_with_one_chinese_line() {
        for bad in [
            vec![],
            vec!["build"],
            vec!["test", ""],
            vec!["test", "06", "07"],
            vec!["test", "--group"],
            vec!["test", "--verbose"],
        ] {
            let Err(Refusal(message)) = parse_args(&args(&bad)) else {
                panic!("{bad:?} must be refused");
            };
            assert!(!message.contains('\n'), "{bad:?}: one line: {message}");
        }
        let Err(Refusal(message)) = parse_args(&args(&["test", &"9".repeat(100_000)])) else {
            panic!("a huge id is refused");
        };
        assert!(message.chars().count() < 120, "shortened: {message}");
    }

    #[test]
    fn finds_the_workspace_from_any_subdirectory() {
        let dir = std::env::temp_dir().join(format!("course-runner-find-{}", std::process::id()));
        let nested = dir.join("pi-course/src");
        std::fs::create_dir_all(&nested).unwrap();
        std::fs::write(dir.join(STAMP_FILE), "{}").unwrap();
        std::fs::write(dir.join("Cargo.toml"), "").unwrap();
        assert_eq!(find_workspace(&nested), Some(dir.clone()));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(find_workspace(&nested), None);
    }
}
