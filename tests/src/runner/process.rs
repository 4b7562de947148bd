//! The real projector binary, for tests that kill it with SIGKILL or run its operator commands: started
//! with a test's arguments, killed when dropped, and run to completion with a deadline.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use super::args;
use crate::kafka::Topics;

/// The projector binary built next to this test binary, or next to this binary (the soak's):
/// `cargo build -p projector` builds it.
pub fn binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe.parent().expect("target dir");
    let beside = dir.join("projector");
    let path = if beside.exists() { beside } else { dir.parent().expect("target dir").join("projector") };
    assert!(path.exists(), "{} is missing: run `cargo build -p projector` first", path.display());
    path
}

/// A child process that is killed when dropped, so a failing test leaves nothing running.
pub struct KillOnDrop(pub Child);

impl KillOnDrop {
    /// SIGSTOP: the process holds everything it holds and does nothing more until killed, so a test can
    /// look at it halfway without racing it to the end.
    pub fn freeze(&self) {
        let status = Command::new("kill").args(["-STOP", &self.0.id().to_string()]).status().expect("kill runs");
        assert!(status.success(), "SIGSTOP to {} failed", self.0.id());
    }

    /// SIGCONT: a process [`KillOnDrop::freeze`] froze goes on where it stood.
    pub fn thaw(&self) {
        let status = Command::new("kill").args(["-CONT", &self.0.id().to_string()]).status().expect("kill runs");
        assert!(status.success(), "SIGCONT to {} failed", self.0.id());
    }

    /// SIGTERM, as an orchestrator stops an instance: the process winds down by itself.
    pub fn sigterm(&self) {
        let status = Command::new("kill").args(["-TERM", &self.0.id().to_string()]).status().expect("kill runs");
        assert!(status.success(), "SIGTERM to {} failed", self.0.id());
    }

    /// SIGKILL, then waits for the process to be gone.
    pub fn sigkill(&mut self) {
        self.0.kill().expect("SIGKILL");
        self.0.wait().expect("killed projector exits");
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl std::ops::Deref for KillOnDrop {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

/// Starts the real projector binary.
pub fn spawn_process(topics: &Topics, prefix: &str, group: &str) -> KillOnDrop {
    KillOnDrop(command(topics, prefix, group, &[]).stdout(Stdio::null()).spawn().expect("projector starts"))
}

/// The real projector binary with a test's arguments, then `extra` (a subcommand and its options).
pub fn command(topics: &Topics, prefix: &str, group: &str, extra: &[&str]) -> Command {
    let mut command = Command::new(binary());
    command.args(args(topics, prefix, group)).args(extra).env("RUST_LOG", "warn").stderr(Stdio::inherit());
    command
}

/// Runs a command to completion with its output captured, killing it and failing the test if it takes
/// longer than `deadline`.
pub fn output_within(mut command: Command, deadline: Duration) -> Output {
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("command starts");
    let started = std::time::Instant::now();
    while child.try_wait().expect("command status").is_none() {
        if started.elapsed() > deadline {
            let _ = child.kill();
            let output = child.wait_with_output().expect("killed command output");
            panic!(
                "{command:?} did not finish within {deadline:?}; it printed:\n{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("command output")
}

/// Runs `projector status` (with `extra`, e.g. `-o json`) and returns its exit code, which says what it
/// found (0, or 2 to 5), and what it printed; a failure of the command itself (1, a signal) fails the test.
pub async fn status_of(
    topics: &Topics,
    prefix: &str,
    group: &str,
    extra: &[&str],
    deadline: Duration,
) -> (i32, String) {
    let args: Vec<&str> = std::iter::once("status").chain(extra.iter().copied()).collect();
    let command = command(topics, prefix, group, &args);
    let output = tokio::task::spawn_blocking(move || output_within(command, deadline)).await.expect("command thread");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let code = output.status.code().filter(|c| [0, 2, 3, 4, 5].contains(c));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let code = code.unwrap_or_else(|| panic!("projector status failed ({}): {stdout}{stderr}", output.status));
    (code, stdout)
}

/// Runs the projector binary with a test's arguments and `extra` to completion (see [`output_within`]),
/// fails the test unless it exits 0, and returns what it printed on stdout.
pub async fn succeed(topics: &Topics, prefix: &str, group: &str, extra: &[&str], deadline: Duration) -> String {
    let command = command(topics, prefix, group, extra);
    let output = tokio::task::spawn_blocking(move || output_within(command, deadline)).await.expect("command thread");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "projector {extra:?} failed ({}): {stdout}{stderr}", output.status);
    stdout
}
