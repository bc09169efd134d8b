//! `cargo xtask test [NN] [--group NAME]` in a practice workspace. Everything happens in the
//! course's runner crate (`xtask/runner`); see its `practice` module.

fn main() -> std::process::ExitCode {
    course_runner::practice::main()
}
