//! Whether the directories a listing read have changed since, known from the kernel's change notifications
//! (inotify) instead of a `stat` of every file: a host that holds its last listing and asks again
//! (`sessions/listDelta`) most often finds nothing changed, and the `stat`s were most of that answer.
//!
//! The answer must be the listing pi would make now, so this says "unchanged" only where a notification would
//! have come for every change a listing shows:
//! - each directory is watched (inotify, on its path: a symlinked project directory is watched at its target,
//!   and its path is checked to still lead there) on a local file system, where every write is seen;
//! - no `*.jsonl` name in it is a symlink (a write to the target elsewhere is not an event of this directory)
//!   or a file with a second name (a write through the other name is not either): checked once after each
//!   change of the directory, the first time the listing is asked about again;
//! - no event came for it since the listing began, none was lost (a full queue says so), and the watch still
//!   holds.
//!
//! Events are read without blocking at each question, so an event the kernel queued before it (every write
//! queues one as it returns) is counted. What stays unseen: a file of the directory given a second name
//! elsewhere after the check and then written only through that name, and writes through a shared memory
//! mapping (pi writes neither way); such a change shows at the next event of the directory.
//!
//! Without inotify (another platform, or none to be had) every question answers "changed": the listing is made
//! as before.

use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::sync::Mutex;

#[cfg(target_os = "linux")]
use rustix::fd::OwnedFd;

/// The directories listings were made of, and what changed in them since.
pub struct QuietDirs {
    #[cfg(target_os = "linux")]
    inotify: Option<OwnedFd>,
    state: Mutex<State>,
}

impl std::fmt::Debug for QuietDirs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuietDirs").finish_non_exhaustive()
    }
}

#[derive(Default)]
struct State {
    /// Bumped when events were lost (the kernel's queue overflowed): every listing made before is in doubt.
    epoch: u64,
    /// Counts every event and every new watch, so that a directory's generation never takes a value again (a
    /// directory removed and made anew, even on the same inode, is not the one a listing saw).
    clock: u64,
    dirs: HashMap<String, Watched>,
    by_watch: HashMap<i32, String>,
}

struct Watched {
    watch: i32,
    /// The directory's identity when it was watched: its path must still lead to it.
    identity: (u64, u64),
    /// The clock at its last event, or when it was watched.
    generation: u64,
    /// The generation at which its names were found free of symlinks and second names, if they were.
    plain_at: Option<u64>,
}

/// What a listing saw of its directories as it began: each one's generation, and the epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    epoch: u64,
    dirs: Vec<(String, u64)>,
}

impl Default for QuietDirs {
    fn default() -> Self {
        QuietDirs::new()
    }
}

impl QuietDirs {
    /// Starts watching nothing yet; without inotify, every question answers "changed".
    pub fn new() -> QuietDirs {
        #[cfg(target_os = "linux")]
        {
            use rustix::fs::inotify::{init, CreateFlags};
            let inotify = init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC)
                .inspect_err(|e| tracing::debug!("no inotify for listings ({e}): held listings are made again"))
                .ok();
            QuietDirs { inotify, state: Mutex::new(State::default()) }
        }
        #[cfg(not(target_os = "linux"))]
        QuietDirs { state: Mutex::new(State::default()) }
    }

    /// Called as a listing of `dirs` begins (before any of them is read): watches each, and gives what the
    /// listing sees of them; None when one cannot be watched (then nothing is ever answered without reading).
    pub fn before_listing(&self, dirs: &[String]) -> Option<Seen> {
        let mut state = lock(&self.state);
        self.drain(&mut state);
        let mut seen = Seen { epoch: state.epoch, dirs: Vec::with_capacity(dirs.len()) };
        for dir in dirs {
            let generation = match state.dirs.get(dir) {
                Some(w) if identity(dir) == Some(w.identity) => w.generation,
                _ => self.watch(&mut state, dir)?,
            };
            seen.dirs.push((dir.clone(), generation));
        }
        Some(seen)
    }

    /// [`QuietDirs::before_listing`] of `root` and of every directory in it (the sessions root of `listAll`).
    /// The root is watched before its directories are read: one made after that is an event of the root, where
    /// reading them first let one made in between into the listing unwatched, its event already counted.
    pub fn before_listing_tree(&self, root: &str) -> Option<Seen> {
        let mut seen = self.before_listing(&[root.to_owned()])?;
        let dirs = crate::session::dirscan::subdirectories(root).ok()?;
        // A symlink that leads to no directory now may lead to one later, with no event of the root.
        if dirs.iter().any(|d| identity(d).is_none()) {
            return None;
        }
        let more = self.before_listing(&dirs)?;
        if more.epoch != seen.epoch {
            return None;
        }
        seen.dirs.extend(more.dirs);
        Some(seen)
    }

    /// True when nothing a listing shows can have changed in `seen`'s directories since it began.
    pub fn unchanged_since(&self, seen: &Seen) -> bool {
        let mut state = lock(&self.state);
        self.drain(&mut state);
        if state.epoch != seen.epoch {
            return false;
        }
        for (dir, generation) in &seen.dirs {
            let Some(w) = state.dirs.get_mut(dir) else { return false };
            if w.generation != *generation || identity(dir) != Some(w.identity) {
                return false;
            }
            if w.plain_at != Some(w.generation) {
                if !only_plain_files(dir) {
                    return false;
                }
                w.plain_at = Some(w.generation);
            }
        }
        true
    }

    #[cfg(target_os = "linux")]
    fn watch(&self, state: &mut State, dir: &str) -> Option<u64> {
        use rustix::fs::inotify::{add_watch, WatchFlags};
        let inotify = self.inotify.as_ref()?;
        if !on_local_file_system(dir) {
            return None;
        }
        let before = identity(dir)?;
        let flags = WatchFlags::MODIFY
            | WatchFlags::ATTRIB
            | WatchFlags::CLOSE_WRITE
            | WatchFlags::CREATE
            | WatchFlags::DELETE
            | WatchFlags::MOVED_FROM
            | WatchFlags::MOVED_TO
            | WatchFlags::DELETE_SELF
            | WatchFlags::MOVE_SELF
            | WatchFlags::ONLYDIR;
        let watch = add_watch(inotify, dir, flags)
            .inspect_err(|e| tracing::debug!("{dir}: not watched for listings ({e})"))
            .ok()?;
        // The path may have been swapped between the look and the watch: the watch must be on what was looked at.
        if identity(dir) != Some(before) {
            return None;
        }
        // Watching a directory twice (two paths to it) gives the same watch: it moves to the newer path.
        if let Some(old) = state.by_watch.insert(watch, dir.to_owned()) {
            if old != dir {
                state.dirs.remove(&old);
            }
        }
        state.clock += 1;
        let generation = state.clock;
        let replaced =
            state.dirs.insert(dir.to_owned(), Watched { watch, identity: before, generation, plain_at: None });
        // The directory the path led to before (moved away, or removed and made anew) is no longer watched.
        if let Some(old) = replaced.filter(|old| old.watch != watch) {
            state.by_watch.remove(&old.watch);
            let _ = rustix::fs::inotify::remove_watch(inotify, old.watch);
        }
        Some(generation)
    }

    #[cfg(not(target_os = "linux"))]
    fn watch(&self, _state: &mut State, _dir: &str) -> Option<u64> {
        None
    }

    /// Reads every event queued, without waiting.
    #[cfg(target_os = "linux")]
    fn drain(&self, state: &mut State) {
        use rustix::fs::inotify::{ReadFlags, Reader};
        let Some(inotify) = self.inotify.as_ref() else { return };
        let mut buf = [MaybeUninit::<u8>::uninit(); 8192];
        let mut reader = Reader::new(inotify, &mut buf);
        loop {
            let event = match reader.next() {
                Ok(e) => e,
                Err(rustix::io::Errno::AGAIN) => return,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => {
                    // Nothing can be known any more: every listing is made again from now on.
                    tracing::warn!("reading inotify events failed ({e}): held listings are made again");
                    state.epoch += 1;
                    state.dirs.clear();
                    state.by_watch.clear();
                    return;
                }
            };
            let flags = event.events();
            if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                state.epoch += 1;
                continue;
            }
            let Some(dir) = state.by_watch.get(&event.wd()) else { continue };
            if flags.contains(ReadFlags::IGNORED) {
                // The directory is gone (or unmounted): a listing of it is made again, and a new one watched.
                let dir = dir.clone();
                state.by_watch.remove(&event.wd());
                if state.dirs.get(&dir).is_some_and(|w| w.watch == event.wd()) {
                    state.dirs.remove(&dir);
                }
                continue;
            }
            state.clock += 1;
            let clock = state.clock;
            if let Some(w) = state.dirs.get_mut(dir) {
                w.generation = clock;
            }
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn drain(&self, _state: &mut State) {}
}

fn lock(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The device and inode `dir` leads to now (following symlinks).
fn identity(dir: &str) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(dir).ok().filter(|m| m.is_dir()).map(|m| (m.dev(), m.ino()))
}

/// True when every `*.jsonl` name in `dir` is a regular file with no other name: a write to any of them is then
/// an event of `dir`.
fn only_plain_files(dir: &str) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else { return false };
    for entry in entries {
        let Ok(entry) = entry else { return false };
        if !entry.file_name().as_encoded_bytes().ends_with(b".jsonl") {
            continue;
        }
        // `DirEntry::metadata` does not follow a symlink: a symlink is not a plain file.
        match entry.metadata() {
            Ok(m) if m.is_file() && m.nlink() == 1 => {}
            Ok(m) if !m.is_file() && !m.file_type().is_symlink() => {} // a directory or FIFO is never listed
            _ => return false,
        }
    }
    true
}

/// True when `dir` is on a file system whose every change this kernel makes (and so notifies): not a network,
/// FUSE or shared-folder file system, where another machine's writes come without an event.
#[cfg(target_os = "linux")]
fn on_local_file_system(dir: &str) -> bool {
    const LOCAL: &[u64] = &[
        0xEF53,      // ext2/3/4
        0x5846_5342, // xfs
        0x9123_683E, // btrfs
        0x0102_1994, // tmpfs
        0x794C_7630, // overlayfs
        0xF2F5_2010, // f2fs
        0x2FC1_2FC1, // zfs
        0xCAFE_4A11, // bcachefs
        0x3153_464A, // jfs
        0x5265_4973, // reiserfs
    ];
    match rustix::fs::statfs(dir) {
        #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
        Ok(fs) => LOCAL.contains(&(fs.f_type as u64)),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("pi-sessiond-quiet-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn s(p: &std::path::Path) -> String {
        p.to_str().unwrap().to_owned()
    }

    /// A change to make to the files, by name.
    type Change<'a> = Box<dyn Fn() + 'a>;

    #[test]
    fn a_directory_is_unchanged_until_a_file_in_it_is_written_created_touched_renamed_or_removed() {
        let root = temp();
        let dir = root.join("d");
        std::fs::create_dir(&dir).unwrap();
        let file = dir.join("a.jsonl");
        std::fs::write(&file, "x\n").unwrap();
        let quiet = QuietDirs::new();
        let changes: Vec<(&str, Change<'_>)> = vec![
            (
                "an append",
                Box::new(|| {
                    use std::io::Write;
                    std::fs::OpenOptions::new().append(true).open(&file).unwrap().write_all(b"y\n").unwrap();
                }),
            ),
            (
                "a new mtime",
                Box::new(|| {
                    let f = std::fs::File::options().write(true).open(&file).unwrap();
                    f.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(7)).unwrap();
                }),
            ),
            ("a new file", Box::new(|| std::fs::write(dir.join("b.jsonl"), "").unwrap())),
            ("a rename", Box::new(|| std::fs::rename(dir.join("b.jsonl"), dir.join("c.jsonl")).unwrap())),
            ("a removal", Box::new(|| std::fs::remove_file(dir.join("c.jsonl")).unwrap())),
            ("a truncation", Box::new(|| std::fs::File::create(&file).map(drop).unwrap())),
        ];
        for (what, change) in changes {
            let seen = quiet.before_listing(&[s(&dir)]).expect("a local directory is watched");
            assert!(quiet.unchanged_since(&seen), "before {what}");
            assert!(quiet.unchanged_since(&seen), "asked twice, before {what}");
            change();
            assert!(!quiet.unchanged_since(&seen), "after {what}");
        }
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn a_symlinked_or_twice_named_session_file_or_a_swapped_directory_is_never_taken_as_unchanged() {
        let root = temp();
        let dir = root.join("d");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("a.jsonl"), "x\n").unwrap();
        std::fs::write(root.join("elsewhere.jsonl"), "x\n").unwrap();
        let quiet = QuietDirs::new();

        std::os::unix::fs::symlink(root.join("elsewhere.jsonl"), dir.join("link.jsonl")).unwrap();
        let seen = quiet.before_listing(&[s(&dir)]).unwrap();
        assert!(!quiet.unchanged_since(&seen), "a symlinked session file");
        std::fs::remove_file(dir.join("link.jsonl")).unwrap();

        std::fs::hard_link(dir.join("a.jsonl"), root.join("second-name.jsonl")).unwrap();
        let seen = quiet.before_listing(&[s(&dir)]).unwrap();
        assert!(!quiet.unchanged_since(&seen), "a session file with a second name");
        std::fs::remove_file(root.join("second-name.jsonl")).unwrap();
        // Removing the other name is no event of the directory; the next listing checks the names again.
        let seen = quiet.before_listing(&[s(&dir)]).unwrap();
        assert!(quiet.unchanged_since(&seen), "plain files again");

        // The directory's path now leads to another directory.
        std::fs::rename(&dir, root.join("old")).unwrap();
        std::fs::create_dir(&dir).unwrap();
        assert!(!quiet.unchanged_since(&seen), "a directory swapped under its path");
        let seen = quiet.before_listing(&[s(&dir)]).unwrap();
        assert!(quiet.unchanged_since(&seen), "the new directory, once listed");
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn lost_events_make_every_listing_made_before_them_doubtful() {
        let root = temp();
        let quiet = QuietDirs::new();
        let seen = quiet.before_listing(&[s(&root)]).unwrap();
        lock(&quiet.state).epoch += 1; // what a queue overflow does
        assert!(!quiet.unchanged_since(&seen));
        std::fs::remove_dir_all(root).unwrap();
    }
}
