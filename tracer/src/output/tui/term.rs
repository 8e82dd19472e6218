//! The real terminal: raw mode and the alternate screen from the run's start to its
//! end, a thread reading keys, and the terminal restored on every way out (q, Ctrl-C as
//! a key, SIGTERM/SIGINT/SIGHUP through the run loop's final report, an error through
//! `Drop`, a panic through ratatui's hook).
use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    thread::JoinHandle,
    time::Duration,
};

use crossterm::event::{self, Event};
use ratatui::DefaultTerminal;
use tokio::sync::mpsc::UnboundedSender;

use super::{render, Action, Sample, Top};
use crate::error::TracerError;
use crate::model::report::RunHeader;
use crate::output::{heatmap, report::Report, sink::Sink};

struct Shared {
    top: Top,
    term: Option<DefaultTerminal>,
}

impl Shared {
    fn draw(&mut self) {
        if let Some(t) = self.term.as_mut() {
            let top = &self.top;
            // A failed draw (a terminal gone) is not worth ending the run for: the
            // signal that follows (SIGHUP) ends it.
            let _ = t.draw(|f| render::draw(f, top));
        }
    }

    fn page(&self) -> usize {
        let area = self
            .term
            .as_ref()
            .and_then(|t| t.size().ok())
            .map(|s| ratatui::layout::Rect::new(0, 0, s.width, s.height))
            .unwrap_or_default();
        render::table_height(&self.top, area)
    }

    fn export(&mut self) {
        let cols: Vec<heatmap::Column> = self.top.history.iter().map(|c| c.all.clone()).collect();
        let name = format!(
            "tracer-top-{}.svg",
            cols.last()
                .map_or("empty".to_string(), |c| c.time.replace(':', ""))
        );
        let title = format!("tracer top: latency heatmaps, {} intervals", cols.len());
        self.top.status = Some(match heatmap::write_svg(name.as_ref(), &title, &cols) {
            Ok(()) => format!("heatmap written to {name}"),
            Err(e) => format!("could not write {name}: {e}"),
        });
    }
}

/// The terminal UI as the run loop's sink: each interval report redraws it.
pub struct TuiSink {
    shared: Arc<Mutex<Shared>>,
    quit: UnboundedSender<()>,
    stop: Arc<AtomicBool>,
    keys: Option<JoinHandle<()>>,
}

impl TuiSink {
    /// Touches no terminal yet: that waits for [`Sink::start`], once the programs are
    /// attached, so an error before leaves the screen as it was.
    pub fn new(title: String, color: bool, quit: UnboundedSender<()>) -> TuiSink {
        TuiSink {
            shared: Arc::new(Mutex::new(Shared {
                top: Top::new(title, color),
                term: None,
            })),
            quit,
            stop: Arc::new(AtomicBool::new(false)),
            keys: None,
        }
    }

    fn restore(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.keys.take() {
            // The key thread sees `stop` within its 100 ms poll, unless the terminal is
            // gone (a hung-up pty: crossterm's read then never returns): it is left behind
            // rather than waited for, or the tracer would never exit.
            let t = std::time::Instant::now();
            while !h.is_finished() && t.elapsed() < Duration::from_millis(500) {
                std::thread::sleep(Duration::from_millis(10));
            }
            if h.is_finished() {
                let _ = h.join();
            }
        }
        let mut s = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        if s.term.take().is_some() {
            ratatui::restore();
        }
    }
}

fn key_loop(shared: Arc<Mutex<Shared>>, stop: Arc<AtomicBool>, quit: UnboundedSender<()>) {
    while !stop.load(Ordering::Relaxed) {
        // Polled, so the thread sees `stop` and ends before the terminal is restored.
        match event::poll(Duration::from_millis(100)) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(_) => break,
        }
        let Ok(ev) = event::read() else { break };
        let mut s = shared.lock().unwrap_or_else(|e| e.into_inner());
        match ev {
            Event::Key(k) => {
                let page = s.page();
                s.top.status = None;
                match s.top.key(k, page) {
                    Action::Quit => {
                        let _ = quit.send(());
                        return;
                    }
                    Action::Export => s.export(),
                    Action::None => continue,
                    Action::Redraw => {}
                }
            }
            Event::Resize(..) => {}
            _ => continue,
        }
        s.draw();
    }
}

impl Sink for TuiSink {
    fn start(&mut self, _header: &RunHeader) -> Result<(), TracerError> {
        // Raw mode, the alternate screen, and a panic hook that restores both.
        let term = ratatui::try_init().map_err(TracerError::Output)?;
        {
            let mut s = self.shared.lock().unwrap_or_else(|e| e.into_inner());
            s.term = Some(term);
            s.draw();
        }
        let (shared, stop, quit) = (self.shared.clone(), self.stop.clone(), self.quit.clone());
        self.keys = Some(std::thread::spawn(move || key_loop(shared, stop, quit)));
        Ok(())
    }

    fn interval(&mut self, r: &Report) -> Result<(), TracerError> {
        let mut s = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        s.top.push(Sample::from_report(r));
        s.draw();
        Ok(())
    }

    /// The screen goes; what the run has to say (notices) goes to stderr.
    fn total(&mut self, r: &Report) -> Result<(), TracerError> {
        self.restore();
        use std::io::Write as _;
        let mut e = std::io::stderr().lock();
        for n in &r.notices {
            let _ = writeln!(e, "tracer: {n}");
        }
        Ok(())
    }
}

impl Drop for TuiSink {
    fn drop(&mut self) {
        self.restore();
    }
}
