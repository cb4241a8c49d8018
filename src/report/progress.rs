//! Training progress on stderr: an indicatif bar per epoch (on a terminal, or wherever
//! `--progress bar` asks), a line every few seconds in a log file (batch jobs, and mpiexec's
//! pipe), or nothing (`--progress none`).

use super::bar_pipe::PipeTerm;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// How often Plain mode writes a line at most.
pub const PLAIN_INTERVAL: Duration = Duration::from_secs(5);
/// How often the bar's message is re-formatted at most (the bar itself redraws at ~20 Hz).
const BAR_MESSAGE_INTERVAL: Duration = Duration::from_millis(100);
/// Redraws per second of a bar drawn into a pipe: each is forwarded by the launcher.
const PIPE_BAR_HZ: u8 = 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgressMode {
    /// An indicatif bar per epoch with losses and images/s in its message.
    Bar,
    /// One line to stderr at most every [`PLAIN_INTERVAL`], and one per finished epoch.
    Plain,
    /// Nothing.
    Off,
}

impl ProgressMode {
    /// `--progress auto`: Bar when stderr is a terminal, Plain otherwise (a log file, or the
    /// pipe to mpiexec).
    pub fn detect() -> ProgressMode {
        if std::io::stderr().is_terminal() { ProgressMode::Bar } else { ProgressMode::Plain }
    }
}

/// Where a bar draws: indicatif's stderr target on a terminal (it knows the width); into
/// the pipe otherwise, as `--progress bar` asks under mpiexec (indicatif's own target would
/// draw nothing there).
fn bar_target() -> ProgressDrawTarget {
    if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::term_like_with_hz(Box::new(PipeTerm::stderr()), PIPE_BAR_HZ)
    }
}

/// The steps of one epoch that this run takes (0-based): from `first` (a resumed run starts
/// mid-epoch) up to `end`, the epoch's own end or the step where `--max-steps` ends the run.
#[derive(Clone, Copy, Debug)]
pub struct EpochSpan {
    pub first: usize,
    pub end: usize,
}

impl EpochSpan {
    /// The span of an epoch of `steps_per_epoch` steps entered at `first`, with the run at
    /// `step` (global) and ending at `max_steps`.
    pub fn of(first: usize, steps_per_epoch: usize, step: u64, max_steps: u64) -> EpochSpan {
        let left = usize::try_from(max_steps.saturating_sub(step)).unwrap_or(usize::MAX);
        EpochSpan { first, end: steps_per_epoch.min(first.saturating_add(left)) }
    }

    /// How many epochs a run reaches that is in epoch `epoch` (0-based) at step `first` of
    /// it, at global `step`: `epochs`, or fewer where `max_steps` comes first.
    pub fn epochs_reached(
        epoch: u64,
        first: usize,
        steps_per_epoch: usize,
        step: u64,
        max_steps: u64,
        epochs: u64,
    ) -> u64 {
        let left = max_steps.saturating_sub(step);
        let to_go = (first as u64).saturating_add(left).div_ceil(steps_per_epoch.max(1) as u64);
        epoch.saturating_add(to_go.max(1)).min(epochs)
    }
}

/// Progress of one epoch. Make a new one per epoch.
pub struct Progress {
    mode: ProgressMode,
    /// 1-based, for display.
    epoch: u64,
    /// The epochs the run reaches (fewer than `--epochs` where `--max-steps` ends it first).
    epochs: u64,
    span: EpochSpan,
    started: Instant,
    bar: Option<ProgressBar>,
    last_message: Option<Instant>,
    out: Box<dyn Write + Send>,
    interval: Duration,
    last_line: Option<Instant>,
    /// The latest metrics, as shown.
    shown: String,
}

impl Progress {
    /// Progress for epoch `epoch` (0-based, shown as epoch + 1) of `epochs`, over `span`.
    pub fn new(mode: ProgressMode, epoch: u64, epochs: u64, span: EpochSpan) -> Progress {
        let target = match mode {
            ProgressMode::Bar => bar_target(),
            _ => ProgressDrawTarget::hidden(),
        };
        Self::build(mode, epoch, epochs, span, Box::new(std::io::stderr()), PLAIN_INTERVAL, target)
    }

    fn build(
        mode: ProgressMode,
        epoch: u64,
        epochs: u64,
        span: EpochSpan,
        out: Box<dyn Write + Send>,
        interval: Duration,
        target: ProgressDrawTarget,
    ) -> Progress {
        let bar = (mode == ProgressMode::Bar).then(|| {
            // The message last and cut to the width: a line wider than the terminal would
            // wrap, and where the width is a guess (a pipe) each redraw would leave its first
            // part behind.
            let style = ProgressStyle::with_template(
                "epoch {prefix} [{bar:24}] {pos}/{len} [{elapsed_precise}<{eta_precise}] {wide_msg}",
            )
            .expect("the template is valid")
            .progress_chars("=> ");
            // Left on the terminal when dropped unfinished: a run that --max-steps ends
            // mid-epoch keeps its last losses on screen.
            let bar = ProgressBar::with_draw_target(Some(span.end as u64), target)
                .with_style(style)
                .with_finish(indicatif::ProgressFinish::AndLeave);
            bar.set_prefix(format!("{}/{epochs}", epoch + 1));
            if span.first > 0 {
                // Resumed mid-epoch: the steps before were not timed by this run, so the
                // estimate starts from here (recorded once at `first`, then reset).
                bar.set_position(span.first as u64);
                bar.tick();
                bar.reset_eta();
            }
            bar
        });
        Progress {
            mode,
            epoch: epoch + 1,
            epochs,
            span,
            started: Instant::now(),
            bar,
            last_message: None,
            out,
            interval,
            last_line: None,
            shown: String::new(),
        }
    }

    /// Step `step_in_epoch` (0-based) has finished with these metrics (averaged over ranks,
    /// as their short text).
    pub fn update(&mut self, step_in_epoch: usize, metrics: &str, images_per_s: f64) {
        self.shown.clear();
        self.shown.push_str(metrics);
        let done = step_in_epoch + 1;
        let now = Instant::now();
        let due = |last: Option<Instant>, every: Duration| last.is_none_or(|t| now - t >= every);
        match self.mode {
            ProgressMode::Off => {}
            ProgressMode::Bar => {
                let bar = self.bar.as_ref().expect("Bar mode has a bar");
                bar.set_position(done as u64);
                if due(self.last_message, BAR_MESSAGE_INTERVAL) || done == self.span.end {
                    bar.set_message(format!("{} {:.0} img/s", self.metrics(), images_per_s));
                    self.last_message = Some(now);
                }
            }
            ProgressMode::Plain => {
                if due(self.last_line, self.interval) {
                    self.last_line = Some(now);
                    // From the steps this run timed, to the span's end.
                    let timed = done.saturating_sub(self.span.first).max(1);
                    let elapsed = self.started.elapsed().as_secs_f64();
                    let eta = elapsed / timed as f64 * self.span.end.saturating_sub(done) as f64;
                    let line = format!(
                        "epoch {}/{} step {done}/{} | {} | {images_per_s:.0} img/s | eta {}",
                        self.epoch,
                        self.epochs,
                        self.span.end,
                        self.metrics(),
                        clock(eta)
                    );
                    // Progress is best effort: a closed stderr must not stop training.
                    let _ = writeln!(self.out, "{line}");
                }
            }
        }
    }

    /// The epoch is over: `seconds` of wall time at `images_per_s` (all ranks together).
    pub fn finish_epoch(&mut self, seconds: f64, images_per_s: f64) {
        let summary = format!("{} | {seconds:.1} s, {images_per_s:.0} img/s", self.metrics());
        match self.mode {
            ProgressMode::Off => {}
            ProgressMode::Bar => {
                let bar = self.bar.as_ref().expect("Bar mode has a bar");
                bar.set_position(self.span.end as u64);
                bar.finish_with_message(summary);
                // Let the finished bar's target go now (a pipe's ends its line when let go),
                // before the epoch's end prints anything.
                bar.set_draw_target(ProgressDrawTarget::hidden());
            }
            ProgressMode::Plain => {
                let _ = writeln!(
                    self.out,
                    "epoch {}/{} done: {} steps | {summary}",
                    self.epoch,
                    self.epochs,
                    self.span.end - self.span.first
                );
                let _ = self.out.flush();
            }
        }
    }

    fn metrics(&self) -> String {
        self.shown.clone()
    }

    #[cfg(test)]
    fn bar(&self) -> Option<&ProgressBar> {
        self.bar.as_ref()
    }
}

/// Seconds as h:mm:ss or m:ss.
fn clock(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as u64;
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A DCGAN step's metrics as the run shows them (record::Losses::short_text).
    fn shown(loss_d: f32, loss_g: f32, d_x: f32, d_g_z: f32) -> String {
        format!("loss_D {loss_d:.3} loss_G {loss_g:.3} D(x) {d_x:.2} D(G(z)) {d_g_z:.2}")
    }
    use std::sync::{Arc, Mutex};

    /// A `Write` whose bytes the test can read afterwards.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);
    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    impl Captured {
        fn lines(&self) -> Vec<String> {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap().lines().map(String::from).collect()
        }
    }

    /// Plain mode writing to `out`, with lines at most every `interval`.
    fn plain_to(out: &Captured, interval: Duration, epoch: u64, epochs: u64, span: EpochSpan) -> Progress {
        let hidden = ProgressDrawTarget::hidden();
        Progress::build(ProgressMode::Plain, epoch, epochs, span, Box::new(out.clone()), interval, hidden)
    }

    #[test]
    fn plain_mode_is_throttled_and_shows_the_numbers() {
        let out = Captured::default();
        let mut p = plain_to(&out, Duration::from_secs(3600), 2, 5, whole(10));
        for step in 0..10 {
            p.update(step, &shown(0.5 + step as f32, 2.25, 0.8, 0.125), 1234.4);
        }
        // The first step prints; the rest fall inside the interval.
        let lines = out.lines();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].starts_with("epoch 3/5 step 1/10 |"), "{}", lines[0]);
        assert!(lines[0].contains("loss_D 0.500 loss_G 2.250 D(x) 0.80 D(G(z)) 0.12"), "{}", lines[0]);
        assert!(lines[0].contains("1234 img/s"), "{}", lines[0]);
        p.finish_epoch(12.34, 999.6);
        let lines = out.lines();
        assert_eq!(lines.len(), 2);
        assert!(lines[1].starts_with("epoch 3/5 done: 10 steps"), "{}", lines[1]);
        assert!(lines[1].contains("loss_D 9.500") && lines[1].contains("12.3 s, 1000 img/s"), "{}", lines[1]);
    }

    #[test]
    fn plain_mode_with_zero_interval_prints_every_step() {
        let out = Captured::default();
        let mut p = plain_to(&out, Duration::ZERO, 0, 1, whole(3));
        for step in 0..3 {
            p.update(step, &shown(1.0, 1.0, 0.5, 0.5), 10.0);
        }
        let lines = out.lines();
        assert_eq!(lines.len(), 3);
        assert!(lines[2].contains("step 3/3") && lines[2].ends_with("eta 0:00"), "{}", lines[2]);
    }

    #[test]
    fn bar_mode_tracks_position_and_message() {
        let mut p = Progress::build(
            ProgressMode::Bar,
            0,
            2,
            whole(4),
            Box::new(std::io::sink()),
            PLAIN_INTERVAL,
            ProgressDrawTarget::hidden(),
        );
        p.update(0, &shown(0.7, 1.5, 0.6, 0.4), 321.0);
        let bar = p.bar().unwrap().clone();
        assert_eq!(bar.position(), 1);
        assert_eq!(bar.length(), Some(4));
        assert_eq!(bar.prefix(), "1/2");
        assert!(bar.message().contains("loss_D 0.700") && bar.message().contains("321 img/s"));
        p.update(3, &shown(0.1, 1.5, 0.6, 0.4), 400.0); // the last step always refreshes the message
        assert!(bar.message().contains("loss_D 0.100"), "{}", bar.message());
        p.finish_epoch(2.0, 500.0);
        assert!(bar.is_finished());
        assert!(bar.message().contains("2.0 s, 500 img/s"));
    }

    fn whole(steps: usize) -> EpochSpan {
        EpochSpan { first: 0, end: steps }
    }

    #[test]
    fn the_span_ends_where_max_steps_ends_the_run() {
        // 937 steps per epoch, --max-steps 20: one epoch of 20 steps.
        let s = EpochSpan::of(0, 937, 0, 20);
        assert_eq!((s.first, s.end), (0, 20));
        assert_eq!(EpochSpan::epochs_reached(0, 0, 937, 0, 20, 5), 1);
        // No --max-steps: the whole epoch, every epoch.
        assert_eq!(EpochSpan::of(0, 937, 0, u64::MAX).end, 937);
        assert_eq!(EpochSpan::epochs_reached(0, 0, 937, 0, u64::MAX, 5), 5);
        // One step past the first epoch reaches the second.
        assert_eq!(EpochSpan::epochs_reached(0, 0, 937, 0, 938, 5), 2);
        // Resumed at step 100 of the third epoch (global step 1974), --max-steps 2000: 26 more.
        let s = EpochSpan::of(100, 937, 1974, 2000);
        assert_eq!((s.first, s.end), (100, 126));
        assert_eq!(EpochSpan::epochs_reached(2, 100, 937, 1974, 2000, 5), 3);
    }

    #[test]
    fn a_resumed_epoch_starts_where_it_left_off() {
        let out = Captured::default();
        let span = EpochSpan { first: 3, end: 8 };
        let mut p = plain_to(&out, Duration::ZERO, 1, 2, span);
        p.update(3, &shown(1.0, 1.0, 0.5, 0.5), 10.0);
        assert!(out.lines()[0].starts_with("epoch 2/2 step 4/8 |"), "{:?}", out.lines());
        p.finish_epoch(1.0, 40.0);
        assert!(out.lines()[1].starts_with("epoch 2/2 done: 5 steps |"), "the steps this run took: {:?}", out.lines());
        let target = ProgressDrawTarget::hidden();
        let sink = Box::new(std::io::sink());
        let p = Progress::build(ProgressMode::Bar, 1, 2, span, sink, PLAIN_INTERVAL, target);
        let bar = p.bar().unwrap();
        assert_eq!((bar.position(), bar.length()), (3, Some(8)));
    }

    #[test]
    fn a_bar_draws_also_where_stderr_is_not_a_terminal() {
        // `--progress bar` under mpiexec, where stderr is a pipe: the bar is drawn, not hidden.
        let p = Progress::new(ProgressMode::Bar, 0, 1, whole(2));
        assert!(!p.bar().unwrap().is_hidden());
        // What it draws into a pipe: whole frames, each clearing the line, none wider than
        // the width.
        let out = Captured::default();
        let target = ProgressDrawTarget::term_like(Box::new(PipeTerm::new(Box::new(out.clone()), 80)));
        let mut p =
            Progress::build(ProgressMode::Bar, 0, 3, whole(937), Box::new(std::io::sink()), PLAIN_INTERVAL, target);
        p.update(0, &shown(0.7, 1.5, 0.6, 0.4), 321.0);
        p.finish_epoch(2.0, 500.0);
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let frames: Vec<&str> = text.split("\r\x1b[2K").filter(|f| !f.is_empty()).collect();
        assert!(frames.len() >= 2, "{text:?}");
        for f in &frames {
            assert!(f.starts_with("epoch 1/3 ["), "{f:?}");
            assert!(f.trim_end().chars().count() <= 80, "{} columns: {f:?}", f.trim_end().chars().count());
        }
        assert!(frames.last().unwrap().contains("937/937"), "{text:?}");
    }

    #[test]
    fn off_and_detect() {
        // Under `cargo test` stderr is captured or a terminal; either way not Off.
        assert_ne!(ProgressMode::detect(), ProgressMode::Off);
        let mut p = Progress::new(ProgressMode::Off, 0, 1, whole(2));
        p.update(0, &shown(0.0, 0.0, 0.0, 0.0), 0.0);
        p.finish_epoch(1.0, 1.0);
        assert!(p.bar().is_none());
    }

    #[test]
    fn clock_format() {
        assert_eq!(clock(0.4), "0:00");
        assert_eq!(clock(65.0), "1:05");
        assert_eq!(clock(3725.0), "1:02:05");
    }
}
