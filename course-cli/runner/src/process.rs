//! Running a test binary so that the code under test cannot hang the judge or outlive it.
//!
//! The binary runs in its own process group (so one signal reaches every process a test
//! spawned) and, on Linux, dies with the thread that started it (`PR_SET_PDEATHSIG`), so
//! killing `cargo xtask` — even with SIGKILL — leaves no orphan behind. SIGINT, SIGTERM and
//! SIGHUP sent to the judge kill the running group before the judge itself goes. Its output
//! is drained as it comes and only a bounded head and tail are kept: a test that prints
//! gigabytes neither blocks on a full pipe nor fills the judge's memory.

use std::collections::VecDeque;
use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

/// How often a running binary is checked for progress, exit or cancellation.
const POLL: Duration = Duration::from_millis(20);
/// How long the output readers get to finish once the binary ended: a grandchild that left
/// the group may keep a pipe open, and the judge must not wait for it.
const READER_GRACE: Duration = Duration::from_secs(2);
/// Bytes of output kept from the start of a run.
const HEAD_BYTES: usize = 64 * 1024;
/// Bytes of output kept from the end of a run (libtest prints its failure sections last).
const TAIL_BYTES: usize = 1024 * 1024;

/// A flag another thread raises to stop a run early (watch mode: a new save arrived).
pub type Cancel = Arc<AtomicBool>;

/// How a run of the binary ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// It exited by itself, with this status.
    Exited(Status),
    /// No verdict appeared for the whole time limit; the group was killed.
    TimedOut,
    /// The cancel flag was raised; the group was killed.
    Cancelled,
}

/// An exit status reduced to what a verdict needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Code(i32),
    Signal(i32),
}

impl Status {
    /// `信号 SIGABRT`, `退出码 0`: how the process ended, for a reason line.
    pub fn describe(self) -> String {
        match self {
            Status::Code(code) => format!("退出码 {code}"),
            Status::Signal(signal) => match signal_name(signal) {
                Some(name) => format!("信号 {name}"),
                None => format!("信号 {signal}"),
            },
        }
    }

    fn of(status: ExitStatus) -> Self {
        #[cfg(unix)]
        {
            use std::os::unix::process::ExitStatusExt;
            if let Some(signal) = status.signal() {
                return Status::Signal(signal);
            }
        }
        Status::Code(status.code().unwrap_or(-1))
    }
}

/// The usual name of the signals a crashing test dies of.
#[cfg(unix)]
fn signal_name(signal: i32) -> Option<&'static str> {
    const NAMES: &[(libc::c_int, &str)] = &[
        (libc::SIGHUP, "SIGHUP"),
        (libc::SIGINT, "SIGINT"),
        (libc::SIGILL, "SIGILL"),
        (libc::SIGTRAP, "SIGTRAP"),
        (libc::SIGABRT, "SIGABRT"),
        (libc::SIGBUS, "SIGBUS"),
        (libc::SIGFPE, "SIGFPE"),
        (libc::SIGKILL, "SIGKILL"),
        (libc::SIGSEGV, "SIGSEGV"),
        (libc::SIGPIPE, "SIGPIPE"),
        (libc::SIGTERM, "SIGTERM"),
    ];
    NAMES
        .iter()
        .find(|(number, _)| *number == signal)
        .map(|(_, name)| *name)
}

#[cfg(not(unix))]
fn signal_name(_signal: i32) -> Option<&'static str> {
    None
}

/// What one run left behind.
#[derive(Debug)]
pub struct Finished {
    pub ending: Ending,
    /// stdout, bounded: head and tail, the middle replaced by one marker line.
    pub stdout: String,
    /// stderr, bounded the same way.
    pub stderr: String,
}

/// Runs `command` (stdout and stderr captured) until it exits, makes no progress for `limit`,
/// or `cancel` is raised. Progress is the length of `progress_file` growing: libtest appends a
/// line there each time a test finishes.
pub fn run_bounded(
    mut command: Command,
    progress_file: &Path,
    limit: Duration,
    cancel: Option<&Cancel>,
) -> std::io::Result<Finished> {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    isolate(&mut command);
    let mut child = command.spawn()?;
    let group = Group::enter(&child);
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());

    let mut last_len = 0;
    let mut last_progress = Instant::now();
    let ending = loop {
        if let Some(status) = child.try_wait()? {
            // Whatever the test started and left behind in its group goes with it.
            group.kill();
            break Ending::Exited(Status::of(status));
        }
        if cancel.is_some_and(|flag| flag.load(Ordering::SeqCst)) {
            break stop(&mut child, &group, Ending::Cancelled);
        }
        let len = std::fs::metadata(progress_file).map_or(0, |m| m.len());
        if len != last_len {
            last_len = len;
            last_progress = Instant::now();
        } else if last_progress.elapsed() >= limit {
            break stop(&mut child, &group, Ending::TimedOut);
        }
        thread::sleep(POLL);
    };
    drop(group);
    Ok(Finished {
        ending,
        stdout: collect(stdout),
        stderr: collect(stderr),
    })
}

fn stop(child: &mut Child, group: &Group, ending: Ending) -> Ending {
    group.kill();
    let _ = child.kill();
    let _ = child.wait();
    ending
}

/// Starts a reader thread that keeps a bounded copy of everything the pipe delivers.
fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> mpsc::Receiver<Bounded> {
    let (sender, receiver) = mpsc::channel();
    thread::spawn(move || {
        let mut kept = Bounded::default();
        if let Some(mut pipe) = pipe {
            let mut buffer = [0u8; 64 * 1024];
            while let Ok(read @ 1..) = pipe.read(&mut buffer) {
                kept.push(&buffer[..read]);
            }
        }
        let _ = sender.send(kept);
    });
    receiver
}

fn collect(reader: mpsc::Receiver<Bounded>) -> String {
    reader
        .recv_timeout(READER_GRACE)
        .map(|kept| kept.text())
        .unwrap_or_default()
}

/// The first `HEAD_BYTES` and the last `TAIL_BYTES` of a stream, and how much fell between.
#[derive(Default)]
struct Bounded {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    dropped: u64,
}

impl Bounded {
    fn push(&mut self, mut bytes: &[u8]) {
        let room = HEAD_BYTES - self.head.len();
        let (head, rest) = bytes.split_at(room.min(bytes.len()));
        self.head.extend_from_slice(head);
        bytes = rest;
        self.tail.extend(bytes);
        if self.tail.len() > TAIL_BYTES {
            let excess = self.tail.len() - TAIL_BYTES;
            self.tail.drain(..excess);
            self.dropped += excess as u64;
        }
    }

    fn text(self) -> String {
        let mut text = String::from_utf8_lossy(&self.head).into_owned();
        if self.dropped > 0 {
            text.push_str(&format!("\n…（中间省略 {} 字节输出）…\n", self.dropped));
        }
        let tail: Vec<u8> = self.tail.into();
        text.push_str(&String::from_utf8_lossy(&tail));
        text
    }
}

/// The process group of a running test binary; killing it reaches every process in it.
struct Group {
    #[cfg(unix)]
    id: libc::pid_t,
}

impl Group {
    #[cfg(unix)]
    fn enter(child: &Child) -> Self {
        let id = child.id() as libc::pid_t;
        signals::watch(id);
        Group { id }
    }

    #[cfg(not(unix))]
    fn enter(_child: &Child) -> Self {
        Group {}
    }

    fn kill(&self) {
        // SAFETY: kill(2) with a negative pid signals the group we created; no memory involved.
        #[cfg(unix)]
        unsafe {
            libc::kill(-self.id, libc::SIGKILL);
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        #[cfg(unix)]
        signals::unwatch(self.id);
    }
}

/// Whether a process with this id exists. Where that cannot be asked (not unix), or for an
/// id kill(2) would read as a group, the answer is yes: callers only ever act on a no.
pub fn is_running(pid: u32) -> bool {
    #[cfg(unix)]
    {
        let Ok(pid) = libc::pid_t::try_from(pid) else {
            return true;
        };
        if pid <= 0 {
            return true;
        }
        // SAFETY: kill(2) with signal 0 sends nothing; it only reports whether `pid` exists.
        let result = unsafe { libc::kill(pid, 0) };
        result == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        true
    }
}

/// Makes `command`'s process its own group leader that dies with its parent.
fn isolate(command: &mut Command) {
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        command.process_group(0);
        die_with_parent(command);
    }
    #[cfg(not(unix))]
    let _ = command;
}

/// On Linux: the process started by `command` is killed when the thread that started it
/// ends, however that happens (SIGKILL included). Elsewhere a no-op.
pub fn die_with_parent(command: &mut Command) {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: getpid, prctl and getppid are async-signal-safe, as pre_exec requires.
        let parent = unsafe { libc::getpid() };
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The parent may have died before prctl took effect.
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = command;
}

/// SIGINT, SIGTERM and SIGHUP to the judge kill the running test group first. A test binary
/// in its own group no longer gets the terminal's Ctrl-C, so the judge passes it on.
#[cfg(unix)]
mod signals {
    use std::sync::atomic::{AtomicI32, Ordering};
    use std::sync::Once;

    /// The group being run, 0 when none; read by the signal handler.
    static RUNNING: AtomicI32 = AtomicI32::new(0);
    static INSTALL: Once = Once::new();

    pub fn watch(group: libc::pid_t) {
        INSTALL.call_once(|| {
            for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                // SAFETY: installs a handler that only uses async-signal-safe calls.
                unsafe {
                    libc::signal(signal, on_signal as *const () as libc::sighandler_t);
                }
            }
        });
        RUNNING.store(group, Ordering::SeqCst);
    }

    pub fn unwatch(group: libc::pid_t) {
        let _ = RUNNING.compare_exchange(group, 0, Ordering::SeqCst, Ordering::SeqCst);
    }

    extern "C" fn on_signal(signal: libc::c_int) {
        let group = RUNNING.load(Ordering::SeqCst);
        // SAFETY: kill, signal and raise are async-signal-safe. The default action is
        // restored and the signal raised again, so the judge ends the way it was asked to.
        unsafe {
            if group > 0 {
                libc::kill(-group, libc::SIGKILL);
            }
            libc::signal(signal, libc::SIG_DFL);
            libc::raise(signal);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_output_keeps_head_and_tail_and_counts_the_rest() {
        let mut kept = Bounded::default();
        kept.push(b"start\n");
        kept.push(&vec![b'x'; HEAD_BYTES + TAIL_BYTES]);
        kept.push(b"\nend");
        let text = kept.text();
        assert!(text.starts_with("start\n"), "输出开头要保留");
        assert!(
            text.ends_with("\nend"),
            "输出结尾要保留（libtest 最后打印失败详情）"
        );
        assert!(text.contains("中间省略 10 字节"), "省略的字节数要如实给出");
        assert!(
            text.len() < HEAD_BYTES + TAIL_BYTES + 100,
            "保留的输出有上限"
        );
    }
}
