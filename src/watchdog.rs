//! A native backstop for Ctrl-C and SIGTERM.
//!
//! Python runs its signal handlers only between bytecodes of the main
//! thread, so a long call into numpy, pandas or pyarrow can delay an
//! interrupt by seconds. Once armed, the first SIGINT or SIGTERM also wakes
//! a native thread (no GIL needed). If the process is still alive `grace`
//! later, that thread removes the registered scratch directories, says so
//! on stderr and ends the process with exit status 128 + the signal number.
//! The handler installed here chains to the one it replaced (Python's), so
//! the normal path, KeyboardInterrupt and clean unwinding, is unchanged.

use std::path::PathBuf;
use std::sync::Mutex;

static SCRATCH: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// The registry, held while a directory is made, removed or swept (so that
/// none is made between the backstop's sweep and its exit: it keeps the lock).
fn scratch() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    SCRATCH.lock().unwrap_or_else(|e| e.into_inner())
}

/// Forgets `path` (made by `create`) without removing it.
pub fn unregister(path: &std::path::Path) {
    scratch().retain(|p| p != path);
}

/// Makes the directory `path` (`mode`, less the umask) and registers it, in
/// one call: no Python signal handler can run between the two. A path is
/// registered only once this call made it, never before (it could be someone
/// else's), and never left unregistered after.
pub fn create(path: &std::path::Path, mode: u32) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, mode);
    #[cfg(not(unix))]
    let _ = mode;
    let mut registry = scratch();
    builder.create(path)?;
    registry.push(path.to_path_buf());
    Ok(())
}

/// Removes the scratch directory `path` (if there) and forgets it, in one
/// call: no Python signal handler can run between the two, nor inside the
/// removal (an interrupt inside `shutil.rmtree` cuts it short, and can make it
/// close a descriptor twice). Returns whether there was a directory to remove.
pub fn remove(path: &std::path::Path) -> bool {
    let mut registry = scratch();
    let removed = std::fs::remove_dir_all(path).is_ok();
    registry.retain(|p| p != path);
    removed
}

/// Removes the directories in `registry` (those still there) and empties it; returns how many were removed.
fn sweep(registry: &mut Vec<PathBuf>) -> usize {
    registry.drain(..).filter(|path| std::fs::remove_dir_all(path).is_ok()).count()
}

/// Removes every registered scratch directory (those still there) and forgets
/// them all; returns how many were removed. The CLI calls it when an interrupt
/// has unwound: a signal that landed between a directory's `create` and the
/// Python that removes it skipped that removal.
pub fn remove_all() -> usize {
    sweep(&mut scratch())
}

#[cfg(unix)]
mod imp {
    use std::sync::atomic::{AtomicI32, Ordering};
    use std::sync::OnceLock;
    use std::time::Duration;

    static SIGNALLED: AtomicI32 = AtomicI32::new(0);
    static WRITE_FD: AtomicI32 = AtomicI32::new(-1);
    static PREV_INT: OnceLock<libc::sigaction> = OnceLock::new();
    static PREV_TERM: OnceLock<libc::sigaction> = OnceLock::new();
    static ARMED: OnceLock<()> = OnceLock::new();

    extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        // Async-signal-safe only: an atomic, write(2), and the previous handler.
        if SIGNALLED.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
            let byte = 1u8;
            let fd = WRITE_FD.load(Ordering::SeqCst);
            if fd >= 0 {
                unsafe { libc::write(fd, &byte as *const u8 as *const libc::c_void, 1) };
            }
        }
        let prev = if sig == libc::SIGINT { PREV_INT.get() } else { PREV_TERM.get() };
        if let Some(prev) = prev {
            let handler = prev.sa_sigaction;
            if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
                return;
            }
            unsafe {
                if prev.sa_flags & libc::SA_SIGINFO != 0 {
                    let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) = std::mem::transmute(handler);
                    f(sig, info, ctx);
                } else {
                    let f: extern "C" fn(libc::c_int) = std::mem::transmute(handler);
                    f(sig);
                }
            }
        }
    }

    fn install(sig: libc::c_int, prev_slot: &OnceLock<libc::sigaction>) -> Result<(), String> {
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as usize;
            // No SA_RESTART, as Python: a blocking call returns EINTR so that Python runs its handler.
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut action.sa_mask);
            let mut prev: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, &action, &mut prev) != 0 {
                return Err(format!("sigaction({sig}) failed"));
            }
            let _ = prev_slot.set(prev);
        }
        Ok(())
    }

    pub fn arm(grace: Duration) -> Result<(), String> {
        if ARMED.set(()).is_err() {
            return Ok(());
        }
        let mut fds = [0 as libc::c_int; 2];
        if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
            return Err("pipe() failed".into());
        }
        let read_fd = fds[0];
        WRITE_FD.store(fds[1], Ordering::SeqCst);
        std::thread::Builder::new()
            .name("ddlsim-interrupt".into())
            .spawn(move || {
                let mut byte = 0u8;
                loop {
                    let r = unsafe { libc::read(read_fd, &mut byte as *mut u8 as *mut libc::c_void, 1) };
                    if r == 1 {
                        break;
                    }
                    if r < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                        continue;
                    }
                    return;
                }
                std::thread::sleep(grace);
                let sig = SIGNALLED.load(Ordering::SeqCst);
                // The registry stays locked until the exit: no directory can be made after the sweep.
                let mut registry = super::scratch();
                super::sweep(&mut registry);
                let what: &[u8] = if sig == libc::SIGINT { b"\ninterrupted (partial outputs removed)\n" } else { b"\nterminated (partial outputs removed)\n" };
                unsafe {
                    libc::write(2, what.as_ptr() as *const libc::c_void, what.len());
                    libc::_exit(128 + sig);
                }
            })
            .map_err(|e| format!("cannot start the interrupt thread: {e}"))?;
        install(libc::SIGINT, &PREV_INT)?;
        install(libc::SIGTERM, &PREV_TERM)?;
        Ok(())
    }
}

#[cfg(not(unix))]
mod imp {
    pub fn arm(_grace: std::time::Duration) -> Result<(), String> {
        Ok(())
    }
}

pub use imp::arm;
