//! A connection's two clocks. A client that has begun a request head must finish it within
//! `HEADER_READ_TIMEOUT_MS` (a slowloris client is disconnected), but a kept-alive connection waiting for
//! its next request is not a slow head: it may wait `KEEP_ALIVE_TIMEOUT_MS`. hyper's own header timeout
//! runs from the moment it waits for a head, idle time included, so it would close every kept-alive
//! connection after a few seconds, shorter than a load balancer's or an HTTP client's pool keeps them;
//! a request sent on one just as it closes is reset (the server closes, the client writes). So the
//! connection's stream keeps both clocks here, and hyper's is off.
//!
//! The head's end is found by scanning the bytes read for an empty line (`\n`, optional `\r`s, `\n`): a
//! few hundred bytes per request, read once. Empty lines before the request line are not an end (RFC 9112
//! lets a server skip them, and hyper does): they begin a head, and its clock, but end none, so that a
//! client sending only line ends is closed on the header clock like any other slow head. A write (the
//! response) makes the connection idle again.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use super::connections::Watch;

/// A stream whose reads fail once a started request head is overdue, and end (a clean close) once the
/// connection has been idle for too long.
pub struct Deadlines<S> {
    inner: S,
    state: State,
    header: Duration,
    keep_alive: Duration,
    sleep: Pin<Box<Sleep>>,
    armed: Instant,
    /// What the cap of connections knows of this one (`super::connections`).
    watch: Arc<Watch>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    /// Waiting for a request's first byte since this instant.
    Idle(Instant),
    /// A head begun at this instant; whether a byte other than a line end came yet (the request line), and
    /// whether the last byte other than `\r` was a `\n`.
    Head(Instant, bool, bool),
    /// A request is handled: no clock until its response is written.
    Busy,
}

impl<S> Deadlines<S> {
    pub fn new(inner: S, header: Duration, keep_alive: Duration, watch: Arc<Watch>) -> Self {
        let now = Instant::now();
        let armed = now + keep_alive;
        watch.waiting(Some(now));
        Deadlines {
            watch,
            inner,
            state: State::Idle(now),
            header,
            keep_alive,
            sleep: Box::pin(tokio::time::sleep_until(armed)),
            armed,
        }
    }

    /// Moves the state on by the bytes just read; `now` is asked for only when a head begins.
    fn read(&mut self, bytes: &[u8], now: impl FnOnce() -> Instant) {
        let (started, mut begun, mut after_newline) = match self.state {
            State::Busy => return,
            State::Idle(_) => {
                let now = now();
                self.watch.waiting(Some(now));
                (now, false, false)
            }
            State::Head(started, begun, after_newline) => (started, begun, after_newline),
        };
        for &byte in bytes {
            if byte == b'\n' {
                if after_newline {
                    self.state = State::Busy;
                    self.watch.waiting(None);
                    return;
                }
                after_newline = begun;
            } else if byte != b'\r' {
                (begun, after_newline) = (true, false);
            }
        }
        self.state = State::Head(started, begun, after_newline);
    }

    /// When the connection is overdue, and whether it is a head (an error) rather than idleness.
    fn deadline(&self) -> Option<(Instant, bool)> {
        match self.state {
            State::Idle(since) => Some((since + self.keep_alive, false)),
            State::Head(started, ..) => Some((started + self.header, true)),
            State::Busy => None,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Deadlines<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        // Shed to make room for a new connection (`super::connections`): closed at once unless a request is
        // in progress, then once it is answered.
        if self.state != State::Busy && self.watch.shed(cx) {
            return match self.state {
                State::Head(..) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "closed to make room for a new connection",
                ))),
                _ => Poll::Ready(Ok(())),
            };
        }
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let read = buf.filled().len() - before;
                let filled = buf.filled();
                self.read(&filled[filled.len() - read..], Instant::now);
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                let deadline = self.deadline();
                // The timer is kept no later than the deadline: moved earlier at once, moved later only
                // once it fires (then it only wakes this task to be set again), so that a kept-alive
                // connection's requests do not each move it.
                if deadline.is_some_and(|(at, _)| at < self.armed) {
                    self.arm(deadline.map(|(at, _)| at));
                }
                if self.sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                match deadline {
                    Some((at, true)) if at <= self.armed => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the request head was not sent in time",
                    ))),
                    // The end of the stream: hyper closes an idle connection quietly.
                    Some((at, false)) if at <= self.armed => Poll::Ready(Ok(())),
                    // Fired before the deadline, or while a request is handled (no clock then, but the
                    // timer stays registered with this task, so that it wakes it once the answer is sent).
                    _ => {
                        self.arm(deadline.map(|(at, _)| at));
                        let _ = self.sleep.as_mut().poll(cx);
                        Poll::Pending
                    }
                }
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Deadlines<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.wrote(&written);
        written
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.wrote(&written);
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<S> Deadlines<S> {
    /// A response written (or a part of it): the connection waits for the next request from now on. The
    /// timer is left as it is: it is no later than this deadline, and registered with the connection's task.
    fn wrote(&mut self, written: &Poll<io::Result<usize>>) {
        if matches!(written, Poll::Ready(Ok(n)) if *n > 0) {
            // Each part of a long answer written moves it on, so that a connection streaming one is never
            // the longest waiting.
            let now = Instant::now();
            self.watch.waiting(Some(now));
            self.state = State::Idle(now);
        }
    }

    /// Sets the timer to `at`, or while a request is handled (no deadline) to a keep-alive from now.
    fn arm(&mut self, at: Option<Instant>) {
        self.armed = at.unwrap_or_else(|| Instant::now() + self.keep_alive);
        let armed = self.armed;
        self.sleep.as_mut().reset(armed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deadlines() -> Deadlines<()> {
        Deadlines::new((), Duration::from_secs(5), Duration::from_secs(75), Watch::unwatched())
    }

    #[tokio::test]
    async fn a_head_ends_at_its_empty_line_however_it_is_split_and_whatever_its_line_ends() {
        for (chunks, busy) in [
            (&["GET / HTTP/1.1\r\nHost: a\r\n\r\n"][..], true),
            (&["GET / HTTP/1.1\r\nHost: a\r", "\n\r", "\n"][..], true),
            (&["GET / HTTP/1.1\nHost: a\n\n"][..], true),
            (&["GET / HTTP/1.1\r\nHost: a\r\n"][..], false),
            (&["GET / HTTP/1.1\r\nHost: a\r\nX: \r\r\n"][..], false),
            // Empty lines before the request line are skipped (RFC 9112, 2.2): they end no head.
            (&["\r\n\r\n"][..], false),
            (&["\n\n\n"][..], false),
            (&["\r\n", "\r\n", "\n"][..], false),
            (&["\r\n\r\nGET /v1/studies HTTP/1.1\r\nX: "][..], false),
            (&["\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n"][..], true),
        ] {
            let mut stream = deadlines();
            let now = Instant::now();
            for chunk in chunks {
                stream.read(chunk.as_bytes(), || now);
            }
            assert_eq!(stream.state == State::Busy, busy, "{chunks:?}");
        }
    }

    #[tokio::test]
    async fn an_idle_connection_has_the_keep_alive_clock_and_a_begun_head_the_header_clock() {
        let mut stream = deadlines();
        let start = Instant::now();
        stream.state = State::Idle(start);
        assert_eq!(stream.deadline(), Some((start + Duration::from_secs(75), false)));
        stream.read(b"GET / HT", || start);
        assert_eq!(stream.deadline(), Some((start + Duration::from_secs(5), true)));
        // The rest of the head later does not restart its clock.
        stream.read(b"TP/1.1\r\n", || start + Duration::from_secs(3));
        assert_eq!(stream.deadline(), Some((start + Duration::from_secs(5), true)));
        stream.read(b"\r\n", || start + Duration::from_secs(4));
        assert_eq!(stream.deadline(), None, "no clock while the request is handled");
        stream.wrote(&Poll::Ready(Ok(10)));
        assert!(matches!(stream.deadline(), Some((_, false))), "idle again once answered");
    }
}
