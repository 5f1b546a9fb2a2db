//! Fault injection through the real binary: `fault_shim.c`, compiled here at test time with the system's `cc`,
//! is loaded into a sidecar with `LD_PRELOAD` and makes `write`, `fsync` and `fdatasync` fail (or another writer
//! get in first) for the files a test names, switched on and off by flag files while the process runs. This is
//! how a full disk, a failing disk and a racing pi are produced without root or a special file system.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use super::sidecar::{Sidecar, Wire};

/// The compiled shim (built once per test run).
fn shim() -> &'static Path {
    static SHIM: OnceLock<PathBuf> = OnceLock::new();
    SHIM.get_or_init(|| {
        let src = super::repo().join("tests/it/support/fault_shim.c");
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("fault_shim-{}.so", std::process::id()));
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
        let status = Command::new(&cc)
            .args(["-shared", "-fPIC", "-O1", "-o"])
            .arg(&out)
            .arg(&src)
            .arg("-ldl")
            .status()
            .unwrap_or_else(|e| {
                panic!("the fault-injection tests compile {} with `{cc}` (a C compiler): {e}", src.display())
            });
        assert!(status.success(), "compiling {} failed", src.display());
        out
    })
}

/// The faults one test controls: flag files in a directory of its own.
pub struct Faults {
    control: tempfile::TempDir,
}

impl Faults {
    /// No fault switched on yet.
    pub fn new() -> Faults {
        Faults { control: tempfile::tempdir().expect("control dir") }
    }

    /// Spawns a sidecar whose writes and fsyncs to files whose path contains `pattern` obey this test's flags.
    pub fn sidecar(&self, args: &[&str], pattern: &str) -> Sidecar {
        let control = self.control.path().to_str().expect("utf-8 temp path").to_owned();
        let shim = shim().to_str().expect("utf-8 target path").to_owned();
        Sidecar::spawn(
            Wire::Jsonl,
            args,
            &[("LD_PRELOAD", &shim), ("PI_FAULT_MATCH", pattern), ("PI_FAULT_CONTROL", &control)],
        )
    }

    /// Switches a fault on or off: `fsync-eio`, `write-enospc`, `stall-tmp` (see `fault_shim.c`).
    pub fn set(&self, fault: &str, on: bool) {
        let path = self.control.path().join(fault);
        if on {
            std::fs::write(path, b"").unwrap();
        } else {
            let _ = std::fs::remove_file(path);
        }
    }

    /// How many fsyncs (`fsync` and `fdatasync`) of matching files were made so far.
    pub fn fsyncs(&self) -> usize {
        std::fs::read(self.control.path().join("fsyncs")).map_or(0, |b| b.len())
    }

    /// Before the next write to a matching file, `bytes` are appended to it by another descriptor (once).
    pub fn inject_before_next_write(&self, bytes: &[u8]) {
        let tmp = self.control.path().join("inject.part");
        std::fs::write(&tmp, bytes).unwrap();
        std::fs::rename(tmp, self.control.path().join("inject")).unwrap();
    }
}
