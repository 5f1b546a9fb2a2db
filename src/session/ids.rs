//! Where new ids and timestamps come from, and pi's exact id formats.
//!
//! pi draws entry ids as the first 8 hex characters of a random v4 UUID (retrying on collision, falling back to
//! the whole UUID), session ids as its own monotonic UUID v7, and timestamps from the wall clock. Randomness and
//! time are injected ([`IdSource`], [`Clock`]) so that a test can replay a scenario and require the very bytes
//! pi wrote; the algorithms on top of them are pi's, step for step.

use std::sync::Mutex;

/// Random bits: pi calls `crypto.randomUUID()` for entry ids and `crypto.getRandomValues()` for session ids.
pub trait IdSource: Send + Sync {
    /// A random v4 UUID in its lowercase 36-character form.
    fn random_uuid(&mut self) -> String;
    /// 16 random bytes.
    fn random_bytes(&mut self) -> [u8; 16];
}

/// The wall clock, in milliseconds since the epoch (`Date.now()`).
pub trait Clock: Send + Sync {
    /// The current time.
    fn now_ms(&mut self) -> f64;
}

/// Randomness from the operating system, drawn 128 UUIDs' worth at a time as Node's `crypto.randomUUID()` draws
/// it: a system call per entry id was a tenth of a batch append's time.
#[derive(Default)]
pub struct OsRandom {
    cache: Vec<u8>,
    used: usize,
}

/// Bytes of randomness drawn at once: Node's cache for `randomUUID()` (128 UUIDs).
const RANDOM_CACHE_BYTES: usize = 128 * 16;

impl OsRandom {
    fn next16(&mut self) -> [u8; 16] {
        if self.used + 16 > self.cache.len() {
            self.cache.resize(RANDOM_CACHE_BYTES, 0);
            if getrandom::fill(&mut self.cache).is_err() {
                // (The uuid crate's own draw, which gives up loudly if the system has no randomness at all.)
                for chunk in self.cache.chunks_mut(16) {
                    chunk.copy_from_slice(uuid::Uuid::new_v4().as_bytes());
                }
            }
            self.used = 0;
        }
        let mut out = [0u8; 16];
        out.copy_from_slice(&self.cache[self.used..self.used + 16]);
        // Used bytes are not kept around.
        self.cache[self.used..self.used + 16].fill(0);
        self.used += 16;
        out
    }
}

impl IdSource for OsRandom {
    fn random_uuid(&mut self) -> String {
        uuid::Builder::from_random_bytes(self.next16()).into_uuid().to_string()
    }
    fn random_bytes(&mut self) -> [u8; 16] {
        self.next16()
    }
}

/// The system clock.
#[derive(Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&mut self) -> f64 {
        let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        d.as_millis() as f64
    }
}

/// A new entry id as pi makes one: 8 hex characters not already `taken`, after 100 collisions a whole UUID.
pub fn generate_entry_id(ids: &mut dyn IdSource, taken: impl Fn(&str) -> bool) -> String {
    for _ in 0..100 {
        let uuid = ids.random_uuid();
        let id = &uuid[..8];
        if !taken(id) {
            return id.to_owned();
        }
    }
    ids.random_uuid()
}

/// The state pi's UUID v7 generator keeps between calls (module-level in pi, so per process).
#[derive(Debug, Clone, Copy, Default)]
pub struct UuidV7State {
    last_timestamp: Option<f64>,
    sequence: Option<u64>,
}

/// The process-wide generator state, so that ids made by different sessions in one process keep increasing, as
/// they do in pi.
pub static PROCESS_UUID_V7: Mutex<UuidV7State> = Mutex::new(UuidV7State { last_timestamp: None, sequence: None });

const MAX_SEQUENCE: u64 = (1 << 41) - 1;

/// pi's `uuidv7()`: a 48-bit timestamp (never going backwards), then a 41-bit counter seeded from the first
/// call's random bytes and incremented on every call, then random bits.
pub fn uuid_v7(state: &mut UuidV7State, now_ms: f64, ids: &mut dyn IdSource) -> String {
    let timestamp = match state.last_timestamp {
        Some(last) if last > now_ms => last,
        _ => now_ms,
    };
    state.last_timestamp = Some(timestamp);
    let mut bytes = ids.random_bytes();
    let sequence = match state.sequence {
        None => {
            ((bytes[1] as u64) << 32)
                | ((bytes[2] as u64) << 24)
                | ((bytes[3] as u64) << 16)
                | ((bytes[4] as u64) << 8)
                | bytes[5] as u64
        }
        // pi throws once the counter is exhausted; wrapping keeps ids unique in practice and is unreachable
        // within 2^41 ids of one process.
        Some(seq) if seq == MAX_SEQUENCE => 0,
        Some(seq) => seq + 1,
    };
    state.sequence = Some(sequence);
    let ts = timestamp as u64;
    for index in (0..=5).rev() {
        bytes[index] = ((ts >> ((5 - index) * 8)) & 0xff) as u8;
    }
    bytes[6] = 0x70 | ((sequence >> 37) & 0x0f) as u8;
    bytes[7] = ((sequence >> 29) & 0xff) as u8;
    bytes[8] = 0x80 | ((sequence >> 23) & 0x3f) as u8;
    bytes[9] = ((sequence >> 15) & 0xff) as u8;
    bytes[10] = ((sequence >> 7) & 0xff) as u8;
    bytes[11] = (((sequence & 0x7f) << 1) as u8) | (bytes[11] & 0x01);
    let hex: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        hex[0..4].concat(),
        hex[4..6].concat(),
        hex[6..8].concat(),
        hex[8..10].concat(),
        hex[10..16].concat()
    )
}

/// pi's `assertValidSessionId`: non-empty ASCII letters, digits, `.`, `_`, `-`, starting and ending with a
/// letter or digit.
pub fn is_valid_session_id(id: &str) -> bool {
    let b = id.as_bytes();
    let ok = |c: &u8| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-');
    !b.is_empty() && b[0].is_ascii_alphanumeric() && b[b.len() - 1].is_ascii_alphanumeric() && b.iter().all(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Counter(u8);
    impl IdSource for Counter {
        fn random_uuid(&mut self) -> String {
            self.0 += 1;
            format!("{:08x}-0000-4000-8000-000000000000", self.0 % 3)
        }
        fn random_bytes(&mut self) -> [u8; 16] {
            [self.0; 16]
        }
    }

    #[test]
    fn os_randomness_drawn_in_blocks_gives_distinct_v4_uuids_past_one_block() {
        let mut ids = OsRandom::default();
        let drawn: Vec<String> = (0..3 * RANDOM_CACHE_BYTES / 16 + 5).map(|_| ids.random_uuid()).collect();
        let distinct: std::collections::HashSet<&String> = drawn.iter().collect();
        assert_eq!(distinct.len(), drawn.len());
        for u in &drawn {
            let parsed = uuid::Uuid::parse_str(u).unwrap();
            assert_eq!(parsed.get_version_num(), 4, "{u}");
            assert_eq!(parsed.get_variant(), uuid::Variant::RFC4122, "{u}");
            assert_eq!(u, &u.to_lowercase());
        }
        assert_ne!(ids.random_bytes(), ids.random_bytes());
    }

    #[test]
    fn entry_ids_retry_on_collision() {
        let mut ids = Counter(0);
        let id = generate_entry_id(&mut ids, |id| id == "00000001");
        assert_eq!(id, "00000002");
    }

    #[test]
    fn session_ids_are_v7_and_strictly_increasing() {
        let mut state = UuidV7State::default();
        let mut ids = OsRandom::default();
        let a = uuid_v7(&mut state, 1_700_000_000_000.0, &mut ids);
        let b = uuid_v7(&mut state, 1_600_000_000_000.0, &mut ids);
        let v7 = |s: &str| {
            let p: Vec<&str> = s.split('-').collect();
            p.len() == 5 && p[2].starts_with('7') && matches!(&p[3][..1], "8" | "9" | "a" | "b")
        };
        assert!(v7(&a) && v7(&b), "{a} {b}");
        assert!(a < b, "{a} < {b}");
    }

    #[test]
    fn session_id_rule_matches_pi() {
        for ok in ["a", "1", "A9", "a.b", "a..b", "a_b-c.d", "abc-123_def.456", "my.id-1"] {
            assert!(is_valid_session_id(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "_a", "a_", ".a", "a.", "..", "a b", "a/b", "a\\b", "ü"] {
            assert!(!is_valid_session_id(bad), "{bad}");
        }
    }
}
