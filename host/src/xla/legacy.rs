//! The legacy ("untyped") custom-call ABI: `void f(CUstream, void** buffers, const char* opaque,
//! size_t opaque_len[, XlaCustomCallStatus*])`, buffers = operands then results.
//!
//! The buffers carry no shapes, so everything travels in the opaque string, in a versioned
//! `key=value` text format that can never parse as JSON (XLA would swallow a JSON-object opaque as
//! an empty GPU backend config):
//!
//! ```text
//! xgk1;op=simple_add;dtype=f32;n=1024
//! xgk1;op=paged_attention;q=bf16[64,32,128];kv=bf16[512,16,16,128];max_num_seqs=8;pages_per_seq=64;sm_scale=0.088388346
//! ```
//! Shapes are `dtype[d0,d1,...]`; floats use Rust/Python shortest round-trip notation. Unknown or
//! repeated keys, a wrong version or a malformed value are errors: nothing is launched then.

use std::collections::BTreeMap;
use std::ffi::c_void;

use crate::dtype::DType;
use crate::error::{Error, Result};

/// Version prefix of the opaque format.
pub const OPAQUE_PREFIX: &str = "xgk1";

/// A parsed opaque string.
#[derive(Debug, Clone, PartialEq)]
pub struct Opaque {
    pub op: String,
    fields: BTreeMap<String, String>,
}

impl Opaque {
    /// Parses the raw opaque bytes.
    pub fn parse(bytes: &[u8]) -> Result<Self> {
        let text = std::str::from_utf8(bytes).map_err(|_| Error::invalid("opaque is not UTF-8"))?;
        let mut parts = text.split(';');
        let version = parts.next().unwrap_or("");
        if version != OPAQUE_PREFIX {
            let shown: String = text.chars().take(40).collect();
            return Err(Error::invalid(format!("opaque must start with '{OPAQUE_PREFIX};', got {shown:?}")));
        }
        let mut fields = BTreeMap::new();
        for part in parts.filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| Error::invalid(format!("opaque field {part:?} is not key=value")))?;
            if fields.insert(k.to_string(), v.to_string()).is_some() {
                return Err(Error::invalid(format!("opaque field '{k}' is repeated")));
            }
        }
        let op = fields.remove("op").ok_or_else(|| Error::invalid("opaque has no 'op' field"))?;
        Ok(Opaque { op, fields })
    }

    /// Fails unless the opaque is for `op` and has no keys outside `known`.
    pub fn expect(&self, op: &str, known: &[&str]) -> Result<()> {
        if self.op != op {
            return Err(Error::invalid(format!("opaque is for op '{}', not '{op}'", self.op)));
        }
        for k in self.fields.keys() {
            if !known.contains(&k.as_str()) {
                return Err(Error::invalid(format!("{op}: unknown opaque field '{k}'")));
            }
        }
        Ok(())
    }

    fn raw(&self, key: &str) -> Option<&str> {
        self.fields.get(key).map(String::as_str)
    }

    fn required(&self, key: &str) -> Result<&str> {
        self.raw(key).ok_or_else(|| Error::invalid(format!("{}: opaque field '{key}' is missing", self.op)))
    }

    /// A required unsigned integer.
    pub fn u64(&self, key: &str) -> Result<u64> {
        let v = self.required(key)?;
        v.parse().map_err(|_| Error::invalid(format!("opaque field '{key}' must be an unsigned integer, got {v:?}")))
    }

    /// An optional float.
    pub fn f32_opt(&self, key: &str) -> Result<Option<f32>> {
        self.raw(key)
            .map(|v| {
                v.parse::<f64>()
                    .map(|x| x as f32)
                    .map_err(|_| Error::invalid(format!("opaque field '{key}' must be a number, got {v:?}")))
            })
            .transpose()
    }

    /// An optional unsigned integer.
    pub fn u64_opt(&self, key: &str) -> Result<Option<u64>> {
        self.raw(key).map(|_| self.u64(key)).transpose()
    }

    /// A required dtype name.
    pub fn dtype(&self, key: &str) -> Result<DType> {
        let v = self.required(key)?;
        DType::parse(v).ok_or_else(|| Error::invalid(format!("opaque field '{key}': unknown dtype {v:?}")))
    }

    /// A required `dtype[d0,d1,...]`.
    pub fn shape(&self, key: &str) -> Result<(DType, Vec<i64>)> {
        let v = self.required(key)?;
        let bad = || Error::invalid(format!("opaque field '{key}' must look like bf16[8,32,128], got {v:?}"));
        let (name, rest) = v.split_once('[').ok_or_else(bad)?;
        let dims = rest.strip_suffix(']').ok_or_else(bad)?;
        let dtype = DType::parse(name).ok_or_else(bad)?;
        let dims = if dims.is_empty() {
            vec![]
        } else {
            dims.split(',')
                .map(|d| d.trim().parse::<i64>().ok().filter(|&d| d >= 0).ok_or_else(bad))
                .collect::<Result<Vec<_>>>()?
        };
        Ok((dtype, dims))
    }
}

/// Marks an `XlaCustomCallStatus` as failed with `message`.
///
/// `XlaCustomCallStatusSetFailure` cannot be resolved from a JAX process (not exported), so the
/// status object (`struct { std::optional<std::string> message; }`) is written in place with the
/// libstdc++ (new ABI) layout: `char* _M_p` @0, `size_t len` @8, 16-byte SSO buffer @16, engaged
/// flag @32. Messages up to 15 bytes live in the SSO buffer; longer ones in a `malloc`ed buffer
/// (`_M_allocated_capacity` @16), which the default `operator delete` releases with `free`.
///
/// # Safety
/// `status` must be null or a fresh `XlaCustomCallStatus*` from XLA (libstdc++ new ABI).
pub unsafe fn set_status_failure(status: *mut c_void, message: &str) {
    if status.is_null() {
        eprintln!("xla-gpu-kernels: {message}");
        return;
    }
    let base = status as *mut u8;
    let bytes = message.as_bytes();
    let len = bytes.len();
    let data = if len <= 15 {
        base.add(16)
    } else {
        let buf = libc::malloc(len + 1) as *mut u8;
        if buf.is_null() {
            return set_status_failure(status, "out of memory");
        }
        *(base.add(16) as *mut usize) = len; // capacity
        buf
    };
    std::ptr::copy_nonoverlapping(bytes.as_ptr(), data, len);
    *data.add(len) = 0;
    *(base as *mut *mut u8) = data;
    *(base.add(8) as *mut usize) = len;
    *base.add(32) = 1;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects_opaques() {
        let o = Opaque::parse(b"xgk1;op=simple_add;dtype=bf16;n=7").unwrap();
        o.expect("simple_add", &["dtype", "n"]).unwrap();
        assert_eq!(o.dtype("dtype").unwrap(), DType::BF16);
        assert_eq!(o.u64("n").unwrap(), 7);
        let o = Opaque::parse(b"xgk1;op=paged_attention;q=f16[4,8,128];sm_scale=0.125").unwrap();
        assert_eq!(o.shape("q").unwrap(), (DType::F16, vec![4, 8, 128]));
        assert_eq!(o.f32_opt("sm_scale").unwrap(), Some(0.125));
        assert_eq!(o.f32_opt("soft_cap").unwrap(), None);
        for bad in [
            &b"{}"[..],
            b"",
            b"xgk2;op=simple_add",
            b"xgk1;dtype=f32",
            b"xgk1;op=simple_add;n=1;n=2",
            b"xgk1;op=x;junk",
        ] {
            assert!(Opaque::parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        let o = Opaque::parse(b"xgk1;op=simple_add;dtype=f32;n=-1;extra=1").unwrap();
        assert!(o
            .expect("simple_add", &["dtype", "n"])
            .unwrap_err()
            .to_string()
            .contains("unknown opaque field 'extra'"));
        assert!(o.u64("n").is_err());
        assert!(Opaque::parse(b"xgk1;op=p;q=f32[2,x]").unwrap().shape("q").is_err());
    }

    #[test]
    fn status_is_written_in_libstdcxx_layout() {
        for msg in ["short", "a message longer than fifteen bytes"] {
            let mut status = [0u64; 5];
            unsafe { set_status_failure(status.as_mut_ptr() as *mut c_void, msg) };
            let base = status.as_ptr() as *const u8;
            unsafe {
                let p = *(base as *const *const u8);
                let len = *(base.add(8) as *const usize);
                assert_eq!(std::slice::from_raw_parts(p, len), msg.as_bytes());
                assert_eq!(*base.add(32), 1);
                if msg.len() > 15 {
                    libc::free(p as *mut c_void);
                } else {
                    assert_eq!(p, base.add(16));
                }
            }
        }
    }
}
