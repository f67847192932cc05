//! Shared by the screen tests: a whole screen drawn into ratatui's TestBackend, as text.

use ratatui::backend::TestBackend;
use ratatui::Terminal;
use syncspy_tui::app::App;

/// The screen of `app` at `w` x `h`, every cell's symbol, one line per row.
pub fn screen(app: &App, w: u16, h: u16) -> String {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(|f| f.render_widget(app, f.area())).unwrap();
    let buf = t.backend().buffer().clone();
    let mut out = String::new();
    for y in 0..h {
        for x in 0..w {
            out.push_str(buf[(x, y)].symbol());
        }
        out.push('\n');
    }
    out
}
