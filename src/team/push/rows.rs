//! Reading session files into rows: what this machine pushed before, which files changed, and each changed
//! file read from where its push stopped into pieces (lines redacted, text, entry rows), one piece at a time.

use super::*;

/// What the database knows of one pushed file.
pub(super) struct Pushed {
    pub(super) sid: i64,
    pub(super) stamp: FileStamp,
    /// False for a row pushed before change times were kept: its `ctime` is taken from the file as it is now, and
    /// recorded once the file is found otherwise unchanged.
    pub(super) ctime_known: bool,
    pub(super) offset: u64,
    pub(super) lines: i32,
    pub(super) head: Vec<u8>,
    pub(super) tail: Vec<u8>,
    /// `head` holds [`known_digest`] of the known bytes (and `tail` is empty), not the bytes themselves.
    pub(super) hashed: bool,
    pub(super) read_at_ns: i64,
}

/// What a row keeps of the bytes that tell a rewrite from an append: their digest, so the file's own bytes (the
/// end of its last line, often a message's text) never leave the machine.
pub(super) fn known_digest(head: &[u8], tail: &[u8]) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update((head.len() as u64).to_le_bytes());
    h.update(head);
    h.update(tail);
    h.finalize().to_vec()
}

impl Pushed {
    /// What the push knew of the file, for [`Known::judge`]: read up to the pushed offset.
    pub(super) fn known(&self) -> Known<'_> {
        Known {
            stamp: &self.stamp,
            len: self.offset,
            head: &self.head,
            tail: &self.tail,
            observed_at_ns: self.read_at_ns,
        }
    }
}

/// A session file on disk.
pub(super) struct Found {
    pub(super) path: String,
    pub(super) project_dir: String,
    pub(super) file_name: String,
    pub(super) stamp: FileStamp,
}

/// One entry line, ready for the database.
pub(super) struct EntryRow {
    pub(super) line: i32,
    pub(super) offset: i64,
    pub(super) raw: Vec<u8>,
    pub(super) entry_id: Option<String>,
    pub(super) parent_id: Option<String>,
    pub(super) kind: Option<String>,
    pub(super) timestamp: Option<String>,
    pub(super) role: Option<String>,
    pub(super) search: Option<Doc>,
}

/// A stretch of one file to write in one transaction: its new lines, and the session row as of their end.
pub(super) struct Piece {
    pub(super) found_index: usize,
    /// The row to continue (None: a new session).
    pub(super) sid: Option<i64>,
    /// Delete the session's entries first (it is being sent again from the start).
    pub(super) restart: bool,
    pub(super) entries: Vec<EntryRow>,
    /// The session row after this piece (None: the file is not a session; its row, if any, is deleted).
    pub(super) row: Option<SessionRow>,
    /// The piece reaches the end of what the file has now (else more pieces of it follow).
    pub(super) finishes: bool,
}

/// What one piece does to the row's `info_all_messages_text` (the JSON string literal of pi's
/// `allMessagesText`): the row keeps the literal of the complete lines' text, then that of the unterminated
/// rest, then the closing quote, and `all_text_committed` says how many characters the first part is.
pub(super) struct TextPiece {
    /// The literal's body (escaped, without quotes) of the text the piece's lines add.
    pub(super) added: String,
    /// The literal's body of the unterminated rest's text (counted by pi, so listed, but not yet committed).
    pub(super) rest: String,
    /// Keep the committed text and append to it (else the piece's text is all there is).
    pub(super) append: bool,
}

/// A string as the body of its JSON literal (JSON.stringify's escapes, without the quotes). Literals of strings
/// joined at a space are the joined bodies: escapes are per character, and no surrogate pair spans the join.
pub(super) fn json_string_body(s: crate::session::json::JsString) -> String {
    let mut literal = Json::String(s).to_canonical_string();
    literal.pop();
    literal.remove(0);
    literal
}

/// The session row's values.
pub(super) struct SessionRow {
    pub(super) info: SessionInfo,
    /// `allMessagesText` (not in `info`, whose `all_messages_text` is None).
    pub(super) text: TextPiece,
    pub(super) header: Json,
    pub(super) stamp: FileStamp,
    pub(super) offset: u64,
    pub(super) lines: i32,
    pub(super) head: Vec<u8>,
    pub(super) tail: Vec<u8>,
    pub(super) unterminated: Vec<u8>,
    pub(super) resume_state: String,
    pub(super) read_at_ns: i64,
}

/// PostgreSQL text cannot hold NUL; a session string can (`\u0000`).
pub(super) fn pg_text(s: String) -> String {
    if s.contains('\0') {
        s.replace('\0', "\u{FFFD}")
    } else {
        s
    }
}

/// A member's value for a readable column: a string's text, else the JSON as written.
pub(super) fn member_text(line: &[u8], members: &[crate::session::json::scan::Member], name: &str) -> Option<String> {
    let v = &line[find_member(line, members, name)?];
    let text = if v.first() == Some(&b'"') {
        decode_string_literal(v).to_string_lossy()
    } else {
        String::from_utf8_lossy(v).into_owned()
    };
    Some(pg_text(text))
}

impl EntryRow {
    pub(super) fn new(line: i32, offset: u64, raw: &[u8], search: Option<Doc>) -> EntryRow {
        let mut row = EntryRow {
            line,
            offset: offset as i64,
            raw: raw.to_vec(),
            entry_id: None,
            parent_id: None,
            kind: None,
            timestamp: None,
            role: None,
            search: search.map(|d| Doc { text: pg_text(d.text), ..d }),
        };
        if let Ok(doc) = scan_document(raw) {
            row.entry_id = member_text(raw, &doc.members, "id");
            row.parent_id = member_text(raw, &doc.members, "parentId");
            row.kind = member_text(raw, &doc.members, "type");
            row.timestamp = member_text(raw, &doc.members, "timestamp");
            row.role = member_text(raw, &doc.message_members, "role");
        }
        row
    }
}

/// What a scan found: the session files, and the paths it could not look at (a project directory it could not
/// read, a file it could not `stat`), whose rows must be kept rather than taken for deleted.
#[derive(Default)]
pub(super) struct Scan {
    pub(super) found: Vec<Found>,
    pub(super) unreadable_dirs: HashSet<String>,
    pub(super) unstatable: HashSet<String>,
}

impl Scan {
    /// Whether a pushed file missing from the scan may be gone rather than only unseen.
    pub(super) fn is_gone(&self, path: &str) -> bool {
        !self.unstatable.contains(path) && !self.unreadable_dirs.contains(&paths::parent_dir(path))
    }
}

/// Every `*.jsonl` file one level under `<agentDir>/sessions` (project directories and symlinks to them), as
/// pi's `listAll` finds them. A missing `sessions` directory is refused (checked on every pass: a watched
/// directory on a volume that went away must not empty the machine's rows) unless empty agent directories are
/// allowed.
pub(super) fn scan(options: &PushOptions) -> DbResult<Scan> {
    let root = options.sessions_root()?;
    let entries = match std::fs::read_dir(&root) {
        Ok(e) => e,
        // Allowed to be empty: nothing to push, and nothing pushed before is there any more.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && options.allow_empty => return Ok(Scan::default()),
        Err(source) => return Err(DbError::File { path: root, source }),
    };
    let mut scan = Scan::default();
    for entry in entries.flatten() {
        let Ok(ft) = entry.file_type() else { continue };
        if !(ft.is_dir() || ft.is_symlink()) {
            continue;
        }
        let project_dir = entry.file_name().to_string_lossy().into_owned();
        let dir = paths::join(&[&root, &project_dir]);
        let Ok(names) = dirscan::jsonl_names(&dir) else {
            scan.unreadable_dirs.insert(dir);
            continue;
        };
        let Ok(stamps) = dirscan::stamp_names(&dir, &names) else {
            scan.unreadable_dirs.insert(dir);
            continue;
        };
        for (name, stamp) in names.into_iter().zip(stamps) {
            let path = paths::join(&[&dir, &name]);
            match stamp {
                // Not a session file (a FIFO, a directory): never opened, and a row of it is deleted.
                Some(stamp) if !stamp.regular => {}
                Some(stamp) => {
                    scan.found.push(Found { path, project_dir: project_dir.clone(), file_name: name, stamp })
                }
                None => {
                    scan.unstatable.insert(path);
                }
            }
        }
    }
    Ok(scan)
}

pub(super) fn load_pushed(client: &mut Client, target: &Target, machine: &str) -> DbResult<HashMap<String, Pushed>> {
    let rows = client
        .query(
            "SELECT path, sid, file_size, file_mtime_ns, file_dev, file_ino, pushed_offset, pushed_lines, head, tail,
                    read_at_ns, file_ctime_ns, known_hashed
             FROM pi_sessions WHERE machine = $1",
            &[&machine],
        )
        .map_err(|e| target.error(e))?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let ctime_ns: Option<i64> = r.get(11);
            let stamp = FileStamp {
                size: r.get::<_, i64>(2) as u64,
                mtime_ns: r.get(3),
                dev: r.get::<_, i64>(4) as u64,
                ino: r.get::<_, i64>(5) as u64,
                ctime_ns: ctime_ns.unwrap_or_default(),
                regular: true,
            };
            let pushed = Pushed {
                sid: r.get(1),
                stamp,
                ctime_known: ctime_ns.is_some(),
                offset: r.get::<_, i64>(6) as u64,
                lines: r.get(7),
                head: r.get(8),
                tail: r.get(9),
                hashed: r.get(12),
                read_at_ns: r.get(10),
            };
            (r.get::<_, String>(0), pushed)
        })
        .collect())
}

/// Where the file's complete lines end (just past the last `\n` at or after `from`), else `from`.
pub(super) fn complete_end(file: &File, from: u64, len: u64) -> std::io::Result<u64> {
    Ok(index::last_newline(file, from, len, &Cancel::new())?.map_or(from, |i| i + 1))
}

/// Feeds one `\n`-terminated line to the listing state as Node's `readline` would split it (a lone `\r` ends a
/// line too; the empty pieces that splitting leaves are blank lines, which the state ignores).
pub(super) fn feed_readline(state: &mut InfoState, line: &[u8], docs: Option<&mut Vec<Doc>>) {
    match docs {
        Some(docs) => line.split(|&b| b == b'\r').for_each(|piece| state.feed(piece, Some(docs))),
        None => line.split(|&b| b == b'\r').for_each(|piece| state.feed(piece, None)),
    }
}

/// What reading a changed file did.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct FileOutcome {
    /// Pieces were written (new lines, a changed unterminated tail, the whole file again, or its deletion).
    pub(super) wrote: bool,
    /// It was sent again from the start.
    pub(super) restarted: bool,
}

/// One file whose stamp changed (or may have) as it is now: an open handle, its stamp taken through that handle
/// and when, and what [`Known::judge`] made of it against its row.
pub(super) struct Opened {
    pub(super) file: File,
    pub(super) stamp: FileStamp,
    pub(super) read_at_ns: i64,
    /// Its row still describes it: the stamp is the pushed one and the known bytes are intact.
    pub(super) unchanged: bool,
    /// It only grew: the new lines continue the pushed row (else it is sent again from the start).
    pub(super) resume: bool,
    /// What each line goes through before it leaves the machine (the push's redactor, and whether images stay).
    pub(super) redactor: Option<Arc<Redactor>>,
    pub(super) keep_images: bool,
}

/// Opens a file whose stamp changed, or may have (racily clean, or pushed before change times were kept), and
/// judges it against its row. None when it cannot be opened: it vanished since the scan or is no longer a
/// regular file, and the next pass sees to it.
pub(super) fn open_changed(found: &Found, known: Option<&mut Pushed>) -> Option<Opened> {
    // Stamped before its bytes are read, so a write made while they are read shows on the next pass.
    let read_at_ns = now_ns();
    let file = store::open_regular(&found.path).ok()?;
    let stamp = FileStamp::of(&file.metadata().ok()?);
    let Some(k) = known else {
        return Some(Opened {
            file,
            stamp,
            read_at_ns,
            unchanged: false,
            resume: false,
            redactor: None,
            keep_images: true,
        });
    };
    if !k.ctime_known {
        // Judged on the rest of its stamp and its bytes, as pushes before change times were kept judged it.
        k.stamp.ctime_ns = stamp.ctime_ns;
    }
    if std::mem::take(&mut k.hashed) {
        // The file's bytes where the known ones were: judged as those when their digest is the kept one; else the
        // digest itself stands in, which the file's bytes do not match, and the file is sent again.
        let (head, tail) = identity::known_bytes(&file, k.offset.min(stamp.size));
        if known_digest(&head, &tail) == k.head {
            (k.head, k.tail) = (head, tail);
        }
    }
    let state = k.known().judge(&stamp, &file);
    // With an unterminated last line the file is longer than the pushed offset: "grew" with the very stamp that
    // was pushed is no change.
    let unchanged = stamp == k.stamp && matches!(state, FileState::Same | FileState::Grew(_));
    let resume = matches!(state, FileState::Same | FileState::Grew(_));
    if !resume {
        tracing::info!("{}: {state:?} since it was pushed; sending it again", found.path);
    }
    Some(Opened { file, stamp, read_at_ns, unchanged, resume, redactor: None, keep_images: true })
}

/// The pieces of one changed file: its new complete lines in stretches of at most [`BYTES_PER_TRANSACTION`],
/// each with the session row as of its end, handed to `emit` as they are read.
pub(super) fn read_file(
    found_index: usize,
    found: &Found,
    opened: &Opened,
    known: Option<&Pushed>,
    client: &mut Client,
    target: &Target,
    emit: &mut dyn FnMut(&mut Client, Piece) -> DbResult<()>,
) -> DbResult<FileOutcome> {
    let file_err = |source| DbError::File { path: found.path.clone(), source };
    let redactor = opened.redactor.as_deref();
    let (f, stat, read_at_ns) = (&opened.file, opened.stamp, opened.read_at_ns);
    let resume = known.filter(|_| opened.resume);
    // Whether the row's `allMessagesText` so far is to be kept and appended to (else the next piece writes it).
    let mut append_text = false;
    let (mut state, mut offset, mut line_no) = match resume {
        Some(k) => {
            let text: String = client
                .query_one("SELECT resume_state FROM pi_sessions WHERE sid = $1", &[&k.sid])
                .map_err(|e| target.error(e))?
                .get(0);
            let decoded = state::decode(&text);
            append_text = decoded.text_in_column;
            (decoded.state, k.offset, k.lines)
        }
        None => (InfoState::default(), 0, 0),
    };
    let restart = known.is_some() && resume.is_none();
    let sid = known.map(|k| k.sid);
    let end = complete_end(f, offset, stat.size).map_err(file_err)?;
    let mut shared = f;
    shared.seek(SeekFrom::Start(offset)).map_err(file_err)?;
    let mut reader = LineReader::new(shared.take(end - offset));
    let mut entries = Vec::new();
    let mut piece_bytes = 0usize;
    let mut first_piece = true;
    let mut wrote = false;
    let mut docs = Vec::new();
    let start = offset;
    loop {
        let next = reader.next_line().map_err(file_err)?;
        let mut done = next.is_none();
        if let Some(raw) = next {
            let (at, line) = (raw.offset, raw.bytes);
            line_no += 1;
            docs.clear();
            let redacted = redact::outgoing_line(line, redactor, opened.keep_images);
            let line = redacted.as_deref().unwrap_or(line);
            // A line the reader skipped (longer than pi can hold, or binary past its first megabytes) is not
            // JSON to pi either: it is stored as an empty line, its length kept by the offsets around it.
            feed_readline(&mut state, line, Some(&mut docs));
            let doc = docs.drain(..).reduce(|mut a, b| {
                a.text.push('\n');
                a.text.push_str(&b.text);
                a
            });
            let line_at = start + at;
            entries.push(EntryRow::new(line_no, line_at, line, doc));
            piece_bytes += line.len() + 1;
            offset = line_at + raw.len + 1;
            // Not a session (any more): the piece below deletes what the database has of it.
            done |= state.rejected;
        }
        if !(done || piece_bytes >= BYTES_PER_TRANSACTION) {
            continue;
        }
        // The text this piece adds to `allMessagesText` leaves the state: the state then holds no more than a
        // piece, whatever the session's length (texts are joined by spaces, so pieces join as the texts do).
        let added = std::mem::take(&mut state.all_text);
        // The row as of `offset`: the listing counts the unterminated rest as pi does, the resume state does not.
        let mut unterminated = Vec::new();
        let mut rest_fed = if done && end < stat.size {
            let mut answer = state.clone();
            let rest = identity::bytes_at(f, end, stat.size - end)
                .ok_or_else(|| file_err(std::io::ErrorKind::UnexpectedEof.into()))?;
            unterminated = redact::outgoing_unterminated(rest, redactor, opened.keep_images);
            feed_readline(&mut answer, &unterminated, None);
            answer
        } else {
            state.clone()
        };
        let (head, tail) = identity::known_bytes(f, offset);
        let (head, tail) = (known_digest(&head, &tail), Vec::new());
        let text = TextPiece {
            added: json_string_body(added),
            rest: json_string_body(std::mem::take(&mut rest_fed.all_text)),
            append: std::mem::replace(&mut append_text, true),
        };
        let info = rest_fed.finish(&found.path, stat.mtime_ms(), false);
        let row = match (info, rest_fed.header.clone()) {
            (Some(info), Some(header)) if !state.rejected => Some(SessionRow {
                info,
                text,
                header,
                // Until the last piece, the stat stays "changed", so a kill between pieces is resumed.
                stamp: if done { stat } else { FileStamp { size: 0, mtime_ns: 0, ctime_ns: 0, ..stat } },
                offset,
                lines: line_no,
                head,
                tail,
                unterminated,
                resume_state: state::encode(&state),
                read_at_ns,
            }),
            _ => None,
        };
        let last = done || row.is_none();
        let piece = Piece {
            found_index,
            sid,
            restart: restart && first_piece,
            entries: std::mem::take(&mut entries),
            row,
            finishes: last,
        };
        wrote |= piece.row.is_some() || piece.sid.is_some();
        emit(client, piece)?;
        first_piece = false;
        piece_bytes = 0;
        if last {
            break;
        }
    }
    Ok(FileOutcome { wrote, restarted: restart })
}
