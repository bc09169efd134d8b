//! Where interactive mode's tasks come from. On a terminal, a line editor (rustyline): arrow
//! keys move and recall, Ctrl-C clears the line, Ctrl-D on an empty line ends the session, and
//! earlier tasks of this session come back with ↑. History is kept in memory only: tasks can
//! hold secrets, and a file of them would outlive the session. Anything else (a pipe, a file)
//! is read line by line, as before.

use std::io::{IsTerminal, Write};
use std::sync::mpsc;

use rustyline::error::ReadlineError;
use rustyline::DefaultEditor;
use tokio::io::{AsyncBufReadExt, BufReader, Lines, Stdin};

const PROMPT: &str = "> ";

/// One answer to "the next task, please".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    Line(String),
    /// Ctrl-C at the prompt: the line was dropped.
    Cleared,
    /// Ctrl-D, or the end of piped input.
    End,
    Failed(String),
}

pub enum Input {
    Editor(Editor),
    Plain(Lines<BufReader<Stdin>>),
}

impl Input {
    /// The line editor when stdin and stdout are a terminal, plain lines otherwise.
    pub fn open() -> Input {
        if std::io::stdin().is_terminal() && std::io::stdout().is_terminal() {
            match Editor::spawn() {
                Ok(editor) => return Input::Editor(editor),
                Err(error) => eprintln!("pi：行编辑用不了（{error}），改为逐行读取"),
            }
        }
        Input::Plain(BufReader::new(tokio::io::stdin()).lines())
    }

    /// The next line. Cancel-safe: dropped while waiting, the next call gets the same line.
    pub async fn read(&mut self) -> Read {
        match self {
            Input::Editor(editor) => editor.read().await,
            Input::Plain(lines) => {
                eprint!("{PROMPT}");
                let _ = std::io::stderr().flush();
                match lines.next_line().await {
                    Ok(Some(line)) => Read::Line(line),
                    Ok(None) => Read::End,
                    Err(error) => Read::Failed(error.to_string()),
                }
            }
        }
    }

    /// pi ends while the prompt may be up: give the terminal back as it was.
    pub fn close(&mut self) {
        if let Input::Editor(editor) = self {
            editor.restore_terminal();
        }
    }
}

/// rustyline blocks, so it lives on a thread of its own and answers one request at a time.
pub struct Editor {
    ask: mpsc::Sender<()>,
    answers: tokio::sync::mpsc::UnboundedReceiver<Read>,
    /// A request is out and not answered yet (the last `read` was dropped while waiting).
    waiting: bool,
    /// The terminal's settings before the editor switched it to raw mode.
    saved: Option<libc::termios>,
}

impl Editor {
    fn spawn() -> Result<Editor, String> {
        let saved = terminal_settings();
        let (ask, asked) = mpsc::channel::<()>();
        let (answer, answers) = tokio::sync::mpsc::unbounded_channel();
        let (ready, started) = mpsc::channel();
        std::thread::Builder::new()
            .name("pi-line-editor".into())
            .spawn(move || {
                let mut editor = match DefaultEditor::new() {
                    Ok(editor) => {
                        let _ = ready.send(Ok(()));
                        editor
                    }
                    Err(error) => {
                        let _ = ready.send(Err(error.to_string()));
                        return;
                    }
                };
                while asked.recv().is_ok() {
                    let read = match editor.readline(PROMPT) {
                        Ok(line) => {
                            if !line.trim().is_empty() {
                                let _ = editor.add_history_entry(line.as_str());
                            }
                            Read::Line(line)
                        }
                        Err(ReadlineError::Interrupted) => Read::Cleared,
                        Err(ReadlineError::Eof) => Read::End,
                        Err(error) => Read::Failed(error.to_string()),
                    };
                    if answer.send(read).is_err() {
                        break;
                    }
                }
            })
            .map_err(|error| error.to_string())?;
        started
            .recv()
            .map_err(|_| "行编辑线程没有启动".to_string())??;
        Ok(Editor {
            ask,
            answers,
            waiting: false,
            saved,
        })
    }

    async fn read(&mut self) -> Read {
        if !self.waiting {
            if self.ask.send(()).is_err() {
                return Read::End;
            }
            self.waiting = true;
        }
        let read = self.answers.recv().await.unwrap_or(Read::End);
        self.waiting = false;
        read
    }

    fn restore_terminal(&self) {
        if let Some(saved) = &self.saved {
            // SAFETY: tcsetattr on fd 0 with settings tcgetattr filled in for the same fd.
            unsafe {
                libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, saved);
            }
        }
    }
}

fn terminal_settings() -> Option<libc::termios> {
    // SAFETY: termios is plain data; tcgetattr fills it in, and it is used only on success.
    unsafe {
        let mut settings: libc::termios = std::mem::zeroed();
        (libc::tcgetattr(libc::STDIN_FILENO, &mut settings) == 0).then_some(settings)
    }
}
