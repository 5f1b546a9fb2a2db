//! What the data generators share: a seeded random source, flag parsing and ISO timestamps.

/// xorshift64: fast, deterministic, good enough for test data.
pub struct Rng(pub u64);

impl Rng {
    /// The next value.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A value below `n`.
    #[allow(dead_code)]
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The number after `--name` in `args`, or `default`.
pub fn flag(args: &[String], name: &str, default: u64) -> u64 {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// An ISO timestamp for `ms` (UTC), as `Date.prototype.toISOString` writes it.
pub fn iso(ms: u64) -> String {
    pi_sessiond::session::js::date::to_iso_string(ms as f64).expect("a valid time")
}
