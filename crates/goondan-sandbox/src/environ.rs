//! This process's own environment block, out of other processes' sight.
//!
//! The kernel serves `/proc/<pid>/environ` from the block of strings it
//! laid out when the program started, whatever the program did with its
//! variables since: removing a variable only drops a pointer, the bytes
//! stay. The shell that starts `gdn` usually exports the model keys, so
//! that block holds them for the life of the orchestrator, readable by
//! any process of the same user (and by root) that can open the file.
//!
//! [`scrub_initial_environment`] moves every variable to a heap copy (the
//! process and the children it spawns see exactly the same environment)
//! and overwrites the block with zeros, so `/proc/<pid>/environ` reads as
//! empty. What it cannot hide is the heap copy itself from a reader of
//! `/proc/<pid>/mem`: that takes ptrace rights over the process, which
//! `gdn` denies to everyone but root by being non-dumpable (SECURITY.md).

use std::io;

/// Moves every variable of this process's initial environment block to
/// the heap and zeroes the block. Idempotent; a variable set later was on
/// the heap all along.
///
/// # Safety
///
/// No other thread may exist: it rewrites the process's `environ` array
/// without the lock Rust's `std::env` takes. Call it first thing in
/// `main`.
#[cfg(target_os = "linux")]
pub unsafe fn scrub_initial_environment() -> io::Result<()> {
    use nix::libc;
    extern "C" {
        // glibc and musl both export it.
        static mut environ: *mut *mut libc::c_char;
    }
    let (start, end) = initial_block()?;
    // SAFETY: single-threaded by the caller's promise; `environ` is a
    // NUL-terminated array of NUL-terminated strings. Every entry inside
    // the block is replaced by a heap copy before the block is zeroed, so
    // nothing points into it afterwards; the block lies in the stack
    // mapping the kernel made writable.
    unsafe {
        let mut entry = environ;
        while !entry.is_null() && !(*entry).is_null() {
            let address = *entry as usize;
            if (start..end).contains(&address) {
                let copy = libc::strdup(*entry);
                if copy.is_null() {
                    return Err(io::Error::from(io::ErrorKind::OutOfMemory));
                }
                // The copy lives as long as the process, as the original
                // did.
                *entry = copy;
            }
            entry = entry.add(1);
        }
        std::ptr::write_bytes(start as *mut u8, 0, end - start);
    }
    Ok(())
}

/// Elsewhere there is no `/proc/<pid>/environ` to hide from.
///
/// # Safety
///
/// None needed; `unsafe` only to match the Linux signature.
#[cfg(not(target_os = "linux"))]
pub unsafe fn scrub_initial_environment() -> io::Result<()> {
    Ok(())
}

/// The addresses where the kernel laid out the environment strings:
/// fields 50 and 51 of `/proc/self/stat` (Linux 3.5 and later).
#[cfg(target_os = "linux")]
fn initial_block() -> io::Result<(usize, usize)> {
    use std::io::Read;
    // One read into a buffer far above the line's ~350 bytes: the file
    // reports size 0, which would make `read_to_string` read it in small
    // pieces, and this runs at the start of every `gdn`.
    let mut buffer = [0u8; 4096];
    let read = std::fs::File::open("/proc/self/stat")?.read(&mut buffer)?;
    let stat = std::str::from_utf8(&buffer[..read])
        .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error))?;
    parse_block(stat).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "/proc/self/stat has no environment addresses (a kernel older than 3.5?)",
        )
    })
}

/// Fields 50 and 51 of a `stat` line. The command name (field 2) may hold
/// spaces and parentheses, so fields are counted from its closing `)`.
fn parse_block(stat: &str) -> Option<(usize, usize)> {
    let (_, after_name) = stat.rsplit_once(')')?;
    // After the name comes field 3.
    let mut fields = after_name.split_whitespace().skip(50 - 3);
    let start = fields.next()?.parse().ok()?;
    let end = fields.next()?.parse().ok()?;
    (start <= end).then_some((start, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_block_addresses_are_fields_50_and_51_counted_after_the_name() {
        let mut fields: Vec<String> = (3..=52).map(|field| field.to_string()).collect();
        fields[50 - 3] = "1000".into();
        fields[51 - 3] = "2000".into();
        let line = format!("42 (a) b (c)) {}", fields.join(" "));
        assert_eq!(parse_block(&line), Some((1000, 2000)));
        assert_eq!(parse_block("42 (short) S 1"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_processes_block_is_found() {
        let (start, end) = initial_block().unwrap();
        assert!(start < end);
    }
}
