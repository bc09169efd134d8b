//! `cargo run -p pi-course --example prologue`: watch the finished loop on day one.

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let result = pi_course::demo::run_demo().await;
    println!("{}", pi_course::demo::render(&result));
}
