//! The sessions each page holds open, given back when the page is gone.
//!
//! Opening a session is one reference on the sidecar, and a page closes it when it opens another or unloads
//! (`pagehide`). A page that never says goodbye (a tab or browser killed, a laptop shut) would hold its session,
//! and the memory it takes, for as long as the server runs; so would every reload whose goodbye was lost. Each
//! page names itself (`page`) on its event stream, its opens and its closes: once the last event stream of a page
//! has been gone for [`GRACE`] (a browser's EventSource reconnects within a few seconds), the references it still
//! holds are closed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a page's event stream may be gone before its sessions are closed: longer than an EventSource waits to
/// reconnect after the connection drops.
pub const GRACE: Duration = Duration::from_secs(10);

/// What closes a reference the page held (the view's `session/close`).
type Close = Arc<dyn Fn(&str) + Send + Sync>;

/// The references each page holds and the event streams it has open.
pub struct Pages {
    inner: Mutex<Inner>,
    close: Close,
    grace: Duration,
}

#[derive(Default)]
struct Inner {
    /// Page → the handles it opened and has not closed, one per reference (a handle opened twice is here twice).
    held: HashMap<String, Vec<String>>,
    /// Page → how many event streams it has open now.
    streams: HashMap<String, usize>,
}

impl Pages {
    /// Pages whose references are closed with `close` once they are gone for `grace`.
    pub fn new(close: impl Fn(&str) + Send + Sync + 'static, grace: Duration) -> Arc<Pages> {
        Arc::new(Pages { inner: Mutex::default(), close: Arc::new(close), grace })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `page` opened `handle` (one more reference).
    pub fn opened(&self, page: &str, handle: &str) {
        self.lock().held.entry(page.to_owned()).or_default().push(handle.to_owned());
    }

    /// `page` closed one reference of `handle`.
    pub fn closed(&self, page: &str, handle: &str) {
        let mut inner = self.lock();
        if let Some(handles) = inner.held.get_mut(page) {
            if let Some(i) = handles.iter().position(|h| h == handle) {
                handles.swap_remove(i);
            }
            if handles.is_empty() {
                inner.held.remove(page);
            }
        }
    }

    /// `page` opened an event stream; dropping what this returns says it ended.
    pub fn stream(self: &Arc<Self>, page: &str) -> PageStream {
        *self.lock().streams.entry(page.to_owned()).or_default() += 1;
        PageStream { pages: self.clone(), page: page.to_owned() }
    }

    /// How many references `page` holds (for tests and logs).
    pub fn held_by(&self, page: &str) -> usize {
        self.lock().held.get(page).map_or(0, Vec::len)
    }

    fn stream_ended(self: &Arc<Self>, page: String) {
        {
            let mut inner = self.lock();
            let Some(n) = inner.streams.get_mut(&page) else { return };
            *n -= 1;
            if *n > 0 {
                return;
            }
            inner.streams.remove(&page);
        }
        let pages = self.clone();
        // A thread of its own: closes run through the sidecar, which may take a moment, and this is rare.
        let spawned = std::thread::Builder::new().name("pi-sessiond-web-page".into()).spawn(move || {
            std::thread::sleep(pages.grace);
            let handles = {
                let mut inner = pages.lock();
                if inner.streams.contains_key(&page) {
                    return; // it came back
                }
                inner.held.remove(&page).unwrap_or_default()
            };
            if !handles.is_empty() {
                tracing::debug!("web: a page left holding {} session reference(s): closed", handles.len());
            }
            for handle in handles {
                (pages.close)(&handle);
            }
        });
        if let Err(e) = spawned {
            tracing::warn!("web: cannot watch for a page that left: {e}");
        }
    }
}

/// One event stream of a page, open while this lives.
pub struct PageStream {
    pages: Arc<Pages>,
    page: String,
}

impl Drop for PageStream {
    fn drop(&mut self) {
        self.pages.stream_ended(std::mem::take(&mut self.page));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recording(grace: Duration) -> (Arc<Pages>, Arc<Mutex<Vec<String>>>) {
        let closed = Arc::new(Mutex::new(Vec::new()));
        let record = closed.clone();
        (Pages::new(move |h| record.lock().unwrap().push(h.to_owned()), grace), closed)
    }

    #[test]
    fn a_page_whose_stream_is_gone_past_the_grace_has_each_reference_it_still_holds_closed_once() {
        let (pages, closed) = recording(Duration::from_millis(50));
        let stream = pages.stream("p1");
        pages.opened("p1", "h1");
        pages.opened("p1", "h1");
        pages.opened("p1", "h2");
        pages.closed("p1", "h2");
        pages.opened("p2", "h3");
        drop(stream);
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(*closed.lock().unwrap(), ["h1", "h1"]);
        assert_eq!(pages.held_by("p1"), 0);
        assert_eq!(pages.held_by("p2"), 1, "another page's are its own");
    }

    #[test]
    fn a_page_that_reconnects_within_the_grace_keeps_its_sessions() {
        let (pages, closed) = recording(Duration::from_millis(200));
        let first = pages.stream("p1");
        pages.opened("p1", "h1");
        drop(first);
        let again = pages.stream("p1");
        std::thread::sleep(Duration::from_millis(400));
        assert!(closed.lock().unwrap().is_empty());
        assert_eq!(pages.held_by("p1"), 1);
        drop(again);
        std::thread::sleep(Duration::from_millis(400));
        assert_eq!(*closed.lock().unwrap(), ["h1"]);
    }
}
