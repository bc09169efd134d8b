//! The learner's judge, met the way a learner (or a coding agent told to "make it green") meets
//! it: learner code that forges libtest's lines, prints without newlines or in bulk, crashes,
//! loops forever, or outlives a killed `cargo xtask`; tests edited under `watch`; a lock file
//! that no longer fits.
//!
//! One practice workspace of chapter 03 serves every test (one dependency build): its copy of
//! chapter 02's `EventStream` is the reference, so chapter 02's tests are green, and each test
//! plants its misbehaviour at the top of `EventStream::push`. The tests take turns on the
//! workspace through a mutex.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use course_cli::runner::Exit;

const BIN: &str = env!("CARGO_BIN_EXE_practice");
const STREAM: &str = "pi-course/src/event_stream.rs";
const TESTS: &str = "pi-course/tests/02_event_stream.rs";
/// The one test the planted code picks on; every other test of the group passes.
const VICTIM: &str = "queue::queued_events_arrive_in_push_order";
/// Where the planted endless loop writes its process id (relative to the test's working
/// directory, the learner crate).
const PID_FILE: &str = "pi-course/hang.pid";

struct Workspace {
    _scratch: tempfile::TempDir,
    root: PathBuf,
    reference: String,
}

fn workspace() -> MutexGuard<'static, Workspace> {
    static WORKSPACE: OnceLock<Mutex<Workspace>> = OnceLock::new();
    WORKSPACE
        .get_or_init(|| {
            let scratch = tempfile::tempdir().unwrap();
            let root = scratch.path().join("w");
            // No dependency cache: this suite builds into its own shared target directory.
            let output = Command::new(BIN)
                .arg("03")
                .arg(&root)
                .env("PI_COURSE_DEPS_CACHE", scratch.path().join("no-deps-cache"))
                .output()
                .unwrap();
            assert!(output.status.success(), "practice 03 writes a workspace");
            let reference = fs::read_to_string(root.join(STREAM)).unwrap();
            Mutex::new(Workspace {
                _scratch: scratch,
                root,
                reference,
            })
        })
        .lock()
        // A failed test leaves nothing the next one depends on: each plants its own code.
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Workspace {
    /// The reference `EventStream` with `code` as the first statement of `push`.
    fn plant(&self, code: &str) {
        let head = "    pub fn push(&self, event: T) {\n";
        assert_eq!(self.reference.matches(head).count(), 1, "push 的开头唯一");
        let planted = self
            .reference
            .replacen(head, &format!("{head}        {code}\n"), 1);
        fs::write(self.root.join(STREAM), planted).unwrap();
        let _ = fs::remove_file(self.root.join(PID_FILE));
    }

    /// `cargo xtask <args>` in the workspace, with a short time limit unless `env` sets one.
    fn command(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut command = Command::new(cargo);
        command
            .arg("xtask")
            .args(args)
            .current_dir(&self.root)
            .env_remove("RUSTFLAGS")
            // Reused across runs of this suite: only the learner crate rebuilds.
            .env("CARGO_TARGET_DIR", shared_target())
            .env("COURSE_TEST_TIMEOUT", "2");
        for (key, value) in env {
            command.env(key, value);
        }
        command
    }

    fn xtask(&self, args: &[&str]) -> (Option<i32>, String, String) {
        let Output {
            status,
            stdout,
            stderr,
        } = self.command(args, &[]).output().unwrap();
        (
            status.code(),
            String::from_utf8_lossy(&stdout).into_owned(),
            String::from_utf8_lossy(&stderr).into_owned(),
        )
    }

    /// Waits until the planted endless loop has written its pid while `judge` still runs.
    fn hung_test_pid(&self, judge: &mut Child) -> u32 {
        loop {
            if let Ok(text) = fs::read_to_string(self.root.join(PID_FILE)) {
                if let Ok(pid) = text.trim().parse() {
                    return pid;
                }
            }
            if let Some(status) = judge.try_wait().unwrap() {
                panic!("判定进程在测试卡住之前就结束了（{status}）");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn shared_target() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("judge-workspace-build")
}

/// Code that makes only [`VICTIM`] do `action`.
fn in_victim(action: &str) -> String {
    format!("if std::thread::current().name() == Some({VICTIM:?}) {{ {action} }}")
}

fn endless_loop() -> String {
    in_victim(&format!(
        "let _ = std::fs::write({:?}, std::process::id().to_string()); loop {{ std::thread::park(); }}",
        PID_FILE.trim_start_matches("pi-course/")
    ))
}

/// A process that is gone or a zombie waiting to be reaped no longer runs learner code.
fn runs(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
        Err(_) => false,
    }
}

/// Whether `pid` stops running soon; generous, since SIGKILL delivery is asynchronous.
fn ends(pid: u32) -> bool {
    for _ in 0..400 {
        if !runs(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    false
}

const QUEUE_GREEN_BUT_ONE: &str = "queue          Lab 2.1   3/4 ✗";

#[test]
fn forged_libtest_lines_and_exit_0_are_red_and_named() {
    let ws = workspace();
    let names = [
        "queue::pushes_after_the_terminal_are_dropped",
        "queue::queued_events_arrive_in_order_and_the_terminal_completes_result",
        VICTIM,
        "queue::result_waits_for_the_terminal_and_then_always_returns_the_same_value",
    ];
    ws.plant(&format!(
        "for name in {names:?} {{ println!(\"test {{name}} ... ok\"); }} \
         println!(\"\\ntest result: ok. 4 passed; 0 failed\"); std::process::exit(0);"
    ));
    let (code, stdout, _) = ws.xtask(&["test", "02", "--group", "queue"]);
    assert_eq!(
        code,
        Some(Exit::Red.code().into()),
        "伪造的 `test … ok` 行加 exit(0) 不能算通过：{stdout}"
    );
    assert!(
        stdout.contains("queue          Lab 2.1   0/4 ✗"),
        "判定只取自 libtest 的判定日志：{stdout}"
    );
    assert!(
        stdout.contains(
            "首个失败 queue::pushes_after_the_terminal_are_dropped：测试进程在 \
             queue::pushes_after_the_terminal_are_dropped 中途退出（退出码 0）：被测代码不能调用 process::exit"
        ),
        "提前退出要点名测试并说明原因：{stdout}"
    );
    assert!(!stdout.contains("通过了"), "{stdout}");
}

#[test]
fn output_without_newline_or_in_bulk_moves_no_verdict() {
    let ws = workspace();
    for (case, code) in [
        (
            "不换行的输出",
            "{ use std::io::Write; let _ = std::io::stdout().write_all(b\"no newline\"); }",
        ),
        (
            "10 MB 输出",
            "{ static ONCE: std::sync::Once = std::sync::Once::new(); ONCE.call_once(|| { \
             use std::io::Write; let _ = std::io::stdout().write_all(&vec![b'x'; 10 << 20]); }); }",
        ),
    ] {
        ws.plant(code);
        let (exit, stdout, _) = ws.xtask(&["test", "02"]);
        assert_eq!(exit, Some(0), "{case}不改变判定：{stdout}");
        assert!(
            stdout.contains("queue          Lab 2.1   4/4 ✓")
                && stdout.contains("waiter         Lab 2.2   6/6 ✓")
                && stdout.ends_with("全部通过。\n"),
            "{case}：正确的代码整章通过：{stdout}"
        );
    }
}

#[test]
fn every_crash_is_red_with_one_line_naming_the_test() {
    let ws = workspace();
    for (action, cause) in [
        ("std::process::abort();", "信号 SIGABRT"),
        ("std::process::exit(0);", "退出码 0"),
        (
            "fn deep(n: u64) -> u64 { if std::hint::black_box(n) == u64::MAX { 0 } else { deep(n + 1) + 1 } } \
             std::hint::black_box(deep(0));",
            "栈溢出，信号 SIGABRT",
        ),
        (
            "let _ = std::process::Command::new(\"kill\").args([\"-9\", &std::process::id().to_string()]).status();",
            "信号 SIGKILL",
        ),
    ] {
        ws.plant(&in_victim(action));
        let (code, stdout, _) = ws.xtask(&["test", "02", "--group", "queue"]);
        assert_eq!(code, Some(Exit::Red.code().into()), "{cause}：{stdout}");
        assert!(
            stdout.contains(QUEUE_GREEN_BUT_ONE),
            "只有崩溃的那个测试是红的，其余单独重跑后通过（{cause}）：{stdout}"
        );
        assert!(
            stdout.contains(&format!(
                "首个失败 {VICTIM}：测试进程在 {VICTIM} 中途退出（{cause}"
            )),
            "崩溃要点名当时在跑的测试和原因（{cause}）：{stdout}"
        );
    }
}

#[test]
fn an_endless_loop_times_out_with_its_test_named() {
    let ws = workspace();
    ws.plant(&endless_loop());
    let (code, stdout, _) = ws.xtask(&["test", "02", "--group", "queue"]);
    assert_eq!(code, Some(Exit::Red.code().into()), "{stdout}");
    assert!(stdout.contains(QUEUE_GREEN_BUT_ONE), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "首个失败 {VICTIM}：超时（2 秒）：{VICTIM} 没有结束，可能是死循环"
        )),
        "超时要点名卡住的测试：{stdout}"
    );
    let pid: u32 = fs::read_to_string(ws.root.join(PID_FILE))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(!runs(pid), "超时的测试进程必须被杀掉，不能留在后台");
}

#[test]
fn a_group_timeout_from_the_manifest_applies_and_the_variable_still_overrides_it() {
    let ws = workspace();
    ws.plant(&endless_loop());
    // The stamp carries the manifest's per-group limits; give the queue group 1 second.
    let stamp_path = ws.root.join(".practice.json");
    let original = fs::read_to_string(&stamp_path).unwrap();
    let mut stamp: serde_json::Value = serde_json::from_str(&original).unwrap();
    let groups = stamp["chapters"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|chapter| chapter["id"] == "02")
        .unwrap()["groups"]
        .as_array_mut()
        .unwrap();
    for group in groups.iter_mut().filter(|group| group["name"] == "queue") {
        group["timeout"] = serde_json::json!(1);
    }
    fs::write(&stamp_path, serde_json::to_string(&stamp).unwrap()).unwrap();

    let mut own_limit = ws.command(&["test", "02", "--group", "queue"], &[]);
    own_limit.env_remove("COURSE_TEST_TIMEOUT");
    let output = own_limit.output().unwrap();
    let own_stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let overridden = ws.xtask(&["test", "02", "--group", "queue"]).1;
    fs::write(&stamp_path, original).unwrap();

    assert!(
        own_stdout.contains(&format!("首个失败 {VICTIM}：超时（1 秒）")),
        "没有 COURSE_TEST_TIMEOUT 时用清单里这一组的 timeout：{own_stdout}"
    );
    assert!(
        overridden.contains(&format!("首个失败 {VICTIM}：超时（2 秒）")),
        "COURSE_TEST_TIMEOUT 压过清单里的 timeout：{overridden}"
    );
}

#[cfg(target_os = "linux")]
#[test]
fn a_killed_judge_leaves_no_test_running() {
    let ws = workspace();
    ws.plant(&endless_loop());
    for signal in ["-KILL", "-TERM", "-INT"] {
        let mut judge = ws
            .command(
                &["test", "02", "--group", "queue"],
                &[("COURSE_TEST_TIMEOUT", "600")],
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let test = ws.hung_test_pid(&mut judge);
        let status = Command::new("kill")
            .arg(signal)
            .arg(judge.id().to_string())
            .status()
            .unwrap();
        assert!(status.success());
        judge.wait().unwrap();
        assert!(
            ends(test),
            "cargo xtask 收到 {signal} 后，测试进程也必须结束，不能成为孤儿"
        );
        let _ = fs::remove_file(ws.root.join(PID_FILE));
    }
}

/// Reads a child's stdout lines on a thread, so the test can wait for a line without blocking
/// forever on a silent child.
fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    let stdout = child.stdout.take().unwrap();
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    receiver
}

/// Lines until one contains `wanted`; all lines seen, or a panic naming `rule` if the output
/// ended (or went silent for minutes) first.
fn until(lines: &mpsc::Receiver<String>, wanted: &str, rule: &str) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        match lines.recv_timeout(Duration::from_secs(300)) {
            Ok(line) => {
                let found = line.contains(wanted);
                seen.push(line);
                if found {
                    return seen;
                }
            }
            Err(_) => panic!(
                "{rule}：没有等到 `{wanted}`，已有输出：\n{}",
                seen.join("\n")
            ),
        }
    }
}

#[cfg(target_os = "linux")]
#[test]
fn watch_abandons_a_hung_run_on_the_next_save() {
    let ws = workspace();
    ws.plant(&endless_loop());
    let mut watch = ws
        .command(&["watch", "02"], &[("COURSE_TEST_TIMEOUT", "600")])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = lines_of(&mut watch);
    until(&lines, "监视", "watch 先报告它在监视哪里");
    let hung = ws.hung_test_pid(&mut watch);
    ws.plant("");
    let seen = until(
        &lines,
        "全部通过。",
        "保存修好的代码后，watch 重新运行并整章通过",
    );
    let _ = Command::new("kill").arg(watch.id().to_string()).status();
    watch.wait().unwrap();
    assert!(
        seen.iter()
            .any(|line| line == "检测到新的保存：停止这次运行，重新开始。"),
        "卡住的运行要被新的保存取消：{seen:?}"
    );
    assert!(!runs(hung), "被取消的运行，其测试进程必须被杀掉");
    let passed: Vec<&String> = seen.iter().filter(|l| l.contains("全部通过")).collect();
    assert_eq!(passed.len(), 1, "只有整章通过才说全部通过：{seen:?}");
}

#[test]
fn watch_refuses_edited_tests_like_test_does() {
    let ws = workspace();
    ws.plant("");
    let path = ws.root.join(TESTS);
    let pristine = fs::read_to_string(&path).unwrap();
    let head = "    async fn queued_events_arrive_in_push_order() {\n";
    assert_eq!(pristine.matches(head).count(), 1);
    fs::write(
        &path,
        pristine.replacen(head, &format!("{head}        return;\n"), 1),
    )
    .unwrap();

    let (test_code, test_out, test_err) = ws.xtask(&["test", "02"]);
    let (watch_code, watch_out, watch_err) = ws.xtask(&["watch", "02"]);
    let restored = ws.xtask(&["restore-tests"]);
    assert_eq!(
        restored.0,
        Some(0),
        "restore-tests 恢复测试：{}",
        restored.2
    );

    let refusal = format!("注入的测试 {TESTS} 与原样不同，本次结果不可信，不给出判定。");
    for (command, code, stdout, stderr) in [
        ("test", test_code, test_out, test_err),
        ("watch", watch_code, watch_out, watch_err),
    ] {
        assert_eq!(
            code,
            Some(Exit::Tampered.code().into()),
            "{command}：测试被改动时退出码是 3：{stdout}{stderr}"
        );
        assert!(
            stderr.contains(&refusal),
            "{command} 给出同一句拒绝：{stderr}"
        );
        assert!(!stdout.contains("通过"), "{command} 不能给出判定：{stdout}");
    }
}

#[test]
fn the_alias_is_locked_so_the_lock_never_moves() {
    let ws = workspace();
    ws.plant("");
    let lock = ws.root.join("Cargo.lock");
    let pinned = fs::read(&lock).unwrap();
    let manifest = ws.root.join("pi-course/Cargo.toml");
    let learner = fs::read_to_string(&manifest).unwrap();

    fs::remove_file(&lock).unwrap();
    let (missing, _, missing_err) = ws.xtask(&["test", "02"]);
    let recreated = lock.exists();
    fs::write(&lock, &pinned).unwrap();

    assert!(learner.contains("[dependencies]\n"));
    fs::write(
        &manifest,
        learner.replacen("[dependencies]\n", "[dependencies]\nitoa = \"1\"\n", 1),
    )
    .unwrap();
    let (added, _, added_err) = ws.xtask(&["test", "02"]);
    let lock_after = fs::read(&lock).unwrap();
    fs::write(&manifest, &learner).unwrap();

    assert_ne!(
        missing,
        Some(0),
        "缺少 Cargo.lock 时不能运行：{missing_err}"
    );
    assert!(!recreated, "--locked：缺少的 Cargo.lock 不会被重新生成");
    assert!(
        missing_err.contains("because --locked was passed"),
        "{missing_err}"
    );
    assert_ne!(added, Some(0), "新增依赖时不能运行：{added_err}");
    assert!(
        added_err.contains("because --locked was passed"),
        "{added_err}"
    );
    assert!(
        lock_after == pinned,
        "--locked：钉住的 Cargo.lock 一个字节都不变"
    );
}

#[test]
fn restore_tests_recreates_a_deleted_tests_folder() {
    let ws = workspace();
    let folder = ws.root.join("pi-course/tests");
    let pristine = fs::read(ws.root.join(TESTS)).unwrap();
    fs::remove_dir_all(&folder).unwrap();
    let (code, stdout, stderr) = ws.xtask(&["restore-tests"]);
    assert_eq!(code, Some(0), "删掉整个 tests 目录也能恢复：{stderr}");
    assert!(stdout.contains(&format!("已恢复 {TESTS}")), "{stdout}");
    assert_eq!(
        fs::read(ws.root.join(TESTS)).unwrap(),
        pristine,
        "恢复的是原样的测试"
    );
}
