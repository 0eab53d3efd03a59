//! Shared pieces of the fuzz targets: a byte reader that never fails (missing bytes read as 0),
//! the encodings of dtypes and dims that the seed generator (`fuzz/gen_corpus.py`) writes, host
//! buffers sized to what the dims declare, and the checks on the library's error messages.
//!
//! Byte encodings (the generator mirrors them):
//! - dtype: one byte `b`; `b < 0xE0` → XLA code `b & 31`; else an `i32` (LE) follows.
//! - dim: one byte `c`; `c < 0xE0` → `c`; `0xE0..0xF0` → [`SPECIAL_DIMS`]`[c - 0xE0]`; else an
//!   `i64` (LE) follows.

use std::ffi::c_void;

/// Reads the fuzz input front to back; past its end every read returns zeros.
pub struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Reader { data, pos: 0 }
    }

    pub fn u8(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }

    pub fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        for b in out.iter_mut() {
            *b = self.u8();
        }
        out
    }

    pub fn i32(&mut self) -> i32 {
        i32::from_le_bytes(self.bytes())
    }

    pub fn i64(&mut self) -> i64 {
        i64::from_le_bytes(self.bytes())
    }

    pub fn f32(&mut self) -> f32 {
        f32::from_le_bytes(self.bytes())
    }

    /// Up to `n` bytes (fewer at the end of the input).
    pub fn take(&mut self, n: usize) -> &'a [u8] {
        let start = self.pos.min(self.data.len());
        let end = (start + n).min(self.data.len());
        self.pos = self.pos.saturating_add(n);
        &self.data[start..end]
    }

    /// The unread rest of the input.
    pub fn rest(&mut self) -> &'a [u8] {
        let start = self.pos.min(self.data.len());
        self.pos = self.data.len();
        &self.data[start..]
    }

    /// A dtype code (see the module docs).
    pub fn dtype(&mut self) -> i32 {
        let b = self.u8();
        if b < 0xE0 {
            (b & 31) as i32
        } else {
            self.i32()
        }
    }

    /// A dim (see the module docs).
    pub fn dim(&mut self) -> i64 {
        let c = self.u8();
        match c {
            0..=0xDF => c as i64,
            0xE0..=0xEF => SPECIAL_DIMS[(c - 0xE0) as usize],
            _ => self.i64(),
        }
    }
}

/// Dims reachable with one byte besides `0..0xE0`: sizes past every limit of the library, and the
/// supported head dims above 223.
pub const SPECIAL_DIMS: [i64; 16] = [
    -1,
    i64::MIN,
    i64::MAX,
    1 << 31,
    (1 << 31) - 1,
    1 << 32,
    u32::MAX as i64,
    256,
    512,
    1024,
    4096,
    1 << 16,
    1 << 40,
    1 << 62,
    -(1 << 31),
    (1 << 32) + 1,
];

/// Largest host buffer a target allocates; a buffer declaring more gets a NULL data pointer.
pub const MAX_BUFFER_BYTES: usize = 1 << 20;

/// Bytes per element of an XLA dtype code (unknown types: 8, the widest a reader could assume).
pub fn elem_bytes(code: i32) -> usize {
    match code {
        1 | 2 | 6 | 19 | 20 => 1,
        3 | 7 | 10 | 16 => 2,
        4 | 8 | 11 => 4,
        _ => 8,
    }
}

/// Elements a rank/dims pair declares (None: negative dim or overflow; rank <= 0: 1).
pub fn declared_elements(rank: i64, dims: &[i64]) -> Option<usize> {
    if rank <= 0 {
        return Some(1);
    }
    dims.iter().take(rank as usize).try_fold(1usize, |acc, &d| usize::try_from(d).ok().and_then(|d| acc.checked_mul(d)))
}

/// A 64-byte aligned host allocation of `len` bytes at offset `misalign` (0 or 1), filled by the
/// caller. ASan sees reads past `len` only up to the 64-byte padding, so the targets size the
/// allocation to exactly `len + misalign` bytes rounded up to whole `u64`s.
pub struct HostBuffer {
    storage: Vec<u64>,
    misalign: usize,
    len: usize,
}

impl HostBuffer {
    pub fn new(len: usize, misalign: usize) -> Self {
        HostBuffer { storage: vec![0u64; (len + misalign).div_ceil(8)], misalign, len }
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: storage holds at least len + misalign bytes.
        unsafe { std::slice::from_raw_parts_mut((self.storage.as_mut_ptr() as *mut u8).add(self.misalign), self.len) }
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: as bytes_mut.
        unsafe { std::slice::from_raw_parts((self.storage.as_ptr() as *const u8).add(self.misalign), self.len) }
    }

    pub fn ptr(&mut self) -> *mut c_void {
        self.bytes_mut().as_mut_ptr() as *mut c_void
    }
}

/// Fills `buf` per `mode`: 0 zeros, 1 bytes from `stream` (then zeros), 2 small int32 values
/// (`-1..=6`, cycling: page indices, lengths), 3 the byte 0x3C (f16 1.0, small f32/bf16).
pub fn fill(buf: &mut [u8], mode: u8, stream: &mut Reader<'_>) {
    match mode & 3 {
        0 => {}
        1 => {
            let src = stream.take(buf.len());
            buf[..src.len()].copy_from_slice(src);
        }
        2 => {
            for (i, chunk) in buf.chunks_mut(4).enumerate() {
                let v = (i as i32 % 8) - 1;
                let b = v.to_le_bytes();
                chunk.copy_from_slice(&b[..chunk.len()]);
            }
        }
        _ => buf.fill(0x3C),
    }
}

/// Fails the run unless `msg` is a proper error message: not empty (nor blank).
///
/// Panics need no check here: libfuzzer-sys's panic hook aborts the process on every panic, also
/// on one the library would catch at its boundary and turn into an "internal error (panic)"
/// message, so a caught panic fails the run as a crash. (Testing messages for that text would
/// not do: messages quote input bytes, which can say anything.)
pub fn check_message(what: &str, msg: &str) {
    assert!(!msg.trim().is_empty(), "{what}: error with an empty message");
}

/// With `XGK_FUZZ_TRACE` set, prints what each call returned (to check that the seeds reach the
/// paths they are meant for: `XGK_FUZZ_TRACE=1 <target binary> fuzz/corpus/<target>/*`).
pub fn trace(what: &str, outcome: &dyn std::fmt::Debug) {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *ON.get_or_init(|| std::env::var_os("XGK_FUZZ_TRACE").is_some()) {
        eprintln!("{what}: {outcome:?}");
    }
}
