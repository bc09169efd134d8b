//! What an `edit` or a `write` changed, as a few lines of unified diff under its result line.
//!
//! The file's text is read right before the call runs and again right after it, inside a
//! per-path queue of pi's own, so two changes to one file in the same batch each show their
//! own diff. The diff is kept beside the transcript, never in it: the model does not see it.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use pi_course::agent_loop::{EventSink, LoopEvent};
use pi_course::coding_tools::{MutationQueue, Workspace};
use pi_course::tool::{
    PreparedCall, Schema, SharedTool, Tool, ToolContext, ToolOutput, ToolRegistry,
};
use serde_json::Value;
use similar::{ChangeTag, TextDiff};

use crate::render::visible;

/// Diff lines shown under a result, hunk headers included; the rest is one "… 还有 N 行" line.
pub const DIFF_LINES: usize = 12;
/// Characters of one diff line shown before it is cut.
const DIFF_LINE_CHARS: usize = 160;
/// Unchanged lines shown around each change.
const CONTEXT: usize = 1;
/// Files larger than this are not diffed (a diff of them would not be short anyway).
const MAX_DIFF_BYTES: u64 = 1 << 20;
/// How long the diff may search for the smallest edit script before it settles for a larger
/// one; a pathological file then costs a coarser diff, not a slower tool call.
const DIFF_DEADLINE: Duration = Duration::from_millis(200);

/// The tools whose calls get a diff.
const DIFFED: [&str; 2] = ["edit", "write"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    Hunk,
    Removed,
    Added,
    Same,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiffLine {
    pub mark: Mark,
    pub text: String,
}

/// The first lines of a unified diff and how many lines were left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShortDiff {
    pub lines: Vec<DiffLine>,
    pub hidden: usize,
}

/// The unified diff from `old` to `new` with one line of context, at most `max` lines of it.
pub fn short_diff(old: &str, new: &str, max: usize) -> ShortDiff {
    let diff = TextDiff::configure()
        .timeout(DIFF_DEADLINE)
        .diff_lines(old, new);
    let mut all = Vec::new();
    for hunk in diff.unified_diff().context_radius(CONTEXT).iter_hunks() {
        all.push(DiffLine {
            mark: Mark::Hunk,
            text: hunk.header().to_string(),
        });
        for change in hunk.iter_changes() {
            let mark = match change.tag() {
                ChangeTag::Delete => Mark::Removed,
                ChangeTag::Insert => Mark::Added,
                ChangeTag::Equal => Mark::Same,
            };
            let value = change.value();
            let line = value
                .strip_suffix('\n')
                .map(|line| line.strip_suffix('\r').unwrap_or(line))
                .unwrap_or(value);
            let mut text = cut(&visible(line), DIFF_LINE_CHARS);
            if change.missing_newline() {
                text.push_str("（文件末尾没有换行）");
            }
            all.push(DiffLine { mark, text });
        }
    }
    let hidden = all.len().saturating_sub(max);
    all.truncate(max);
    ShortDiff { lines: all, hidden }
}

fn cut(text: &str, limit: usize) -> String {
    let mut shown: String = text.chars().take(limit).collect();
    if text.chars().count() > limit {
        shown.push('…');
    }
    shown
}

impl ShortDiff {
    /// The lines as printed, indented under the result line; ANSI colours when `colour`.
    pub fn render(&self, colour: bool) -> Vec<String> {
        let mut out: Vec<String> = self
            .lines
            .iter()
            .map(|line| {
                let (sign, paint) = match line.mark {
                    Mark::Hunk => ("", "\x1b[36m"),
                    Mark::Removed => ("-", "\x1b[31m"),
                    Mark::Added => ("+", "\x1b[32m"),
                    Mark::Same => (" ", ""),
                };
                if colour && !paint.is_empty() {
                    format!("  {paint}{sign}{}\x1b[0m", line.text)
                } else {
                    format!("  {sign}{}", line.text)
                }
            })
            .collect();
        if self.hidden > 0 {
            out.push(format!("  … 还有 {} 行", self.hidden));
        }
        out
    }
}

/// Colours only on a terminal, and never when `NO_COLOR` is set.
fn stderr_wants_colour() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// The file's text, `""` when it does not exist yet; `None` when it cannot be diffed (too
/// large, not UTF-8, unreadable).
async fn snapshot(path: &Path) -> Option<String> {
    match tokio::fs::metadata(path).await {
        Ok(meta) if !meta.is_file() || meta.len() > MAX_DIFF_BYTES => return None,
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Some(String::new()),
        Err(_) => return None,
    }
    let bytes = tokio::fs::read(path).await.ok()?;
    String::from_utf8(bytes).ok()
}

/// Wraps `edit` and `write` so each successful call leaves its diff here, by call id, for the
/// event sink to print after the call's result line. Clones share the diffs and the queue.
#[derive(Clone, Default)]
pub struct DiffWatch {
    diffs: Arc<Mutex<HashMap<String, ShortDiff>>>,
    queue: MutationQueue,
}

impl DiffWatch {
    /// `registry` with `edit` and `write` wrapped; every other tool as it was, in order.
    pub fn wrap(
        &self,
        registry: ToolRegistry,
        workspace: &Workspace,
    ) -> Result<ToolRegistry, String> {
        let tools = registry
            .list()
            .iter()
            .map(|tool| {
                if DIFFED.contains(&tool.name()) {
                    self.watched(Arc::clone(tool), workspace.clone())
                } else {
                    Arc::clone(tool)
                }
            })
            .collect();
        ToolRegistry::new(tools).map_err(|error| format!("工具注册失败：{error}"))
    }

    fn watched(&self, inner: SharedTool, workspace: Workspace) -> SharedTool {
        let parser = Arc::clone(&inner);
        // The inner tool's own schema check decides; the path is only read alongside it.
        let schema = Schema::new(inner.json_schema().cloned(), move |arguments: &Value| {
            let prepared = parser.prepare(arguments)?;
            let path = arguments["path"].as_str().map(str::to_string);
            Ok((path, prepared))
        });
        let watch = self.clone();
        Tool::new(
            inner.name(),
            inner.description(),
            schema,
            move |(path, prepared): (Option<String>, PreparedCall), context: ToolContext| {
                let watch = watch.clone();
                let target = path.and_then(|path| workspace.resolve(&path).ok());
                async move {
                    let Some(target) = target else {
                        return prepared.run(context).await;
                    };
                    let call_id = context.call_id.clone();
                    watch.run(target, call_id, prepared, context).await
                }
            },
        )
        .shared()
    }

    async fn run(
        &self,
        target: PathBuf,
        call_id: String,
        prepared: PreparedCall,
        context: ToolContext,
    ) -> Result<ToolOutput, pi_course::tool::ToolError> {
        let queue = self.queue.clone();
        queue
            .run(&target, async {
                let before = snapshot(&target).await;
                let output = prepared.run(context).await;
                let succeeded = matches!(&output, Ok(output) if output.is_error != Some(true));
                if let (true, Some(before)) = (succeeded, before) {
                    if let Some(after) = snapshot(&target).await {
                        let diff = short_diff(&before, &after, DIFF_LINES);
                        self.diffs
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .insert(call_id, diff);
                    }
                }
                output
            })
            .await
    }

    /// The diff the call `call_id` left, once.
    pub fn take(&self, call_id: &str) -> Option<ShortDiff> {
        self.diffs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(call_id)
    }

    /// `inner`, and after each result line of a diffed call its diff, under one stderr lock so
    /// other calls' lines cannot come in between.
    pub fn sink(&self, inner: EventSink) -> EventSink {
        let watch = self.clone();
        Arc::new(move |event| {
            let call_id = match &event {
                LoopEvent::ToolEnd(result) if !result.is_error => Some(result.tool_call_id.clone()),
                _ => None,
            };
            let stderr = std::io::stderr();
            let mut stderr = stderr.lock();
            inner(event);
            if let Some(diff) = call_id.and_then(|id| watch.take(&id)) {
                let colour = stderr_wants_colour();
                for line in diff.render(colour) {
                    let _ = writeln!(stderr, "{line}");
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(diff: &ShortDiff) -> Vec<String> {
        diff.render(false)
    }

    #[test]
    fn a_one_line_change_shows_its_hunk_with_one_line_of_context() {
        let diff = short_diff("a\nb\nc\nd\ne\n", "a\nb\nC\nd\ne\n", DIFF_LINES);
        assert_eq!(
            plain(&diff),
            ["  @@ -2,3 +2,3 @@", "   b", "  -c", "  +C", "   d"],
            "改一行：hunk 头、前后各一行上下文、先删后加"
        );
        assert_eq!(diff.hidden, 0, "短 diff 没有省略");
    }

    #[test]
    fn a_new_file_is_all_added_lines() {
        let diff = short_diff("", "fn main() {}\n", DIFF_LINES);
        assert_eq!(
            plain(&diff),
            ["  @@ -0,0 +1 @@", "  +fn main() {}"],
            "新文件：每行都是新增"
        );
    }

    #[test]
    fn unchanged_text_has_no_diff_lines() {
        let diff = short_diff("same\n", "same\n", DIFF_LINES);
        assert_eq!(diff, ShortDiff::default(), "内容没变就没有 diff 行");
    }

    #[test]
    fn a_long_diff_is_cut_with_a_count_of_the_rest() {
        let new: String = (1..=20).map(|n| format!("line {n}\n")).collect();
        let diff = short_diff("", &new, 5);
        let lines = plain(&diff);
        assert_eq!(
            lines,
            [
                "  @@ -0,0 +1,20 @@",
                "  +line 1",
                "  +line 2",
                "  +line 3",
                "  +line 4",
                "  … 还有 16 行"
            ],
            "超过上限：只显示前几行，最后一行说还有多少行"
        );
    }

    #[test]
    fn colour_only_when_asked_and_control_characters_are_visible() {
        let diff = short_diff("x\n", "\x1b[2Jy\r\n", DIFF_LINES);
        assert_eq!(
            diff.render(true),
            [
                "  \x1b[36m@@ -1 +1 @@\x1b[0m",
                "  \x1b[31m-x\x1b[0m",
                "  \x1b[32m+\\u{1b}[2Jy\x1b[0m"
            ],
            "终端上：删除红色、新增绿色；文件里的控制字符显示成转义，不会被终端执行"
        );
        let last = short_diff("a", "b", DIFF_LINES);
        assert_eq!(
            plain(&last),
            [
                "  @@ -1 +1 @@",
                "  -a（文件末尾没有换行）",
                "  +b（文件末尾没有换行）"
            ],
            "文件末尾没有换行时说出来"
        );
    }
}
