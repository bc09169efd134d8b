//! Chapter 00 tests: they pin what the prologue demo shows.

use pi_course::agent_loop::RunReason;
use pi_course::demo::{render, run_demo};
use pi_course::types::AgentMessage;

mod prologue {
    use super::*;

    #[tokio::test]
    async fn the_demo_transcript_is_exactly_what_the_learner_sees() {
        let result = run_demo().await;
        assert_eq!(
            render(&result),
            "[user] 这个项目是做什么的？\n\
             [assistant] 先看看 README。\n\
             \x20 → read_file {\"path\":\"README.md\"}（call-1）\n\
             \x20 → read_file {\"path\":\"TODO.md\"}（call-2）\n\
             [toolResult call-1 ✓] # pi / 一个会读文件的编码智能体。\n\
             [toolResult call-2 ✗] Tool read_file failed: 文件不存在：TODO.md\n\
             [assistant] 这是一个会读文件的编码智能体；TODO.md 不存在。\n\
             结束：Stop，共 2 步"
        );
    }

    #[tokio::test]
    async fn a_failed_read_is_still_a_paired_result_and_the_loop_goes_on() {
        let result = run_demo().await;
        assert_eq!((result.reason, result.steps), (RunReason::Stop, 2));
        let results: Vec<(&str, bool)> = result
            .messages
            .iter()
            .filter_map(|message| match message {
                AgentMessage::ToolResult(result) => {
                    Some((result.tool_call_id.as_str(), result.is_error))
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            results,
            [("call-1", false), ("call-2", true)],
            "失败的读取也有配对结果，且循环继续"
        );
    }
}
