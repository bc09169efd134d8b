//! 第 11 章保留测试：只在讲师的 verify 里运行，从不进入练习目录。

use pi_course::context_compaction::answer;

#[test]
fn the_answer_does_not_change_between_calls() {
    assert_eq!(answer(), answer(), "answer() 每次都返回同一个值");
}
