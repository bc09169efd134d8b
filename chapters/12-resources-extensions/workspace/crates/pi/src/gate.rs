//! `--confirm` and `--allow`: the first real extension, a `before` hook in front of the tools
//! that change things (`bash`, `write`, `edit`).
//!
//! A rule is `tool:pattern`, e.g. `bash:cargo test*`. The pattern is matched against the whole
//! subject — the command for `bash`, the path for `write` and `edit` — and `*` is the only
//! special character (any run of characters, `/` included). Chosen over full globs or regexes
//! because a user reads it at a glance and it cannot mean more than it says: `bash:cargo test*`
//! also allows `cargo test; rm -rf ~`, which the help text says plainly.
//!
//! Without a matching rule, print mode denies; interactive mode shows the whole command or
//! change on stderr and asks on the terminal (`/dev/tty`, so a piped stdin cannot answer).

use std::io::{BufRead, BufReader, Write};

use pi_course::extensions::{Extension, ExtensionContext, HookDecision};
use pi_course::types::ToolCall;
use serde_json::Value;

/// The tools the gate stands in front of.
pub const GUARDED: [&str; 3] = ["bash", "write", "edit"];

/// One `--allow` rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    tool: String,
    pattern: String,
}

impl Rule {
    /// Parses `tool:pattern`; the tool must be one the gate guards.
    pub fn parse(text: &str) -> Result<Rule, String> {
        let Some((tool, pattern)) = text.split_once(':') else {
            return Err(format!(
                "--allow 的规则应写成 工具:模式，例如 'bash:cargo test*'，实际是 {text:?}"
            ));
        };
        if !GUARDED.contains(&tool) {
            return Err(format!(
                "--allow 的工具只能是 bash、write 或 edit，实际是 {tool:?}"
            ));
        }
        Ok(Rule {
            tool: tool.to_string(),
            pattern: pattern.to_string(),
        })
    }

    fn allows(&self, tool: &str, subject: &str) -> bool {
        self.tool == tool && wildcard_match(&self.pattern, subject)
    }
}

/// Whether `text` matches `pattern` as a whole, `*` standing for any run of characters.
pub fn wildcard_match(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let middle: Vec<&str> = parts.collect();
    let Some((last, middle)) = middle.split_last() else {
        // No `*` at all: the whole text must have been the prefix.
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// What a rule is matched against, and what the user is shown.
fn subject(call: &ToolCall) -> String {
    let field = |name: &str| {
        call.arguments[name]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    match call.name.as_str() {
        "bash" => field("command"),
        _ => field("path"),
    }
}

/// The whole change, never cut: a command, a file's new content, or each replacement.
pub fn describe(call: &ToolCall) -> String {
    let arguments = &call.arguments;
    let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
    let lines = |sign: char, value: &str| {
        value
            .lines()
            .map(|line| format!("{sign} {line}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    match call.name.as_str() {
        "bash" => format!("bash 要运行：\n{}", text(&arguments["command"])),
        "write" => format!(
            "write 要写入 {}：\n{}",
            text(&arguments["path"]),
            lines('+', &text(&arguments["content"]))
        ),
        _ => {
            let mut edits: Vec<(String, String)> = arguments["edits"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|edit| (text(&edit["oldText"]), text(&edit["newText"])))
                .collect();
            if arguments.get("oldText").is_some() {
                edits.insert(
                    0,
                    (text(&arguments["oldText"]), text(&arguments["newText"])),
                );
            }
            let changes: Vec<String> = edits
                .iter()
                .map(|(old, new)| format!("{}\n{}", lines('-', old), lines('+', new)))
                .collect();
            format!(
                "edit 要修改 {}：\n{}",
                text(&arguments["path"]),
                changes.join("\n…\n")
            )
        }
    }
}

/// How a call without a matching rule is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// Print mode: nobody to ask.
    Never,
    /// Interactive mode: ask on the terminal.
    Terminal,
}

pub struct Gate {
    pub rules: Vec<Rule>,
    pub ask: Ask,
}

pub const NO_RULE: &str = "--confirm 之下没有匹配的 --allow 规则，未运行";
pub const USER_SAID_NO: &str = "用户拒绝了这次调用，未运行";
pub const NO_TERMINAL: &str = "无法在终端上询问用户，按拒绝处理，未运行";

impl Extension for Gate {
    fn register(&self, cx: &mut ExtensionContext) -> Result<(), String> {
        let rules = self.rules.clone();
        let ask = self.ask;
        cx.on_before_tool_call(move |call: ToolCall| {
            let rules = rules.clone();
            async move {
                if !GUARDED.contains(&call.name.as_str()) {
                    return HookDecision::Allow;
                }
                let subject = subject(&call);
                if rules.iter().any(|rule| rule.allows(&call.name, &subject)) {
                    return HookDecision::Allow;
                }
                match ask {
                    Ask::Never => HookDecision::Deny(NO_RULE.to_string()),
                    Ask::Terminal => {
                        let question = describe(&call);
                        // Reading a terminal blocks; keep it off the async workers.
                        tokio::task::spawn_blocking(move || ask_terminal(&question))
                            .await
                            .unwrap_or_else(|_| HookDecision::Deny(NO_TERMINAL.to_string()))
                    }
                }
            }
        });
        Ok(())
    }
}

fn ask_terminal(question: &str) -> HookDecision {
    let Ok(tty) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
    else {
        return HookDecision::Deny(NO_TERMINAL.to_string());
    };
    let mut writer = &tty;
    if writeln!(writer, "{question}")
        .and_then(|()| write!(writer, "允许吗？[y/N] "))
        .and_then(|()| writer.flush())
        .is_err()
    {
        return HookDecision::Deny(NO_TERMINAL.to_string());
    }
    let mut answer = String::new();
    match BufReader::new(&tty).read_line(&mut answer) {
        Ok(_) if matches!(answer.trim(), "y" | "Y" | "yes") => HookDecision::Allow,
        Ok(_) => HookDecision::Deny(USER_SAID_NO.to_string()),
        Err(_) => HookDecision::Deny(NO_TERMINAL.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_matches_the_whole_subject_and_star_is_any_run() {
        assert!(
            wildcard_match("cargo test*", "cargo test -p pi"),
            "* 匹配任意后缀"
        );
        assert!(
            wildcard_match("cargo test*", "cargo test"),
            "* 也可以匹配空串"
        );
        assert!(
            !wildcard_match("cargo test", "cargo test -p pi"),
            "没有 * 时必须整串相等"
        );
        assert!(!wildcard_match("cargo*", "xcargo"), "模式从开头匹配");
        assert!(wildcard_match("src/*.rs", "src/a/b.rs"), "* 可以跨过 /");
        assert!(wildcard_match("a*b*c", "a-b-b-c"), "中间的片段按顺序出现");
        assert!(!wildcard_match("a*b*c", "a-c-b"), "中间的片段要按顺序出现");
    }

    #[test]
    fn rules_name_a_guarded_tool() {
        assert_eq!(
            Rule::parse("bash:ls*").map(|rule| rule.allows("bash", "ls -la")),
            Ok(true),
            "bash:ls* 允许 ls -la"
        );
        assert!(Rule::parse("ls").is_err(), "没有冒号的规则必须拒绝");
        assert!(
            Rule::parse("read:*").is_err(),
            "read 不受 --confirm 管，规则不能写它"
        );
    }
}
