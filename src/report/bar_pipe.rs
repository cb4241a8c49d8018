//! The progress bar drawn into a pipe: under mpiexec a rank's stderr is a pipe to the
//! launcher, which copies it to its own stderr, perhaps a terminal. indicatif's stderr target
//! hides itself off a terminal, so `--progress bar` draws through this one instead.

use indicatif::TermLike;
use std::io::Write;
use std::sync::Mutex;

/// The width assumed where the real one cannot be known (the launcher's terminal is on the
/// other side of the pipe): a line wider than the terminal would wrap, and each redraw would
/// then leave its first part behind, so the guess is the narrowest common terminal.
const ASSUMED_WIDTH: u16 = 80;

/// A terminal that writes its escape sequences into `out` whatever `out` is, one `write` per
/// frame (so that the launcher forwards whole frames), and ends the bar's line when the bar
/// lets it go.
pub struct PipeTerm {
    out: Mutex<Box<dyn Write + Send>>,
    frame: Mutex<Vec<u8>>,
    width: u16,
}

impl Drop for PipeTerm {
    /// The last frame stays as the bar left it; what is written next goes below it. (On a
    /// terminal of the assumed width the cursor would wrap by itself; on a wider one the next
    /// line would continue the bar's.)
    fn drop(&mut self) {
        let _ = self.flush();
        let out = self.out.get_mut().expect("the output lock");
        let _ = out.write_all(b"\n").and_then(|()| out.flush());
    }
}

impl PipeTerm {
    /// Drawing into `out`, `width` columns wide.
    pub fn new(out: Box<dyn Write + Send>, width: u16) -> PipeTerm {
        PipeTerm { out: Mutex::new(out), frame: Mutex::new(Vec::new()), width: width.max(20) }
    }

    /// Drawing into stderr, as wide as `COLUMNS` says (exported to the ranks with
    /// `mpiexec -x COLUMNS`), else 80 columns.
    pub fn stderr() -> PipeTerm {
        let width = std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok()).unwrap_or(ASSUMED_WIDTH);
        PipeTerm::new(Box::new(std::io::stderr()), width)
    }

    fn put(&self, s: &str) -> std::io::Result<()> {
        self.frame.lock().expect("the frame lock").extend_from_slice(s.as_bytes());
        Ok(())
    }
}

impl std::fmt::Debug for PipeTerm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PipeTerm({} columns)", self.width)
    }
}

impl TermLike for PipeTerm {
    fn width(&self) -> u16 {
        self.width
    }

    fn move_cursor_up(&self, n: usize) -> std::io::Result<()> {
        if n > 0 { self.put(&format!("\x1b[{n}A")) } else { Ok(()) }
    }

    fn move_cursor_down(&self, n: usize) -> std::io::Result<()> {
        if n > 0 { self.put(&format!("\x1b[{n}B")) } else { Ok(()) }
    }

    fn move_cursor_right(&self, n: usize) -> std::io::Result<()> {
        if n > 0 { self.put(&format!("\x1b[{n}C")) } else { Ok(()) }
    }

    fn move_cursor_left(&self, n: usize) -> std::io::Result<()> {
        if n > 0 { self.put(&format!("\x1b[{n}D")) } else { Ok(()) }
    }

    fn write_line(&self, s: &str) -> std::io::Result<()> {
        self.put(s)?;
        self.put("\n")
    }

    fn write_str(&self, s: &str) -> std::io::Result<()> {
        self.put(s)
    }

    fn clear_line(&self) -> std::io::Result<()> {
        self.put("\r\x1b[2K")
    }

    fn flush(&self) -> std::io::Result<()> {
        let frame = std::mem::take(&mut *self.frame.lock().expect("the frame lock"));
        let mut out = self.out.lock().expect("the output lock");
        out.write_all(&frame)?;
        out.flush()
    }
}
