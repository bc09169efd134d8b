//! Chapter 12 acceptance tests: instructions, skills, activation, templates and the resource
//! section, the trust gate, and hooks. One `mod` per group; group k is Lab 12.k.

use std::fs;
use std::path::{Path, PathBuf};

use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh directory per test, removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A fresh directory and its canonical path, so expected paths compare equal.
fn temp() -> (Scratch, PathBuf) {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "pi-course-12-{}-{}",
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

fn skill_text(name: &str, description: &str, body: &str) -> String {
    format!("---\nname: {name}\ndescription: {description}\n---\n{body}")
}

mod instructions {
    use super::*;
    use pi_course::resources::*;

    #[test]
    fn root_first_one_file_per_directory_claude_only_without_agents() {
        let (_dir, root) = temp();
        write(&root.join("AGENTS.md"), "root rules\n");
        write(&root.join("CLAUDE.md"), "ignored: AGENTS.md wins here\n");
        write(&root.join("crates/CLAUDE.md"), "crates rules\n");
        write(&root.join("crates/pi/AGENTS.md"), "pi rules\n");
        write(&root.join("crates/pi/src/main.rs"), "fn main() {}\n");
        write(&root.join("docs/AGENTS.md"), "not on the way\n");

        let found = discover_instructions(&root, &root.join("crates/pi/src"), 1024)
            .expect("工作目录在根目录之内，发现不能失败");
        let paths: Vec<&str> = found.files.iter().map(|file| file.path.as_str()).collect();
        assert_eq!(
            paths,
            ["AGENTS.md", "crates/CLAUDE.md", "crates/pi/AGENTS.md"],
            "说明文件必须从根目录到工作目录、根在前，每层一个，只有没有 AGENTS.md 时才用 CLAUDE.md"
        );
        let contents: Vec<&str> = found
            .files
            .iter()
            .map(|file| file.content.as_str())
            .collect();
        assert_eq!(
            contents,
            ["root rules\n", "crates rules\n", "pi rules\n"],
            "没有超出预算的文件必须原样保留"
        );
        assert!(
            found.files.iter().all(|file| !file.truncated) && found.omitted.is_empty(),
            "没有超出预算时不能标记截断或省略"
        );
    }

    #[test]
    fn budget_cuts_on_a_character_boundary_and_omits_the_rest() {
        let (_dir, root) = temp();
        write(&root.join("AGENTS.md"), "规则一\n");
        write(&root.join("a/AGENTS.md"), "规则二二\n");
        write(&root.join("a/b/AGENTS.md"), "three\n");
        // 10 bytes: "规则一\n" (10) fills it exactly; nothing of the next file fits.
        let exact = discover_instructions(&root, &root.join("a/b"), 10).expect("发现不能失败");
        assert_eq!(exact.files.len(), 1, "预算正好用完时只保留第一个文件");
        assert!(!exact.files[0].truncated, "正好装下的文件不算截断");
        assert_eq!(
            exact.omitted,
            ["a/AGENTS.md", "a/b/AGENTS.md"],
            "预算用完后找到的文件必须按根在前的顺序记为省略"
        );

        // 15 bytes: 10 for the first, 5 left; "规则二二\n" is cut to "规" (3 bytes), not mid-character.
        let cut = discover_instructions(&root, &root.join("a/b"), 15).expect("发现不能失败");
        assert_eq!(
            cut.files.len(),
            2,
            "还有预算时，下一个文件必须保留能装下的前缀"
        );
        assert_eq!(
            cut.files[1].content, "规",
            "截断必须落在字符边界上，不能切开一个汉字"
        );
        assert!(cut.files[1].truncated, "被截断的文件必须标记 truncated");
        assert_eq!(cut.budget, 15, "结果必须记下所用的预算");
        assert_eq!(cut.omitted, ["a/b/AGENTS.md"], "截断之后的文件必须记为省略");
    }

    #[test]
    fn a_sibling_whose_name_extends_the_root_is_not_below_it() {
        let (_dir, base) = temp();
        let root = base.join("app");
        write(&root.join("AGENTS.md"), "app\n");
        write(&base.join("app-old/AGENTS.md"), "old\n");
        let error = discover_instructions(&root, &base.join("app-old"), 1024)
            .expect_err("app-old 不在 app 之下，必须拒绝");
        assert!(
            error.to_string().contains(NOT_UNDER_ROOT),
            "路径比较必须按组件而不是按字符串前缀，实际错误：{error}"
        );
    }

    #[test]
    fn a_symlinked_working_directory_is_judged_by_where_it_points() {
        let (_dir, base) = temp();
        let root = base.join("project");
        write(&root.join("AGENTS.md"), "project\n");
        write(&base.join("elsewhere/AGENTS.md"), "elsewhere\n");
        std::os::unix::fs::symlink(base.join("elsewhere"), root.join("link"))
            .expect("无法创建符号链接");
        let error = discover_instructions(&root, &root.join("link"), 1024)
            .expect_err("指向根目录之外的符号链接不能当作根目录之内的工作目录");
        assert!(
            error.to_string().contains(NOT_UNDER_ROOT),
            "必须先 canonicalize 再比较，实际错误：{error}"
        );

        write(&root.join("real/AGENTS.md"), "real\n");
        std::os::unix::fs::symlink(root.join("real"), base.join("outside-link"))
            .expect("无法创建符号链接");
        let found = discover_instructions(&root, &base.join("outside-link"), 1024)
            .expect("真实位置在根目录之内的工作目录必须接受");
        let paths: Vec<&str> = found.files.iter().map(|file| file.path.as_str()).collect();
        assert_eq!(
            paths,
            ["AGENTS.md", "real/AGENTS.md"],
            "符号链接按它的真实位置走路径"
        );
    }
}

mod skills {
    use super::*;
    use pi_course::resources::*;

    #[test]
    fn front_matter_subset_reads_two_keys_and_returns_the_body() {
        let text = "---\n# a comment\nname: deploy\n\ndescription: \"Ship it: safely\"\nversion: 2\n---\nBody line\n";
        let (front_matter, body) = parse_front_matter(text).expect("合法的 front matter 必须解析");
        assert_eq!(
            front_matter,
            FrontMatter {
                name: "deploy".into(),
                description: "Ship it: safely".into()
            },
            "值只在第一个冒号处切开，一对引号被去掉，其他键被忽略"
        );
        assert_eq!(body, "Body line\n", "正文是结束的 --- 之后的全部文字");

        let crlf = "---\r\nname: 'x'\r\ndescription: y\r\n---\r\nbody\r\n";
        let (front_matter, body) = parse_front_matter(crlf).expect("CRLF 行尾也必须解析");
        assert_eq!(
            (front_matter.name.as_str(), body),
            ("x", "body\r\n"),
            "单引号也要去掉，CRLF 行尾不能进入值，正文原样保留"
        );
    }

    #[test]
    fn front_matter_errors_name_their_line() {
        let cases = [
            ("name: x\n", 1, "---"),
            ("---\nname: x\ndescription y\n---\n", 3, "key: value"),
            ("---\nname: x\nname: y\ndescription: z\n---\n", 3, "重复"),
            ("---\nname: x\ndescription: |\n  more\n---\n", 3, "块标量"),
            ("---\nname: x\ndescription: \"\"\n---\n", 4, "不能为空"),
            ("---\ndescription: z\n---\n", 3, "缺少 name"),
            ("---\nname: x\ndescription: z\n", 4, "结束"),
        ];
        for (text, line, words) in cases {
            let Err(error) = parse_front_matter(text) else {
                panic!("不合规的 front matter 必须拒绝（应含“{words}”）：{text:?}");
            };
            assert_eq!(
                error.line, line,
                "错误必须指出出错的行（{words}）：{text:?}"
            );
            assert!(
                error.to_string().starts_with(&format!("第 {line} 行："))
                    && error.message.contains(words),
                "错误信息必须以行号开头并说出原因（应含“{words}”），实际是：{error}"
            );
        }
    }

    #[test]
    fn catalog_is_sorted_by_name_and_earlier_roots_win() {
        let (_dir, base) = temp();
        let project = base.join("project-skills");
        let user = base.join("user-skills");
        write(
            &project.join("zeta/SKILL.md"),
            &skill_text("zeta", "Project zeta", "z"),
        );
        write(
            &project.join("deploy/SKILL.md"),
            &skill_text("deploy", "Project deploy", "p"),
        );
        write(
            &user.join("deploy/SKILL.md"),
            &skill_text("deploy", "User deploy", "u"),
        );
        write(
            &user.join("alpha/SKILL.md"),
            &skill_text("alpha", "User alpha", "a"),
        );
        write(&user.join("notes/README.md"), "not a skill");

        let catalog = discover_skills(&[project.clone(), base.join("missing"), user.clone()]);
        let listed: Vec<(&str, &str)> = catalog
            .skills
            .iter()
            .map(|skill| (skill.name.as_str(), skill.description.as_str()))
            .collect();
        assert_eq!(
            listed,
            [
                ("alpha", "User alpha"),
                ("deploy", "Project deploy"),
                ("zeta", "Project zeta")
            ],
            "目录按名字排序；同名技能以先给出的根目录为准；不存在的根目录跳过"
        );
        assert_eq!(
            catalog.get("deploy").map(|skill| skill.dir.clone()),
            Some(project.join("deploy")),
            "技能的目录必须是它所在的 canonical 目录"
        );
        assert!(catalog.problems.is_empty(), "没有坏文件时不能有问题记录");
    }

    #[test]
    fn a_bad_skill_is_a_problem_not_a_failure() {
        let (_dir, root) = temp();
        write(
            &root.join("good/SKILL.md"),
            &skill_text("good", "Works", "body"),
        );
        write(&root.join("bad/SKILL.md"), "---\nname bad\n---\n");
        let catalog = discover_skills(std::slice::from_ref(&root));
        let names: Vec<&str> = catalog
            .skills
            .iter()
            .map(|skill| skill.name.as_str())
            .collect();
        assert_eq!(names, ["good"], "一个坏的 SKILL.md 不能挡住其他技能");
        assert_eq!(catalog.problems.len(), 1, "坏的 SKILL.md 必须记成一条问题");
        assert_eq!(
            catalog.problems[0].path,
            root.join("bad/SKILL.md"),
            "问题必须指出是哪个文件"
        );
        assert!(
            catalog.problems[0].message.starts_with("第 2 行："),
            "问题必须带上 front matter 的行号，实际是：{}",
            catalog.problems[0].message
        );
    }
}

mod activation {
    use super::*;
    use pi_course::resources::*;

    #[test]
    fn the_body_is_read_when_the_skill_is_activated() {
        let (_dir, root) = temp();
        let skill_md = root.join("deploy/SKILL.md");
        write(&skill_md, &skill_text("deploy", "Deploy", "old body\n"));
        let catalog = discover_skills(std::slice::from_ref(&root));
        write(&skill_md, &skill_text("deploy", "Deploy", "new body\n"));

        let active = activate_skill(&catalog, "deploy", &[]).expect("目录里的技能必须能启用");
        assert_eq!(
            active.body, "new body\n",
            "正文必须在启用时才读取，不能在发现时缓存"
        );
        assert_eq!(
            active.source, skill_md,
            "source 必须是 SKILL.md 的 canonical 路径"
        );
        assert_eq!(active.name, "deploy", "启用的技能保留目录里的名字");

        let error = activate_skill(&catalog, "nope", &[]).expect_err("未知技能必须拒绝");
        assert_eq!(
            error.to_string(),
            format!("{UNKNOWN_SKILL}：nope"),
            "未知技能的错误必须说出名字"
        );
    }

    #[test]
    fn requested_files_come_with_their_sources_in_request_order() {
        let (_dir, root) = temp();
        write(
            &root.join("deploy/SKILL.md"),
            &skill_text("deploy", "Deploy", "body"),
        );
        write(&root.join("deploy/refs/checklist.md"), "check\n");
        write(&root.join("deploy/notes.md"), "notes\n");
        let catalog = discover_skills(std::slice::from_ref(&root));

        let active = activate_skill(
            &catalog,
            "deploy",
            &["refs/checklist.md", "refs/../notes.md"],
        )
        .expect("技能目录之内的文件必须能读");
        let files: Vec<(&str, PathBuf, &str)> = active
            .files
            .iter()
            .map(|file| {
                (
                    file.path.as_str(),
                    file.source.clone(),
                    file.content.as_str(),
                )
            })
            .collect();
        assert_eq!(
            files,
            [
                ("refs/checklist.md", root.join("deploy/refs/checklist.md"), "check\n"),
                ("refs/../notes.md", root.join("deploy/notes.md"), "notes\n"),
            ],
            "每个文件按请求顺序返回，path 是原样请求，source 是真实路径；只在目录内转一圈的 .. 可以接受"
        );
    }

    #[test]
    fn traversal_absolute_paths_and_symlink_escapes_are_refused() {
        let (_dir, root) = temp();
        write(
            &root.join("deploy/SKILL.md"),
            &skill_text("deploy", "Deploy", "body"),
        );
        write(&root.join("deploy/inside.md"), "inside\n");
        write(&root.join("deploy-old/secret.md"), "secret\n");
        std::os::unix::fs::symlink(
            root.join("deploy-old/secret.md"),
            root.join("deploy/link.md"),
        )
        .expect("无法创建符号链接");
        let catalog = discover_skills(std::slice::from_ref(&root));

        let absolute = root.join("deploy/inside.md").display().to_string();
        let cases = [
            ("../deploy-old/secret.md", SKILL_FILE_OUTSIDE),
            (absolute.as_str(), SKILL_FILE_ABSOLUTE),
            ("link.md", SKILL_FILE_OUTSIDE),
        ];
        for (path, rule) in cases {
            let Err(error) = activate_skill(&catalog, "deploy", &["inside.md", path]) else {
                panic!("{path}：技能目录之外的文件必须拒绝（规则：{rule}）");
            };
            assert_eq!(
                error.to_string(),
                format!("{rule}：{path}"),
                "技能文件必须是相对路径且真实位置在技能目录之内（按组件比较）"
            );
        }
    }
}

mod context {
    use std::collections::BTreeMap;

    use pi_course::resources::*;
    use pi_course::types::{current_system_prompt, AgentMessage, SystemMessage};
    use serde_json::json;

    fn arguments(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect()
    }

    #[test]
    fn render_fills_each_placeholder_once_and_never_rescans_a_value() {
        let rendered = render_template(
            "Review {{file}} for {{focus}}; then {{file}} again.",
            &arguments(&[("file", "{{focus}}.rs"), ("focus", "safety")]),
        )
        .expect("每个占位都有值时必须渲染");
        assert_eq!(
            rendered, "Review {{focus}}.rs for safety; then {{focus}}.rs again.",
            "同一占位每处都替换，插入的值原样保留、不再被当成模板扫描"
        );
        assert_eq!(
            render_template("{ single } and }}", &arguments(&[])),
            Ok("{ single } and }}".to_string()),
            "只有 {{name}} 是占位，其他花括号原样保留"
        );
    }

    #[test]
    fn render_refuses_missing_unused_and_malformed_names() {
        let missing = render_template("Fix {{issue}}", &arguments(&[]));
        assert_eq!(
            missing,
            Err(TemplateError::Missing("issue".into())),
            "缺少的变量必须按名字拒绝"
        );
        let unused = render_template("Fix it", &arguments(&[("isue", "7")]));
        assert_eq!(
            unused,
            Err(TemplateError::Unused("isue".into())),
            "没用到的参数必须按名字拒绝"
        );
        let malformed = render_template("Fix {{ issue }}", &arguments(&[("issue", "7")]));
        assert_eq!(
            malformed,
            Err(TemplateError::Malformed("{{ issue }}".into())),
            "名字里不能有空格等字符"
        );
        let unclosed = render_template("Fix {{issue", &arguments(&[("issue", "7")]));
        assert_eq!(
            unclosed,
            Err(TemplateError::Malformed("{{issue".into())),
            "没有闭合的 {{ 必须拒绝"
        );
        assert_eq!(
            TemplateError::Missing("issue".into()).to_string(),
            "模板变量 issue 没有提供值",
            "错误信息必须说出变量名"
        );
    }

    fn sample() -> (Instructions, SkillCatalog, Vec<ActivatedSkill>) {
        let instructions = Instructions {
            files: vec![
                InstructionFile {
                    path: "AGENTS.md".into(),
                    content: "Root.\n".into(),
                    truncated: false,
                },
                InstructionFile {
                    path: "app/AGENTS.md".into(),
                    content: "App".into(),
                    truncated: true,
                },
            ],
            omitted: vec!["app/x/AGENTS.md".into(), "app/x/y/CLAUDE.md".into()],
            budget: 9,
        };
        let catalog = SkillCatalog {
            skills: vec![
                Skill {
                    name: "deploy".into(),
                    description: "Ship".into(),
                    dir: "/s/deploy".into(),
                },
                Skill {
                    name: "review".into(),
                    description: "Read diffs".into(),
                    dir: "/s/review".into(),
                },
            ],
            problems: vec![],
        };
        let activated = vec![
            ActivatedSkill {
                name: "review".into(),
                source: "/s/review/SKILL.md".into(),
                body: "\nReview body\n".into(),
                files: vec![],
            },
            ActivatedSkill {
                name: "deploy".into(),
                source: "/s/deploy/SKILL.md".into(),
                body: "Deploy body\n".into(),
                files: vec![SkillFile {
                    path: "refs/a.md".into(),
                    source: "/s/deploy/refs/a.md".into(),
                    content: "A\n".into(),
                }],
            },
        ];
        (instructions, catalog, activated)
    }

    #[test]
    fn the_section_has_a_fixed_order_and_says_when_it_was_cut() {
        let (instructions, catalog, activated) = sample();
        let expected = "## AGENTS.md\n\nRoot.\n\n\
                        ## app/AGENTS.md\n\nApp\n\n[说明文件超出 9 字节的预算，后面的内容已截断]\n\n\
                        [预算已用完，这些说明文件没有载入：app/x/AGENTS.md、app/x/y/CLAUDE.md]\n\n\
                        ## Skills\n\n- deploy: Ship\n- review: Read diffs\n\n\
                        ## Skill deploy\n\nDeploy body\n\n### refs/a.md\n\nA\n\n\
                        ## Skill review\n\nReview body";
        assert_eq!(
            format_resource_section(&instructions, &catalog, &activated),
            expected,
            "资源段落的顺序固定：说明文件根在前、截断与省略的提示、技能列表、按名字排序的已启用技能"
        );
        assert_eq!(
            format_resource_section(&Instructions::default(), &SkillCatalog::default(), &[]),
            "",
            "没有任何资源时段落是空字符串"
        );
        let listed_only = format_resource_section(&Instructions::default(), &catalog, &[]);
        assert!(
            !listed_only.contains("Deploy body"),
            "没启用的技能只列出名字和描述，不能带正文"
        );
    }

    #[test]
    fn the_patch_enters_one_named_section_and_an_empty_one_removes_it() {
        let base = AgentMessage::System(SystemMessage {
            content: "You are pi.".into(),
            sections: None,
            timestamp: 1,
        });
        let first = resource_patch("## AGENTS.md\n\nA");
        assert_eq!(
            serde_json::to_value(&first.sections).expect("sections 必须能序列化"),
            json!({RESOURCE_SECTION: "## AGENTS.md\n\nA"}),
            "资源只进入名为 pi-resources 的一个段落，content 保持空"
        );
        assert_eq!(first.content, "", "资源补丁不能追加到 content");
        let second = resource_patch("## AGENTS.md\n\nB");
        let messages = vec![
            base.clone(),
            AgentMessage::System(first),
            AgentMessage::System(second),
        ];
        assert_eq!(
            current_system_prompt(&messages).as_deref(),
            Some("You are pi.\n\n## AGENTS.md\n\nB"),
            "同名段落按名字替换：只剩最新的资源段落"
        );
        assert_eq!(
            serde_json::to_value(&resource_patch("").sections).expect("sections 必须能序列化"),
            json!({RESOURCE_SECTION: null}),
            "空的资源段落必须写成 null，删除旧段落"
        );
        let cleared = vec![
            base,
            AgentMessage::System(resource_patch("## AGENTS.md\n\nA")),
            AgentMessage::System(resource_patch("")),
        ];
        assert_eq!(
            current_system_prompt(&cleared).as_deref(),
            Some("You are pi."),
            "空的资源段落用 null 删除旧段落，不能留下过期的资源"
        );
    }
}

mod trust {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use pi_course::extensions::*;
    use pi_course::tool::ToolRegistry;
    use pi_course::types::ToolCall;

    use super::tool_named;

    struct Registers {
        tools: Vec<&'static str>,
        hooks: usize,
        fail: Option<&'static str>,
    }

    impl Extension for Registers {
        fn register(&self, cx: &mut ExtensionContext) -> Result<(), String> {
            for name in &self.tools {
                cx.register_tool(tool_named(name));
            }
            for _ in 0..self.hooks {
                cx.on_before_tool_call(|_call: ToolCall| async { HookDecision::Allow });
                cx.on_after_tool_result(|_call: ToolCall, _outcome| async { Ok(()) });
            }
            match self.fail {
                Some(message) => Err(message.to_string()),
                None => Ok(()),
            }
        }
    }

    fn source(id: &str) -> ExtensionSource {
        ExtensionSource {
            id: id.into(),
            location: format!("/project/.pi/extensions/{id}").into(),
        }
    }

    fn host() -> ExtensionHost {
        ExtensionHost::new(ToolRegistry::new(vec![tool_named("read")]).expect("核心工具不重名"))
    }

    fn names(host: &ExtensionHost) -> Vec<String> {
        host.tools()
            .list()
            .iter()
            .map(|tool| tool.name().to_string())
            .collect()
    }

    #[test]
    fn an_untrusted_source_is_never_imported() {
        let mut host = host();
        let imports = Arc::new(AtomicUsize::new(0));
        let asked = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&imports);
        let outcome = load_extension(
            &mut host,
            &source("evil"),
            |seen| {
                asked.fetch_add(1, Ordering::SeqCst);
                assert_eq!(seen.id, "evil", "信任判断必须针对要加载的来源");
                false
            },
            move |_| {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok(Box::new(Registers {
                    tools: vec!["evil"],
                    hooks: 1,
                    fail: None,
                }) as Box<dyn Extension>)
            },
        );
        assert_eq!(
            outcome,
            Ok(LoadOutcome::SkippedUntrusted),
            "不受信任的来源必须跳过"
        );
        assert_eq!(asked.load(Ordering::SeqCst), 1, "信任必须被询问一次");
        assert_eq!(
            imports.load(Ordering::SeqCst),
            0,
            "信任检查必须在导入之前：不受信任的来源不能被导入"
        );
        assert_eq!(names(&host), ["read"], "跳过的扩展不能注册任何工具");
        assert!(host.extensions().is_empty(), "跳过的扩展不算已加载");
    }

    #[test]
    fn a_trusted_source_commits_everything_it_registered() {
        let mut host = host();
        let outcome = load_extension(
            &mut host,
            &source("lint"),
            |_| true,
            |_| {
                Ok(Box::new(Registers {
                    tools: vec!["lint", "fmt"],
                    hooks: 2,
                    fail: None,
                }) as Box<dyn Extension>)
            },
        );
        assert_eq!(
            outcome,
            Ok(LoadOutcome::Active),
            "受信任且注册成功的扩展必须生效"
        );
        assert_eq!(
            names(&host),
            ["read", "lint", "fmt"],
            "扩展的工具按注册顺序排在核心工具之后"
        );
        assert_eq!(
            (host.before_hook_count(), host.after_hook_count()),
            (2, 2),
            "扩展注册的 hook 必须全部生效"
        );
        assert_eq!(host.extensions(), ["lint"], "生效的扩展按加载顺序记下 id");
        let again = load_extension(
            &mut host,
            &source("lint"),
            |_| true,
            |_| {
                Ok(Box::new(Registers {
                    tools: vec![],
                    hooks: 0,
                    fail: None,
                }) as Box<dyn Extension>)
            },
        );
        assert_eq!(
            again,
            Err(ExtensionError::DuplicateExtension("lint".into())),
            "同一个扩展不能加载两次"
        );
    }

    #[test]
    fn a_failed_or_conflicting_registration_leaves_no_residue() {
        let cases: [(&str, Registers, ExtensionError); 4] = [
            (
                "fails",
                Registers {
                    tools: vec!["new"],
                    hooks: 1,
                    fail: Some("config missing"),
                },
                ExtensionError::Register {
                    id: "fails".into(),
                    message: "config missing".into(),
                },
            ),
            (
                "core-clash",
                Registers {
                    tools: vec!["new", "read"],
                    hooks: 1,
                    fail: None,
                },
                ExtensionError::DuplicateTool {
                    id: "core-clash".into(),
                    tool: "read".into(),
                },
            ),
            (
                "self-clash",
                Registers {
                    tools: vec!["new", "new"],
                    hooks: 1,
                    fail: None,
                },
                ExtensionError::DuplicateTool {
                    id: "self-clash".into(),
                    tool: "new".into(),
                },
            ),
            (
                "ext-clash",
                Registers {
                    tools: vec!["other", "lint"],
                    hooks: 1,
                    fail: None,
                },
                ExtensionError::DuplicateTool {
                    id: "ext-clash".into(),
                    tool: "lint".into(),
                },
            ),
        ];
        for (id, extension, expected) in cases {
            let mut host = host();
            load_extension(
                &mut host,
                &source("lint"),
                |_| true,
                |_| {
                    Ok(Box::new(Registers {
                        tools: vec!["lint"],
                        hooks: 1,
                        fail: None,
                    }) as Box<dyn Extension>)
                },
            )
            .expect("第一个扩展必须加载成功");
            let outcome = load_extension(
                &mut host,
                &source(id),
                |_| true,
                move |_| Ok(Box::new(extension) as Box<dyn Extension>),
            );
            assert_eq!(outcome, Err(expected), "{id}：注册失败或重名必须报告");
            assert_eq!(
                names(&host),
                ["read", "lint"],
                "{id}：失败的注册不能留下任何工具"
            );
            assert_eq!(
                (host.before_hook_count(), host.after_hook_count()),
                (1, 1),
                "{id}：失败的注册不能留下任何 hook"
            );
            assert_eq!(host.extensions(), ["lint"], "{id}：失败的扩展不算已加载");
        }
        let mut host = host();
        let import_failed = load_extension(
            &mut host,
            &source("broken"),
            |_| true,
            |_| Err("syntax error".into()),
        );
        assert_eq!(
            import_failed,
            Err(ExtensionError::Import {
                id: "broken".into(),
                message: "syntax error".into()
            }),
            "导入失败必须报告原因"
        );
    }
}

mod hooks {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use pi_course::extensions::*;
    use pi_course::tool::{execute_tool_call, CallContext, ToolRegistry};
    use pi_course::types::{text, ToolCall, ToolResultMessage};
    use serde_json::json;
    use tokio::sync::oneshot;

    use super::{call, counting_tool};

    struct Hooks(Box<dyn Fn(&mut ExtensionContext) + Send + Sync>);

    impl Extension for Hooks {
        fn register(&self, cx: &mut ExtensionContext) -> Result<(), String> {
            (self.0)(cx);
            Ok(())
        }
    }

    fn load(
        host: &mut ExtensionHost,
        id: &str,
        register: impl Fn(&mut ExtensionContext) + Send + Sync + 'static,
    ) {
        let source = ExtensionSource {
            id: id.into(),
            location: id.into(),
        };
        let outcome = load_extension(
            host,
            &source,
            |_| true,
            |_| Ok(Box::new(Hooks(Box::new(register))) as Box<dyn Extension>),
        );
        assert_eq!(outcome, Ok(LoadOutcome::Active), "测试用的扩展必须加载成功");
    }

    async fn run(host: &ExtensionHost, call: &ToolCall) -> ToolResultMessage {
        tokio::time::timeout(
            Duration::from_secs(1),
            execute_tool_call(call, &host.registry(), CallContext::default()),
        )
        .await
        .expect("1 秒内没有返回结果：hook 是否挂住了调用？")
    }

    #[tokio::test]
    async fn a_denied_call_gets_a_paired_error_and_the_tool_never_runs() {
        let runs = Arc::new(AtomicUsize::new(0));
        let mut host = ExtensionHost::new(
            ToolRegistry::new(vec![counting_tool("bash", Arc::clone(&runs))]).expect("不重名"),
        );
        let seen = Arc::new(Mutex::new(Vec::new()));
        let after_runs = Arc::new(AtomicUsize::new(0));
        let record = Arc::clone(&seen);
        load(&mut host, "gate", move |cx| {
            let record = Arc::clone(&record);
            cx.on_before_tool_call(move |call: ToolCall| {
                record
                    .lock()
                    .expect("锁不会中毒")
                    .push((call.id.clone(), call.arguments.clone()));
                async move {
                    if call.arguments["command"]
                        .as_str()
                        .is_some_and(|command| command.starts_with("rm"))
                    {
                        HookDecision::Deny("rm 需要确认".into())
                    } else {
                        HookDecision::Allow
                    }
                }
            });
        });
        let counted = Arc::clone(&after_runs);
        load(&mut host, "audit", move |cx| {
            let counted = Arc::clone(&counted);
            cx.on_after_tool_result(move |_call: ToolCall, _outcome| {
                counted.fetch_add(1, Ordering::SeqCst);
                async { Ok(()) }
            });
        });

        let denied = run(
            &host,
            &call("call-9", "bash", json!({"command": "rm -rf /"})),
        )
        .await;
        assert_eq!(
            (
                denied.tool_call_id.as_str(),
                denied.tool_name.as_str(),
                denied.is_error
            ),
            ("call-9", "bash", true),
            "被拒绝的调用必须得到一个配对的 error 结果"
        );
        assert_eq!(
            denied.content,
            vec![text(&format!(
                "Tool bash failed: {DENIED}（gate）：rm 需要确认"
            ))],
            "拒绝的原因和扩展 id 必须交给模型"
        );
        assert_eq!(runs.load(Ordering::SeqCst), 0, "被拒绝的调用不能执行工具");
        assert_eq!(
            after_runs.load(Ordering::SeqCst),
            0,
            "被拒绝的调用没有核心结果，after hook 不能运行"
        );

        let allowed = run(&host, &call("call-10", "bash", json!({"command": "ls"}))).await;
        assert_eq!(
            (allowed.is_error, allowed.content.clone()),
            (false, vec![text("ran ls")]),
            "允许的调用照常执行"
        );
        assert_eq!(runs.load(Ordering::SeqCst), 1, "允许的调用只执行一次");
        assert_eq!(
            *seen.lock().expect("锁不会中毒"),
            vec![
                ("call-9".to_string(), json!({"command": "rm -rf /"})),
                ("call-10".to_string(), json!({"command": "ls"}))
            ],
            "before hook 看到的是调用自己的 id 和原样的参数"
        );
        assert!(
            host.diagnostics().is_empty(),
            "正常的拒绝不是故障，不能产生诊断"
        );
    }

    #[tokio::test]
    async fn a_panicking_or_hanging_before_hook_denies_and_leaves_a_diagnostic() {
        let runs = Arc::new(AtomicUsize::new(0));
        let core =
            ToolRegistry::new(vec![counting_tool("write", Arc::clone(&runs))]).expect("不重名");
        let mut host =
            ExtensionHost::new(core.clone()).with_hook_timeout(Duration::from_millis(50));
        load(&mut host, "boom", |cx| {
            // Panics while it is called, before any future exists.
            cx.on_before_tool_call(|_call: ToolCall| -> std::future::Ready<HookDecision> {
                panic!("hook exploded")
            });
        });
        let panicked = run(&host, &call("p-1", "write", json!({"command": "x"}))).await;
        assert_eq!(
            (panicked.is_error, panicked.content.clone()),
            (
                true,
                vec![text(&format!("Tool write failed: {HOOK_FAILED}（boom）"))]
            ),
            "panic 的 before hook 必须按拒绝处理（fail closed）"
        );

        let (dropped_tx, dropped_rx) = oneshot::channel::<()>();
        let dropped_tx = Arc::new(Mutex::new(Some(dropped_tx)));
        let mut host2 = ExtensionHost::new(core).with_hook_timeout(Duration::from_millis(50));
        load(&mut host2, "sleepy", move |cx| {
            let dropped_tx = Arc::clone(&dropped_tx);
            cx.on_before_tool_call(move |_call: ToolCall| {
                let guard = SendOnDrop(dropped_tx.lock().expect("锁不会中毒").take());
                async move {
                    let _guard = guard;
                    std::future::pending::<HookDecision>().await
                }
            });
        });
        let hung = run(&host2, &call("h-1", "write", json!({"command": "x"}))).await;
        assert_eq!(
            (hung.is_error, hung.content.clone()),
            (
                true,
                vec![text(&format!("Tool write failed: {HOOK_FAILED}（sleepy）"))]
            ),
            "超时的 before hook 必须按拒绝处理，不能放行"
        );
        tokio::time::timeout(Duration::from_secs(1), dropped_rx)
            .await
            .expect("超时后 hook 的任务必须被中止，不能在后台继续运行")
            .ok();
        assert_eq!(runs.load(Ordering::SeqCst), 0, "hook 失败时工具不能执行");

        let kinds: Vec<(String, String, HookPoint, FailureKind)> = host
            .diagnostics()
            .into_iter()
            .chain(host2.diagnostics())
            .map(|d| (d.extension_id, d.call_id, d.hook, d.kind))
            .collect();
        assert_eq!(
            kinds,
            [
                (
                    "boom".to_string(),
                    "p-1".to_string(),
                    HookPoint::Before,
                    FailureKind::Panic
                ),
                (
                    "sleepy".to_string(),
                    "h-1".to_string(),
                    HookPoint::Before,
                    FailureKind::Timeout
                ),
            ],
            "每次 hook 故障都必须留下一条诊断，说明扩展、调用、hook 和故障种类"
        );
        assert!(
            host.diagnostics()[0].message.contains("hook exploded"),
            "panic 的诊断必须带上 panic 信息"
        );
    }

    struct SendOnDrop(Option<oneshot::Sender<()>>);
    impl Drop for SendOnDrop {
        fn drop(&mut self) {
            if let Some(sender) = self.0.take() {
                let _ = sender.send(());
            }
        }
    }

    #[tokio::test]
    async fn after_hooks_run_once_per_result_and_cannot_change_it() {
        let runs = Arc::new(AtomicUsize::new(0));
        let mut host = ExtensionHost::new(
            ToolRegistry::new(vec![counting_tool("bash", Arc::clone(&runs))]).expect("不重名"),
        )
        .with_hook_timeout(Duration::from_millis(50));
        let observed = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&observed);
        load(&mut host, "observer", move |cx| {
            let record = Arc::clone(&record);
            cx.on_after_tool_result(move |call: ToolCall, outcome| {
                let record = Arc::clone(&record);
                async move {
                    let text = match &outcome {
                        Ok(output) => output.content[0].text.clone(),
                        Err(error) => format!("error: {error}"),
                    };
                    record.lock().expect("锁不会中毒").push((call.id, text));
                    Ok(())
                }
            });
        });
        load(&mut host, "failing", |cx| {
            cx.on_after_tool_result(|_call: ToolCall, _outcome| async {
                Err("audit log full".to_string())
            });
            cx.on_after_tool_result(|_call: ToolCall, _outcome| async { panic!("after exploded") });
        });

        let ok = run(&host, &call("a-1", "bash", json!({"command": "ls"}))).await;
        assert_eq!(
            (ok.is_error, ok.content.clone()),
            (false, vec![text("ran ls")]),
            "after hook 的失败不能替换核心结果"
        );
        let invalid = run(&host, &call("a-2", "bash", json!({"command": 7}))).await;
        assert_eq!(
            (invalid.is_error, invalid.content.clone()),
            (true, vec![text("Tool bash failed: 必须是 string")]),
            "参数仍由核心工具的 schema 检查，错误原样成为结果"
        );
        assert_eq!(
            runs.load(Ordering::SeqCst),
            1,
            "参数不合法的调用不能执行工具"
        );
        assert_eq!(
            *observed.lock().expect("锁不会中毒"),
            vec![
                ("a-1".to_string(), "ran ls".to_string()),
                ("a-2".to_string(), "error: 必须是 string".to_string())
            ],
            "after hook 对每个核心结果（包括错误）恰好运行一次"
        );
        let failures: Vec<(String, String, HookPoint, FailureKind)> = host
            .diagnostics()
            .into_iter()
            .map(|d| (d.extension_id, d.call_id, d.hook, d.kind))
            .collect();
        let after = |id: &str, kind| {
            (
                "failing".to_string(),
                id.to_string(),
                HookPoint::After,
                kind,
            )
        };
        assert_eq!(
            failures,
            [
                after("a-1", FailureKind::Error),
                after("a-1", FailureKind::Panic),
                after("a-2", FailureKind::Error),
                after("a-2", FailureKind::Panic),
            ],
            "after hook 的错误和 panic 都必须留下诊断，并且不影响后面的 hook"
        );
    }

    #[tokio::test]
    async fn hooks_run_in_load_order_and_the_first_deny_wins() {
        let runs = Arc::new(AtomicUsize::new(0));
        let mut host = ExtensionHost::new(
            ToolRegistry::new(vec![counting_tool("edit", Arc::clone(&runs))]).expect("不重名"),
        );
        let order = Arc::new(Mutex::new(Vec::new()));
        for (id, decision) in [
            ("first", None),
            ("second", Some("second says no")),
            ("third", Some("third says no")),
        ] {
            let order = Arc::clone(&order);
            load(&mut host, id, move |cx| {
                let order = Arc::clone(&order);
                cx.on_before_tool_call(move |_call: ToolCall| {
                    order.lock().expect("锁不会中毒").push(id);
                    async move {
                        match decision {
                            Some(reason) => HookDecision::Deny(reason.to_string()),
                            None => HookDecision::Allow,
                        }
                    }
                });
            });
        }
        let denied = run(&host, &call("o-1", "edit", json!({"command": "x"}))).await;
        assert_eq!(
            denied.content,
            vec![text(&format!(
                "Tool edit failed: {DENIED}（second）：second says no"
            ))],
            "第一个拒绝的 hook 决定结果"
        );
        assert_eq!(
            *order.lock().expect("锁不会中毒"),
            ["first", "second"],
            "before hook 按加载顺序运行，拒绝之后不再询问后面的 hook"
        );
        assert_eq!(runs.load(Ordering::SeqCst), 0, "被拒绝的调用不能执行工具");
        assert_eq!(
            host.registry().definitions(),
            host.tools().definitions(),
            "包上 hook 的工具必须保留名字、描述和 schema"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Tools shared by the extension groups
// ---------------------------------------------------------------------------------------

fn call(id: &str, name: &str, arguments: serde_json::Value) -> pi_course::types::ToolCall {
    pi_course::types::ToolCall {
        id: id.into(),
        name: name.into(),
        arguments,
        raw_arguments: None,
    }
}

/// A tool taking `{command: string}` that answers `ran <command>` and counts its runs.
fn counting_tool(
    name: &str,
    runs: std::sync::Arc<std::sync::atomic::AtomicUsize>,
) -> pi_course::tool::SharedTool {
    use pi_course::tool::*;
    let schema = Schema::new(
        Some(serde_json::json!({"type": "object", "properties": {"command": {"type": "string"}}})),
        |arguments| match arguments.get("command") {
            Some(serde_json::Value::String(command)) => Ok(command.clone()),
            _ => Err(ValidationError("必须是 string".into())),
        },
    );
    Tool::new(
        name,
        "A test tool",
        schema,
        move |command: String, _context| {
            let runs = std::sync::Arc::clone(&runs);
            async move {
                runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Ok(ToolOutput::text(&format!("ran {command}")))
            }
        },
    )
    .shared()
}

fn tool_named(name: &str) -> pi_course::tool::SharedTool {
    counting_tool(name, Default::default())
}
