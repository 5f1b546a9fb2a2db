//! Planning a listing's writes: for each file, what reading it from where its row stopped (or from the start)
//! gives, computed on a few threads with no lock held.

use super::*;

/// The most threads that read files for one listing.
pub(super) const PLAN_THREADS: usize = 4;

/// A file's plan as [`plan_all`] returns it: its index, the row version it was planned from, when it was read
/// (ns), and [`plan`]'s answer and write.
pub(super) type Planned = (usize, Option<Version>, i64, (Option<Option<SessionInfo>>, Write));

/// [`plan`] for each file of `batch` (its index in `files` and its row as read), a file at a time on each of a
/// few threads (reading is most of a cold listing, and the files are independent), in `batch`'s order.
pub(super) fn plan_all(
    files: &[FileToIndex<'_>],
    batch: Vec<(usize, Option<KnownRow>)>,
    with_text: bool,
    disk: &Arc<dyn Disk>,
    cancel: &Cancel,
) -> Vec<Planned> {
    let one = |(i, basis): (usize, Option<KnownRow>)| {
        let read_at = now_ns();
        let (version, row) = basis.map_or((None, None), |(v, r)| (Some(v), r));
        (i, version, read_at, plan(&files[i], row, with_text, disk, cancel))
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, PLAN_THREADS);
    if threads == 1 || batch.len() < 2 {
        return batch.into_iter().map(one).collect();
    }
    let count = batch.len();
    let work = Mutex::new(batch.into_iter().enumerate());
    let mut planned: Vec<Option<Planned>> = (0..count).map(|_| None).collect();
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads.min(count))
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        // (The lock is let go before the file is read.)
                        let next = lock(&work).next();
                        let Some((k, item)) = next else { return mine };
                        mine.push((k, one(item)));
                    }
                })
            })
            .collect();
        for worker in workers {
            // A panic goes on to the request, as it would have without the threads.
            for (k, p) in worker.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)) {
                planned[k] = Some(p);
            }
        }
    });
    planned.into_iter().flatten().collect()
}

/// One file's next row and listing entry, from its row as read (`known`, with its text) and the file's bytes
/// (read with no lock held, through `disk`): as `identity` judges the file against the row, answered from the row (the same),
/// continued from where the row stopped (it grew), or read again from the start (anything else).
/// The answer is None when the file could not be read (it vanished, or changed while read): the listing leaves it
/// out this time, and nothing remembers that. When the process is out of descriptors, the failure is noted on
/// `cancel` (the listing fails) and the row is kept.
pub(super) fn plan(
    file: &FileToIndex<'_>,
    known: Option<Row>,
    with_text: bool,
    disk: &Arc<dyn Disk>,
    cancel: &Cancel,
) -> (Option<Option<SessionInfo>>, Write) {
    let now = &file.stamp;
    let finish = |state: &InfoState| Some(state.finish(&file.path, now.mtime_ms(), with_text));
    if let Some(row) = known.as_ref().filter(|r| r.answers_unread(now)) {
        return (finish(&row.state), Write::Keep);
    }
    let f = match store::open_regular_on(disk, &file.path) {
        Ok(f) => f,
        Err(e) => {
            cancel.note_failure(&e);
            let exhausted = matches!(&e, crate::session::Error::Io { source, .. } if is_exhaustion(source));
            return (None, if exhausted { Write::Keep } else { Write::Forget });
        }
    };
    let indexed_at_ns = now_ns();
    let (mut row, continued) = match known.map(|r| (r.known().judge(now, f.file()), r)) {
        Some((FileState::Same, r)) if r.stamp == *now => {
            // Racily clean, and its bytes say it is unchanged: clean from now on if the tick has passed.
            let write = if r.stamp.settled_at(indexed_at_ns) { Write::Settle { indexed_at_ns } } else { Write::Keep };
            return (finish(&r.state), write);
        }
        // Grew (or only its unterminated last line changed): go on from where the row stopped.
        Some((FileState::Same | FileState::Grew(_), r)) => (r, true),
        _ => (Row::empty(now), false),
    };
    let len = now.size;
    let was_short = row.offset == 0 || row.stamp.size <= HEADER_SCAN_LIMIT;
    // Complete lines are remembered; a final line without `\n` is counted for this answer only (it may be a write
    // in progress, and pi's listing reads it as a line).
    let complete_end = match last_newline(&f, row.offset, len, cancel) {
        Ok(nl) => nl.map_or(row.offset, |i| i + 1),
        Err(_) => return (None, Write::Keep),
    };
    if complete_end > row.offset {
        let state = &mut row.state;
        if feed_lines(&f, row.offset, complete_end, cancel, |line| state.feed(line, None)).is_err() {
            return (None, Write::Keep);
        }
        row.offset = complete_end;
        (row.head, row.tail) = identity::known_bytes(f.file(), complete_end);
    }
    if was_short {
        // What discovery finds depends only on the first MiB: recompute it while the file is shorter than that.
        row.bounded_header = read_header_bounded(&file.path);
    }
    row.stamp = *now;
    row.indexed_at_ns = indexed_at_ns;
    let answer = if complete_end < len {
        let mut answer = row.state.clone();
        if feed_lines(&f, complete_end, len, cancel, |line| answer.feed(line, None)).is_err() {
            return (None, Write::Keep);
        }
        finish(&answer)
    } else {
        finish(&row.state)
    };
    (answer, Write::Store { row: Box::new(row), continued })
}
