//! Running the binary on a pseudo-terminal, as a person at a terminal runs it: stdout, stderr and stdin are
//! the pty's slave side (so `isatty` is true and the window has a size), and everything the program writes
//! is read from the master side.

use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::process::{Command, ExitStatus, Stdio};

/// What a program printed on the terminal (carriage returns removed) and how it ended.
pub struct Screen {
    /// Everything written to the terminal, stdout and stderr interleaved, `\r\n` made `\n`.
    pub text: String,
    /// The exit status.
    pub status: ExitStatus,
}

/// Runs `cmd` on a new `cols`×`rows` terminal, typing `input` once it has started.
pub fn run_on_terminal(cmd: &mut Command, cols: u16, rows: u16, input: &[u8]) -> Screen {
    use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC).expect("openpt");
    grantpt(&master).expect("grantpt");
    unlockpt(&master).expect("unlockpt");
    let name = ptsname(&master, Vec::new()).expect("ptsname");
    let slave: OwnedFd = rustix::fs::open(
        name.as_c_str(),
        rustix::fs::OFlags::RDWR | rustix::fs::OFlags::NOCTTY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .expect("open the pty's slave");
    let size = rustix::termios::Winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
    rustix::termios::tcsetwinsize(slave.as_fd(), size).expect("set the window size");
    let dup = |fd: &OwnedFd| Stdio::from(fd.try_clone().expect("dup"));
    let mut child = cmd.stdin(dup(&slave)).stdout(dup(&slave)).stderr(dup(&slave)).spawn().expect("spawn");
    // The command keeps its copies of the slave side until told otherwise; while any is open, reading the master
    // never ends.
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    drop(slave);
    let mut master = std::fs::File::from(master);
    if !input.is_empty() {
        master.write_all(input).expect("type on the terminal");
    }
    let mut bytes = Vec::new();
    let mut buf = [0u8; 65536];
    // Reading the master fails with EIO once every slave descriptor is closed (the program and its children
    // have exited): that is the end of the output.
    loop {
        match master.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    let status = child.wait().expect("wait");
    Screen { text: String::from_utf8_lossy(&bytes).replace("\r\n", "\n"), status }
}
