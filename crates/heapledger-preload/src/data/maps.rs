//! Finding the mapping that holds an address in `/proc/self/maps`, without
//! allocating (it runs inside a hook; see `bounds::stack_bounds`).

/// The bounds of the mapping that holds `addr`, read from
/// `/proc/self/maps` without allocating; None when it cannot be read or no
/// mapping holds `addr`.
// Not inlined: its buffer stays off the frames of its callers, which may run
// where little stack is left (`side.rs`).
#[inline(never)]
pub fn mapping_of(addr: u64) -> Option<(u64, u64)> {
    // SAFETY: a NUL-terminated path; the descriptor is closed below.
    let fd = unsafe {
        libc::open(
            c"/proc/self/maps".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return None;
    }
    let mut buf = [0u8; 1024];
    let mut scan = MapsScan::new(addr);
    let found = loop {
        // SAFETY: buf is writable for its length.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break None;
        }
        if let Some(r) = scan.feed(&buf[..n as usize]) {
            break Some(r);
        }
    };
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    found
}

/// Finds the line of `/proc/PID/maps` whose range holds an address, fed in
/// pieces of any size (a line may span two reads).
pub struct MapsScan {
    addr: u64,
    start: u64,
    end: u64,
    /// 0: in the start address, 1: in the end address, 2: in the rest.
    field: u8,
}

impl MapsScan {
    pub fn new(addr: u64) -> MapsScan {
        MapsScan {
            addr,
            start: 0,
            end: 0,
            field: 0,
        }
    }

    /// The range holding the address, once its line has been seen.
    pub fn feed(&mut self, bytes: &[u8]) -> Option<(u64, u64)> {
        for &b in bytes {
            match (self.field, b) {
                (_, b'\n') => *self = MapsScan::new(self.addr),
                (0, b'-') => self.field = 1,
                (1, b' ') => {
                    if self.start <= self.addr && self.addr < self.end {
                        return Some((self.start, self.end));
                    }
                    self.field = 2;
                }
                (0 | 1, _) => {
                    let d = match b {
                        b'0'..=b'9' => b - b'0',
                        b'a'..=b'f' => b - b'a' + 10,
                        _ => {
                            self.field = 2;
                            continue;
                        }
                    };
                    let v = if self.field == 0 {
                        &mut self.start
                    } else {
                        &mut self.end
                    };
                    *v = (*v << 4) | d as u64;
                }
                _ => {}
            }
        }
        None
    }
}
