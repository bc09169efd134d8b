//! Held-out tests for chapter 12 (instructor only): other names and depths, a zero budget, a
//! symlinked directory inside a skill, hyphenated template names, and a hanging `after` hook.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use std::time::Duration;

use pi_course::extensions::*;
use pi_course::resources::*;
use pi_course::tool::{
    execute_tool_call, field, object_schema, string_value, CallContext, Tool, ToolOutput,
    ToolRegistry,
};
use pi_course::types::{text, ToolCall};
use serde_json::json;

struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn temp() -> (Scratch, PathBuf) {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "pi-course-12-held-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("测试需要能在系统临时目录里建目录");
    let root = dir.canonicalize().expect("临时目录必须可以 canonicalize");
    (Scratch(dir), root)
}

fn write(path: &Path, content: &str) {
    fs::create_dir_all(path.parent().expect("文件必须有父目录")).expect("无法创建目录");
    fs::write(path, content).expect("无法写入测试文件");
}

#[test]
fn claude_at_the_root_agents_deeper_and_a_zero_budget() {
    let (_dir, root) = temp();
    write(&root.join("CLAUDE.md"), "claude root\n");
    write(&root.join("svc/api/v2/AGENTS.md"), "v2\n");
    let found = discover_instructions(&root, &root.join("svc/api/v2"), 100).expect("发现不能失败");
    let paths: Vec<&str> = found.files.iter().map(|file| file.path.as_str()).collect();
    assert_eq!(
        paths,
        ["CLAUDE.md", "svc/api/v2/AGENTS.md"],
        "没有 AGENTS.md 的层用 CLAUDE.md，根在前"
    );

    let at_root = discover_instructions(&root, &root, 100).expect("工作目录就是根目录时也要发现");
    assert_eq!(at_root.files.len(), 1, "工作目录就是根目录时只读根目录一层");

    let none = discover_instructions(&root, &root.join("svc/api/v2"), 0).expect("发现不能失败");
    assert!(none.files.is_empty(), "预算为 0 时不保留任何文件");
    assert_eq!(
        none.omitted,
        ["CLAUDE.md", "svc/api/v2/AGENTS.md"],
        "预算为 0 时所有文件都记为省略"
    );
}

#[test]
fn a_symlinked_directory_inside_a_skill_cannot_lead_out() {
    let (_dir, root) = temp();
    write(
        &root.join("skills/release/SKILL.md"),
        "---\nname: release\ndescription: Cut a release\n---\nSteps\n",
    );
    write(&root.join("skills/release/docs/steps.md"), "one\n");
    write(&root.join("private/keys.md"), "secret\n");
    std::os::unix::fs::symlink(root.join("private"), root.join("skills/release/refs"))
        .expect("无法创建符号链接");
    let catalog = discover_skills(&[root.join("skills")]);

    let active =
        activate_skill(&catalog, "release", &["./docs/steps.md"]).expect("目录内的文件必须能读");
    assert_eq!(active.body, "Steps\n", "正文是 front matter 之后的文字");
    assert_eq!(
        active.files[0].source,
        root.join("skills/release/docs/steps.md"),
        "source 是真实路径"
    );

    let error = activate_skill(&catalog, "release", &["refs/keys.md"])
        .expect_err("经由符号链接目录逃出的文件必须拒绝");
    assert_eq!(
        error.to_string(),
        format!("{SKILL_FILE_OUTSIDE}：refs/keys.md"),
        "错误必须说出请求的路径"
    );
}

#[test]
fn hyphenated_names_render_and_a_typo_is_named() {
    let arguments = [("pr-id", "42"), ("base_branch", "main")]
        .into_iter()
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect();
    assert_eq!(
        render_template("PR {{pr-id}} onto {{base_branch}} ({{pr-id}})", &arguments),
        Ok("PR 42 onto main (42)".to_string()),
        "名字可以含 - 和 _，同一个名字每处都替换"
    );
    assert_eq!(
        render_template("PR {{pr_id}}", &arguments),
        Err(TemplateError::Missing("pr_id".into())),
        "缺少的变量按名字拒绝"
    );
}

#[tokio::test]
async fn a_hanging_after_hook_times_out_without_touching_the_result() {
    let schema = object_schema((field("path", string_value()),));
    let cat = Tool::new(
        "cat",
        "Print a file",
        schema,
        |(path,), _context| async move { Ok(ToolOutput::text(&format!("contents of {path}"))) },
    )
    .shared();
    let mut host = ExtensionHost::new(ToolRegistry::new(vec![cat]).expect("不重名"))
        .with_hook_timeout(Duration::from_millis(40));
    struct Slow;
    impl Extension for Slow {
        fn register(&self, cx: &mut ExtensionContext) -> Result<(), String> {
            cx.on_after_tool_result(|_call: ToolCall, _outcome| std::future::pending());
            Ok(())
        }
    }
    let source = ExtensionSource {
        id: "slow-audit".into(),
        location: "/x".into(),
    };
    assert_eq!(
        load_extension(
            &mut host,
            &source,
            |_| true,
            |_| Ok(Box::new(Slow) as Box<dyn Extension>)
        ),
        Ok(LoadOutcome::Active),
        "受信任的扩展必须加载"
    );
    let call = ToolCall {
        id: "c-77".into(),
        name: "cat".into(),
        arguments: json!({"path": "a.txt"}),
        raw_arguments: None,
    };
    let result = tokio::time::timeout(
        Duration::from_secs(1),
        execute_tool_call(&call, &host.registry(), CallContext::default()),
    )
    .await
    .expect("挂住的 after hook 不能挂住调用");
    assert_eq!(
        (
            result.tool_call_id.as_str(),
            result.is_error,
            result.content.clone()
        ),
        ("c-77", false, vec![text("contents of a.txt")]),
        "after hook 超时不能改变结果"
    );
    let diagnostics: Vec<(String, String, HookPoint, FailureKind)> = host
        .diagnostics()
        .into_iter()
        .map(|d| (d.extension_id, d.call_id, d.hook, d.kind))
        .collect();
    assert_eq!(
        diagnostics,
        [(
            "slow-audit".to_string(),
            "c-77".to_string(),
            HookPoint::After,
            FailureKind::Timeout
        )],
        "after hook 超时必须留下一条诊断"
    );
}
