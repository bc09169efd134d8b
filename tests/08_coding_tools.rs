//! Chapter 08 acceptance tests: the coding tools.
//!
//! Group k only needs Labs 8.1 … 8.k: `read` reads plain names only; `workspace` resolves paths
//! directly and through `read`; `write` drives the queue and the write tool; `edit` the edit
//! tool; `output` the pure functions that shape a command's output; `bash` the bash tool; only
//! `real_loop` builds the whole registry and runs the loop.
//!
//! Every test works in a fresh directory under the system temp dir and removes it afterwards.
//! Waits are bounded by generous timeouts that only fire when something hangs.

use std::ffi::OsString;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use pi_course::agent_loop::*;
use pi_course::coding_tools::*;
use pi_course::scripted_model::{tool_call, ScriptedModel, ScriptedTurn};
use pi_course::tool::*;
use pi_course::types::*;
use serde_json::{json, Value};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

/// A fresh directory under the system temp dir, removed on drop. `ws/` inside it is the
/// workspace; siblings of `ws/` are "outside".
struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    fn new(label: &str) -> Scratch {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "pi-course-08-{label}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("ws")).expect("测试需要能在系统临时目录里建目录");
        Scratch { dir }
    }

    /// `ws/` as given, not canonicalised.
    fn ws(&self) -> PathBuf {
        self.dir.join("ws")
    }

    /// Writes a file below the scratch dir, creating its parents.
    fn file(&self, relative: &str, content: &str) -> PathBuf {
        let path = self.dir.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("测试需要能建父目录");
        }
        std::fs::write(&path, content).expect("测试需要能写文件");
        path
    }

    /// Tools over `ws/` that save cut outputs below the scratch dir, not in the system one.
    fn tools(&self) -> CodingTools {
        CodingTools::new(self.ws())
            .expect("ws 是存在的目录，CodingTools 应当建成")
            .with_output_dir(&self.dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn content_of(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|error| format!("<读不出来：{error}>"))
}

/// The permission bits of `path`, e.g. `0o755`.
fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path).map_or(0, |metadata| metadata.permissions().mode() & 0o7777)
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .expect("测试需要能改文件权限");
}

fn registry(tools: Vec<SharedTool>) -> ToolRegistry {
    ToolRegistry::new(tools).expect("测试用的工具名互不相同，Registry 应当建成")
}

async fn call(registry: &ToolRegistry, name: &str, arguments: Value) -> ToolResultMessage {
    call_with(registry, name, arguments, CallContext::default()).await
}

/// One call through chapter 06's executor, bounded by 5 s.
async fn call_with(
    registry: &ToolRegistry,
    name: &str,
    arguments: Value,
    context: CallContext,
) -> ToolResultMessage {
    let call = tool_call("call-1", name, arguments);
    tokio::time::timeout(
        Duration::from_secs(5),
        execute_tool_call(&call, registry, context),
    )
    .await
    .unwrap_or_else(|_| panic!("{name} 调用 5 秒内没有返回：是在等一个永远不会结束的东西吗？"))
}

/// One call that must return within 5 s; `rule` says why it must not wait longer.
async fn call_within(
    registry: &ToolRegistry,
    name: &str,
    arguments: Value,
    rule: &str,
) -> ToolResultMessage {
    let call = tool_call("call-1", name, arguments);
    tokio::time::timeout(
        Duration::from_secs(5),
        execute_tool_call(&call, registry, CallContext::default()),
    )
    .await
    .unwrap_or_else(|_| panic!("{rule}（等了 5 秒也没有返回）"))
}

/// One call on a task of its own, unbounded: the test bounds the wait with its own rule.
fn spawn_call(
    registry: &ToolRegistry,
    name: &str,
    arguments: Value,
    context: CallContext,
) -> tokio::task::JoinHandle<ToolResultMessage> {
    let registry = registry.clone();
    let call = tool_call("call-1", name, arguments);
    tokio::spawn(async move { execute_tool_call(&call, &registry, context).await })
}

/// The text of a result's single content block.
fn body(result: &ToolResultMessage) -> String {
    result
        .content
        .iter()
        .map(|block| block.text.as_str())
        .collect()
}

/// Waits until `condition` holds; only a hang reaches the 5 s bound, and then `rule` is the
/// failure message.
async fn until(rule: &str, mut condition: impl FnMut() -> bool) {
    let waited = tokio::time::timeout(Duration::from_secs(5), async {
        while !condition() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "{rule}（等了 5 秒也没有等到）");
}

/// A mutation that occupies `path` in the queue until it is released, then writes `content`
/// to `file`: lets a test prove that a tool really waits its turn, without any timing.
struct HeldPath {
    release: oneshot::Sender<()>,
    holder: tokio::task::JoinHandle<()>,
}

impl HeldPath {
    async fn occupy(
        queue: &MutationQueue,
        path: &Path,
        file: &Path,
        content: &'static str,
    ) -> Self {
        let (release, gate) = oneshot::channel::<()>();
        let holder = tokio::spawn({
            let (queue, path, file) = (queue.clone(), path.to_path_buf(), file.to_path_buf());
            async move {
                queue
                    .run(&path, async {
                        let _ = gate.await;
                        std::fs::write(&file, content).expect("测试需要能写文件");
                    })
                    .await
            }
        });
        until("先占住这个路径的修改应当开始", || {
            queue.pending(path) == 1
        })
        .await;
        HeldPath { release, holder }
    }

    /// Lets the held mutation write and finish.
    async fn release(self) {
        self.release.send(()).expect("先占住的修改还在等放行");
        self.holder.await.expect("先占住的修改不应 panic");
    }
}

fn outside(path: &str) -> ToolError {
    ToolError::new(format!("{OUTSIDE_WORKSPACE}：{path}"))
}

/// Every entry below `dir` whose name holds the temporary-file marker.
fn leftovers(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&next) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if entry.file_name().to_string_lossy().contains(TEMP_MARKER) {
                found.push(path.clone());
            }
            if path.is_dir() && !path.is_symlink() {
                pending.push(path);
            }
        }
    }
    found
}

mod read {
    use super::*;

    #[tokio::test]
    async fn a_line_window_matches_its_details_and_says_where_to_continue() {
        let scratch = Scratch::new("read-window");
        scratch.file("ws/five.txt", "one\ntwo\nthree\nfour\nfive\n");
        scratch.file("ws/tail.txt", "a\nb");
        let tools = scratch.tools();
        let registry = registry(vec![tools.read_tool()]);

        let whole = call(&registry, "read", json!({"path": "five.txt"})).await;
        assert_eq!(
            (body(&whole), whole.is_error),
            ("one\ntwo\nthree\nfour\nfive\n".to_string(), false),
            "不带 offset/limit 时读出整个文件：原样，不加行号"
        );
        assert_eq!(
            whole.details,
            Some(json!({
                "path": "five.txt", "startLine": 1, "endLine": 5, "totalLines": 5,
                "bytes": 24, "truncated": false
            })),
            "details 与实际输出一致"
        );

        let window = call(
            &registry,
            "read",
            json!({"path": "five.txt", "offset": 2, "limit": 2}),
        )
        .await;
        assert_eq!(
            body(&window),
            "two\nthree\n\n[第 2-3 行，共 5 行；用 offset=4 继续读取]",
            "offset 从 1 数起，limit 是行数；后面还有内容时，提示从哪一行继续"
        );
        assert_eq!(
            window.details,
            Some(json!({
                "path": "five.txt", "startLine": 2, "endLine": 3, "totalLines": 5,
                "bytes": 10, "truncated": false
            })),
            "limit 停下的窗口不算截断，bytes 只数显示出来的内容"
        );

        let last = call(&registry, "read", json!({"path": "five.txt", "offset": 5})).await;
        assert_eq!(
            body(&last),
            "five\n",
            "读到文件末尾时没有提示：没有东西可以继续读"
        );
        let beyond = call(&registry, "read", json!({"path": "five.txt", "offset": 6})).await;
        assert_eq!(
            (body(&beyond), beyond.is_error),
            (
                "Tool read failed: offset=6 超出文件范围（文件共 5 行）".to_string(),
                true
            ),
            "offset 超过最后一行是错误，错误信息写出文件的行数"
        );
        let tail = call(&registry, "read", json!({"path": "tail.txt"})).await;
        assert_eq!(
            (
                body(&tail),
                tail.details.as_ref().map(|d| d["totalLines"].clone())
            ),
            ("a\nb".to_string(), Some(json!(2))),
            "最后一行没有换行符也是一行，内容原样返回"
        );

        assert_eq!(
            registry.definitions()[0].parameters,
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "offset": {"type": "integer", "minimum": 1},
                    "limit": {"type": "integer", "minimum": 1}
                },
                "required": ["path"],
                "additionalProperties": false
            }),
            "read 的参数沿用上游 pi 的名字：path、可选的 offset 与 limit"
        );
    }

    #[tokio::test]
    async fn the_byte_cap_stops_at_a_whole_line_and_continuing_skips_nothing() {
        let scratch = Scratch::new("read-cap");
        scratch.file("ws/abc.txt", "aaaa\nbbbb\ncccc\n");
        scratch.file("ws/long.txt", &format!("short\n{}\nend\n", "x".repeat(30)));
        let many: String = (1..=20)
            .map(|n| format!("line {n}: {}\n", "x".repeat(n % 7)))
            .collect();
        scratch.file("ws/many.txt", &many);
        let limits = Limits {
            max_read_bytes: 12,
            ..Limits::default()
        };
        let tools = scratch.tools().with_limits(limits);
        let registry = registry(vec![tools.read_tool()]);

        let first = call(&registry, "read", json!({"path": "abc.txt"})).await;
        assert_eq!(
            body(&first),
            "aaaa\nbbbb\n\n[第 1-2 行，共 3 行；已达 12 字节上限，用 offset=3 继续读取]",
            "字节上限只在整行处停下：第 3 行放不下就整行留给下一次"
        );
        assert_eq!(
            first.details,
            Some(json!({
                "path": "abc.txt", "startLine": 1, "endLine": 2, "totalLines": 3,
                "bytes": 10, "truncated": true
            })),
            "被字节上限截断时 details.truncated 为 true"
        );
        let rest = call(&registry, "read", json!({"path": "abc.txt", "offset": 3})).await;
        assert_eq!(body(&rest), "cccc\n", "按提示的 offset 续读，正好接上");

        let head = call(&registry, "read", json!({"path": "long.txt"})).await;
        assert_eq!(
            body(&head),
            "short\n\n[第 1-1 行，共 3 行；已达 12 字节上限，用 offset=2 继续读取]",
            "放不下的行不显示半行"
        );
        let long = call(&registry, "read", json!({"path": "long.txt", "offset": 2})).await;
        assert_eq!(
            (
                body(&long),
                long.details
                    .as_ref()
                    .map(|d| (d["endLine"].clone(), d["bytes"].clone()))
            ),
            (
                "[第 2 行有 31 字节，超过 12 字节上限；请用 bash 分段查看]".to_string(),
                Some((json!(1), json!(0)))
            ),
            "单独一行就超过上限时，不显示内容，只说明这一行有多长"
        );

        // Follow the notes the way a model would, with a larger cap.
        let tools = scratch.tools().with_limits(Limits {
            max_read_bytes: 25,
            ..Limits::default()
        });
        let registry = super::registry(vec![tools.read_tool()]);
        let mut collected = String::new();
        let mut offset = 1;
        let mut reads = 0;
        loop {
            reads += 1;
            assert!(reads <= 40, "按提示续读必须在有限次内读完 many.txt");
            let result = call(
                &registry,
                "read",
                json!({"path": "many.txt", "offset": offset}),
            )
            .await;
            let text = body(&result);
            let (content, note) = match text.split_once("\n[") {
                Some((content, note)) => (content.to_string(), Some(note.to_string())),
                None => (text.clone(), None),
            };
            assert!(
                content.len() <= 25,
                "每次显示的内容不能超过 25 字节上限，实际 {} 字节",
                content.len()
            );
            collected.push_str(&content);
            let Some(note) = note else { break };
            let next: usize = note
                .split_once("offset=")
                .map(|(_, rest)| rest.chars().take_while(char::is_ascii_digit).collect())
                .and_then(|digits: String| digits.parse().ok())
                .unwrap_or_else(|| panic!("截断提示必须写出继续读取的 offset，实际是：{note}"));
            let end_line = result.details.as_ref().map(|d| d["endLine"].clone());
            assert_eq!(
                Some(json!(next - 1)),
                end_line,
                "提示的 offset 必须是 endLine + 1"
            );
            offset = next;
        }
        assert_eq!(
            collected, many,
            "按提示的 offset 一路续读，拼起来正好是整个文件：不跳行，也不重复"
        );
        assert!(reads > 2, "25 字节的上限下，many.txt 要分几次才能读完");
    }

    #[tokio::test]
    async fn the_cap_counts_bytes_and_a_line_that_fills_it_exactly_fits() {
        let scratch = Scratch::new("read-edge");
        scratch.file("ws/abc.txt", "aaaa\nbbbb\ncccc\n");
        scratch.file("ws/wide.txt", "你好\n世界\n");
        scratch.file("ws/minified.json", &format!("{}\nshort\n", "x".repeat(40)));
        let tools = scratch.tools().with_limits(Limits {
            max_read_bytes: 10,
            ..Limits::default()
        });
        let registry = registry(vec![tools.read_tool()]);

        let exact = call(&registry, "read", json!({"path": "abc.txt"})).await;
        assert_eq!(
            body(&exact),
            "aaaa\nbbbb\n\n[第 1-2 行，共 3 行；已达 10 字节上限，用 offset=3 继续读取]",
            "正好填满上限的行也放得下：前两行加起来正好 10 字节，都要显示"
        );
        let both = call(&registry, "read", json!({"path": "abc.txt", "limit": 2})).await;
        assert_eq!(
            (
                body(&both),
                both.details.as_ref().map(|d| d["truncated"].clone())
            ),
            (
                "aaaa\nbbbb\n\n[第 1-2 行，共 3 行；用 offset=3 继续读取]".to_string(),
                Some(json!(false))
            ),
            "limit 与字节上限同时到达时，是 limit 停下了窗口：不算截断"
        );

        let wide = call(&registry, "read", json!({"path": "wide.txt"})).await;
        assert_eq!(
            body(&wide),
            "你好\n\n[第 1-1 行，共 2 行；已达 10 字节上限，用 offset=2 继续读取]",
            "上限按字节算，不是按字符：一个汉字占 3 个字节，每行 7 字节，两行放不进 10 字节"
        );

        let minified = call(&registry, "read", json!({"path": "minified.json"})).await;
        assert_eq!(
            (body(&minified), minified.details),
            (
                "[第 1 行有 41 字节，超过 10 字节上限；请用 bash 分段查看]".to_string(),
                Some(json!({
                    "path": "minified.json", "startLine": 1, "endLine": 0, "totalLines": 2,
                    "bytes": 0, "truncated": true
                }))
            ),
            "第一行本身就超过上限：一行也不显示，只说明这一行有多长，truncated 为 true"
        );
    }

    #[tokio::test]
    async fn read_failures_are_results_that_name_the_path() {
        let scratch = Scratch::new("read-errors");
        scratch.file("ws/docs/guide.md", "# guide\n");
        scratch.file("ws/empty.txt", "");
        std::fs::write(scratch.ws().join("blob.bin"), [0xff_u8, 0xfe, 0x00])
            .expect("测试需要能写二进制文件");
        let tools = scratch.tools();
        let registry = registry(vec![tools.read_tool()]);

        let missing = call(&registry, "read", json!({"path": "missing.txt"})).await;
        assert!(
            missing.is_error
                && body(&missing).starts_with("Tool read failed: 无法读取 missing.txt："),
            "读不到的文件得到一条失败结果，说明读不了哪个路径，实际：{}",
            body(&missing)
        );
        let directory = call(&registry, "read", json!({"path": "docs"})).await;
        assert!(
            directory.is_error && body(&directory).starts_with("Tool read failed: 无法读取 docs："),
            "目录不是文件，同样是失败结果，实际：{}",
            body(&directory)
        );
        let binary = call(&registry, "read", json!({"path": "blob.bin"})).await;
        assert_eq!(
            (body(&binary), binary.is_error),
            (
                "Tool read failed: blob.bin 不是 UTF-8 文本".to_string(),
                true
            ),
            "不是 UTF-8 的文件不能当文本读"
        );
        let empty = call(&registry, "read", json!({"path": "empty.txt"})).await;
        assert_eq!(
            (body(&empty), empty.details),
            (
                String::new(),
                Some(json!({
                    "path": "empty.txt", "startLine": 1, "endLine": 0, "totalLines": 0,
                    "bytes": 0, "truncated": false
                }))
            ),
            "空文件有 0 行，从第 1 行读起得到空内容，不是错误"
        );
        let zero = call(&registry, "read", json!({"path": "empty.txt", "offset": 0})).await;
        assert_eq!(
            body(&zero),
            format!("Tool read failed: {MUST_BE_POSITIVE_INTEGER}"),
            "offset 由第 06 章的 optional_positive_integer 校验：0 不是合法的行号"
        );
    }
}

mod workspace {
    use super::*;

    #[tokio::test]
    async fn dot_dot_and_absolute_paths_may_not_leave_the_root() {
        let scratch = Scratch::new("ws-lexical");
        scratch.file("ws/a.txt", "a\n");
        scratch.file("ws/docs/guide.md", "# guide\n");
        let secret = scratch.file("outside/secret.txt", "secret\n");
        scratch.file("ws-evil/secret.txt", "evil\n");
        let tools = scratch.tools();
        let workspace = tools.workspace();
        let root = workspace.root().to_path_buf();

        assert_eq!(
            workspace.resolve("./docs/../a.txt"),
            Ok(root.join("a.txt")),
            "`.` 与 `..` 在 workspace 里面时照常解析"
        );
        assert_eq!(
            workspace.resolve("docs/./guide.md"),
            Ok(root.join("docs/guide.md")),
            "相对路径相对于 workspace 根目录解析"
        );
        let absolute_inside = root.join("a.txt").display().to_string();
        assert_eq!(
            workspace.resolve(&absolute_inside),
            Ok(root.join("a.txt")),
            "workspace 里面的绝对路径可以用"
        );
        assert_eq!(
            workspace.resolve("new/dir/file.txt"),
            Ok(root.join("new/dir/file.txt")),
            "还不存在的路径也能解析：真实的父目录加上缺的名字"
        );
        let absolute_outside = secret.display().to_string();
        for escape in [
            "..",
            "../outside/secret.txt",
            "docs/../../outside/secret.txt",
            "../ws-evil/secret.txt",
            absolute_outside.as_str(),
        ] {
            assert_eq!(
                workspace.resolve(escape),
                Err(outside(escape)),
                "{escape} 在 workspace 之外，必须拒绝（按路径的组成部分比较，不是按字符串前缀）"
            );
        }

        let registry = registry(vec![tools.read_tool()]);
        let refused = call(&registry, "read", json!({"path": "../outside/secret.txt"})).await;
        assert_eq!(
            (body(&refused), refused.is_error),
            (
                format!("Tool read failed: {OUTSIDE_WORKSPACE}：../outside/secret.txt"),
                true
            ),
            "read 先解析路径：workspace 之外的文件不读"
        );
    }

    #[tokio::test]
    async fn symlinks_are_followed_before_the_check() {
        let scratch = Scratch::new("ws-symlink");
        scratch.file("ws/docs/guide.md", "# guide\n");
        let secret = scratch.file("outside/secret.txt", "secret\n");
        let ws = scratch.ws();
        std::os::unix::fs::symlink(scratch.dir.join("outside"), ws.join("out"))
            .expect("测试需要能建目录链接");
        std::os::unix::fs::symlink(&secret, ws.join("leak.txt")).expect("测试需要能建文件链接");
        std::os::unix::fs::symlink(ws.join("docs"), ws.join("alias"))
            .expect("测试需要能建指向 workspace 里面的链接");
        let tools = scratch.tools();
        let workspace = tools.workspace();
        let root = workspace.root().to_path_buf();

        assert_eq!(
            workspace.resolve("out/secret.txt"),
            Err(outside("out/secret.txt")),
            "穿过指向外面的目录链接的路径必须拒绝：只看字面路径不够，要先 canonicalize"
        );
        assert_eq!(
            workspace.resolve("leak.txt"),
            Err(outside("leak.txt")),
            "指向外面的文件链接必须拒绝"
        );
        assert_eq!(
            workspace.resolve("out/new.txt"),
            Err(outside("out/new.txt")),
            "还不存在的文件要按它最长的已存在前缀检查：父目录是指向外面的链接就拒绝"
        );
        assert_eq!(
            workspace.resolve("out/sub/deeper/new.txt"),
            Err(outside("out/sub/deeper/new.txt")),
            "新文件在外向链接下面好几层（中间的目录都还不存在）：同样按最长的已存在前缀检查，看一层父目录不够"
        );
        assert_eq!(
            workspace.resolve("alias/guide.md"),
            Ok(root.join("docs/guide.md")),
            "指向 workspace 里面的链接可以用，解析结果是真实路径"
        );
        assert_eq!(
            workspace.resolve("alias/new.md"),
            Ok(root.join("docs/new.md")),
            "还不存在的文件：真实的父目录加上缺的名字"
        );

        let registry = registry(vec![tools.read_tool()]);
        let leaked = call(&registry, "read", json!({"path": "leak.txt"})).await;
        assert_eq!(
            (body(&leaked), leaked.is_error),
            (
                format!("Tool read failed: {OUTSIDE_WORKSPACE}：leak.txt"),
                true
            ),
            "read 不能借链接读到 workspace 之外的文件"
        );
        let aliased = call(&registry, "read", json!({"path": "alias/guide.md"})).await;
        assert_eq!(
            body(&aliased),
            "# guide\n",
            "指向 workspace 里面的链接照常可读"
        );
    }

    #[tokio::test]
    async fn where_a_path_ends_decides_not_the_way_there() {
        let scratch = Scratch::new("ws-ends");
        scratch.file("ws/a.txt", "a\n");
        scratch.file("ws/docs/guide.md", "# guide\n");
        let evil = scratch.file("ws-evil/secret.txt", "evil\n");
        std::os::unix::fs::symlink(scratch.dir.join("ws-evil"), scratch.ws().join("evil"))
            .expect("测试需要能建目录链接");
        let tools = scratch.tools();
        let workspace = tools.workspace();
        let root = workspace.root().to_path_buf();

        for (path, inside) in [
            ("../ws/a.txt", "a.txt"),
            ("docs/../../ws/docs/guide.md", "docs/guide.md"),
        ] {
            assert_eq!(
                workspace.resolve(path),
                Ok(root.join(inside)),
                "{path} 离开根目录又回来：路径以它最后落在哪里为准，落在里面就可以用"
            );
        }
        for path in ["", ".", "docs/.."] {
            assert_eq!(
                workspace.resolve(path),
                Ok(root.clone()),
                "“{path}”解析到根目录本身：它在 workspace 里面，是真实的根目录"
            );
        }
        let evil_absolute = evil.display().to_string();
        for path in [
            "../ws-evil",
            "../ws-evil/secret.txt",
            "../ws-evil/new.txt",
            evil_absolute.as_str(),
            "evil/secret.txt",
            "evil/new.txt",
        ] {
            assert_eq!(
                workspace.resolve(path),
                Err(outside(path)),
                "{path}：名字以根目录的名字开头的兄弟目录不在 workspace 里面，无论字面上还是经过链接（按路径的组成部分比较）"
            );
        }
    }
}

mod write {
    use super::*;

    #[tokio::test]
    async fn a_write_renames_a_temporary_file_over_the_target_and_creates_parents() {
        let scratch = Scratch::new("write-atomic");
        let target = scratch.file("ws/a.txt", "old\n");
        // A second name for the same file: an in-place write would change it too.
        let witness = scratch.dir.join("witness.txt");
        std::fs::hard_link(&target, &witness).expect("测试需要能建硬链接");
        let tools = scratch.tools();
        let registry = registry(vec![tools.write_tool()]);

        let written = call(
            &registry,
            "write",
            json!({"path": "a.txt", "content": "new\n"}),
        )
        .await;
        assert_eq!(
            (body(&written), written.is_error),
            ("已写入 4 字节：a.txt".to_string(), false),
            "write 报告写了多少字节、写到哪里"
        );
        assert_eq!(
            written.details,
            Some(json!({"path": "a.txt", "bytes": 4})),
            "details 写明路径与字节数"
        );
        assert_eq!(content_of(&target), "new\n", "write 替换整个文件");
        assert_eq!(
            content_of(&witness),
            "old\n",
            "write 必须写临时文件再 rename 过去：原地改写会连硬链接的另一个名字一起改掉"
        );

        let nested = call(
            &registry,
            "write",
            json!({"path": "deep/er/b.txt", "content": "b"}),
        )
        .await;
        assert_eq!(
            (
                nested.is_error,
                content_of(&scratch.ws().join("deep/er/b.txt"))
            ),
            (false, "b".to_string()),
            "write 先建好缺少的父目录"
        );

        let escaped = call(
            &registry,
            "write",
            json!({"path": "../escape.txt", "content": "x"}),
        )
        .await;
        assert_eq!(
            body(&escaped),
            format!("Tool write failed: {OUTSIDE_WORKSPACE}：../escape.txt"),
            "write 也先解析路径：workspace 之外不写"
        );
        assert!(
            !scratch.dir.join("escape.txt").exists(),
            "被拒绝的 write 不能在 workspace 之外留下文件"
        );
        assert_eq!(
            leftovers(&scratch.dir),
            Vec::<PathBuf>::new(),
            "成功的 write 不留下临时文件"
        );
    }

    #[tokio::test]
    async fn a_failed_rename_leaves_the_target_and_no_temporary_file() {
        let scratch = Scratch::new("write-failure");
        let kept = scratch.file("ws/dir/keep.txt", "keep\n");
        let tools = scratch.tools();
        let registry = registry(vec![tools.write_tool()]);

        // A directory cannot be replaced by a file: the rename fails.
        let failed = call(&registry, "write", json!({"path": "dir", "content": "x"})).await;
        assert!(
            failed.is_error && body(&failed).starts_with("Tool write failed: 无法写入 dir："),
            "写不进去时得到失败结果，说明哪个路径写不了，实际：{}",
            body(&failed)
        );
        assert_eq!(content_of(&kept), "keep\n", "失败的 write 不动原来的东西");
        assert_eq!(
            leftovers(&scratch.dir),
            Vec::<PathBuf>::new(),
            "rename 失败时必须删掉临时文件"
        );
    }

    type Log = Arc<Mutex<Vec<&'static str>>>;

    fn logged(log: &Log) -> Vec<&'static str> {
        log.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn note(log: &Log, entry: &'static str) {
        log.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(entry);
    }

    #[tokio::test]
    async fn one_path_runs_one_mutation_at_a_time_in_arrival_order() {
        let queue = MutationQueue::default();
        let path = PathBuf::from("/queue-test/a.txt");
        let log: Log = Arc::default();
        let (release, gate) = oneshot::channel::<()>();

        let first = tokio::spawn({
            let (queue, path, log) = (queue.clone(), path.clone(), Arc::clone(&log));
            async move {
                queue
                    .run(&path, async {
                        note(&log, "first:start");
                        let _ = gate.await;
                        note(&log, "first:end");
                        Err::<(), &str>("first failed")
                    })
                    .await
            }
        });
        until("第一个修改应当开始", || {
            logged(&log) == ["first:start"]
        })
        .await;
        let later = |entry: &'static str| {
            let (queue, path, log) = (queue.clone(), path.clone(), Arc::clone(&log));
            tokio::spawn(async move { queue.run(&path, async { note(&log, entry) }).await })
        };
        let second = later("second");
        let third = later("third");
        until("后来的两个修改应当排队或者开始", || {
            queue.pending(&path) == 3 || logged(&log).len() > 1
        })
        .await;
        assert_eq!(
            logged(&log),
            ["first:start"],
            "同一路径上，前一个修改结束之前，后来的修改不能开始"
        );
        assert_eq!(
            queue.pending(&path),
            3,
            "pending 数着这条路径上正在执行和排队的修改"
        );

        release.send(()).expect("第一个修改还在等放行");
        let outcome = first.await.expect("第一个修改的任务不应 panic");
        second.await.expect("第二个修改的任务不应 panic");
        third.await.expect("第三个修改的任务不应 panic");
        assert_eq!(outcome, Err("first failed"), "run 原样交回操作自己的结果");
        assert_eq!(
            logged(&log),
            ["first:start", "first:end", "second", "third"],
            "同一路径的修改按到达顺序一个接一个执行；失败的修改不挡住后面的"
        );
        assert_eq!(queue.pending(&path), 0, "全部结束后 pending 回到 0");
    }

    #[tokio::test]
    async fn different_paths_do_not_wait_for_each_other() {
        let queue = MutationQueue::default();
        let (release, gate) = oneshot::channel::<()>();
        // The mutation of a.txt can only finish after the one of b.txt has run.
        let held = tokio::spawn({
            let queue = queue.clone();
            async move {
                queue
                    .run(Path::new("/queue-test/a.txt"), async {
                        let _ = gate.await;
                    })
                    .await
            }
        });
        let other = tokio::spawn({
            let queue = queue.clone();
            async move {
                queue
                    .run(Path::new("/queue-test/b.txt"), async {
                        let _ = release.send(());
                    })
                    .await
            }
        });
        let both = tokio::time::timeout(Duration::from_secs(5), async {
            other.await.expect("b.txt 的修改不应 panic");
            held.await.expect("a.txt 的修改不应 panic");
        })
        .await;
        assert!(
            both.is_ok(),
            "不同路径的修改不能互相等待：只有 b.txt 的修改执行了，a.txt 的修改才能结束"
        );
    }

    #[tokio::test]
    async fn write_waits_its_turn_under_the_resolved_path() {
        let scratch = Scratch::new("write-queue");
        let target = scratch.file("ws/a.txt", "v0\n");
        let tools = scratch.tools();
        let resolved = tools
            .workspace()
            .resolve("a.txt")
            .expect("a.txt 在 workspace 里面");
        let queue = tools.queue().clone();
        let held = HeldPath::occupy(&queue, &resolved, &target, "holder\n").await;

        let registry = registry(vec![tools.write_tool()]);
        let writer = tokio::spawn({
            let registry = registry.clone();
            async move {
                call(
                    &registry,
                    "write",
                    json!({"path": "./a.txt", "content": "writer\n"}),
                )
                .await
            }
        });
        until(
            "write 必须在解析后的路径上排队：./a.txt 与 a.txt 是同一个文件，共用一个队列",
            || queue.pending(&resolved) == 2,
        )
        .await;
        assert_eq!(content_of(&target), "v0\n", "排队的 write 还不能动文件");

        held.release().await;
        let written = writer.await.expect("write 的任务不应 panic");
        assert_eq!(
            (written.is_error, content_of(&target)),
            (false, "writer\n".to_string()),
            "write 在排在它前面的修改之后执行"
        );

        // Through a link inside the workspace: the same file, so the same turn.
        std::os::unix::fs::symlink(scratch.ws(), scratch.ws().join("here"))
            .expect("测试需要能建指向 workspace 自己的链接");
        let held = HeldPath::occupy(&queue, &resolved, &target, "holder\n").await;
        let linked = tokio::spawn(async move {
            call(
                &registry,
                "write",
                json!({"path": "here/a.txt", "content": "linked\n"}),
            )
            .await
        });
        until(
            "write 必须在真实路径上排队：经过链接写的 here/a.txt 就是 a.txt，必须排在同一个队列里",
            || queue.pending(&resolved) == 2,
        )
        .await;
        held.release().await;
        let written = linked.await.expect("write 的任务不应 panic");
        assert_eq!(
            (written.is_error, content_of(&target)),
            (false, "linked\n".to_string()),
            "经过链接的 write 也在排在它前面的修改之后执行"
        );

        // Only the last operation out may remove the path's slot.
        let first = HeldPath::occupy(&queue, &resolved, &target, "first\n").await;
        let (second_release, second_gate) = oneshot::channel::<()>();
        let second = tokio::spawn({
            let (queue, resolved) = (queue.clone(), resolved.clone());
            async move {
                queue
                    .run(&resolved, async {
                        let _ = second_gate.await;
                    })
                    .await
            }
        });
        until("第二个修改应当排在第一个后面", || {
            queue.pending(&resolved) == 2
        })
        .await;
        first.release().await;
        until(
            "第一个修改离开后，还在运行的第二个仍占着这个路径：只有最后一个离开的才能移除槽位",
            || queue.pending(&resolved) == 1,
        )
        .await;
        second_release.send(()).expect("第二个修改还在等放行");
        second.await.expect("第二个修改不应 panic");
        assert_eq!(
            queue.pending(&resolved),
            0,
            "全部完成后这个路径上没有排队的修改"
        );
    }

    #[tokio::test]
    async fn a_held_file_does_not_hold_its_neighbours() {
        let scratch = Scratch::new("write-neighbours");
        let target = scratch.file("ws/a.txt", "v0\n");
        let tools = scratch.tools();
        let resolved = tools
            .workspace()
            .resolve("a.txt")
            .expect("a.txt 在 workspace 里面");
        let queue = tools.queue().clone();
        let held = HeldPath::occupy(&queue, &resolved, &target, "holder\n").await;
        let registry = registry(vec![tools.write_tool()]);

        let beside = call_within(
            &registry,
            "write",
            json!({"path": "b.txt", "content": "b\n"}),
            "队列按文件排，不按目录排：a.txt 被占着，同一个目录里的 b.txt 照样可以写",
        )
        .await;
        let namesake = call_within(
            &registry,
            "write",
            json!({"path": "docs/a.txt", "content": "docs\n"}),
            "队列按整个真实路径排，不只按文件名：另一个目录里的同名文件照样可以写",
        )
        .await;
        assert_eq!(
            (beside.is_error, namesake.is_error),
            (false, false),
            "不同文件的 write 在另一个文件被占着时正常完成"
        );
        assert_eq!(content_of(&target), "v0\n", "被占着的文件还没有人动过");
        held.release().await;
        assert_eq!(queue.pending(&resolved), 0, "放行之后队列空了");
    }

    #[tokio::test]
    async fn a_run_dropped_while_waiting_or_panicking_leaves_no_trace() {
        let queue = MutationQueue::default();
        let path = PathBuf::from("/queue-test/a.txt");
        let (release, gate) = oneshot::channel::<()>();
        let first = tokio::spawn({
            let (queue, path) = (queue.clone(), path.clone());
            async move {
                queue
                    .run(&path, async {
                        let _ = gate.await;
                    })
                    .await
            }
        });
        until("第一个修改应当开始", || queue.pending(&path) == 1).await;

        let waiting = tokio::spawn({
            let (queue, path) = (queue.clone(), path.clone());
            async move { queue.run(&path, async {}).await }
        });
        until("第二个修改应当排队", || queue.pending(&path) == 2).await;
        waiting.abort();
        let _ = waiting.await;
        until(
            "排队时被丢弃的修改必须离开队列：pending 要减回 1，它不能留下一个永远不会结束的名额",
            || queue.pending(&path) == 1,
        )
        .await;

        release.send(()).expect("第一个修改还在等放行");
        first.await.expect("第一个修改不应 panic");
        let panicking = tokio::spawn({
            let (queue, path) = (queue.clone(), path.clone());
            async move {
                queue
                    .run(&path, async { panic!("an operation that panics") })
                    .await
            }
        });
        assert!(panicking.await.is_err(), "测试前提：这个修改 panic 了");
        assert_eq!(
            queue.pending(&path),
            0,
            "panic 的修改也必须离开队列：无论 run 怎样结束，pending 都要减回去"
        );
        let next =
            tokio::time::timeout(Duration::from_secs(5), queue.run(&path, async { "ran" })).await;
        assert_eq!(
            next,
            Ok("ran"),
            "被丢弃和 panic 的修改都离开之后，新的修改立刻就能执行"
        );
    }

    #[tokio::test]
    async fn the_workspace_root_is_no_file_to_write() {
        let scratch = Scratch::new("write-root");
        let kept = scratch.file("ws/docs/keep.txt", "keep\n");
        let tools = scratch.tools();
        let root = tools.workspace().root().display().to_string();
        let registry = registry(vec![tools.write_tool()]);

        for path in ["", ".", "docs/..", root.as_str()] {
            let refused = call(&registry, "write", json!({"path": path, "content": "x"})).await;
            assert_eq!(
                (body(&refused), refused.is_error),
                (format!("Tool write failed: {ROOT_IS_NO_FILE}：{path}"), true),
                "“{path}”解析到 workspace 根目录本身：write 必须在建任何临时文件之前拒绝它（根目录的父目录在 workspace 之外）"
            );
        }
        assert_eq!(
            content_of(&kept),
            "keep\n",
            "被拒绝的 write 不动 workspace 里的东西"
        );
        assert_eq!(
            leftovers(&scratch.dir),
            Vec::<PathBuf>::new(),
            "被拒绝的 write 不留下临时文件，workspace 的父目录里也没有"
        );
    }

    #[test]
    fn temporary_names_sit_beside_the_target_and_never_repeat() {
        let target = Path::new("/project/docs/a.txt");
        let first = temp_path(target).expect("有父目录和文件名的路径有临时文件名");
        let second = temp_path(target).expect("有父目录和文件名的路径有临时文件名");
        let other = temp_path(Path::new("/project/docs/b.txt"))
            .expect("有父目录和文件名的路径有临时文件名");
        for temp in [&first, &second, &other] {
            assert_eq!(
                temp.parent(),
                Some(Path::new("/project/docs")),
                "临时文件必须和目标在同一个目录里：rename 只在同一个文件系统里是原子的，实际是 {}",
                temp.display()
            );
        }
        let name = first
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        assert!(
            name.starts_with(".a.txt") && name.contains(TEMP_MARKER),
            "临时文件名以 .{{文件名}} 开头并带着 TEMP_MARKER，实际是 {name}"
        );
        assert!(
            first != second && first != other && second != other,
            "同一个目录里的两次写入不能共用一个临时文件名，即使写的是同一个文件：{} {} {}",
            first.display(),
            second.display(),
            other.display()
        );
        assert_eq!(
            temp_path(Path::new("/")),
            None,
            "没有文件名的路径没有临时文件名"
        );
    }

    #[tokio::test]
    async fn a_write_keeps_the_file_mode() {
        let scratch = Scratch::new("write-mode");
        let script = scratch.file("ws/run.sh", "#!/bin/sh\necho old\n");
        set_mode(&script, 0o755);
        let private = scratch.file("ws/secret.env", "TOKEN=old\n");
        set_mode(&private, 0o600);
        let shared = scratch.file("ws/group.txt", "old\n");
        set_mode(&shared, 0o640);
        // A file made the ordinary way, under this process's umask: the default mode.
        let ordinary = scratch.file("ordinary.txt", "");
        let tools = scratch.tools();
        let registry = registry(vec![tools.write_tool()]);

        for (path, mode, rule) in [
            ("run.sh", 0o755, "755 的脚本写过之后仍然可以执行"),
            ("secret.env", 0o600, "600 的文件写过之后仍然只有自己能读"),
            ("group.txt", 0o640, "原来的权限一位不差地保留"),
        ] {
            let written = call(
                &registry,
                "write",
                json!({"path": path, "content": "new\n"}),
            )
            .await;
            let target = scratch.ws().join(path);
            assert_eq!(
                (written.is_error, content_of(&target), mode_of(&target)),
                (false, "new\n".to_string(), mode),
                "{path}：{rule}（临时文件加 rename 会换掉整个文件，权限要从旧文件抄过来）"
            );
        }
        let created = call(
            &registry,
            "write",
            json!({"path": "new.txt", "content": "n\n"}),
        )
        .await;
        assert_eq!(
            (created.is_error, mode_of(&scratch.ws().join("new.txt"))),
            (false, mode_of(&ordinary)),
            "新文件得到普通的默认权限（0666 去掉 umask），和别的程序新建的文件一样"
        );
    }
}

mod edit {
    use super::*;

    const CODE: &str = "fn a() {}\nfn b() {}\nfn c() {}\n";

    #[tokio::test]
    async fn a_batch_is_matched_against_the_original_and_written_once() {
        let scratch = Scratch::new("edit-batch");
        let target = scratch.file("ws/lib.rs", CODE);
        let witness = scratch.dir.join("witness.rs");
        std::fs::hard_link(&target, &witness).expect("测试需要能建硬链接");
        let tools = scratch.tools();
        let registry = registry(vec![tools.edit_tool()]);

        let edited = call(
            &registry,
            "edit",
            json!({"path": "lib.rs", "edits": [
                {"oldText": "fn c", "newText": "fn see"},
                {"oldText": "fn a", "newText": "fn alpha"}
            ]}),
        )
        .await;
        let expected = "fn alpha() {}\nfn b() {}\nfn see() {}\n";
        assert_eq!(
            (body(&edited), edited.is_error),
            ("已在 lib.rs 中替换 2 处".to_string(), false),
            "edit 报告替换了几处"
        );
        assert_eq!(
            content_of(&target),
            expected,
            "每个 oldText 在原文件里找到自己的位置，与在 edits 里的顺序无关"
        );
        assert_eq!(
            edited.details,
            Some(json!({
                "path": "lib.rs", "edits": 2,
                "oldBytes": CODE.len(), "newBytes": expected.len()
            })),
            "details 写明替换数与前后字节数"
        );
        assert_eq!(
            content_of(&witness),
            CODE,
            "edit 也通过临时文件加 rename 写回，不原地改写"
        );

        let single = call(
            &registry,
            "edit",
            json!({"path": "lib.rs", "oldText": "fn b()", "newText": "fn bee()"}),
        )
        .await;
        assert_eq!(
            (body(&single), content_of(&target)),
            (
                "已在 lib.rs 中替换 1 处".to_string(),
                "fn alpha() {}\nfn bee() {}\nfn see() {}\n".to_string()
            ),
            "单个 oldText/newText 是只有一个修改的批次"
        );

        assert_eq!(
            registry.definitions()[0].parameters,
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "oldText": {"type": "string"},
                    "newText": {"type": "string"},
                    "edits": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "oldText": {"type": "string"},
                                "newText": {"type": "string"}
                            },
                            "required": ["oldText", "newText"],
                            "additionalProperties": false
                        }
                    }
                },
                "required": ["path"],
                "additionalProperties": false
            }),
            "edit 的参数沿用上游 pi 的名字：path、oldText、newText、edits"
        );
    }

    #[tokio::test]
    async fn any_failure_leaves_the_file_untouched() {
        let original = "fn a() {}\nfn b() {}\nlet dup = 1;\nlet dup = 1;\n";
        let scratch = Scratch::new("edit-refusals");
        let target = scratch.file("ws/lib.rs", original);
        let tools = scratch.tools();
        let registry = registry(vec![tools.edit_tool()]);
        let ok = json!({"oldText": "fn a", "newText": "fn z"});

        let cases = [
            (
                json!({"path": "lib.rs", "edits": []}),
                EDIT_NEEDS_EDITS.to_string(),
            ),
            (json!({"path": "lib.rs"}), EDIT_NEEDS_EDITS.to_string()),
            (
                json!({"path": "lib.rs", "oldText": "fn a"}),
                EDIT_NEEDS_EDITS.to_string(),
            ),
            (
                json!({"path": "lib.rs", "oldText": "fn a", "newText": "x", "edits": [ok]}),
                EDIT_NEEDS_EDITS.to_string(),
            ),
            (
                json!({"path": "lib.rs", "edits": [{"oldText": "fn a"}]}),
                MUST_BE_EDITS.to_string(),
            ),
            (
                json!({"path": "lib.rs", "edits": [ok, {"oldText": "", "newText": "?"}]}),
                "第 2 个修改的 oldText 为空".to_string(),
            ),
            (
                json!({"path": "lib.rs", "edits": [ok, {"oldText": "fn q", "newText": "?"}]}),
                "第 2 个修改的 oldText 在 lib.rs 中找不到".to_string(),
            ),
            (
                json!({"path": "lib.rs", "edits": [ok, {"oldText": "let dup = 1;", "newText": "?"}]}),
                "第 2 个修改的 oldText 在 lib.rs 中出现了 2 次，必须恰好一次".to_string(),
            ),
            (
                json!({"path": "lib.rs", "edits": [
                    {"oldText": "fn a() {}\nfn b", "newText": "X"},
                    {"oldText": "{}\nfn b() {}", "newText": "Y"}
                ]}),
                "第 1 个和第 2 个修改的 oldText 相互重叠".to_string(),
            ),
            // The second oldText exists only after the first edit: edits are matched against
            // the original file, not one after another.
            (
                json!({"path": "lib.rs", "edits": [ok, {"oldText": "fn z", "newText": "fn y"}]}),
                "第 2 个修改的 oldText 在 lib.rs 中找不到".to_string(),
            ),
        ];
        for (arguments, reason) in cases {
            let result = call(&registry, "edit", arguments.clone()).await;
            assert_eq!(
                content_of(&target),
                original,
                "{arguments}：任何一个修改失败，整个批次都不写，文件保持原样"
            );
            assert_eq!(
                (body(&result), result.is_error),
                (format!("Tool edit failed: {reason}"), true),
                "{arguments} 必须失败，并给出指南里的原因"
            );
        }

        // Chapter 06's rule: an explicit null is not an absent field.
        for arguments in [
            json!({"path": "lib.rs", "edits": null}),
            json!({"path": "lib.rs", "oldText": "fn a", "newText": "fn z", "edits": null}),
        ] {
            let result = call(&registry, "edit", arguments.clone()).await;
            assert_eq!(
                (body(&result), content_of(&target)),
                (format!("Tool edit failed: {MUST_BE_EDITS}"), original.to_string()),
                "{arguments}：edits 为 null 不等于没给 edits，和其他不是数组的值一样要拒绝，文件不动"
            );
        }

        let missing = call(
            &registry,
            "edit",
            json!({"path": "nope.rs", "oldText": "a", "newText": "b"}),
        )
        .await;
        assert!(
            missing.is_error && body(&missing).starts_with("Tool edit failed: 无法读取 nope.rs："),
            "不存在的文件不能 edit，实际：{}",
            body(&missing)
        );
        assert!(
            !scratch.ws().join("nope.rs").exists(),
            "失败的 edit 不能凭空建出文件"
        );

        let touching = call(
            &registry,
            "edit",
            json!({"path": "lib.rs", "edits": [
                {"oldText": "fn a", "newText": "fn x"},
                {"oldText": "() {}\nfn b", "newText": "()\nfn y"}
            ]}),
        )
        .await;
        assert_eq!(
            (touching.is_error, content_of(&target)),
            (
                false,
                "fn x()\nfn y() {}\nlet dup = 1;\nlet dup = 1;\n".to_string()
            ),
            "首尾相接的两处修改不算重叠：一个结束的位置正好是下一个开始的位置"
        );
    }

    #[tokio::test]
    async fn edit_reads_checks_and_writes_in_one_turn_of_the_queue() {
        let scratch = Scratch::new("edit-queue");
        let target = scratch.file("ws/notes.txt", "count = 1\n");
        let tools = scratch.tools();
        let resolved = tools
            .workspace()
            .resolve("notes.txt")
            .expect("notes.txt 在 workspace 里面");
        let queue = tools.queue().clone();
        // The mutation ahead in the queue changes the file the edit is waiting for.
        let held = HeldPath::occupy(&queue, &resolved, &target, "count = 2\n").await;

        let registry = registry(vec![tools.edit_tool()]);
        let editor = tokio::spawn(async move {
            call(
                &registry,
                "edit",
                json!({"path": "notes.txt", "oldText": "count = 2", "newText": "count = 3"}),
            )
            .await
        });
        until(
            "edit 必须和 write 在同一个修改队列里、按解析后的路径排队",
            || queue.pending(&resolved) == 2,
        )
        .await;

        held.release().await;
        let edited = editor.await.expect("edit 的任务不应 panic");
        assert_eq!(
            (body(&edited), content_of(&target)),
            (
                "已在 notes.txt 中替换 1 处".to_string(),
                "count = 3\n".to_string()
            ),
            "edit 在轮到自己之后才读文件：读、检查、写都在同一轮里"
        );
    }

    #[tokio::test]
    async fn an_edit_changes_its_text_and_nothing_else() {
        let scratch = Scratch::new("edit-endings");
        let windows = scratch.file("ws/win.txt", "one\r\ntwo\r\nthree\r\n");
        let unix = scratch.file("ws/unix.txt", "a\nb\n");
        let marked = scratch.file("ws/bom.rs", "\u{feff}fn a() {}\r\nfn b() {}\r\n");
        let mixed = scratch.file("ws/mixed.txt", "lf line\nwin line\r\nlast\n");
        let script = scratch.file("ws/run.sh", "#!/bin/sh\necho old\n");
        set_mode(&script, 0o755);
        let tools = scratch.tools();
        let registry = registry(vec![tools.edit_tool()]);

        let lf_old_text = call(
            &registry,
            "edit",
            json!({"path": "win.txt", "oldText": "one\ntwo", "newText": "1\n2"}),
        )
        .await;
        assert_eq!(
            (body(&lf_old_text), content_of(&windows)),
            (
                "已在 win.txt 中替换 1 处".to_string(),
                "1\r\n2\r\nthree\r\n".to_string()
            ),
            "CRLF 的文件：按 LF 写的 oldText 也能匹配，newText 写回时用文件自己的 CRLF"
        );
        let crlf_old_text = call(
            &registry,
            "edit",
            json!({"path": "win.txt", "oldText": "2\r\nthree", "newText": "2\r\n3"}),
        )
        .await;
        assert_eq!(
            (crlf_old_text.is_error, content_of(&windows)),
            (false, "1\r\n2\r\n3\r\n".to_string()),
            "CRLF 的文件：带 CRLF 的 oldText 同样匹配"
        );
        assert_eq!(
            crlf_old_text.details,
            Some(json!({"path": "win.txt", "edits": 1, "oldBytes": 13, "newBytes": 9})),
            "details 的字节数是文件真实的字节数，CR 也算"
        );

        let unix_edit = call(
            &registry,
            "edit",
            json!({"path": "unix.txt", "oldText": "a\r\nb", "newText": "x\r\ny"}),
        )
        .await;
        assert_eq!(
            (unix_edit.is_error, content_of(&unix)),
            (false, "x\ny\n".to_string()),
            "LF 的文件保持 LF：带 CRLF 的 oldText 与 newText 都换成 LF"
        );

        let bom_edit = call(
            &registry,
            "edit",
            json!({"path": "bom.rs", "oldText": "fn a() {}\nfn b", "newText": "fn x() {}\nfn y"}),
        )
        .await;
        assert_eq!(
            (bom_edit.is_error, content_of(&marked)),
            (false, "\u{feff}fn x() {}\r\nfn y() {}\r\n".to_string()),
            "文件开头的 BOM 保持在开头，CRLF 保持 CRLF"
        );

        let mixed_edit = call(
            &registry,
            "edit",
            json!({"path": "mixed.txt", "oldText": "last", "newText": "final\nline"}),
        )
        .await;
        assert_eq!(
            (mixed_edit.is_error, content_of(&mixed)),
            (false, "lf line\nwin line\r\nfinal\nline\n".to_string()),
            "混合换行的文件：第一行的换行决定新文字用哪种换行，替换之外的字节一个都不变"
        );

        let script_edit = call(
            &registry,
            "edit",
            json!({"path": "run.sh", "oldText": "old", "newText": "new"}),
        )
        .await;
        assert_eq!(
            (script_edit.is_error, content_of(&script), mode_of(&script)),
            (false, "#!/bin/sh\necho new\n".to_string(), 0o755),
            "edit 过的 755 脚本仍然是 755：edit 也经过保留权限的原子写入"
        );
    }
}

mod output {
    use super::*;

    /// A run that ended as `ending` after printing `output`, as `run_command` would report it.
    fn run(ending: Ending, output: &str) -> CommandRun {
        CommandRun {
            ending,
            output: output.to_string(),
            output_bytes: output.len(),
            truncated: false,
            full_output: None,
            shell: PathBuf::from("/usr/bin/bash"),
        }
    }

    #[test]
    fn an_output_that_fits_is_shown_whole_even_at_the_exact_cap() {
        let mut capture = OutputCapture::new(10);
        assert_eq!(
            capture.finish(None),
            (String::new(), false),
            "没有输出时文本为空，不算截断"
        );
        capture.push(b"hello ");
        capture.push(b"you\n");
        assert_eq!(
            (capture.total(), capture.kept()),
            (10, b"hello you\n".to_vec()),
            "没超过上限时，capture 保留全部输出，total 数着每一个字节"
        );
        assert_eq!(
            capture.finish(None),
            ("hello you\n".to_string(), false),
            "正好等于上限的输出原样显示，不截断"
        );
    }

    #[test]
    fn a_long_output_keeps_its_end_and_the_note_counts_against_the_cap() {
        let full: String = (1..=1000).map(|n| format!("{n}\n")).collect();
        let saved = FullOutput::Saved(PathBuf::from("/tmp/pi-bash-1-0/1.log"));
        let note = bash_truncation_note(full.len(), 200, Some(&saved));
        let expected = format!("{note}{}", &full[full.len() - (200 - note.len())..]);

        let mut line_by_line = OutputCapture::new(200);
        for line in full.split_inclusive('\n') {
            line_by_line.push(line.as_bytes());
        }
        assert_eq!(
            line_by_line.finish(Some(&saved)),
            (expected.clone(), true),
            "超过上限的输出保留结尾（构建和测试工具把错误打印在最后）：开头是截断提示，提示也算在上限里，加起来正好 200 字节"
        );
        assert_eq!(
            (line_by_line.total(), line_by_line.kept().len()),
            (full.len(), 200),
            "capture 数着全部字节，却只留着最后 cap 个"
        );
        let mut at_once = OutputCapture::new(200);
        at_once.push(full.as_bytes());
        assert_eq!(
            at_once.finish(Some(&saved)),
            (expected, true),
            "一次推进来比上限还大的一块，保留的同样是它的结尾"
        );

        // Bytes, not characters: the cut backs off to a whole character.
        let wide = "字".repeat(100);
        let mut capture = OutputCapture::new(200);
        capture.push(wide.as_bytes());
        let note = bash_truncation_note(300, 200, None);
        let room = 200 - note.len();
        assert_ne!(
            room % 3,
            0,
            "test premise: the cut falls inside a character"
        );
        assert_eq!(
            capture.finish(None),
            (format!("{note}{}", "字".repeat(room / 3)), true),
            "上限按字节算：截断点落在一个汉字中间时，留下的是完整的字符（不是半个字符，也不是替换字符），总长不超过上限"
        );

        let mut tiny = OutputCapture::new(10);
        tiny.push(b"twenty bytes of text");
        assert_eq!(
            tiny.finish(None),
            (bash_truncation_note(20, 10, None), true),
            "上限比截断提示还短时，只显示提示本身：提示总是完整的"
        );
    }

    #[test]
    fn control_characters_never_reach_the_model() {
        for (raw, clean, rule) in [
            ("plain\ttext\n", "plain\ttext\n", "换行与制表符原样保留"),
            (
                "\u{1b}[1;31mred\u{1b}[0m plain\n",
                "red plain\n",
                "颜色这类 CSI 转义序列整段去掉，不能只去掉 ESC 留下 [1;31m",
            ),
            (
                "\u{1b}[2J\u{1b}[Hcleared\n",
                "cleared\n",
                "清屏、移动光标的转义序列整段去掉",
            ),
            (
                "a\u{1b}]0;title\u{7}b\n",
                "ab\n",
                "OSC 序列（比如改窗口标题）一直去到 BEL",
            ),
            (
                "a\u{1b}]8;;http://x\u{1b}\\link\u{1b}]8;;\u{1b}\\b\n",
                "alinkb\n",
                "OSC 序列也可以以 ESC \\ 结束（终端里的超链接），后面的文字照常保留",
            ),
            (
                "bell\u{7} nul\0 del\u{7f} reset\u{1b}c c1\u{9b}\n",
                "bell nul del reset c1\n",
                "其余控制字符（BEL、NUL、DEL、C1）和 ESC 加一个字符的序列一律去掉",
            ),
            (
                "unfinished \u{1b}[31",
                "unfinished ",
                "没写完的转义序列也不给模型看",
            ),
            ("line\r\nnext\r\n", "line\nnext\n", "\\r\\n 是一个换行"),
            (
                "10%\r50%\r100%\ndone\n",
                "100%\ndone\n",
                "后面还有内容的单独 \\r 擦掉这一行在它之前的内容：进度条只留最后的样子",
            ),
            (
                "\r\u{1b}[Kredrawn\n",
                "redrawn\n",
                "\\r 之后是清行序列再重画：只留重画之后的内容",
            ),
            ("kept\r", "kept", "行尾的 \\r 后面没有内容，不擦掉这一行"),
            (
                "a\r\r\nb\n",
                "a\nb\n",
                "几个 \\r 之后紧跟换行：这一行同样保留",
            ),
        ] {
            assert_eq!(
                clean_output(raw),
                clean,
                "{raw:?}：{rule}（转义序列和控制字符不给模型看）"
            );
        }
        let mut binary = OutputCapture::new(100);
        binary.push(b"a\xffb\0c\n");
        assert_eq!(
            binary.finish(None),
            ("a\u{fffd}bc\n".to_string(), false),
            "不是 UTF-8 的字节变成 U+FFFD，NUL 这样的控制字符直接去掉"
        );
        let mut coloured = OutputCapture::new(100);
        coloured.push(b"\x1b[32mok\x1b[0m\n");
        assert_eq!(
            coloured.finish(None),
            ("ok\n".to_string(), false),
            "finish 交出的文本已经清理过"
        );
    }

    #[test]
    fn the_status_line_says_how_the_command_ended() {
        let timeout = Duration::from_secs(7);
        let exited = |code, signal| Ending::Exited { code, signal };
        // (ending, output, shown text, exitCode, signal, the rule)
        let cases = [
            (
                exited(Some(0), None),
                "",
                NO_OUTPUT.to_string(),
                json!(0),
                json!(null),
                "退出码 0 而没有输出：文本是 NO_OUTPUT，不是错误",
            ),
            (
                exited(Some(0), None),
                "ok\n",
                "ok\n".to_string(),
                json!(0),
                json!(null),
                "退出码 0：只有输出，没有状态行，不是错误",
            ),
            (
                exited(Some(3), None),
                "out",
                "out\n[退出码 3]".to_string(),
                json!(3),
                json!(null),
                "非零退出码：先补一个换行，再写 [退出码 n]，结果是错误",
            ),
            (
                exited(None, Some(15)),
                "",
                "[命令被信号 15 终止]".to_string(),
                json!(null),
                json!(15),
                "被信号杀死的命令没有退出码：状态行写出信号，details.signal 是它，结果是错误",
            ),
            (
                Ending::Unknown,
                "partial\n",
                format!("partial\n{ENDING_UNKNOWN}"),
                json!(null),
                json!(null),
                "wait() 失败、不知道命令怎样结束：照样是错误，状态行说明不知道",
            ),
            (
                Ending::TimedOut,
                "slow",
                "slow\n[命令超时（7 秒），已终止它的进程组]".to_string(),
                json!(null),
                json!(null),
                "超时：状态行写出 timeout 的秒数，结果是错误",
            ),
            (
                Ending::Cancelled,
                "",
                CANCELLED.to_string(),
                json!(null),
                json!(null),
                "运行中被取消：状态行是 CANCELLED，结果是错误",
            ),
            (
                Ending::NotStarted,
                "",
                CANCELLED_BEFORE_START.to_string(),
                json!(null),
                json!(null),
                "启动前已取消：状态行是 CANCELLED_BEFORE_START，结果是错误",
            ),
        ];
        for (ending, output, shown, exit_code, signal, rule) in cases {
            let result = bash_output("some command", run(ending, output), timeout);
            let ok = ending == exited(Some(0), None);
            assert_eq!(
                (
                    result
                        .content
                        .iter()
                        .map(|c| c.text.as_str())
                        .collect::<String>(),
                    result.is_error
                ),
                (shown, Some(!ok)),
                "{ending:?}：{rule}"
            );
            assert_eq!(
                result.details,
                Some(json!({
                    "command": "some command", "shell": "/usr/bin/bash",
                    "exitCode": exit_code, "signal": signal,
                    "timedOut": ending == Ending::TimedOut,
                    "aborted": matches!(ending, Ending::Cancelled | Ending::NotStarted),
                    "truncated": false, "outputBytes": output.len(), "fullOutputPath": null
                })),
                "{ending:?}：details 写明 shell、退出码或信号、是超时还是取消"
            );
        }

        for (full_output, path) in [
            (
                FullOutput::Saved(PathBuf::from("/tmp/out/1.log")),
                json!("/tmp/out/1.log"),
            ),
            (
                FullOutput::Partial {
                    path: PathBuf::from("/tmp/out/2.log"),
                    bytes: 64,
                },
                json!("/tmp/out/2.log"),
            ),
            (FullOutput::Unsaved("disk full".to_string()), json!(null)),
        ] {
            let cut = CommandRun {
                truncated: true,
                output_bytes: 5000,
                full_output: Some(full_output.clone()),
                ..run(
                    Ending::Exited {
                        code: Some(0),
                        signal: None,
                    },
                    "[note]\ntail\n",
                )
            };
            let details = bash_output("noisy", cut, timeout).details;
            assert_eq!(
                details.as_ref().map(|d| (
                    d["truncated"].clone(),
                    d["outputBytes"].clone(),
                    d["fullOutputPath"].clone()
                )),
                Some((json!(true), json!(5000), path)),
                "{full_output:?}：被截断的输出在 details 里给出完整输出文件的路径（没能保存就是 null）"
            );
        }
    }
}

mod bash {
    use super::*;

    /// Whether `pid` is a live process; a zombie counts as dead.
    fn alive(pid: i32) -> bool {
        if Path::new("/proc/self/stat").exists() {
            match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
                // The state letter follows the command name in parentheses.
                Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| {
                    !matches!(rest.trim_start().chars().next(), Some('Z' | 'X'))
                }),
                Err(_) => false,
            }
        } else {
            // SAFETY: signal 0 only asks whether the process exists.
            unsafe { libc::kill(pid, 0) == 0 }
        }
    }

    /// The pid a command wrote into `file`, once the whole line is there.
    fn pid_in(file: &Path) -> Option<i32> {
        let text = std::fs::read_to_string(file).ok()?;
        text.strip_suffix('\n')?.trim().parse().ok()
    }

    /// Kills the processes whose pids the command wrote into these files, when the test ends:
    /// a wrong implementation — or a process that left the group on purpose — must not
    /// outlive the test.
    struct Reaper(Vec<PathBuf>);

    impl Drop for Reaper {
        fn drop(&mut self) {
            for file in &self.0 {
                if let Some(pid) = pid_in(file) {
                    if alive(pid) {
                        // SAFETY: SIGKILL to a process this test's command started.
                        unsafe {
                            libc::kill(pid, libc::SIGKILL);
                        }
                    }
                }
            }
        }
    }

    fn cancellable(cancel: &CancellationToken) -> CallContext {
        CallContext {
            cancel: cancel.clone(),
            ..CallContext::default()
        }
    }

    /// Makes this test process's own stdin a pipe that nobody ever writes to or closes (once
    /// per process): a command that inherited it, instead of getting an empty stdin, would
    /// wait on it for ever.
    fn agent_stdin_that_never_ends() {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            let mut ends = [0; 2];
            // SAFETY: pipe fills `ends` with two new descriptors; dup2 puts the read end on
            // fd 0; the write end stays open and unused for the life of the process, and is
            // closed on exec so no command holds it.
            unsafe {
                assert_eq!(libc::pipe(ends.as_mut_ptr()), 0, "测试需要能建管道");
                assert_eq!(libc::dup2(ends[0], 0), 0, "测试需要能换掉自己的 stdin");
                libc::close(ends[0]);
                libc::fcntl(ends[1], libc::F_SETFD, libc::FD_CLOEXEC);
            }
        });
    }

    fn is_bash(shell: &Path) -> bool {
        shell.file_name().is_some_and(|name| name == "bash")
    }

    #[tokio::test]
    async fn runs_in_the_workspace_root_and_reports_output_and_exit_code() {
        let scratch = Scratch::new("bash-basic");
        let tools = scratch.tools();
        let root = tools.workspace().root().display().to_string();
        let shell = tools.shell();
        let registry = registry(vec![tools.bash_tool()]);

        let pwd = call(&registry, "bash", json!({"command": "pwd -P"})).await;
        assert_eq!(
            (body(&pwd), pwd.is_error),
            (format!("{root}\n"), false),
            "命令在 workspace 根目录里运行，输出原样返回"
        );
        assert_eq!(
            pwd.details,
            Some(json!({
                "command": "pwd -P", "shell": shell.display().to_string(),
                "exitCode": 0, "signal": null, "timedOut": false, "aborted": false,
                "truncated": false, "outputBytes": root.len() + 1, "fullOutputPath": null
            })),
            "details 写明命令、shell、退出码和输出字节数"
        );

        let quiet = call(&registry, "bash", json!({"command": "true"})).await;
        assert_eq!(
            (body(&quiet), quiet.is_error),
            (NO_OUTPUT.to_string(), false),
            "成功而没有输出的命令返回“（无输出）”"
        );

        let failing = call(
            &registry,
            "bash",
            json!({"command": "echo out; echo err >&2; exit 3"}),
        )
        .await;
        let text = body(&failing);
        let mut lines: Vec<&str> = text.lines().collect();
        let status = lines.pop();
        lines.sort_unstable();
        assert_eq!(
            (lines, status, failing.is_error),
            (vec!["err", "out"], Some("[退出码 3]"), true),
            "stdout 与 stderr 都收进输出，非零退出码写在最后一行，结果 isError 为 true"
        );
        assert_eq!(
            failing.details.as_ref().map(|d| d["exitCode"].clone()),
            Some(json!(3)),
            "details.exitCode 是命令的退出码"
        );

        let killed = call(&registry, "bash", json!({"command": "kill -TERM $$"})).await;
        assert_eq!(
            (
                body(&killed),
                killed
                    .details
                    .as_ref()
                    .map(|d| (d["exitCode"].clone(), d["signal"].clone()))
            ),
            (
                "[命令被信号 15 终止]".to_string(),
                Some((json!(null), json!(15)))
            ),
            "被信号杀死的 shell 没有退出码：结果写明是哪个信号"
        );

        let which = call(
            &registry,
            "bash",
            json!({"command": "[[ -n ${BASH_VERSION:-} ]] && echo bash || echo sh"}),
        )
        .await;
        let expected = if is_bash(&shell) { "bash\n" } else { "sh\n" };
        assert_eq!(
            body(&which),
            expected,
            "PATH 上有 bash 时，命令由 bash 运行（bash 的语法可以用）；details.shell 说的就是运行它的 shell"
        );

        assert_eq!(
            registry.definitions()[0].parameters,
            json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string"},
                    "timeout": {"type": "integer", "minimum": 1}
                },
                "required": ["command"],
                "additionalProperties": false
            }),
            "bash 的参数沿用上游 pi 的名字：command 与以秒计的 timeout"
        );
    }

    #[tokio::test]
    async fn the_shell_is_the_first_bash_on_the_path_else_sh() {
        let scratch = Scratch::new("bash-shell");
        let directory_named_bash = scratch.dir.join("bin0/bash");
        std::fs::create_dir_all(&directory_named_bash).expect("测试需要能建目录");
        let not_executable = scratch.file("bin1/bash", "#!/bin/sh\necho no\n");
        set_mode(&not_executable, 0o644);
        let fake = scratch.file(
            "bin2/bash",
            "#!/bin/sh\nprintf 'fake bash:'; printf ' %s' \"$@\"; printf '\\n'\n",
        );
        set_mode(&fake, 0o755);
        let later = scratch.file("bin3/bash", "#!/bin/sh\necho later\n");
        set_mode(&later, 0o755);
        let path =
            std::env::join_paths(["bin0", "bin1", "bin2", "bin3"].map(|dir| scratch.dir.join(dir)))
                .expect("测试的目录名里没有冒号");

        assert_eq!(
            find_shell(Some(&path)),
            fake,
            "shell 是 PATH 上第一个可执行的 bash 文件：名叫 bash 的目录和不能执行的文件都不算"
        );
        let no_bash = std::env::join_paths([scratch.dir.join("bin0"), scratch.dir.join("bin1")])
            .expect("测试的目录名里没有冒号");
        for path in [None, Some(OsString::new()), Some(no_bash)] {
            assert_eq!(
                find_shell(path.as_deref()),
                PathBuf::from(FALLBACK_SHELL),
                "PATH 上没有可执行的 bash（或者根本没有 PATH）时，退回 {FALLBACK_SHELL}"
            );
        }

        let tools = scratch.tools().with_environment([("PATH", path)]);
        assert_eq!(
            tools.shell(),
            fake,
            "CodingTools::shell() 在捕获的环境的 PATH 上找"
        );
        let registry = registry(vec![tools.bash_tool()]);
        let result = call(&registry, "bash", json!({"command": "echo hi"})).await;
        assert_eq!(
            (
                body(&result),
                result.details.as_ref().map(|d| d["shell"].clone())
            ),
            (
                "fake bash: -c echo hi\n".to_string(),
                Some(json!(fake.display().to_string()))
            ),
            "命令交给找到的 shell，用 -c 运行：shell -c <command>"
        );
    }

    #[tokio::test]
    async fn secrets_and_the_agents_stdin_never_reach_the_command() {
        agent_stdin_that_never_ends();
        let scratch = Scratch::new("bash-env");
        let path = std::env::var_os("PATH").unwrap_or_default();
        let given = [
            ("PATH", path.clone()),
            ("PLAIN", OsString::from("kept")),
            ("OPENAI_COMPATIBLE_API_KEY", OsString::from("sk-1")),
            ("my_api_key", OsString::from("sk-2")),
            ("GitHub_Token", OsString::from("ghp")),
            ("PGPASSWORD", OsString::from("pw")),
            ("AWS_SECRET_ACCESS_KEY", OsString::from("aws")),
            ("KEYCHAIN_PATH", OsString::from("kc")),
        ];
        // A variable of this process that the captured environment does not have.
        let not_captured = std::env::vars_os()
            .map(|(name, _)| name)
            .find(|name| given.iter().all(|(given, _)| name != given));
        let tools = scratch
            .tools()
            .with_limits(Limits {
                kill_grace: Duration::from_millis(100),
                ..Limits::default()
            })
            .with_environment(given.clone());
        let registry = registry(vec![tools.bash_tool()]);

        let env = call(&registry, "bash", json!({"command": "env"})).await;
        let seen: Vec<(String, String)> = body(&env)
            .lines()
            .filter_map(|line| line.split_once('='))
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect();
        let value = |name: &str| {
            seen.iter()
                .find(|(each, _)| each == name)
                .map(|(_, value)| value.clone())
        };
        for (name, _) in &given[2..] {
            assert_eq!(
                value(name),
                None,
                "{name}：名字里带 KEY、TOKEN、SECRET 或 PASSWORD（不分大小写）的变量不能进入命令的环境"
            );
        }
        assert_eq!(
            (value("PLAIN"), value("PATH")),
            (
                Some("kept".to_string()),
                Some(path.to_string_lossy().into_owned())
            ),
            "其他变量原样交给命令"
        );
        if let Some(name) = not_captured {
            let name = name.to_string_lossy().into_owned();
            assert_eq!(
                value(&name),
                None,
                "命令的环境只来自 CodingTools 捕获的那一份：agent 进程里另外的变量 {name} 不能混进来"
            );
        }

        let read = call(
            &registry,
            "bash",
            json!({"command": "read -r line; echo \"read: $?\"", "timeout": 3}),
        )
        .await;
        assert_eq!(
            body(&read),
            "read: 1\n",
            "命令的 stdin 必须是空的（/dev/null）：读 stdin 立刻读到结尾，不能读到或等着 agent 自己的 stdin"
        );
    }

    #[tokio::test]
    async fn a_pre_cancelled_call_never_spawns() {
        let scratch = Scratch::new("bash-precancel");
        let tools = scratch.tools();
        let shell = tools.shell().display().to_string();
        let registry = registry(vec![tools.bash_tool()]);
        let cancel = CancellationToken::new();
        cancel.cancel();

        let result = call_with(
            &registry,
            "bash",
            json!({"command": "touch started.txt"}),
            cancellable(&cancel),
        )
        .await;
        assert_eq!(
            (body(&result), result.is_error),
            (CANCELLED_BEFORE_START.to_string(), true),
            "预取消的调用不启动命令，直接说明没有运行"
        );
        assert_eq!(
            result.details,
            Some(json!({
                "command": "touch started.txt", "shell": shell, "exitCode": null,
                "signal": null, "timedOut": false, "aborted": true, "truncated": false,
                "outputBytes": 0, "fullOutputPath": null
            })),
            "预取消：aborted 为 true，没有退出码"
        );
        assert!(
            !scratch.ws().join("started.txt").exists(),
            "预取消时不能 spawn 子进程"
        );
    }

    #[tokio::test]
    async fn a_long_output_keeps_its_end_and_is_saved_whole_outside_the_workspace() {
        let scratch = Scratch::new("bash-cap");
        let tools = scratch.tools().with_limits(Limits {
            max_bash_output_bytes: 1000,
            ..Limits::default()
        });
        let root = tools.workspace().root().to_path_buf();
        let registry = registry(vec![tools.bash_tool()]);

        // Output keeps being read until both streams are closed, not just the first one.
        let split = "echo early; exec 1>&-; sleep 0.2; echo late >&2";
        let split = call(&registry, "bash", json!({ "command": split })).await;
        assert_eq!(
            body(&split),
            "early\nlate\n",
            "stdout 先关闭后，stderr 后来的输出仍要读完：两个流都关闭才算结束"
        );

        let exact = call(&registry, "bash", json!({"command": "printf '%01000d' 0"})).await;
        assert_eq!(
            (
                body(&exact),
                exact
                    .details
                    .as_ref()
                    .map(|d| (d["truncated"].clone(), d["fullOutputPath"].clone()))
            ),
            ("0".repeat(1000), Some((json!(false), json!(null)))),
            "正好 1000 字节的输出不截断，也不存文件"
        );

        // Two pipes give two chunks, each below the cap: the one read first is saved too.
        let two = call(
            &registry,
            "bash",
            json!({"command": "printf '%0600d' 0; printf '%0600d' 1 >&2"}),
        )
        .await;
        let saved_two = two
            .details
            .as_ref()
            .and_then(|d| d["fullOutputPath"].as_str())
            .map(PathBuf::from)
            .unwrap_or_default();
        let (first, second) = ("0".repeat(600), format!("{}1", "0".repeat(599)));
        let content = content_of(&saved_two);
        assert!(
            content == format!("{first}{second}") || content == format!("{second}{first}"),
            "越过上限之前读到的输出也要存进文件：文件从第一个字节开始，是完整的输出（实际 {} 字节）",
            content.len()
        );

        // Far above a pipe's buffer (64 KiB): the command must be read while it runs.
        let full: String = (1..=40000).map(|n| format!("{n}\n")).collect();
        let long = call(&registry, "bash", json!({"command": "seq 1 40000"})).await;
        let saved = long
            .details
            .as_ref()
            .and_then(|d| d["fullOutputPath"].as_str())
            .map(PathBuf::from)
            .unwrap_or_else(|| panic!("被截断的输出必须存进文件，details.fullOutputPath 给出路径"));
        let note = bash_truncation_note(full.len(), 1000, Some(&FullOutput::Saved(saved.clone())));
        assert_eq!(
            (body(&long), long.is_error),
            (
                format!("{note}{}", &full[full.len() - (1000 - note.len())..]),
                false
            ),
            "超过上限的输出：截断提示加上输出的结尾，正好 1000 字节"
        );
        assert_eq!(
            long.details.as_ref().map(|d| (
                d["truncated"].clone(),
                d["outputBytes"].clone(),
                d["exitCode"].clone()
            )),
            Some((json!(true), json!(full.len()), json!(0))),
            "details.truncated 为 true，outputBytes 是命令实际写出的字节数"
        );
        assert!(
            content_of(&saved) == full,
            "存下的文件里是完整的输出，一个字节不少（{}，{} 字节）",
            saved.display(),
            content_of(&saved).len()
        );
        assert!(
            !saved.starts_with(&root),
            "完整输出的文件不能放进 workspace：{}",
            saved.display()
        );
        let dir = saved.parent().map(Path::to_path_buf).unwrap_or_default();
        assert_eq!(
            (mode_of(&saved), mode_of(&dir)),
            (0o600, 0o700),
            "输出里可能有秘密：文件和它的目录只有自己能读"
        );

        let one_more = call(&registry, "bash", json!({"command": "printf '%01001d' 0"})).await;
        let second = one_more
            .details
            .as_ref()
            .and_then(|d| d["fullOutputPath"].as_str())
            .map(PathBuf::from)
            .unwrap_or_default();
        assert_eq!(
            (
                second.parent() == Some(dir.as_path()) && second != saved,
                content_of(&second)
            ),
            (true, "0".repeat(1001)),
            "超过上限一个字节就要存文件；同一个 CodingTools 的输出文件放在同一个目录里，各有各的名字"
        );

        drop(registry);
        drop(tools);
        assert!(
            !dir.exists(),
            "CodingTools 的最后一个克隆被丢弃时，存输出的目录连同文件一起删掉：{}",
            dir.display()
        );
    }

    #[tokio::test]
    async fn the_saved_output_has_a_size_limit_and_a_failure_to_save_is_told() {
        let scratch = Scratch::new("bash-saved");
        let limits = Limits {
            max_bash_output_bytes: 1000,
            max_saved_output_bytes: 5000,
            ..Limits::default()
        };
        let full: String = (1..=40000).map(|n| format!("{n}\n")).collect();
        let tools = scratch.tools().with_limits(limits);
        let registry = registry(vec![tools.bash_tool()]);
        let long = call(&registry, "bash", json!({"command": "seq 1 40000"})).await;
        let saved = long
            .details
            .as_ref()
            .and_then(|d| d["fullOutputPath"].as_str())
            .map(PathBuf::from)
            .unwrap_or_default();
        let note = bash_truncation_note(
            full.len(),
            1000,
            Some(&FullOutput::Partial {
                path: saved.clone(),
                bytes: 5000,
            }),
        );
        assert_eq!(
            (body(&long), content_of(&saved)),
            (
                format!("{note}{}", &full[full.len() - (1000 - note.len())..]),
                full[..5000].to_string()
            ),
            "输出文件最多存 max_saved_output_bytes 字节（写不停的命令不能把磁盘写满）：文件里是开头的 5000 字节，提示说明只存了这么多"
        );

        let blocked = scratch.file("not-a-directory", "");
        let tools = scratch
            .tools()
            .with_limits(limits)
            .with_output_dir(&blocked);
        let registry = super::registry(vec![tools.bash_tool()]);
        let unsaved = call(&registry, "bash", json!({"command": "seq 1 40000"})).await;
        let reason = io::Error::from_raw_os_error(libc::ENOTDIR).to_string();
        let note = bash_truncation_note(full.len(), 1000, Some(&FullOutput::Unsaved(reason)));
        assert_eq!(
            (
                body(&unsaved),
                unsaved.is_error,
                unsaved
                    .details
                    .as_ref()
                    .map(|d| d["fullOutputPath"].clone())
            ),
            (
                format!("{note}{}", &full[full.len() - (1000 - note.len())..]),
                false,
                Some(json!(null))
            ),
            "存不了完整输出时命令照样算完成：提示写明没能保存和原因，fullOutputPath 为 null"
        );
    }

    #[tokio::test]
    async fn timeout_and_cancellation_are_told_apart() {
        let scratch = Scratch::new("bash-endings");
        let tools = scratch.tools();
        let registry = registry(vec![tools.bash_tool()]);

        let timed = call(
            &registry,
            "bash",
            json!({"command": "sleep 30", "timeout": 1}),
        )
        .await;
        assert_eq!(
            (body(&timed), timed.is_error),
            ("[命令超时（1 秒），已终止它的进程组]".to_string(), true),
            "超过 timeout 秒的命令被终止，结果说明是超时"
        );
        assert_eq!(
            timed.details.as_ref().map(|d| (
                d["timedOut"].clone(),
                d["aborted"].clone(),
                d["exitCode"].clone()
            )),
            Some((json!(true), json!(false), Value::Null)),
            "超时：timedOut 为 true，aborted 为 false"
        );

        let cancel = CancellationToken::new();
        let running = spawn_call(
            &registry,
            "bash",
            json!({"command": "touch ready; sleep 30"}),
            cancellable(&cancel),
        );
        let ready = scratch.ws().join("ready");
        until("命令应当开始运行", || ready.exists()).await;
        cancel.cancel();
        let cancelled = tokio::time::timeout(Duration::from_secs(5), running)
            .await
            .expect("取消后命令必须被终止，调用随即返回")
            .expect("bash 调用的任务不应 panic");
        assert_eq!(
            (body(&cancelled), cancelled.is_error),
            (CANCELLED.to_string(), true),
            "运行中被取消的命令被终止，结果说明是取消，不是超时"
        );
        assert_eq!(
            cancelled
                .details
                .as_ref()
                .map(|d| (d["timedOut"].clone(), d["aborted"].clone())),
            Some((json!(false), json!(true))),
            "取消：aborted 为 true，timedOut 为 false"
        );
    }

    #[tokio::test]
    async fn sigterm_first_then_sigkill_for_the_whole_group() {
        let scratch = Scratch::new("bash-group");
        // A generous grace: the shell's trap must get to run even on a loaded machine.
        let tools = scratch.tools().with_limits(Limits {
            kill_grace: Duration::from_secs(5),
            ..Limits::default()
        });
        let registry = registry(vec![tools.bash_tool()]);
        let ws = scratch.ws();
        let _reaper = Reaper(vec![ws.join("child.pid")]);
        // The shell cleans up on SIGTERM; its background child ignores SIGTERM.
        let command = "trap 'echo term > got-term; exit 0' TERM; \
                       sh -c 'trap \"\" TERM; echo $$ > child.pid; exec sleep 30' & wait";
        let cancel = CancellationToken::new();
        let running = spawn_call(
            &registry,
            "bash",
            json!({ "command": command }),
            cancellable(&cancel),
        );
        until("后台子进程应当开始运行", || {
            pid_in(&ws.join("child.pid")).is_some()
        })
        .await;
        cancel.cancel();
        let finished = tokio::time::timeout(Duration::from_secs(8), running).await;
        let cancelled = finished
            .expect("取消后宽限期一过，必须用 SIGKILL 结束整个进程组：忽略 SIGTERM 的子进程还活着")
            .expect("bash 调用的任务不应 panic");
        assert_eq!(body(&cancelled), CANCELLED, "结果说明命令被取消");
        assert!(
            ws.join("got-term").exists(),
            "先发 SIGTERM：命令有机会运行自己的清理，然后才是 SIGKILL"
        );
        let child = pid_in(&ws.join("child.pid")).expect("child.pid 里有后台子进程的 pid");
        until(
            "取消后宽限期一过，必须用 SIGKILL 结束整个进程组：忽略 SIGTERM 的后台子进程也不能活下来",
            || !alive(child),
        )
        .await;
    }

    #[tokio::test]
    async fn no_process_of_the_group_outlives_the_call() {
        let scratch = Scratch::new("bash-leftovers");
        // A long output grace: only a process of the group that is still alive could write
        // during it, and none may be.
        let tools = scratch.tools().with_limits(Limits {
            output_grace: Duration::from_secs(4),
            ..Limits::default()
        });
        let registry = registry(vec![tools.bash_tool()]);
        let ws = scratch.ws();
        let _reaper = Reaper(vec![
            ws.join("job.pid"),
            ws.join("shell.pid"),
            ws.join("child.pid"),
        ]);

        let finished = call(
            &registry,
            "bash",
            json!({"command": "(sleep 2; echo late) & echo $! > job.pid; echo started"}),
        )
        .await;
        assert_eq!(
            (body(&finished), finished.is_error),
            ("started\n".to_string(), false),
            "命令正常结束时同样立刻给整个进程组发 SIGKILL：它留在后台的任务不能再写出任何东西"
        );
        let job = pid_in(&ws.join("job.pid")).expect("job.pid 里有后台任务的 pid");
        until(
            "命令结束之后，它留在后台的任务也必须被杀掉：正常退出之后同样要给整个进程组发 SIGKILL",
            || !alive(job),
        )
        .await;

        let running = spawn_call(
            &registry,
            "bash",
            json!({"command": "echo $$ > shell.pid; sleep 30 & echo $! > child.pid; wait"}),
            CallContext::default(),
        );
        until("命令和它的后台子进程应当开始运行", || {
            pid_in(&ws.join("shell.pid")).is_some() && pid_in(&ws.join("child.pid")).is_some()
        })
        .await;
        let (shell, child) = (
            pid_in(&ws.join("shell.pid")).unwrap_or_default(),
            pid_in(&ws.join("child.pid")).unwrap_or_default(),
        );
        // The call's future is dropped mid-run, as when its task is aborted.
        running.abort();
        let _ = running.await;
        until(
            "调用在运行中被丢弃时，整个进程组都要被杀掉：只杀 shell（kill_on_drop）会留下它的子进程",
            || !alive(shell) && !alive(child),
        )
        .await;
    }

    #[tokio::test]
    async fn a_process_that_leaves_the_group_cannot_hold_the_call() {
        let scratch = Scratch::new("bash-escape");
        let tools = scratch.tools().with_limits(Limits {
            kill_grace: Duration::from_millis(200),
            output_grace: Duration::from_millis(200),
            ..Limits::default()
        });
        let registry = registry(vec![tools.bash_tool()]);
        let ws = scratch.ws();
        let _reaper = Reaper(vec![ws.join("held.pid"), ws.join("slow.pid")]);
        // `set -m` gives the background job a process group of its own, as `setsid` would:
        // the call cannot kill it, and it holds stdout open for 30 s.
        let rule = "命令的进程组结束后，输出只再读一个很短的宽限期：离开进程组的进程还握着输出管道，不能等它关闭";

        let done = call_within(
            &registry,
            "bash",
            json!({"command": "set -m; sleep 30 & echo $! > held.pid; echo done"}),
            rule,
        )
        .await;
        assert_eq!(
            (body(&done), done.is_error),
            ("done\n".to_string(), false),
            "命令自己结束了：结果是它在结束之前写出的全部输出"
        );

        let timed = call_within(
            &registry,
            "bash",
            json!({
                "command": "set -m; sleep 30 & echo $! > slow.pid; set +m; echo waiting; sleep 30",
                "timeout": 1
            }),
            rule,
        )
        .await;
        assert_eq!(
            body(&timed),
            "waiting\n[命令超时（1 秒），已终止它的进程组]",
            "超时照样准时结束，哪怕有离开进程组的进程握着输出"
        );
    }

    #[tokio::test]
    async fn a_failed_spawn_is_a_failed_call() {
        let scratch = Scratch::new("bash-spawn");
        let tools = scratch.tools();
        let shell = tools.shell();
        let registry = registry(vec![tools.bash_tool()]);
        std::fs::remove_dir_all(scratch.ws()).expect("测试需要能删掉 workspace");

        let failed = call(&registry, "bash", json!({"command": "echo hi"})).await;
        assert_eq!(
            (body(&failed), failed.is_error),
            (
                format!(
                    "Tool bash failed: 无法启动 {}：{}",
                    shell.display(),
                    io::Error::from_raw_os_error(libc::ENOENT)
                ),
                true
            ),
            "启动失败（这里是 workspace 根目录没了）是一条失败结果，写明哪个 shell 没能启动、为什么"
        );
    }
}

mod real_loop {
    use super::*;

    #[test]
    fn the_registry_offers_the_four_tools_with_upstream_names() {
        let scratch = Scratch::new("loop-registry");
        let tools = scratch.tools();
        let registry = tools.registry().expect("四个工具名互不相同");
        let definitions = registry.definitions();
        let names: Vec<&str> = definitions.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(
            names,
            ["read", "write", "edit", "bash"],
            "Registry 按 read、write、edit、bash 的顺序注册四个工具"
        );
        let required: Vec<Value> = definitions
            .iter()
            .map(|d| d.parameters["required"].clone())
            .collect();
        assert_eq!(
            required,
            [
                json!(["path"]),
                json!(["path", "content"]),
                json!(["path"]),
                json!(["command"])
            ],
            "每个工具的必填参数沿用上游 pi 的名字"
        );
        assert_eq!(
            definitions
                .iter()
                .map(|d| d.description.as_str())
                .collect::<Vec<_>>(),
            [
                READ_DESCRIPTION,
                WRITE_DESCRIPTION,
                EDIT_DESCRIPTION,
                BASH_DESCRIPTION
            ],
            "每个工具带着骨架给出的说明"
        );
    }

    fn roles(messages: &[AgentMessage]) -> Vec<&'static str> {
        messages
            .iter()
            .map(|message| match message {
                AgentMessage::System(_) => "system",
                AgentMessage::User(_) => "user",
                AgentMessage::Assistant(_) => "assistant",
                AgentMessage::ToolResult(_) => "toolResult",
            })
            .collect()
    }

    #[tokio::test]
    async fn a_scripted_run_reads_edits_and_checks_a_real_file() {
        let scratch = Scratch::new("loop-run");
        let original = "# Plan\n- write tests\n- ship\n";
        let notes = scratch.file("ws/notes.md", original);
        let tools = scratch.tools();
        let model = ScriptedModel::new(vec![
            ScriptedTurn::tool_calls(vec![tool_call(
                "call_read",
                "read",
                json!({"path": "notes.md"}),
            )]),
            ScriptedTurn::tool_calls(vec![tool_call(
                "call_edit",
                "edit",
                json!({"path": "notes.md", "edits": [
                    {"oldText": "- write tests", "newText": "- write tests (done)"}
                ]}),
            )]),
            ScriptedTurn::tool_calls(vec![tool_call(
                "call_bash",
                "bash",
                json!({"command": "cat notes.md"}),
            )]),
            ScriptedTurn::text("notes.md updated"),
        ]);
        let context = AgentContext {
            messages: vec![user_message("mark the tests done")],
            ..AgentContext::default()
        };
        let options = AgentLoopOptions::new(
            Arc::new(model.clone()),
            tools.registry().expect("四个工具名互不相同"),
            context,
        );
        let result = tokio::time::timeout(Duration::from_secs(5), run_agent_loop(options))
            .await
            .expect("脚本只有四个回合，循环应在 5 秒内结束");

        let edited = "# Plan\n- write tests (done)\n- ship\n";
        assert_eq!(content_of(&notes), edited, "edit 真的改了磁盘上的文件");
        assert_eq!(
            (result.reason, result.steps),
            (RunReason::Stop, 4),
            "三次工具往返之后模型 stop：四个模型回合"
        );
        assert_eq!(
            roles(&result.messages),
            [
                "user",
                "assistant",
                "toolResult",
                "assistant",
                "toolResult",
                "assistant",
                "toolResult",
                "assistant"
            ],
            "每个工具调用后面紧跟它的结果"
        );
        let paired: Vec<(String, String, String, bool)> = result
            .messages
            .iter()
            .filter_map(|message| match message {
                AgentMessage::ToolResult(result) => Some((
                    result.tool_call_id.clone(),
                    result.tool_name.clone(),
                    body(result),
                    result.is_error,
                )),
                _ => None,
            })
            .collect();
        assert_eq!(
            paired,
            [
                (
                    "call_read".into(),
                    "read".into(),
                    original.to_string(),
                    false
                ),
                (
                    "call_edit".into(),
                    "edit".into(),
                    "已在 notes.md 中替换 1 处".into(),
                    false
                ),
                ("call_bash".into(), "bash".into(), edited.to_string(), false)
            ],
            "每个调用恰好一条配对结果：read 读到原文，edit 改好，bash 看到的是改过的文件"
        );
        let requests = model.requests();
        let offered: Vec<&str> = requests[0].tools.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(
            offered,
            ["read", "write", "edit", "bash"],
            "模型在第一次请求里就看到四个工具"
        );
        assert_eq!(
            requests[1].messages.last(),
            result.messages.get(2),
            "第二次请求带着 read 的结果：模型是读过文件之后才决定怎么改的"
        );
    }

    #[tokio::test]
    async fn the_four_tools_share_one_queue_and_one_set_of_limits() {
        let scratch = Scratch::new("loop-shared");
        let target = scratch.file("ws/a.txt", "v0\n");
        scratch.file("ws/long.txt", "abcdefghij\n");
        let tools = scratch.tools().with_limits(Limits {
            max_read_bytes: 8,
            max_bash_output_bytes: 400,
            ..Limits::default()
        });
        let registry = tools.registry().expect("四个工具名互不相同");
        let resolved = tools
            .workspace()
            .resolve("a.txt")
            .expect("a.txt 在 workspace 里面");
        let queue = tools.queue().clone();

        let held = HeldPath::occupy(&queue, &resolved, &target, "holder\n").await;
        let writer = spawn_call(
            &registry,
            "write",
            json!({"path": "a.txt", "content": "writer\n"}),
            CallContext::default(),
        );
        let editor = spawn_call(
            &registry,
            "edit",
            json!({"path": "a.txt", "oldText": "writer", "newText": "edited"}),
            CallContext::default(),
        );
        until(
            "Registry 里的 write 与 edit 必须排在这个 CodingTools 的同一个队列里",
            || queue.pending(&resolved) == 3,
        )
        .await;
        held.release().await;
        let (written, edited) = (writer.await, editor.await);
        assert!(
            written.is_ok_and(|r| !r.is_error) && edited.is_ok_and(|r| !r.is_error),
            "排队的 write 与 edit 按到达顺序完成"
        );
        assert_eq!(
            content_of(&target),
            "edited\n",
            "edit 看到的是 write 写好的文件"
        );

        let read = call(&registry, "read", json!({"path": "long.txt"})).await;
        assert_eq!(
            body(&read),
            "[第 1 行有 11 字节，超过 8 字节上限；请用 bash 分段查看]",
            "Registry 里的 read 用的是这个 CodingTools 的字节上限"
        );
        let bash = call(&registry, "bash", json!({"command": "seq 1 200"})).await;
        assert!(
            bash.details
                .as_ref()
                .is_some_and(|d| d["truncated"] == json!(true))
                && body(&bash).len() <= 400,
            "Registry 里的 bash 用的是这个 CodingTools 的输出上限，实际 {} 字节",
            body(&bash).len()
        );
    }
}
